// "Which calls failed this week?" (`callsync calls --status failed`, GET /api/calls?status=failed):
// answered from the index of dead-lettered calls (`calls:failed`, queues/timeline.ts), not by reading
// the timeline of every call of the range. Thousands of delivered calls and a few failed ones: every
// failed call in one answer, not truncated, reading the timelines of the failed calls only. A dead
// letter an operator retried is not listed; a failed call updated later is listed once, at its new
// place. A range that starts before the index began is read as before (the calls dead-lettered by a
// version that did not index them are found). `callsync forget` erases a call from the index and the
// retention sweeper trims it. The timelines are written through the real timeline writer; on the
// shared Redis (the read count on a private redis-server, by MONITOR), or with TEST_REDIS_CLUSTER=1
// on a Redis Cluster with spread keys.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import pino from 'pino';
import type { RedisClient } from '../queues/connection.js';
import { RedisKeys } from '../queues/keys.js';
import {
  CallTimeline,
  failedCallsKey,
  failedSinceKey,
  findCalls,
  timelineId,
  type CallQuery,
} from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { parseTarget } from '../src/model/number-words.js';
import { forget } from '../src/privacy/forget.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { sampleCall } from './support/calls.js';
import { testEnv } from './support/callsync.js';
import { testRedis, waitFor } from './support/redis.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { monitorOf } from './support/monitor.js';

const HOUR = 3600_000;
type Events = Parameters<CallTimeline['sinkEvents']>[1];

/** A call through the real writer: received, fanned out to `archive`, then `events` (at `clock.now`). */
async function deliver(timeline: CallTimeline, callId: string, events: (jobId: string) => Events) {
  const call = sampleCall(callId);
  const id = timelineId(call);
  const jobId = `${id}-1`;
  await Promise.all([
    timeline.received(call, { jobId, revision: 'new' }),
    timeline.fannedOut(call, { jobId, routes: ['all'], sinks: ['archive'] }),
    timeline.sinkEvents(call, events(jobId), id),
  ]);
  return { call, id, jobId };
}

const done = (jobId: string): Events => [
  { event: 'attempt', sink: 'archive', jobId, attempt: 1 },
  { event: 'done', sink: 'archive', jobId, attempt: 1 },
];
const deadLetter = (jobId: string): Events => [
  { event: 'attempt', sink: 'archive', jobId, attempt: 1 },
  { event: 'dead-lettered', sink: 'archive', jobId, attempt: 1, kind: 'permanent', reason: 'HTTP 400' },
];

describe('failed calls from the index of dead-lettered calls', () => {
  let server: PrivateRedis | null = null;
  let redis: RedisClient;
  let keys: RedisKeys;
  let prefix: string;
  /** The commands MONITOR saw since the last call (a private redis-server; null on the cluster), and whether a script ran each. */
  let commands: (() => Promise<{ args: string[]; lua: boolean }[]>) | null = null;
  const seen: { args: string[]; lua: boolean }[] = [];
  let monitor: { disconnect(): void } | null = null;
  const clock = { now: 0 };
  let timeline: CallTimeline;
  const base = Date.now() - 6 * HOUR;
  /** Call ids by call hash, and the failed ones' hashes. */
  const names = new Map<string, string>();
  const failed: string[] = [];
  let retried = '';
  let updated = '';
  /** Prefixes to clean up on the cluster. */
  const cleanups: string[] = [];
  const watchers: Redis[] = [];

  before(async () => {
    const target = await testRedis();
    if (target.isCluster) {
      prefix = await target.prefix('failidx');
      redis = target.connect();
      keys = target.keys(prefix);
    } else {
      server = await startPrivateRedis({ appendonly: false });
      prefix = 'failidx';
      redis = new Redis(server.url) as unknown as RedisClient;
      keys = new RedisKeys(prefix, 'one-slot', 1);
      const watcher = new Redis(server.url);
      const m = (await monitorOf(watcher)) as unknown as {
        on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
        disconnect(): void;
      };
      monitor = m;
      m.on('monitor', (_t, args, source) => void seen.push({ args: args.map(String), lua: source === 'lua' }));
      commands = async () => {
        // MONITOR shows commands in order: once it shows a marker sent after, it has shown the rest.
        const mark = `${prefix}:mark:${Math.random()}`;
        await redis.get(mark);
        await waitFor(async () => (seen.some((c) => c.args[1] === mark) ? true : null), {
          what: 'MONITOR to catch up',
        });
        return seen.splice(0);
      };
      watchers.push(watcher);
    }
    timeline = new CallTimeline(redis, keys, { ttlDays: 30, privacySecret: 'failidx', now: () => clock.now });
    // A worker of this version started before the range: the index covers it.
    clock.now = base - HOUR;
    await timeline.beginFailedIndex();
    // 6,000 calls one a second (5,000 is all one query looks at), one in a thousand failed.
    for (let i = 0; i < 6000; i += 200) {
      const writes: Promise<unknown>[] = [];
      for (let j = i; j < i + 200; j++) {
        clock.now = base + j * 1000;
        const isFailed = j % 1000 === 500;
        writes.push(
          deliver(timeline, `fi-${j}`, isFailed ? deadLetter : done).then(({ id }) => {
            names.set(id, `fi-${j}`);
            if (isFailed) failed.push(id);
          }),
        );
      }
      await Promise.all(writes);
    }
    // A failed call whose dead letter an operator retried (a new round, pending): no longer failed.
    clock.now = base + 2500_500;
    const r = await deliver(timeline, 'fi-retried', deadLetter);
    retried = r.id;
    clock.now = base + 2500_900;
    await timeline.sinkEvents(r.call, [{ event: 'retried', sink: 'archive', jobId: r.jobId, by: 'test' }], r.id);
    // A failed call (received early) updated later: its update's job dead-lettered too.
    clock.now = base + 100_500;
    const u = await deliver(timeline, 'fi-updated', deadLetter);
    updated = u.id;
    clock.now = base + 5800_500;
    const update = `${u.id}-2`;
    await timeline.received(u.call, { jobId: update, revision: 'update' });
    await timeline.fannedOut(u.call, { jobId: update, routes: ['all'], sinks: ['archive'] });
    clock.now = base + 5800_700;
    await timeline.sinkEvents(u.call, deadLetter(update), u.id);
    names.set(retried, 'fi-retried');
    names.set(updated, 'fi-updated');
    clock.now = base + 6000_000;
  });

  after(async () => {
    monitor?.disconnect();
    for (const w of watchers) w.disconnect();
    redis?.disconnect();
    if (server) await server.destroy();
    else for (const p of [prefix, ...cleanups]) if (p) await (await testRedis()).cleanup(p);
  });

  test('every failed call of 6,000 in one answer, reading only their timelines', async () => {
    await commands?.();
    const query: CallQuery = { since: base, until: base + 6000_000, status: 'failed', limit: 50 };
    const found = await findCalls(timeline, query);
    const sent = (await commands?.()) ?? null;
    const read = sent && sent.filter((c) => c.args[0]!.toUpperCase() === 'LRANGE' && c.args[1]!.endsWith(':timeline'));
    // Before: the newest 5,000 timelines read, `truncated`, the oldest failed call on a later page.
    assert.equal(found.truncated, false, `truncated after ${found.scanned} calls`);
    assert.equal(found.next, undefined);
    assert.equal(found.more, false);
    assert.deepEqual(
      found.calls.map((c) => names.get(c.id)),
      ['fi-updated', 'fi-5500', 'fi-4500', 'fi-3500', 'fi-2500', 'fi-1500', 'fi-500'],
      'every failed call once, newest last receipt first; not the retried one',
    );
    for (const c of found.calls) assert.equal(c.sinks.archive, 'failed');
    assert.equal(found.scanned, 8, 'the failed calls and the retried one are looked at, no other');
    if (read) assert.equal(read.length, 8, 'timelines read (LRANGE, by MONITOR)');
  });

  test('the range, the limit and the paging of a failed call query stay exact', async () => {
    // A failed call updated later is listed at its last receipt: not in a range before it.
    const early = await findCalls(timeline, { since: base, until: base + 5000_000, status: 'failed' });
    assert.deepEqual(
      early.calls.map((c) => names.get(c.id)),
      ['fi-4500', 'fi-3500', 'fi-2500', 'fi-1500', 'fi-500'],
    );
    // Page by page, limit 2: every failed call once, newest first, `more` while there is more.
    const listed: string[] = [];
    let until = base + 6000_000;
    for (let n = 0; n < 10; n++) {
      const page = await findCalls(timeline, { since: base, until, status: 'failed', limit: 2 });
      listed.push(...page.calls.map((c) => names.get(c.id)!));
      if (page.next === undefined) break;
      assert.equal(page.more, true);
      assert.equal(page.truncated, false);
      until = Date.parse(page.next);
    }
    assert.deepEqual(listed, ['fi-updated', 'fi-5500', 'fi-4500', 'fi-3500', 'fi-2500', 'fi-1500', 'fi-500']);
    // A sink filter and a number filter still apply.
    assert.equal((await findCalls(timeline, { since: base, status: 'failed', sink: 'crm' })).calls.length, 0);
    const byNumber = await findCalls(timeline, {
      since: base,
      until: base + 6000_000,
      status: 'failed',
      number: sampleCall('x').from!,
    });
    assert.equal(byNumber.calls.length, 7);
    assert.equal(byNumber.truncated, false);
    const otherNumber = await findCalls(timeline, { since: base, status: 'failed', number: '+4930901820' });
    assert.equal(otherNumber.calls.length, 0);
  });

  test('a range that starts before the index began is read as before: no failed call missed', async () => {
    // Its own prefix: a deployment whose calls were dead-lettered before it ran this version.
    const target = await testRedis();
    const oldKeys = server
      ? new RedisKeys(`${prefix}-old`, 'one-slot', 1)
      : target.keys(await target.prefix('failold'));
    if (!server) cleanups.push(oldKeys.prefix);
    const old = new CallTimeline(redis, oldKeys, { ttlDays: 30, privacySecret: 'failidx', now: () => clock.now });
    clock.now = base;
    const a = await deliver(old, 'old-failed', deadLetter);
    clock.now = base + 1000;
    await deliver(old, 'old-done', done);
    // Written by a version without the index: neither the index nor its start.
    await redis.del(failedCallsKey(oldKeys), failedSinceKey(oldKeys));
    clock.now = base + HOUR;
    await old.beginFailedIndex();
    clock.now = base + 2 * HOUR;
    const found = await findCalls(old, { since: base, status: 'failed' });
    assert.deepEqual(
      found.calls.map((c) => c.id),
      [a.id],
      'the call dead-lettered before the index began',
    );
    assert.equal(found.scanned, 2, 'found by reading the timelines of the range');
    assert.equal(await old.failedIndexCovers(base), false);
    assert.equal(await old.failedIndexCovers(base + HOUR + 60_000), true);
  });

  test('a dead letter goes to the index in the command of its entries; a delivered attempt touches no index', async (t) => {
    if (!commands) return t.skip('MONITOR on a private redis-server only');
    await commands();
    const call = sampleCall('fi-commands');
    const id = timelineId(call);
    clock.now = base + 7000_000;
    await timeline.sinkEvents(call, done(`${id}-1`), id);
    const delivered = await commands();
    assert.equal(delivered.filter((c) => !c.lua).length - 1, 1, 'one command (and the marker)');
    assert.ok(!delivered.some((c) => c.args.some((a) => a.endsWith(':calls:failed'))), 'no index touched');
    await timeline.sinkEvents(call, deadLetter(`${id}-2`), id);
    const failedWrite = (await commands()).filter((c) => !c.lua);
    assert.equal(failedWrite.length - 1, 1, 'one command (and the marker)');
    assert.ok(failedWrite[0]!.args.includes(failedCallsKey(keys)), 'the index is a key of that command');
    assert.equal(await redis.zscore(failedCallsKey(keys), id), String(base + 7000_000));
  });
});

describe('forget and the retention sweeper: the index of failed calls', () => {
  let prefix: string;
  let redis: RedisClient;
  before(async () => {
    const target = await testRedis();
    prefix = await target.prefix('failfgt');
    redis = target.connect();
  });
  after(async () => {
    redis?.disconnect();
    if (prefix) await (await testRedis()).cleanup(prefix);
  });

  test('forget erases a failed call from the index; the sweeper trims what is past the TTL', async () => {
    const target = await testRedis();
    const A = '+491701234567';
    const config = loadConfig(
      testEnv(prefix, {
        ...target.env(),
        CALL_TIMELINE_TTL_DAYS: '1',
        SPOOL_ENABLED: 'false',
        PRIVACY_HMAC_SECRET: 'failfgt-secret-0123456789abcdef',
      }),
    );
    const keys = target.keys(prefix);
    const log = pino({ level: 'silent' });
    const start = Date.now();
    const clock = { now: start - 23 * HOUR };
    const timeline = new CallTimeline(redis, keys, { ...config.timeline, now: () => clock.now });
    const index = failedCallsKey(keys);
    const write = async (callId: string, from?: string) => {
      const call = sampleCall(callId, { patch: from ? (p) => (p.call.from = from) : undefined });
      const id = timelineId(call);
      await timeline.received(call, { jobId: `${id}-1`, revision: 'new' });
      await timeline.sinkEvents(call, deadLetter(`${id}-1`), id);
      return id;
    };
    // A fan-out failure is indexed too (the inbound dead letter, by its acknowledgement id).
    const old = await write('ff-old');
    clock.now = start - HOUR;
    const ofA = await write('ff-a', A);
    const other = await write('ff-other');
    const fanOut = sampleCall('ff-fanout');
    await timeline.received(fanOut, { jobId: `${timelineId(fanOut)}-1`, revision: 'new' });
    await timeline.fanOutFailed(`${timelineId(fanOut)}-1`, 'cannot be routed', fanOut);
    await waitFor(async () => ((await redis.zcard(index)) === 4 ? true : null), { what: 'four calls indexed' });
    assert.equal(await redis.zscore(index, timelineId(fanOut)), String(start - HOUR));

    const receipt = await forget(config, redis, log, { target: parseTarget(A, 'DE'), dryRun: false, crm: false });
    assert.equal(receipt.calls, 1, JSON.stringify(receipt));
    assert.equal(await redis.zscore(index, ofA), null, "forget: A's call is not in the index of failed calls");
    assert.notEqual(await redis.zscore(index, other), null, 'another call stays');

    // Two hours on, the first failed call is 25 hours old: past the TTL, gone at the sweep.
    await sweepRetention(config, redis, log, start);
    assert.notEqual(await redis.zscore(index, old), null);
    await sweepRetention(config, redis, log, start + 2 * HOUR);
    assert.equal(await redis.zscore(index, old), null, 'the sweeper trimmed the index');
    assert.notEqual(await redis.zscore(index, other), null);
    const ttl = await redis.pttl(index);
    assert.ok(ttl > 0 && ttl <= 24 * HOUR, `the index expires with the TTL (${ttl} ms)`);
  });
});
