// A call's timeline is capped (CallTimeline `maxEntries`): every script that appends to it keeps its
// first entry (the call's receipt: which call it is, from where) and the newest up to the cap,
// whichever wrote them — one entry (`append`), one per call of a batch
// (`fannedOutMany`), an attempt's entries (`sinkEvents`), the sink state's release
// (`releaseAppending`), the SMS sink's marker (`setAppending`), the inbound log's append (`received`,
// inline) — and trims only when the list is over the cap (no LTRIM below it: docs/performance.md
// round 14, item 3). MONITOR, filtered to this test's prefix, counts the LTRIMs run inside the scripts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { RedisKeyValueStore, type ListAppend } from '../src/state/kv.js';
import { InboundLog } from '../queues/inbound.js';
import { asKeys } from '../queues/keys.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { sampleCall } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { monitorOf } from './support/monitor.js';

describe('the timeline cap', () => {
  const prefix = uniquePrefix('tl-trim');
  const keys = asKeys(prefix);
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const watcher = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const MAX = 4;
  const timeline = new CallTimeline(redis, keys, { ttlDays: 1, maxEntries: MAX, privacySecret: 'tl-trim-secret' });
  let trims = 0;
  let monitor: {
    on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
    disconnect(): void;
  };

  before(async () => {
    monitor = (await monitorOf(watcher)) as unknown as typeof monitor;
    monitor.on('monitor', (_time, args, source) => {
      if (source === 'lua' && String(args[0]).toUpperCase() === 'LTRIM' && String(args[1]).startsWith(prefix)) trims++;
    });
  });
  after(async () => {
    monitor.disconnect();
    watcher.disconnect();
    await cleanupPrefix(prefix);
    redis.disconnect();
  });

  /** The LTRIMs MONITOR saw run by `work` (it shows them in order: a PING sent after marks the end). */
  async function trimsOf(work: () => Promise<unknown>): Promise<number> {
    const start = trims;
    await work();
    const mark = `${prefix}:mark:${Math.random()}`;
    let seen = false;
    monitor.on('monitor', (_t, args) => {
      if (String(args[1]) === mark) seen = true;
    });
    await redis.get(mark);
    await waitFor(async () => (seen ? true : null), { what: 'MONITOR to catch up' });
    return trims - start;
  }

  const texts = async (key: string) => (await redis.lrange(key, 0, -1)).map((t) => (JSON.parse(t) as { n?: number }).n);

  test('one entry at a time (append): no trim up to the cap, then the first and the newest kept', async () => {
    const id = 'append-1';
    assert.equal(
      await trimsOf(async () => {
        for (let n = 1; n <= MAX; n++) await timeline.append(id, { event: 'note', n } as never);
      }),
      0,
    );
    assert.equal(
      await trimsOf(async () => {
        for (let n = MAX + 1; n <= MAX + 3; n++) await timeline.append(id, { event: 'note', n } as never);
      }),
      3,
    );
    assert.deepEqual(await texts(timeline.key(id)), [1, 5, 6, 7]);
  });

  test("an attempt's entries (sinkEvents): pushed together, trimmed once when over", async () => {
    const call = sampleCall('tl-trim-events');
    const key = timeline.key(timelineId(call));
    const entry = (n: number) => ({ event: 'attempt', sink: 's', n }) as never;
    assert.equal(await trimsOf(() => timeline.sinkEvents(call, [entry(1), entry(2)])), 0);
    assert.equal(await trimsOf(() => timeline.sinkEvents(call, [entry(3), entry(4)])), 0);
    assert.equal(await trimsOf(() => timeline.sinkEvents(call, [entry(5), entry(6), entry(7)])), 1);
    assert.deepEqual(await texts(key), [1, 5, 6, 7]);
  });

  test("a fan-out batch (fannedOutMany): each call's list trimmed only when over", async () => {
    const calls = [sampleCall('tl-trim-fan-a'), sampleCall('tl-trim-fan-b')];
    const batch = () =>
      timeline.fannedOutMany(calls.map((call) => ({ call, jobId: timelineId(call), routes: ['r'], sinks: ['s'] })));
    assert.equal(await trimsOf(batch), 0);
    for (let i = 0; i < MAX - 1; i++) await timeline.append(timelineId(calls[0]!), { event: 'note', n: i } as never);
    assert.equal(await trimsOf(batch), 1, 'only the list that went over the cap');
    assert.equal(await redis.llen(timeline.key(timelineId(calls[0]!))), MAX);
    assert.equal(await redis.llen(timeline.key(timelineId(calls[1]!))), 2);
  });

  /**
   * A sink-state script that appends the entries it is given to `list`: two writes within the cap
   * (no trim), then 250 entries in one write (one trim, the first and the newest kept), the list given its TTL.
   */
  async function capsInOneScript(list: string, append: (entries: ListAppend) => Promise<unknown>): Promise<void> {
    const values = (from: number, to: number) =>
      Array.from({ length: to - from + 1 }, (_, i) => JSON.stringify({ n: from + i }));
    const write = (v: string[]) => append({ key: list, values: v, max: MAX, ttlMs: 60_000 });
    assert.equal(await trimsOf(() => write(values(1, 2))), 0);
    assert.equal(await trimsOf(() => write(values(3, 4))), 0);
    assert.deepEqual(await texts(list), [1, 2, 3, 4]);
    assert.equal(await trimsOf(() => write(values(5, 254))), 1);
    assert.deepEqual(await texts(list), [1, 252, 253, 254]);
    assert.ok((await redis.pttl(list)) > 0);
  }

  test("the sink state's release (releaseAppending): 250 entries in one release, the first and the newest kept", async () => {
    const store = new RedisKeyValueStore(redis, `${prefix}:state:`);
    await capsInOneScript(`${prefix}:release-list`, (entries) => store.releaseAppending('lock', 'token', [], entries));
  });

  test("the SMS sink's marker with the attempt's entries (setAppending): the marker set, the first and the newest entries kept", async () => {
    const store = new RedisKeyValueStore(redis, `${prefix}:state:`);
    await capsInOneScript(`${prefix}:set-list`, (entries) =>
      store.setAppending([{ key: 'marker', value: 'sent', ttlMs: 60_000 }], entries),
    );
    assert.equal(await redis.get(`${prefix}:state:marker`), 'sent');
    assert.ok((await redis.pttl(`${prefix}:state:marker`)) > 0);
  });

  test("the inbound log's append (the received entry, inline): duplicates fill the list, then the first receipt and the newest kept", async () => {
    const acceptor = new InboundAcceptor(new InboundLog(redis, keys), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
      timeline,
      timelineConnection: redis,
    });
    const call = () => sampleCall('tl-trim-received');
    // The first delivery reads the privacy key; from then on the entries go inside the append script.
    await acceptor.accept(call(), { requestId: 'r-0' });
    const key = timeline.key(timelineId(call()));
    await waitFor(async () => ((await redis.llen(key)) === 1 ? true : null), { what: 'the first entry' });
    assert.equal(
      await trimsOf(async () => {
        for (let i = 1; i < MAX; i++) await acceptor.accept(call(), { requestId: `r-${i}` });
      }),
      0,
    );
    assert.equal(
      await trimsOf(async () => {
        for (let i = MAX; i < MAX + 2; i++) await acceptor.accept(call(), { requestId: `r-${i}` });
      }),
      2,
    );
    const requestIds = (await redis.lrange(key, 0, -1)).map((t) => (JSON.parse(t) as { requestId: string }).requestId);
    assert.deepEqual(requestIds, ['r-0', 'r-3', 'r-4', 'r-5']);
  });

  test('a flood of duplicates drops its own older receipts, not the fan-out and the outcomes', async () => {
    const acceptor = new InboundAcceptor(new InboundLog(redis, keys), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
      timeline,
      timelineConnection: redis,
    });
    const call = () => sampleCall('tl-trim-duplicates');
    await acceptor.accept(call(), { requestId: 'r-0' });
    const id = timelineId(call());
    const key = timeline.key(id);
    await waitFor(async () => ((await redis.llen(key)) === 1 ? true : null), { what: 'the first entry' });
    await timeline.fannedOut(call(), { jobId: id, routes: ['r'], sinks: ['archive'] });
    await timeline.append(id, { event: 'done', sink: 'archive', jobId: id, attempt: 1 });
    // The platform resends the call again and again: each a duplicate, its receipt in the timeline.
    for (let i = 1; i <= 3 * MAX; i++) await acceptor.accept(call(), { requestId: `r-${i}` });
    const entries = await timeline.read(id);
    assert.deepEqual(
      entries.map((e) => `${e.event}${e.requestId ? ` ${e.requestId}` : ''}`),
      ['received r-0', 'fanned-out', 'done', `received r-${3 * MAX}`],
    );
    const summary = timeline.summarize(id, entries);
    assert.deepEqual(summary.sinks, { archive: 'done' });
    assert.equal(summary.fanOutPending, undefined);
  });
});
