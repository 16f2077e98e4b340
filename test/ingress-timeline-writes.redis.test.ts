// The acceptor's `received` timeline entries of one stored batch leave over the connection in one
// socket write (src/ingress/accept.ts corks it while they are sent), not one write per call — and
// every call still has its entry, with its request id. Once the index key is known (one-slot
// layout) the entries go inside the append script itself (queues/inbound.ts): no command of their own.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { InboundLog } from '../queues/inbound.js';
import { asKeys } from '../queues/keys.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { sampleCall } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { monitorOf } from './support/monitor.js';

describe('the ingress timeline writes', () => {
  const prefix = uniquePrefix('tl-writes');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  after(async () => {
    await cleanupPrefix(prefix);
    redis.disconnect();
  });

  test("a stored batch's received entries go out in one write, each call's entry written", async () => {
    const keys = asKeys(prefix);
    const timeline = new CallTimeline(redis, keys, { ttlDays: 1 });
    const acceptor = new InboundAcceptor(new InboundLog(redis, keys), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
      timeline,
      timelineConnection: redis,
    });
    // The first call reads (or makes) the privacy key the index needs; from then on each entry is one command.
    await acceptor.accept(sampleCall('tl-first'), { requestId: 'req-first' });
    // Its entry and (the key being new) its lookups in a second command: both written before counting.
    await waitFor(async () => ((await timeline.resolve('tl-first')).length === 1 ? true : null), {
      what: 'the first entry and its lookups',
    });

    // Count the socket's writes to the kernel (each `_write`/`_writev` is one) while a batch is stored.
    const socket = redis.stream as unknown as {
      _write: (...args: unknown[]) => unknown;
      _writev: (...args: unknown[]) => unknown;
    };
    let writes = 0;
    const write = socket._write.bind(socket);
    const writev = socket._writev.bind(socket);
    socket._write = (...args) => (writes++, write(...args));
    socket._writev = (...args) => (writes++, writev(...args));
    const calls = Array.from({ length: 20 }, (_, i) => sampleCall(`tl-batch-${i}`));
    // Accepted in one turn of the event loop: one batch, one append.
    const results = await Promise.all(calls.map((call, i) => acceptor.accept(call, { requestId: `req-${i}` })));
    // Each call is answered after its entry was sent (not awaited): every write of the batch is behind us.
    socket._write = write;
    socket._writev = writev;
    assert.ok(results.every((r) => !r.duplicate));
    assert.ok(writes <= 2, `${writes} socket writes for one append and 20 timeline entries (one for all expected)`);
    const entries = await Promise.all(
      calls.map((call) =>
        waitFor(async () => ((await timeline.read(timelineId(call))) as unknown[]).at(0) ?? null, {
          what: `the entry of ${call.callId}`,
        }),
      ),
    );
    assert.deepEqual(
      entries.map((e) => (e as { requestId?: string }).requestId),
      calls.map((_, i) => `req-${i}`),
    );
  });

  test("with the index key known, a call's received entry and lookups are written by the append itself: one command", async () => {
    const keys = asKeys(prefix);
    const at = Date.parse('2026-11-27T01:00:00Z');
    const timeline = new CallTimeline(redis, keys, { ttlDays: 1, privacySecret: 'tl-inline-secret', now: () => at });
    const acceptor = new InboundAcceptor(new InboundLog(redis, keys), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
      timeline,
      timelineConnection: redis,
    });
    const watcher = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const monitor = (await monitorOf(watcher)) as unknown as {
      on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
      disconnect(): void;
    };
    const sent: string[][] = [];
    monitor.on('monitor', (_time, args, source) => {
      // Writes (scripts) under this prefix sent by a client: the reads below are left out.
      if (source !== 'lua' && /^eval/i.test(String(args[0])) && args.some((a) => String(a).startsWith(prefix)))
        sent.push(args.map(String));
    });
    try {
      const call = sampleCall('tl-inline');
      const first = await acceptor.accept(call, { requestId: 'req-inline-1' });
      const again = await acceptor.accept(sampleCall('tl-inline'), { requestId: 'req-inline-2' });
      const changed = await acceptor.accept(
        sampleCall('tl-inline', { patch: (p) => (p.assist.transcription.content += ' changed') }),
        { requestId: 'req-inline-3' },
      );
      assert.equal(again.id, first.id);
      assert.equal(changed.update, true);
      const id = timelineId(call);
      const entries = await timeline.read(id);
      assert.deepEqual(
        entries.map((e) => [e.event, e.revision, e.jobId, e.requestId, e.at]),
        [
          ['received', 'new', first.id, 'req-inline-1', at],
          ['received', 'duplicate', first.id, 'req-inline-2', at],
          ['received', 'update', changed.id, 'req-inline-3', at],
        ],
      );
      assert.equal(entries[0]!.from, '+49211****340', 'the number masked as in logs');
      // The same text as CallTimeline.received writes for these values.
      const raw = await redis.lrange(timeline.key(id), 0, 0);
      assert.equal(
        raw[0],
        JSON.stringify({
          at,
          event: 'received',
          source: call.source,
          callId: call.callId,
          revision: 'new',
          jobId: first.id,
          requestId: 'req-inline-1',
          direction: call.direction,
          from: entries[0]!.from,
          to: entries[0]!.to,
          startedAt: call.startedAt,
        }),
      );
      assert.deepEqual(await timeline.byCallId('tl-inline'), [id]);
      assert.deepEqual(await timeline.byNumber(call.from!), [id]);
      assert.deepEqual(
        (await timeline.recent(at - 1, at + 1, 10)).map((r) => r.id),
        [id],
      );
      // Three accepts, three commands sent by the client (the append script each time): no timeline command beside.
      const scripts = await waitFor(async () => (sent.length >= 3 ? sent : null), { what: 'the commands' });
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.equal(scripts.length, 3, scripts.map((a) => a.slice(0, 3).join(' ')).join('\n'));
    } finally {
      monitor.disconnect();
      watcher.disconnect();
    }
  });
});
