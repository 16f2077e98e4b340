// The work of one call query (findCalls: `callsync calls`, GET /api/calls, the Calls page) at scale:
// a status few calls have over calls that retried to the timeline's cap reads a bounded number of
// timelines and says where it stopped (`next`), not every timeline of the newest 5000; paging by
// `next` reaches every call of a range once, newest first, across calls received in the same
// millisecond and past the 5000 calls one query looks at; a number's calls before its newest 5000
// are found. Each call listed shows the state its own timeline gives. A call id of 64 KB names its
// own call only, not another whose id begins with the same 200 characters (the index's key).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { REDIS_URL, cleanupPrefix, testRedis, uniquePrefix } from './support/redis.js';
import { CallTimeline, callsNamed, findCalls, timelineId, type CallQuery } from '../queues/timeline.js';
import { sampleCall } from './support/calls.js';

/** Writes `n` calls through the real timeline writer: call j received at base + ⌊j / perMs⌋ ms, failed when `failed(j)`. */
async function fill(
  timeline: CallTimeline,
  clock: { now: number },
  o: { n: number; base: number; perMs: number; entries: number; failed: (j: number) => boolean; tag: string },
): Promise<Map<string, number>> {
  const ids = new Map<string, number>();
  for (let i = 0; i < o.n; i += 250) {
    const writes: Promise<void>[] = [];
    for (let j = i; j < Math.min(o.n, i + 250); j++) {
      clock.now = o.base + Math.floor(j / o.perMs);
      const call = sampleCall(`${o.tag}-${j}`);
      const id = timelineId(call);
      ids.set(id, j);
      const jobId = `${id}-1`;
      writes.push(timeline.received(call, { jobId, revision: 'new' }));
      writes.push(timeline.fannedOut(call, { jobId, routes: ['all'], sinks: ['archive'] }));
      const events: Parameters<CallTimeline['sinkEvents']>[1] = [];
      for (let a = 1; a < o.entries - 2; a++) events.push({ event: 'attempt', sink: 'archive', jobId, attempt: a });
      events.push(
        o.failed(j)
          ? { event: 'dead-lettered', sink: 'archive', jobId, attempt: 1, kind: 'permanent', reason: 'HTTP 400' }
          : { event: 'done', sink: 'archive', jobId, attempt: 1 },
      );
      writes.push(timeline.sinkEvents(call, events, id));
    }
    await Promise.all(writes);
  }
  return ids;
}

/** Every page of a query, following `next` (at most `maxPages`). */
async function allPages(timeline: CallTimeline, query: CallQuery, maxPages = 100) {
  const pages = [];
  let until = query.until;
  for (let n = 0; n < maxPages; n++) {
    const page = await findCalls(timeline, { ...query, until });
    pages.push(page);
    if (page.next === undefined) return pages;
    assert.ok(page.more || page.truncated, 'a next only when the list stopped early');
    const next = Date.parse(page.next);
    assert.ok(until === undefined || next <= until, 'next goes back in time');
    until = next;
  }
  throw new Error(`more than ${maxPages} pages`);
}

describe('call queries at scale', () => {
  let redis: Redis;
  const prefixes: string[] = [];
  const timelineAt = async (clock: { now: number }) => {
    const prefix = uniquePrefix('cqb');
    prefixes.push(prefix);
    return new CallTimeline(redis, (await testRedis()).keys(prefix), { ttlDays: 30, now: () => clock.now });
  };
  before(() => {
    redis = new Redis(REDIS_URL);
  });
  after(async () => {
    for (const p of prefixes) await cleanupPrefix(p);
    redis.disconnect();
  });

  test('a status few calls have, over calls with full timelines: bounded reads, then the rest at `next`', async () => {
    const clock = { now: 0 };
    const timeline = await timelineAt(clock);
    const base = Date.now() - 3600_000;
    // 400 calls of 200 entries (80,000 entries); only the oldest failed.
    const ids = await fill(timeline, clock, {
      n: 400,
      base,
      perMs: 1,
      entries: 200,
      failed: (j) => j === 0,
      tag: 'full',
    });
    clock.now = base + 10_000;
    const query = { since: base, until: base + 10_000, status: 'failed' as const };
    const first = await findCalls(timeline, query);
    // Before: every one of the 400 timelines read (80,000 entries) for one page.
    assert.ok(first.scanned < 400, `scanned ${first.scanned} of 400 long timelines for one page`);
    assert.equal(first.truncated, true);
    assert.equal(first.more, false);
    assert.ok(first.next, 'says where to go on');
    const pages = await allPages(timeline, query);
    const failed = pages.flatMap((p) => p.calls);
    assert.deepEqual(
      failed.map((c) => ids.get(c.id)),
      [0],
      'the failed call is found, once, on a later page',
    );
    assert.equal(
      pages.reduce((n, p) => n + p.scanned, 0),
      400,
      'every call looked at once over the pages',
    );
    assert.equal(failed[0]!.sinks.archive, 'failed');
    assert.deepEqual(failed[0]!.sinks, timeline.summarize(failed[0]!.id, await timeline.read(failed[0]!.id)).sinks);
  });

  test('paging by `next` reaches every call of the range once, newest first: same milliseconds, past 5000, by number', async () => {
    const clock = { now: 0 };
    const timeline = await timelineAt(clock);
    const base = Date.now() - 3600_000;
    // 6,000 calls, three per millisecond, every 7th failed; all from the same number.
    const ids = await fill(timeline, clock, {
      n: 6000,
      base,
      perMs: 3,
      entries: 4,
      failed: (j) => j % 7 === 0,
      tag: 'page',
    });
    const until = base + 10_000;
    clock.now = until;
    for (const query of [
      { since: base, until, limit: 50 },
      { since: base, until, limit: 1000 },
      { since: base, until, limit: 1000, status: 'failed' as const },
      { since: base, until, limit: 50, status: 'done' as const },
      { since: base, until: base + 20, limit: 1 },
      { since: base, until, limit: 1000, number: sampleCall('x').from! },
    ]) {
      const pages = await allPages(timeline, query, 200);
      const listed = pages.flatMap((p) => p.calls);
      const label = JSON.stringify({ ...query, number: query.number && 'N' });
      // Over the limit only by calls received in the same millisecond (a page ends between two).
      for (const p of pages)
        assert.ok(
          p.calls.length <= query.limit || p.calls.every((c) => c.receivedAt === p.calls[0]!.receivedAt),
          `${label}: at most limit per page`,
        );
      const wanted = [...ids.values()].filter(
        (j) =>
          base + Math.floor(j / 3) <= query.until &&
          (query.status === 'failed' ? j % 7 === 0 : query.status === 'done' ? j % 7 !== 0 : true),
      );
      const got = listed.map((c) => ids.get(c.id)!);
      assert.equal(new Set(got).size, got.length, `${label}: no call twice`);
      assert.deepEqual(
        [...got].sort((a, b) => a - b),
        wanted,
        `${label}: every call`,
      );
      for (let i = 1; i < listed.length; i++)
        assert.ok(listed[i - 1]!.receivedAt! >= listed[i]!.receivedAt!, `${label}: newest first`);
      // The state each call shows is the one its timeline gives (and the one it was written with).
      for (const c of listed) assert.equal(c.sinks.archive, ids.get(c.id)! % 7 === 0 ? 'failed' : 'done', label);
    }
    const sample = (await findCalls(timeline, { since: base, until, limit: 20 })).calls;
    for (const c of sample)
      assert.deepEqual(c, timeline.summarize(c.id, await timeline.read(c.id)), 'a listed summary is its timeline’s');
  });

  test("a number's calls before its newest 5000 are found (the range, not the newest 5000 of the number)", async () => {
    const clock = { now: 0 };
    const timeline = await timelineAt(clock);
    const base = Date.now() - 3600_000;
    const ids = await fill(timeline, clock, { n: 5200, base, perMs: 1, entries: 3, failed: () => false, tag: 'num' });
    clock.now = base + 10_000;
    // The oldest 100 calls: received base … base + 99.
    const found = await findCalls(timeline, {
      since: base,
      until: base + 99,
      limit: 1000,
      number: sampleCall('x').from!,
    });
    // Before: the number's newest 5000 read, none in the range: "no calls match".
    assert.deepEqual(
      found.calls.map((c) => ids.get(c.id)).sort((a, b) => a! - b!),
      Array.from({ length: 100 }, (_, i) => i),
    );
    assert.equal(found.truncated, false);
  });

  test('`call <id>` of a long call id: only its call, not another sharing the first 200 characters', async () => {
    const clock = { now: Date.now() };
    const timeline = await timelineAt(clock);
    const stem = 'X'.repeat(300);
    const long = sampleCall(`${stem}A${'a'.repeat(64 * 1024)}`);
    const short = sampleCall(`${stem}B`);
    for (const call of [long, short]) {
      clock.now++;
      await timeline.received(call, { jobId: `${timelineId(call)}-1`, revision: 'new' });
    }
    // Before: each lookup showed both calls, the other one first.
    assert.deepEqual(
      (await callsNamed(timeline, long.callId)).map((c) => c.callId),
      [long.callId],
    );
    assert.deepEqual(
      (await callsNamed(timeline, short.callId)).map((c) => c.callId),
      [short.callId],
    );
    assert.deepEqual(
      (await callsNamed(timeline, timelineId(short))).map((c) => c.callId),
      [short.callId],
    );
  });
});
