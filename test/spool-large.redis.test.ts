// Large events and the ingress spool (issue 23, item 1, the part done): a restart on a spool of
// large events drains it without running out of memory (segments read as streams, drained one
// large event at a time); once Redis is back, new calls go to Redis directly instead of queueing
// behind the whole backlog, while an update of a call still in the spool queues behind it (per-call
// order); the enqueue timeout grows with the batch's size; bytes on their way to Redis are bounded.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { InboundAcceptor, QueueUnavailableError, type AcceptResult } from '../src/ingress/accept.js';
import { SpoolingAcceptor } from '../src/ingress/spool.js';
import type { CanonicalCall } from '../src/model/call.js';
import { memoryLog } from './support/callsync.js';
import { sampleCall } from './support/calls.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { NOWHERE, uniquePrefix, waitFor } from './support/redis.js';

const MB = 1024 * 1024;

/** A call whose transcript is about `mb` MB of text (a long call with its chunks). */
function largeCall(id: string, mb: number, marker = ''): CanonicalCall {
  const call = sampleCall(id);
  const sentence = `Caller and agent talk about the appointment ${marker}${id}. `;
  call.transcript = { ...call.transcript!, content: sentence.repeat(Math.ceil((mb * MB) / sentence.length)) };
  return call;
}

/** An acceptor whose Redis is unreachable: every event is spooled. */
function unreachable(): { inner: InboundAcceptor; redis: Redis } {
  const redis = new Redis(NOWHERE, {
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    enableOfflineQueue: false,
    retryStrategy: () => null,
  });
  redis.on('error', () => undefined);
  return {
    inner: new InboundAcceptor(new InboundLog(redis, 'nowhere'), { dedupeWindowMs: 60_000, timeoutMs: 500 }),
    redis,
  };
}

describe('large events and the spool', () => {
  let redis: PrivateRedis;
  let admin: Redis;
  before(async () => {
    redis = await startPrivateRedis({ appendonly: false });
    admin = new Redis(redis.url, { maxRetriesPerRequest: null });
  });
  after(async () => {
    admin.disconnect();
    await redis.destroy();
  });

  test('a restart on a spool of large events (16 × 6 MB) drains it all with a 160 MB heap, in order', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'spool-large-'));
    const prefix = uniquePrefix('spool-large');
    try {
      const { inner, redis: nowhere } = unreachable();
      const spool = new SpoolingAcceptor(inner, { dir, log: memoryLog().log });
      await spool.open();
      const ids: string[] = [];
      for (let i = 0; i < 16; i++) {
        const r = await spool.accept(largeCall(`big-${i}`, 6));
        assert.equal(r.spooled, true);
        ids.push(r.id);
      }
      await spool.close();
      nowhere.disconnect();
      const segments = (await readdir(dir)).filter((n) => n.endsWith('.jsonl'));
      const size = (await Promise.all(segments.map((n) => stat(join(dir, n))))).reduce((sum, s) => sum + s.size, 0);
      assert.ok(size > 96 * MB, `${size} bytes spooled`);

      const child = spawn(
        process.execPath,
        ['--max-old-space-size=160', '--import', 'tsx', 'test/support/spool-drain-process.ts'],
        {
          env: { ...process.env, SPOOL_DIR: dir, REDIS_URL: redis.url, QUEUE_PREFIX: prefix },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      let err = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
      assert.equal(code, 0, `the draining process failed: ${err.slice(-2000)}`);
      assert.deepEqual(JSON.parse(out.trim().split('\n').at(-1)!), { pending: 0, drained: 16 });
      const log = new InboundLog(admin, prefix);
      assert.deepEqual(
        (await log.entries()).map((e) => e.id),
        ids,
        'every acknowledged event, in acknowledged order, under its id',
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('Redis back: new calls go straight to Redis while the backlog drains; an update of a spooled call queues behind it', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'spool-order-'));
    const prefix = uniquePrefix('spool-order');
    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    try {
      const { inner: away, redis: nowhere } = unreachable();
      const first = new SpoolingAcceptor(away, { dir, log: memoryLog().log });
      await first.open();
      const backlog: string[] = [];
      for (let i = 0; i < 10; i++)
        backlog.push((await first.accept(largeCall(i === 9 ? 'late-call' : `backlog-${i}`, 1.5))).id);
      await first.close();
      nowhere.disconnect();

      // Redis is back: the next start drains the backlog (1.5 MB events, two per batch).
      const inner = new InboundAcceptor(new InboundLog(conn, prefix), { dedupeWindowMs: 3_600_000, timeoutMs: 1500 });
      let during: Promise<[AcceptResult, AcceptResult]> | undefined;
      const spool = new SpoolingAcceptor(inner, {
        dir,
        log: memoryLog().log,
        events: {
          drained() {
            // After the first batch reached Redis, with the rest (and `late-call`) still in the spool.
            during ??= Promise.all([
              spool.accept(sampleCall('fresh-call')),
              spool.accept(largeCall('late-call', 1.5, 'corrected ')),
            ]);
          },
        },
      });
      await spool.open();
      await waitFor(() => during !== undefined && spool.pending === 0, {
        timeoutMs: 60_000,
        what: 'the backlog drained',
      });
      const [fresh, update] = await during!;
      assert.equal(fresh.spooled, undefined, 'a new call goes to Redis directly, not behind the backlog');
      assert.equal(update.spooled, true, 'an update of a call still in the spool queues behind its first revision');
      await waitFor(() => spool.pending === 0, { timeoutMs: 60_000, what: 'the update drained' });
      await spool.close();

      const ids = (await new InboundLog(conn, prefix).entries()).map((e) => e.id);
      assert.ok(
        ids.indexOf(fresh.id) >= 0 && ids.indexOf(fresh.id) < ids.indexOf(backlog.at(-1)!),
        'the new call is stored before the backlog ended',
      );
      assert.ok(
        ids.indexOf(update.id) > ids.indexOf(backlog.at(-1)!),
        'the update after the first revision of its call',
      );
      for (const id of backlog) assert.ok(ids.includes(id), `backlog event ${id} stored`);
    } finally {
      conn.disconnect();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('the enqueue timeout grows with the size; bytes on their way to Redis are bounded', async () => {
    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const prefix = uniquePrefix('enqueue-size');
    try {
      const inner = new InboundAcceptor(new InboundLog(conn, prefix), {
        dedupeWindowMs: 60_000,
        timeoutMs: 1000,
        maxInFlightChars: 10 * MB,
      });
      // Redis holds writes for 2 s: a 16 MB call gets 1 s + 16 MB at 8 MB/s = about 3 s, so it is stored.
      await admin.call('CLIENT', 'PAUSE', '2000', 'WRITE');
      const big = inner.accept(largeCall('sized-1', 16));
      // While it is on its way, another large call would pass the in-flight bound: refused at once.
      await assert.rejects(
        inner.accept(largeCall('sized-2', 6)),
        (err: unknown) => err instanceof QueueUnavailableError && /on their way to Redis/.test(err.message),
      );
      const stored = await big;
      assert.equal(stored.duplicate, false);
      await waitFor(() => inner.inFlight === 0, { timeoutMs: 10_000, what: 'nothing in flight' });
      assert.equal((await inner.accept(largeCall('sized-2', 6))).duplicate, false, 'taken once the first is stored');
      assert.deepEqual(
        (await new InboundLog(conn, prefix).entries()).map((e) => e.call?.callId),
        ['sized-1', 'sized-2'],
      );
    } finally {
      await admin.call('CLIENT', 'UNPAUSE').catch(() => undefined);
      conn.disconnect();
    }
  });
});
