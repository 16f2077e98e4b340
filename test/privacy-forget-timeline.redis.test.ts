// `callsync forget <number>` a day later (issue 25): the number's delivered jobs are gone (the
// retention sweeper removed them after COMPLETED_JOB_RETENTION_SECONDS) and no archive holds the
// calls, but their timelines stay for CALL_TIMELINE_TTL_DAYS, found by the number's keyed hash in
// the timeline's number index (`callsync calls --number`). forget finds the calls there: the index
// entries, the timelines and the lookups by call id go; another number's stay. On the shared Redis,
// or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { CallTimeline } from '../queues/timeline.js';
import type { RedisClient } from '../queues/connection.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { webhookPayload } from './support/calls.js';
import { postJson, type TestCallsync } from './support/callsync.js';
import { waitFor, type TestRedis } from './support/redis.js';
import { startWebhookCallsync, stopWebhookCallsync, type WebhookCallsync } from './support/webhook-callsync.js';

const A = '+491701234567';
const B = '+491761234599';
const DAY_MS = 24 * 3600_000;

describe('forget <number> after the jobs were swept: the timeline index finds the calls', () => {
  let target: TestRedis;
  let conn: RedisClient;
  let cs: TestCallsync;
  let env: Record<string, string>;
  let prefix: string;

  let setup: WebhookCallsync | undefined;
  before(async () => {
    setup = await startWebhookCallsync('forgettl');
    ({ target, conn, cs, env, prefix } = setup);
  });
  after(() => stopWebhookCallsync(setup));

  test('the index, the timelines and the call-id lookups of the number go; the other number keeps its', async () => {
    const calls: [string, Record<string, any>][] = [
      ['tl-a1', webhookPayload('tl-a1', (p) => (p.call.from = A))],
      [
        'tl-a2',
        webhookPayload('tl-a2', (p) => {
          p.call.direction = 'out';
          p.call.from = '+4921155550100';
          p.call.to = A;
        }),
      ],
      ['tl-b1', webhookPayload('tl-b1', (p) => (p.call.from = B))],
    ];
    for (const [, payload] of calls)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const config = loadConfig(env);
    const log = pino({ level: 'silent' });
    const timeline = new CallTimeline(conn, target.keys(prefix), config.timeline);
    const hash = (id: string) => callHash(callKey('ai-agent', 'agent-1', id));
    try {
      await waitFor(async () => (await queue.getJobCounts('completed')).completed === calls.length, {
        what: 'every call delivered',
        timeoutMs: 30_000,
      });
      // Two days later the sweeper has removed the delivered jobs; the timelines are kept 30 days.
      const swept = await sweepRetention(config, conn, log, Date.now() + 2 * DAY_MS);
      assert.equal(swept.removed.completed_jobs, calls.length);
      // On the one-slot layout the lookups go in the call's own append; on a spread cluster they
      // are a second write after the acknowledgement, which can land after the delivery (seen
      // ~200 ms late on a loaded machine): wait for them rather than race them.
      await waitFor(
        async () => (await timeline.byNumber(A)).length === 2 && (await timeline.byNumber(B)).length === 1,
        {
          what: "the number index lists A's two calls and B's one",
          timeoutMs: 10_000,
        },
      );
      assert.deepEqual((await timeline.byNumber(A)).sort(), [hash('tl-a1'), hash('tl-a2')].sort());
      assert.ok((await timeline.read(hash('tl-a1'))).length > 0, "tl-a1's timeline is there");

      const receipt = await forget(config, conn, log, { target: parseTarget(A, 'DE'), dryRun: false, crm: false });
      assert.equal(receipt.calls, 2, JSON.stringify(receipt));
      assert.deepEqual(await timeline.byNumber(A), [], 'the number index lists no call of A');
      for (const id of ['tl-a1', 'tl-a2']) {
        assert.deepEqual(await timeline.read(hash(id)), [], `no timeline of ${id}`);
        assert.deepEqual(await timeline.byCallId(id), [], `no lookup of ${id} by its call id`);
      }
      assert.deepEqual(await timeline.byNumber(B), [hash('tl-b1')], "B's calls are still indexed");
      assert.ok((await timeline.read(hash('tl-b1'))).length > 0, "B's timeline stays");
      assert.deepEqual(await timeline.byCallId('tl-b1'), [hash('tl-b1')]);
    } finally {
      await queue.close();
    }
  });
});
