// Redis full (`maxmemory`, `noeviction`: every write answers OOM) while a sink job runs: the job's
// processor fails on a Redis write (the archive's revision lock), and that is Redis' trouble, not the
// sink's — the job waits, as the fan-out does, without spending any of its attempts. Before, the
// failure counted as transient: a long OOM used up every attempt and dead-lettered the job.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

/** How long Redis stays full: many times what the job's attempts last with the test's backoff. */
const OOM_MS = 12_000;

let redis: PrivateRedis;
let admin: Redis;
before(async () => {
  redis = await startPrivateRedis({ appendonly: false });
  admin = new Redis(redis.url, { maxRetriesPerRequest: null });
});
after(async () => {
  await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
  admin.disconnect();
  await redis.destroy();
});

test('Redis out of memory while a sink job runs: no attempt is spent; delivered once memory is back', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sink-oom-'));
  const prefix = uniquePrefix('sink-oom');
  let cs: TestCallsync | undefined;
  const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: admin, prefix });
  try {
    // The archive folder is a file at first: the job's first attempt fails (ENOTDIR) and waits its
    // backoff in the delayed set, from where a worker takes it even while Redis is full (a job waiting
    // in the list it could not). Four attempts, 1–2 s apart: without the fix they are gone in seconds.
    const folder = join(dir, 'archive');
    await writeFile(folder, 'not a folder');
    cs = await startTestCallsync({
      REDIS_URL: redis.url,
      QUEUE_PREFIX: prefix,
      ARCHIVE_DIR: folder,
      JOB_ATTEMPTS: '4',
      JOB_BACKOFF_MS: '2000',
      JOB_MAX_BACKOFF_MS: '2000',
    });
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('sink-oom-1'));
    assert.equal(res.status, 202, JSON.stringify(res.body));
    const job = await waitFor(async () => (await archive.getJobs(['delayed']))[0] ?? null, {
      timeoutMs: 20_000,
      what: 'the archive job failed once, waiting its backoff',
    });
    assert.equal(job.attemptsMade, 1);
    await admin.config('SET', 'maxmemory', '1');
    await rm(folder);

    // The job runs into OOM again and again; it must never spend an attempt nor reach the dead letters.
    let seenActive = false;
    const until = Date.now() + OOM_MS;
    while (Date.now() < until) {
      const now = (await archive.getJob(job.id!)) as Job<SinkDeliverJob>;
      const state = await now.getState();
      if (now.attemptsStarted > job.attemptsStarted) seenActive = true;
      assert.notEqual(state, 'failed', `dead-lettered during the OOM: ${now.failedReason}`);
      assert.equal(now.attemptsMade, 1, `attempts spent during the OOM (state ${state}, reason ${now.failedReason})`);
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.ok(seenActive, 'the worker ran the job during the OOM');
    assert.deepEqual(
      archivedRecords(
        await readdir(folder, { recursive: true })
          .catch(() => [] as string[])
          .then((f) => f.map(String)),
      ),
      [],
      'nothing written while Redis refused the lock',
    );
    assert.ok(
      cs.logs.some(
        (l) =>
          l.msg === 'Redis failed under the job: waiting for Redis, no attempt spent' && l.queue === 'sink-archive',
      ),
      'the wait is logged',
    );

    await admin.config('SET', 'maxmemory', '0');
    await waitFor(async () => (await (await archive.getJob(job.id!))?.getState()) === 'completed', {
      timeoutMs: 30_000,
      what: 'the archive job completed once memory was back',
    });
    const done = (await archive.getJob(job.id!))!;
    assert.equal(done.attemptsMade, 2, 'the folder failure and the success: the OOM cost none');
    assert.equal(
      archivedRecords(
        await readdir(folder, { recursive: true })
          .catch(() => [] as string[])
          .then((f) => f.map(String)),
      ).length,
      1,
      'the call is archived',
    );
  } finally {
    await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
    await archive.close();
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  }
});
