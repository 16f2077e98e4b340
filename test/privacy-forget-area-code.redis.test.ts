// A number sent nationally with its area code in brackets (`(201) 555-0123`, PHONE_DEFAULT_REGION=US:
// a region without a trunk 0) is no E.164 number: kept as sent, indexed by its digits, given to the
// sinks as sent (a CRM reads it in its region). Two days later, its delivered job swept, `forget
// +12015550123` finds the call by the national form and erases its timeline, lookups and index
// entries. Before, toE164 read it as `+2015550123` (a number in Egypt): the sinks got that number,
// the call was indexed under it, and forget reported 0 calls while all of it stayed.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Queue } from 'bullmq';
import { sinkQueueName } from '../queues/registry.js';
import { CallTimeline } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { testRedis, uniquePrefix, valuesUnder, waitFor, type TestRedis } from './support/redis.js';
import type { RedisClient } from '../queues/connection.js';

const DAY_MS = 24 * 3600_000;
const SENT = '(201) 555-0123';
const E164 = '+12015550123';
let dir: string;
let cs: TestCallsync;
let env: Record<string, string>;
let conn: RedisClient;
let prefix: string;
let target: TestRedis;
let receiver: FakeWebhookReceiver;

before(async () => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  target = await testRedis();
  conn = target.connect();
  receiver = await new FakeWebhookReceiver(secret).start();
  dir = await mkdtemp(join(tmpdir(), 'forget-area-code-'));
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    `sinks:\n  hooks:\n    type: webhook\n    endpoints: [{ name: r, url: "${receiver.url}" }]\nroutes:\n  - to: [hooks]\n`,
  );
  prefix = uniquePrefix('forget-area-code');
  env = testEnv(prefix, {
    ...target.env(),
    CALLSYNC_CONFIG: configPath,
    CRM_WEBHOOK_SECRET: secret,
    SPOOL_ENABLED: 'false',
    PHONE_DEFAULT_REGION: 'US',
  });
  cs = await startTestCallsync(env);
});

after(async () => {
  await cs?.stop();
  await receiver?.stop();
  conn?.disconnect();
  await rm(dir, { recursive: true, force: true });
});

test('forget <US number> a day later finds the call a platform sent as (201) 555-0123', async () => {
  const payload = webhookPayload('us-1', (p) => (p.call.from = SENT));
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
  const name = sinkQueueName('hooks', 'r');
  const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
  const config = loadConfig(env);
  const log = pino({ level: 'silent' });
  const timeline = new CallTimeline(conn, target.keys(prefix), config.timeline);
  const hash = callHash(callKey('ai-agent', 'agent-1', 'us-1'));
  try {
    await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, {
      what: 'the call delivered',
      timeoutMs: 30_000,
    });
    const job = await queue.getJob(hash);
    const stored = (job?.data as { call: { from: string | null; fromRaw: string | null } }).call;
    assert.deepEqual([stored.from, stored.fromRaw], [null, SENT], 'kept as sent, not read as +2015550123');
  } finally {
    await queue.close();
  }
  // Two days later the delivered job is swept; the timeline stays CALL_TIMELINE_TTL_DAYS (30).
  assert.equal((await sweepRetention(config, conn, log, Date.now() + 2 * DAY_MS)).removed.completed_jobs, 1);
  assert.ok((await timeline.read(hash)).length > 0, 'the timeline is there');
  assert.deepEqual(await timeline.byNumber('+2015550123'), [], 'not indexed under the misread number');

  const receipt = await forget(config, conn, log, { target: parseTarget(E164, 'US'), dryRun: false, crm: false });
  const left = (await valuesUnder(conn, prefix))
    .filter((v) => v.text.includes(hash) || v.text.includes('us-1'))
    .map((v) => v.where);
  assert.deepEqual(
    {
      calls: receipt.calls,
      timeline: (await timeline.read(hash)).length,
      byCallId: await timeline.byCallId('us-1'),
      keysLeft: left,
    },
    { calls: 1, timeline: 0, byCallId: [], keysLeft: [] },
    `receipt ${JSON.stringify(receipt)}`,
  );
});
