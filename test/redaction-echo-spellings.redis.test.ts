// A signed-webhook receiver that echoes the caller's number in another spelling — with thousands
// separators (a numeric field formatted by its locale) or split by the markup it highlights a part
// with, inside a JSON message — has the number masked in the dead letter's reason and in every log
// line (before, a comma or a tag cut it into runs too short to be masked). The spellings one by one:
// test/redact.test.ts.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Job } from 'bullmq';
import type { SinkDeliverJob } from '../queues/registry.js';
import type { CanonicalCall } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';

// The fixture's caller is +492116355340.
const ANSWERS: Record<string, (from: string) => { type: string; body: string }> = {
  // 492116355340 as a receiver's locale writes a number it read from the `from` field.
  'echo-grouped': (from) => ({
    type: 'text/plain',
    body: `field "from": ${Number(from.replace(/\D/g, '')).toLocaleString('en-US')} is not a valid account number`,
  }),
  // The receiver highlights the part of the number it refuses, inside a JSON message.
  'echo-markup': () => ({
    type: 'application/json',
    body: JSON.stringify({ message: 'invalid caller +49 211 <b>635</b> 53 40' }),
  }),
};

describe('a webhook receiver echoing the caller number in another spelling', () => {
  let receiver: Server;
  let cs: TestCallsync;
  let dir: string;
  before(async () => {
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const { data } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data: CanonicalCall };
        const answer = ANSWERS[data.callId]!(data.from!);
        res.writeHead(400, { 'content-type': answer.type });
        res.end(answer.body);
      });
    });
    await new Promise<void>((r) => receiver.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
    dir = await mkdtemp(join(tmpdir(), 'redaction-echo-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  webhook: { type: webhook, endpoints: [{ name: hooks, url: "${url}" }] }\nroutes:\n  - to: [webhook]\n`,
    );
    cs = await startTestCallsync({
      CALLSYNC_CONFIG: configPath,
      CRM_WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString('base64')}`,
      JOB_ATTEMPTS: '1',
    });
  });
  after(async () => {
    await cs.stop();
    await new Promise((r) => receiver.close(r));
    await rm(dir, { recursive: true, force: true });
  });

  async function deadLetter(callId: string): Promise<Job> {
    const queue = [...cs.queues.values()].find((q) => q.name.startsWith('sink-webhook.'));
    assert.ok(queue);
    return waitFor(
      async () =>
        (await queue.getFailed(0, 100)).find((j) => (j.data as SinkDeliverJob).call.callId === callId) ?? null,
      { timeoutMs: 20_000, what: `${callId} dead-lettered` },
    );
  }

  for (const callId of Object.keys(ANSWERS)) {
    test(`${callId}: no digits of +492116355340 survive in the reason or the logs`, async () => {
      cs.logs.length = 0; // this test's lines only
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(callId))).status, 202);
      const job = await deadLetter(callId);
      const logs = JSON.stringify(cs.logs);
      for (const [where, text] of [
        ['logs', logs],
        ['failedReason', job.failedReason],
      ] as const) {
        // The number's digits, whatever stands between them (commas, tags).
        const digits = text.replace(/<[^>]*>/g, '').replace(/[^\d]/g, '');
        assert.ok(
          !digits.includes('2116355340'),
          `${where} holds the caller's number: ${where === 'logs' ? JSON.stringify(cs.logs.filter((l) => JSON.stringify(l).includes('answered 400')).map((l) => ({ msg: l.msg, reason: l.reason }))) : text}`,
        );
      }
    });
  }
});
