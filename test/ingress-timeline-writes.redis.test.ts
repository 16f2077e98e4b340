// The acceptor's `received` timeline entries of one stored batch leave over the connection in one
// socket write (src/ingress/accept.ts corks it while they are sent), not one write per call — and
// every call still has its entry, with its request id.
import { after, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { InboundLog } from '../queues/inbound.js';
import { asKeys } from '../queues/keys.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { sampleCall } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

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
});
