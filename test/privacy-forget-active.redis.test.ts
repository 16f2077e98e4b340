// `callsync forget` and a job of the number that a worker is delivering right now: forget waits for
// it to finish and then removes it; when it does not finish in time, forget stops with
// ForgetIncompleteError (the CLI: exit 1, "run forget again"), and a second run completes the erasure.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { callHash, callKey } from '../src/model/call.js';
import { forget, ForgetIncompleteError } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FlakySink } from './support/flaky-sink.js';
import { waitFor } from './support/redis.js';

const A = '+491701234567';

describe('forget and an active job of the number', () => {
  const sink = new FlakySink('archive', 2500);
  let cs: TestCallsync;
  let dir: string;
  let queue: Queue;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'forget-active-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  archive:\n    type: archive\n    dir: ${join(dir, 'archive')}\nroutes:\n  - to: [archive]\n`,
    );
    cs = await startTestCallsync(
      { CALLSYNC_CONFIG: configPath, SPOOL_ENABLED: 'false' },
      { sinks: new Map([['archive', sink]]) },
    );
    queue = new Queue(sinkQueueName('archive'), { connection: cs.redis.worker, prefix: cs.prefix });
  });
  after(async () => {
    await queue?.close();
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function active(callId: string): Promise<string> {
    assert.equal(
      (
        await postJson(
          `${cs.url}/webhooks/ai-agent/agent-1`,
          webhookPayload(callId, (p) => (p.call.from = A)),
        )
      ).status,
      202,
    );
    const id = callHash(callKey('ai-agent', 'agent-1', callId));
    await waitFor(async () => (await (await queue.getJob(id))?.isActive()) || null, {
      what: `${callId} being delivered`,
    });
    return id;
  }

  test('forget waits for the active job, then removes it', async () => {
    const id = await active('slow-a1');
    const receipt = await forget(cs.config, cs.redis.worker, pino({ level: 'silent' }), {
      target: parseTarget(A, 'DE'),
      dryRun: false,
      crm: false,
    });
    assert.ok(sink.delivered.includes('slow-a1'), 'the delivery finished first');
    assert.equal(await queue.getJob(id), undefined, 'then the job went');
    assert.equal(receipt.stores['jobs (active)'], 1, JSON.stringify(receipt.stores));
  });

  test('an active job that does not finish in time: ForgetIncompleteError, and a second run completes', async () => {
    const id = await active('slow-a2');
    await assert.rejects(
      forget(cs.config, cs.redis.worker, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: false,
        activeWaitMs: 200,
      }),
      (err: unknown) => err instanceof ForgetIncompleteError && /still active/.test(err.message),
    );
    await waitFor(async () => (await (await queue.getJob(id))?.isCompleted()) || null, {
      what: 'the delivery finished',
    });
    const again = await forget(cs.config, cs.redis.worker, pino({ level: 'silent' }), {
      target: parseTarget(A, 'DE'),
      dryRun: false,
      crm: false,
    });
    assert.equal(again.calls, 1);
    assert.equal(await queue.getJob(id), undefined);
  });
});
