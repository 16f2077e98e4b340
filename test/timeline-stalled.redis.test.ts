// A job BullMQ fails itself because it stalled too often (its workers kept dying under it) runs no
// attempt that could write its end: the runner's 'failed' hook (workers/attempts.ts
// recordStalledFailure) writes the attempt cut short and the dead letter, so the call's timeline
// shows the sink failed instead of pending for ever. The worker that "dies" takes the job by hand
// (BullMQ's manual processing: a lock nobody renews) and never finishes it.
// And an attempt that lost its job's lock while it ran (its job taken over and finished by another
// attempt) may fail after that: its failure, which the queue never took, does not make the sink
// "retrying" again in the timeline.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Redis } from 'ioredis';
import { Queue, Worker } from 'bullmq';
import { RedisKeys } from '../queues/keys.js';
import { JobName, sinkJobId, sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { CallTimeline, summarize, timelineId } from '../queues/timeline.js';
import { TransientError } from '../src/errors.js';
import { runWorker } from '../workers/runner.js';
import { sampleCall } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

/** The archive sink's queue and a call timeline under a prefix of their own, on the test Redis. */
function archiveQueue(tag: string) {
  const prefix = uniquePrefix(tag);
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const keys = new RedisKeys(prefix, 'one-slot', 1);
  const queueName = sinkQueueName('archive');
  const queuePrefix = keys.queuePrefix(queueName);
  return {
    prefix,
    redis,
    keys,
    timeline: new CallTimeline(redis, keys, { ttlDays: 1 }),
    queueName,
    queuePrefix,
    queue: new Queue(queueName, { connection: redis, prefix: queuePrefix }),
  };
}

test('a job failed by BullMQ for stalling too often shows the attempt cut short and the dead letter', async () => {
  const { prefix, redis, keys, timeline, queueName, queuePrefix, queue } = archiveQueue('tlstalled');
  const dying = new Worker(queueName, null, {
    connection: redis,
    prefix: queuePrefix,
    autorun: false,
    lockDuration: 300,
  });
  let worker: ReturnType<typeof runWorker> | undefined;
  try {
    const call = sampleCall('stalled-1');
    const id = timelineId(call);
    const jobId = sinkJobId(call);
    await timeline.fannedOut(call, { jobId, routes: ['#0'], sinks: ['archive'] });
    const data: SinkDeliverJob = { kind: JobName.sinkDeliver, sink: 'archive', call };
    await queue.add(JobName.sinkDeliver, data, { jobId, attempts: 5 });
    // Taken, and its lock left to expire: a worker killed mid-attempt.
    const taken = await dying.getNextJob('dying-worker');
    assert.equal(taken?.id, jobId);

    let runs = 0;
    worker = runWorker(
      queueName,
      async () => {
        runs++;
        return { status: 'done' };
      },
      {
        connection: redis,
        prefix: keys,
        retry: { attempts: 5, backoffMs: 100, maxBackoffMs: 1000 },
        concurrency: 1,
        stalledIntervalMs: 300,
        lockDurationMs: 2000,
        // The first stall is already one too many.
        maxStalledCount: 0,
        log: pino({ level: 'silent' }),
        timeline,
      },
    );
    await waitFor(async () => (await queue.getJobState(jobId)) === 'failed', {
      timeoutMs: 30_000,
      what: 'the job failed by BullMQ for stalling',
    });
    assert.equal(runs, 0, 'no attempt ran: BullMQ failed the job before the processor');
    assert.equal((await queue.getJob(jobId))?.failedReason, 'job stalled more than allowable limit');

    const entries = await waitFor(
      async () => {
        const all = await timeline.read(id);
        return summarize(id, all).sinks.archive === 'failed' ? all : null;
      },
      { timeoutMs: 10_000, what: 'the sink failed in the timeline' },
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(await timeline.read(id))}`);
    });
    const archive = entries.filter((e) => e.sink === 'archive');
    assert.deepEqual(
      archive.map((e) => [e.event, e.cutOff ?? false]),
      [
        ['attempt', true],
        ['dead-lettered', false],
      ],
    );
    assert.equal(archive[1]!.reason, 'job stalled more than allowable limit');
    assert.equal(archive[1]!.jobId, jobId);
  } finally {
    await worker?.close();
    await dying.close();
    await queue.close();
    redis.disconnect();
    await cleanupPrefix(prefix);
  }
});

test('an attempt that lost its lock fails after the attempt that took its job over finished it: the sink shows done', async () => {
  const { prefix, redis, keys, timeline, queueName, queuePrefix, queue } = archiveQueue('tloverlap');
  let worker: ReturnType<typeof runWorker> | undefined;
  let letFirstEnd!: () => void;
  const firstMayEnd = new Promise<void>((resolve) => (letFirstEnd = resolve));
  try {
    const call = sampleCall('overlap-1');
    const id = timelineId(call);
    const jobId = sinkJobId(call);
    await timeline.fannedOut(call, { jobId, routes: ['#0'], sinks: ['archive'] });
    let runs = 0;
    worker = runWorker(
      queueName,
      async (job) => {
        runs++;
        if (runs > 1) return { status: 'done', refs: { objectKey: 'calls/overlap-1.json' } };
        // The first attempt loses its lock (as when its worker stalls): the job is taken over.
        await redis.del(`${queuePrefix}:${queueName}:${job.id}:lock`);
        await firstMayEnd;
        throw new TransientError('remote hiccup', { status: 502 });
      },
      {
        connection: redis,
        prefix: keys,
        retry: { attempts: 5, backoffMs: 100, maxBackoffMs: 1000 },
        concurrency: 2,
        stalledIntervalMs: 300,
        lockDurationMs: 2000,
        maxStalledCount: 1,
        log: pino({ level: 'silent' }),
        timeline,
      },
    );
    const data: SinkDeliverJob = { kind: JobName.sinkDeliver, sink: 'archive', call };
    await queue.add(JobName.sinkDeliver, data, { jobId, attempts: 5 });
    await waitFor(async () => (await queue.getJobState(jobId)) === 'completed', {
      timeoutMs: 30_000,
      what: 'the job taken over and completed',
    });
    letFirstEnd();
    const entries = await waitFor(
      async () => {
        const all = await timeline.read(id);
        return all.some((e) => e.event === 'retry') ? all : null;
      },
      { timeoutMs: 10_000, what: "the first attempt's failure in the timeline" },
    );
    assert.equal(runs, 2);
    assert.equal(await queue.getJobState(jobId), 'completed', 'the queue did not take the late failure');
    // Both attempts shown (the first cut short, then failing late), the sink done.
    assert.deepEqual(
      entries.filter((e) => e.sink === 'archive').map((e) => [e.event, e.attempt, e.cutOff ?? false]),
      [
        ['attempt', 1, false],
        ['attempt', 1, true],
        ['attempt', 1, false],
        ['done', 1, false],
        ['retry', 1, false],
      ],
    );
    assert.equal(summarize(id, entries).sinks.archive, 'done', JSON.stringify(entries));
  } finally {
    letFirstEnd();
    await worker?.close();
    await queue.close();
    redis.disconnect();
    await cleanupPrefix(prefix);
  }
});
