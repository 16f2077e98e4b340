// Dead letters (a queue's failed jobs) put back for a whole new round of attempts: `callsync dlq
// retry`, the Calls page's Retry and Bull Board's all go through here.
import type { Job, Queue, RetryOptions } from 'bullmq';
import { settledWithin, type RedisClient } from './connection.js';
import {
  endpointFromQueue,
  INBOUND_QUEUE,
  JobName,
  sinkNameFromQueue,
  type CallReceivedJob,
  type SinkDeliverJob,
} from './registry.js';
import { timelineIdOf, type CallTimeline } from './timeline.js';

/**
 * BullMQ's retry keeps a job's counts: a job dead-lettered after its last attempt would get one
 * attempt more and be dead-lettered at its next failure, without backoff. Both counts start again:
 * attemptsMade (the runner's "attempts used up" and the backoff before each retry) and
 * attemptsStarted (started but not made counts the runner's deferrals: with the old round's starts
 * a "retry later" would count as a failure at once).
 */
const NEW_ROUND: RetryOptions = { resetAttemptsMade: true, resetAttemptsStarted: true };

// KEYS[1] the failed set, KEYS[2] the job's hash; ARGV[1] the job's id.
const FORGET_STALLS = `if redis.call('ZSCORE', KEYS[1], ARGV[1]) then redis.call('HDEL', KEYS[2], 'stc') end`;

/** How long a retry waits for its timeline entry at most (it is sent again in the background). */
const TIMELINE_WRITE_MS = 2000;

/** Failed jobs read per page by `retryDeadLetters`. */
const PAGE = 200;

/**
 * Puts one dead letter back (its id, data and options kept) for a new round of attempts; a sink
 * job's call timeline says so (`retried`: the attempts that follow are numbered from 1 again).
 * Rejects as `Job.retry` does when the job is no longer failed.
 */
export async function retryDeadLetter(queue: Queue, job: Job, timeline?: CallTimeline, by?: string): Promise<void> {
  const at = Date.now();
  // BullMQ's retry keeps the stall count, so a job that stalled before it failed would be
  // dead-lettered again at its next stall: the new round forgets them (only while it is failed).
  if (job.id !== undefined && (job.stalledCounter ?? 0) > 0)
    // The Redis backend's client is ioredis' (BullMQ's interface names only the commands it uses).
    await ((await queue.getBackend().client) as unknown as RedisClient).eval(
      FORGET_STALLS,
      2,
      queue.toKey('failed'),
      queue.toKey(job.id),
      job.id,
    );
  await job.retry('failed', NEW_ROUND);
  // An inbound dead letter (a fan-out that failed): its call's timeline says it is fanned out again.
  if (timeline && job.queueName === INBOUND_QUEUE && job.id) {
    const call = (job.data as CallReceivedJob | undefined)?.call;
    await settledWithin([timeline.fanOutRetried(job.id, call, at)], TIMELINE_WRITE_MS);
    return;
  }
  const data = job.data as SinkDeliverJob | undefined;
  const sink = sinkNameFromQueue(job.queueName);
  if (!timeline || sink === null || data?.kind !== JobName.sinkDeliver || typeof data.call?.key !== 'string') return;
  const endpoint = endpointFromQueue(job.queueName) ?? undefined;
  const jobId = job.id ?? '';
  // Its time is taken before the retry: the new round's first attempt sorts after it.
  const entry = {
    at,
    event: 'retried' as const,
    sink,
    ...(endpoint ? { endpoint } : {}),
    jobId,
    ...(by ? { by } : {}),
  };
  await settledWithin([timeline.sinkEvents(data.call, [entry], timelineIdOf(jobId, data.call))], TIMELINE_WRITE_MS);
}

/**
 * Retries every dead letter of a queue, oldest first, page by page (the failed set holds up to
 * 100 000); a job that fails again meanwhile is not retried twice, one retried or removed by
 * someone else meanwhile is passed over. Returns how many it retried.
 */
export async function retryDeadLetters(queue: Queue, timeline?: CallTimeline, by?: string): Promise<number> {
  const seen = new Set<string>();
  let retried = 0;
  for (;;) {
    // Retried jobs leave the failed set and jobs failing again join its newest end: the oldest page
    // holds what is left to do, until all it holds failed again (or failed after the start).
    const jobs = (await queue.getJobs(['failed'], 0, PAGE - 1, true)).filter(
      (job): job is Job => job !== undefined && job.id !== undefined && !seen.has(job.id),
    );
    if (jobs.length === 0) return retried;
    for (const job of jobs) {
      seen.add(job.id!);
      try {
        await retryDeadLetter(queue, job, timeline, by);
        retried++;
      } catch (err) {
        if (await job.isFailed().catch(() => true)) throw err;
      }
    }
  }
}
