// Retention of the timelines' lookups and of the refused calls (docs/privacy.md, "Per-call timeline
// and its lookups", "Refused calls"): each entry goes CALL_TIMELINE_TTL_DAYS after it was written,
// also in a set that is written to again before it expires. Before, the sets were trimmed only when
// written to, and expired that long after their last write: a repeat caller's number index kept the
// first call's hash, and the refused set the first refusal, up to twice the TTL (day 0 and day 29:
// both kept until day 59) — the sweep trimmed them only once, when the setting had been lowered.
// On the shared Redis, or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import type { RedisClient } from '../queues/connection.js';
import { CallTimeline, recentCallsKey, refusedCallsKey, timelineId, type Refusal } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { sampleCall } from './support/calls.js';
import { testEnv } from './support/callsync.js';
import { testRedis, waitFor } from './support/redis.js';

const HOUR = 3600_000;
const NUMBER = '+491701234567';

describe('the lookups and refusals go CALL_TIMELINE_TTL_DAYS after they were written', () => {
  let prefix: string;
  let redis: RedisClient;
  before(async () => {
    const target = await testRedis();
    prefix = await target.prefix('lookups');
    redis = target.connect();
  });
  after(async () => {
    redis?.disconnect();
    if (prefix) await (await testRedis()).cleanup(prefix);
  });

  test("a repeat caller's number index and the refused set lose what is past the TTL at the next sweep", async () => {
    const target = await testRedis();
    const config = loadConfig(
      testEnv(prefix, { ...target.env(), CALL_TIMELINE_TTL_DAYS: '1', SPOOL_ENABLED: 'false' }),
    );
    const keys = target.keys(prefix);
    const log = pino({ level: 'silent' });
    const start = Date.now();
    let now = start - 23 * HOUR;
    const timeline = new CallTimeline(redis, keys, { ...config.timeline, privacySecret: 'lookups', now: () => now });
    const refusal = (callId: string): Refusal => ({
      at: now,
      callId,
      source: 'ai-agent',
      status: 400,
      pointer: '/call/startTime',
      detail: 'Expected number, received string',
    });
    const refused = refusedCallsKey(keys);
    const callOf = (id: string) =>
      sampleCall(id, {
        patch: (p) => {
          p.call.from = NUMBER;
        },
      });

    // Day 0: the caller's first call, and a refusal.
    const first = callOf('lk-first');
    await timeline.received(first, { jobId: 'j1', revision: 'new' });
    timeline.refused(refusal('lk-refused-first'));
    await waitFor(async () => (await redis.zcard(refused)) === 1, { what: 'the first refusal written' });
    // 22 hours later, the same caller again, and another refusal: each set is written to again.
    now = start - HOUR;
    const second = callOf('lk-second');
    await timeline.received(second, { jobId: 'j2', revision: 'new' });
    timeline.refused(refusal('lk-refused-second'));
    await waitFor(async () => (await redis.zcard(refused)) === 2, { what: 'the second refusal written' });
    const numberIndex = timeline.numberKey(await timeline.numberHmac(NUMBER));
    assert.deepEqual(await redis.zrange(numberIndex, 0, -1), [timelineId(first), timelineId(second)]);

    // A sweep now changes nothing (the first one records the TTL it applied).
    await sweepRetention(config, redis, log, start);
    assert.equal(await redis.zcard(numberIndex), 2);
    assert.equal(await redis.zcard(refused), 2);

    // Two hours on, the first call's lookups and the first refusal are 25 hours old: past the TTL.
    const swept = await sweepRetention(config, redis, log, start + 2 * HOUR);
    // Counted: the first call in the lookups of its two numbers, by time and by call id, and the first refusal.
    assert.equal(swept.removed.timeline_lookups, 5, 'callsync_retention_removed_total{store="timeline_lookups"}');
    assert.deepEqual(await redis.zrange(numberIndex, 0, -1), [timelineId(second)], 'the number index');
    assert.equal(await redis.zscore(recentCallsKey(keys), timelineId(first)), null, 'the index by time');
    assert.deepEqual(await redis.zrange(`${keys.area('calls')}:calls:id:lk-first`, 0, -1), [], 'the call id lookup');
    const left = (await redis.zrange(refused, 0, -1)).map((r) => (JSON.parse(r) as Refusal).callId);
    assert.deepEqual(left, ['lk-refused-second'], 'the refused calls');
  });
});
