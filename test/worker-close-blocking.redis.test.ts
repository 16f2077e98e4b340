// A worker closes while its blocking connection reconnects. BullMQ's close waits for that
// connection to end, and ioredis never ends one that waits between reconnect attempts (it has no
// socket to close: taskforcesh/bullmq#4656). The runner closed such a worker without waiting only
// when its shared connection was away; after an outage the shared connection can be back while
// the blocking one still waits its turn (up to 2 s), and a SIGTERM then hung the shutdown for its
// whole grace period (test/start-truth's stop, exit 1, in loaded CI runs). Here the blocking
// connection alone is cut, so the shared one stays ready, and the close must end at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { createRedis } from '../queues/connection.js';
import { loadConfig } from '../src/config/index.js';
import { runWorker } from '../workers/runner.js';
import { bounded } from './support/callsync-process.js';
import { startPrivateRedis } from './support/redis-server.js';
import { cleanupPrefix, REDIS_URL, TEST_TOPOLOGY, uniquePrefix, waitFor } from './support/redis.js';

test(
  'a worker whose blocking connection is between reconnect attempts closes at once',
  { skip: TEST_TOPOLOGY !== 'single' && 'one Redis: the connection is cut by its address' },
  async () => {
    const prefix = uniquePrefix('close-blocking');
    const settings = loadConfig({ REDIS_URL, QUEUE_PREFIX: prefix }).redis;
    const conn = createRedis(settings, 'worker');
    const admin = new Redis(REDIS_URL);
    const queue = new Queue('close-blocking', { connection: conn, prefix });
    let done = 0;
    const worker = runWorker(
      'close-blocking',
      async () => {
        done++;
        return { status: 'done' };
      },
      {
        connection: conn,
        prefix,
        retry: { attempts: 1, backoffMs: 100, maxBackoffMs: 100 },
        concurrency: 1,
        stalledIntervalMs: 30_000,
        lockDurationMs: 30_000,
        maxStalledCount: 1,
        log: pino({ level: 'silent' }),
      },
    );
    try {
      await queue.add('job', { n: 1 });
      await waitFor(() => done === 1 || null, { timeoutMs: 10_000, what: 'the job done' });
      const blocking = await worker.worker.backend.blockingClient;
      assert.ok(blocking, 'the worker has a blocking connection');
      // Its connection, waiting for the next job (BZPOPMIN), cut from the server's side.
      const local = (blocking as unknown as { stream?: { localPort?: number } }).stream?.localPort;
      assert.ok(local, 'the blocking connection has a socket');
      await waitFor(async () => String(await admin.client('LIST')).includes(`addr=127.0.0.1:${local} `) || null, {
        timeoutMs: 10_000,
        what: 'the blocking connection listed',
      });
      // Closed the moment the connection starts waiting for its next attempt (ioredis' event),
      // however late this process' timers run on a loaded machine.
      const closed = new Promise<void>((resolve, reject) => {
        blocking.once('reconnecting', () => {
          try {
            assert.equal(conn.status, 'ready', 'the shared connection stayed up');
            assert.equal(blocking.status, 'reconnecting');
          } catch (err) {
            reject(err as Error);
            return;
          }
          worker.close().then(resolve, reject);
        });
      });
      await admin.client('KILL', 'ADDR', `127.0.0.1:${local}`);
      await bounded(closed, 10_000, 'the worker to close');
    } finally {
      await queue.close();
      conn.disconnect();
      await cleanupPrefix(prefix);
      admin.disconnect();
    }
  },
);

// The other branch: the blocking connection does not come back (here Redis refuses new connections:
// maxclients is below the count, which Redis applies to new ones only), the shared one is up, a job
// is in flight. The close waits for that job — it completes, its result written — then closes
// without the blocking connection, instead of hanging.
test('a worker whose blocking connection stays away closes once its job in flight is done', async () => {
  const redis = await startPrivateRedis();
  const prefix = uniquePrefix('close-away');
  const conn = createRedis(loadConfig({ REDIS_URL: redis.url, QUEUE_PREFIX: prefix }).redis, 'worker');
  const admin = new Redis(redis.url);
  const queue = new Queue('close-away', { connection: conn, prefix });
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let finished = false;
  const worker = runWorker(
    'close-away',
    async () => {
      started();
      await released;
      finished = true;
      return { status: 'done' };
    },
    {
      connection: conn,
      prefix,
      retry: { attempts: 1, backoffMs: 100, maxBackoffMs: 100 },
      concurrency: 1,
      stalledIntervalMs: 30_000,
      lockDurationMs: 30_000,
      maxStalledCount: 1,
      log: pino({ level: 'silent' }),
    },
  );
  try {
    const job = await queue.add('job', { n: 1 });
    await running;
    const blocking = await worker.worker.backend.blockingClient;
    assert.ok(blocking);
    const local = (blocking as unknown as { stream?: { localPort?: number } }).stream?.localPort;
    assert.ok(local, 'the blocking connection has a socket');
    const clients = Number(/connected_clients:(\d+)/.exec(await admin.info('clients'))?.[1]);
    await admin.config('SET', 'maxclients', String(clients - 1));
    await admin.client('KILL', 'ADDR', `127.0.0.1:${local}`);
    await waitFor(() => blocking.status !== 'ready' || null, { timeoutMs: 5_000, intervalMs: 1, what: 'away' });
    const closing = worker.close();
    setTimeout(release, 500);
    await bounded(closing, 15_000, 'the worker to close');
    assert.ok(finished, 'the job in flight finished before the close ended');
    assert.notEqual(blocking.status, 'ready', 'closed without its blocking connection');
    assert.equal(await queue.getJobState(job.id!), 'completed');
  } finally {
    release();
    await admin.config('SET', 'maxclients', '10000').catch(() => undefined);
    await queue.close();
    conn.disconnect();
    admin.disconnect();
    await redis.destroy();
  }
});
