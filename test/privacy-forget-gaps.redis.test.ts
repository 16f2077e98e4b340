// `callsync forget`, tried where the other privacy tests do not look (issue 25, an adversarial pass):
// - a call whose payload spelled the number with the trunk `0` after the country code
//   (`+49 (0) 170 1234567`, which the call record keeps as `+4901701234567`), a day later when its
//   jobs are swept: the timeline's number index names it by that spelling, and forget must find it
//   there as it finds the E.164 spelling;
// - another number's state whose value names a call key that merely begins with the forgotten
//   call's (`…:k10` and `…:k1`) is not the forgotten call's, and stays;
// - a transcript giving the number with a typographic dash (`0170 – 1234567`), in full-width digits
//   or without its trunk 0 (`170 123 45 67`) mentions it;
// - `forget --crm` while the number's HubSpot job is delivering: the CRM record that job creates
//   after forget's CRM step is deleted too, not orphaned with its record memory erased;
// - the number given as a `tel:` URI (RFC 3966), as payloads and CRMs spell it, is a number.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { CallTimeline } from '../queues/timeline.js';
import type { RedisClient } from '../queues/connection.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { parsePushEvent } from '../src/model/push.js';
import { PushAssembly, pushCallKey } from '../src/sources/push-assembly.js';
import { sweepRetention } from '../src/privacy/retention.js';
import type { Sink } from '../src/sinks/types.js';
import { recipientHash } from '../src/sinks/notify/ledger.js';
import { PrivacyKey } from '../queues/privacy-key.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { waitFor, type TestRedis } from './support/redis.js';
import { startWebhookCallsync, stopWebhookCallsync, type WebhookCallsync } from './support/webhook-callsync.js';

const A = '+491701234567';
const B = '+491761234599';
const DAY_MS = 24 * 3600_000;

test('a tel: URI is a number, not a call id', () => {
  assert.deepEqual(parseTarget('tel:+491701234567', 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(parseTarget('TEL:+49-170-1234567', 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(parseTarget('tel:0170 1234567', 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(parseTarget('c-2026-04-08-0001', 'DE'), { kind: 'call', callId: 'c-2026-04-08-0001' });
  assert.deepEqual(parseTarget('tel:desk-7', 'DE'), { kind: 'call', callId: 'tel:desk-7' });
});

describe('forget <number> finds, by the timeline index, a call that spelled it +49 (0) …', () => {
  let target: TestRedis;
  let conn: RedisClient;
  let cs: TestCallsync;
  let env: Record<string, string>;
  let prefix: string;

  let setup: WebhookCallsync | undefined;
  before(async () => {
    setup = await startWebhookCallsync('forgettrunk');
    ({ target, conn, cs, env, prefix } = setup);
  });
  after(() => stopWebhookCallsync(setup));

  test("a Push API call being assembled goes, also when its call id has a ':' (the API allows one)", async () => {
    const assembly = new PushAssembly(conn, { prefix: target.keys(prefix).area('push'), timeoutMs: 3600_000 });
    for (const callId of ['push-plain', 'push:with:colons', 'open'])
      await assembly.recordEvent(
        parsePushEvent(`event=newCall&callId=${callId}&from=491701234567&to=4921100000&direction=in`),
      );
    const keys = ['push-plain', 'push:with:colons', 'open'].map((id) =>
      pushCallKey(target.keys(prefix).area('push'), id),
    );
    for (const key of keys) assert.equal(await conn.exists(key), 1, key);
    const config = loadConfig(env);
    await forget(config, conn, pino({ level: 'silent' }), { target: parseTarget(A, 'DE'), dryRun: false, crm: false });
    for (const key of keys) assert.equal(await conn.exists(key), 0, `${key}: the caller's number is still there`);
    assert.equal(await conn.zcard(`${target.keys(prefix).area('push')}:push:open`), 0, 'no open call left');
  });

  test('the trunk-0 spelling is the number: its call, timeline and lookups go', async () => {
    const spelled = '+49 (0) 170 1234567';
    const payload = webhookPayload('trunk-1', (p) => (p.call.from = spelled));
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const config = loadConfig(env);
    const log = pino({ level: 'silent' });
    const timeline = new CallTimeline(conn, target.keys(prefix), config.timeline);
    const hash = callHash(callKey('ai-agent', 'agent-1', 'trunk-1'));
    try {
      await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, {
        what: 'the call delivered',
        timeoutMs: 30_000,
      });
      const job = await queue.getJob(hash);
      assert.equal((job?.data as { call: { from: string } }).call.from, '+4901701234567', 'the record keeps the 0');
      // Two days later the delivered job is swept; the timeline stays 30 days.
      assert.equal((await sweepRetention(config, conn, log, Date.now() + 2 * DAY_MS)).removed.completed_jobs, 1);
      await waitFor(async () => (await timeline.byNumber(spelled)).length === 1 || null, {
        what: 'the number index lists the call under the spelling it came in',
        timeoutMs: 10_000,
      });

      const receipt = await forget(config, conn, log, { target: parseTarget(A, 'DE'), dryRun: false, crm: false });
      assert.equal(receipt.calls, 1, JSON.stringify(receipt));
      assert.deepEqual(await timeline.byNumber(spelled), [], '`callsync call "+49 (0) 170 1234567"` finds nothing');
      assert.deepEqual(await timeline.read(hash), [], 'no timeline of the call');
      assert.deepEqual(await timeline.byCallId('trunk-1'), [], 'no lookup by its call id');
    } finally {
      await queue.close();
    }
  });

  test('a call that mentions the number with a typographic dash, in full-width digits or without its trunk 0 is erased whole', async () => {
    // B's call, whose transcript gives A's number with an en dash (as word processors and some
    // speech-to-text models write it), a non-breaking hyphen, in full-width digits (CJK input), with
    // a dash between two spaces each side, and without the trunk 0. The last three stayed before.
    const mentions = [
      '0170 \u2013 1234567',
      '+49\u2011170\u20111234567',
      '\uff10\uff11\uff17\uff10\uff11\uff12\uff13\uff14\uff15\uff16\uff17',
      '0170  \u2013  1234567',
      '170 123 45 67',
    ];
    for (const [i, text] of mentions.entries()) {
      const payload = webhookPayload(`dash-${i}`, (p) => {
        p.call.from = B;
        p.assist.transcription.content = `Caller: Please call my colleague back at ${text}.`;
        p.assist.transcription.chunks[0].content = `Please call my colleague back at ${text}.`;
      });
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    }
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const ids = mentions.map((_, i) => callHash(callKey('ai-agent', 'agent-1', `dash-${i}`)));
    try {
      await waitFor(
        async () =>
          (await Promise.all(ids.map(async (id) => (await queue.getJob(id))?.isCompleted()))).every(Boolean) || null,
        { what: "B's calls delivered", timeoutMs: 30_000 },
      );
      const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: false,
      });
      for (const id of ids) assert.equal(await queue.getJob(id), undefined, JSON.stringify(receipt));
    } finally {
      await queue.close();
    }
  });

  test("another number's state naming a call key that begins with the forgotten call's stays", async () => {
    // A's call `k1`; B's SMS cooldown is held by B's call `k10` (whose key begins with k1's).
    const payload = webhookPayload('k1', (p) => (p.call.from = A));
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const k = target.keys(prefix);
    const config = loadConfig(env);
    try {
      await waitFor(
        async () => (await (await queue.getJob(callHash(callKey('ai-agent', 'agent-1', 'k1'))))?.isCompleted()) || null,
        {
          what: "A's call delivered",
          timeoutMs: 30_000,
        },
      );
      const secret = await new PrivacyKey(conn, k, config.privacy.hmacSecret).get();
      const cooldown = `${k.sinkState('sms')}cooldown:${recipientHash(secret, B)}`;
      const held = JSON.stringify({ callKey: callKey('ai-agent', 'agent-1', 'k10'), until: Date.now() + 3600_000 });
      await conn.set(cooldown, held, 'PX', 3600_000);

      const receipt = await forget(config, conn, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: false,
      });
      assert.equal(receipt.calls, 1, JSON.stringify(receipt));
      assert.equal(await queue.getJob(callHash(callKey('ai-agent', 'agent-1', 'k1'))), undefined, "A's job went");
      assert.equal(await conn.get(cooldown), held, "B's cooldown stays");
    } finally {
      await queue.close();
    }
  });
});

describe('forget --crm while the number’s HubSpot job is delivering', () => {
  let hubspot: FakeHubSpot;
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    hubspot = await new FakeHubSpot().start();
    dir = await mkdtemp(join(tmpdir(), 'forget-crm-active-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  hubspot:\n    type: hubspot\n    apiUrl: ${hubspot.url}\n    rateLimit: { max: 1000, durationMs: 1000 }\nroutes:\n  - to: [hubspot]\n`,
    );
    cs = await startTestCallsync({
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      SPOOL_ENABLED: 'false',
    });
  });
  after(async () => {
    await cs?.stop();
    await hubspot?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('the record the job creates after forget’s CRM step is deleted too', async () => {
    // HubSpot takes A's call record only once released: the job is active while forget starts.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const writesCall = (req: { method: string; path: string }) =>
      req.method === 'POST' && /\/crm\/objects\/[^/]+\/calls(\/batch\/upsert)?$/.test(req.path);
    hubspot.enqueue({ match: writesCall, hold: held });
    try {
      const payload = webhookPayload('crm-active-1', (p) => (p.call.from = A));
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
      await waitFor(() => hubspot.requests.some(writesCall) || null, { what: 'the call record being written' });

      // The live sink, watched: the record is released once forget has asked it to erase A's call.
      const real = cs.sinks.get('hubspot')!;
      const asked: string[] = [];
      const watched = Object.create(real) as Sink;
      watched.eraseCall = async (key, options) => {
        asked.push(key);
        return real.eraseCall!(key, options);
      };
      const key = callKey('ai-agent', 'agent-1', 'crm-active-1');
      const running = forget(cs.config, cs.redis.worker, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: true,
        sinks: new Map([['hubspot', watched]]),
      });
      await waitFor(() => asked.includes(key) || null, { what: "forget's CRM step for the call" });
      release();
      const receipt = await running;

      assert.equal(receipt.stores['jobs (active)'], 1, JSON.stringify(receipt.stores));
      assert.deepEqual(
        [...hubspot.calls.values()].map((c) => c.id),
        [],
        'HubSpot keeps no call record of A (none orphaned with its record memory gone)',
      );
      assert.equal(receipt.stores['crm records (hubspot)'], 1, JSON.stringify(receipt.stores));
    } finally {
      release();
    }
  });
});
