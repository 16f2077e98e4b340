// Runs a processor on a queue with callsync's error policy: typed sink errors decide whether a
// failure is dead-lettered at once, waits without spending an attempt, pauses (or disables) the
// queue, or backs off — exponentially with jitter, or by the queue's own schedule — until attempts
// run out and the job lands in the dead letters. Redis failing under a job (out of memory,
// read-only, loading, connection lost) is no failure of the sink: the job waits for Redis, as the
// fan-out does, and spends no attempt.
import { logRepeated } from '../src/log.js';
import { DelayedError, Queue, UnrecoverableError, Worker, type Job, type WorkerOptions } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import { asKeys, type RedisKeys } from '../queues/keys.js';
import type { Logger } from 'pino';
import { backoffDelay, scheduleDelay } from '../src/backoff.js';
import { classify, isRedisCondition, RetryLaterError, SinkError } from '../src/errors.js';
import type { AttemptOutcome, QueueLimit } from '../src/sinks/types.js';
import {
  BACKOFF_STRATEGY,
  INBOUND_QUEUE,
  type CallReceivedJob,
  type JobPayload,
  type RetryPolicy,
} from '../queues/registry.js';
import { disableQueue, pauseQueue } from '../queues/disabled.js';
import { HELD, holdQueue } from '../queues/hold.js';
import type { CallTimeline } from '../queues/timeline.js';
import { PlannedRetries, recordAttempts, recordStalledFailure } from './attempts.js';

/** Hooks for metrics and tests; every one optional. */
export interface RunnerEvents {
  /** `result`: what the processor returned (a sink's `{ status, reason, refs }`). */
  completed?(queue: string, job: Job, durationMs: number, result?: unknown): void;
  failed?(queue: string, job: Job | undefined, err: Error, final: boolean): void;
  deferred?(queue: string, job: Job, delayMs: number, scope: 'job' | 'queue'): void;
  paused?(queue: string, reason: string): void;
}

export interface RunnerOptions {
  connection: RedisClient;
  /** Where the queues' keys are (queues/keys.ts; a QUEUE_PREFIX alone: one slot). */
  prefix: RedisKeys | string;
  /** This queue's retry policy (the backoff; the attempts travel with each job, see defaultJobOptions). */
  retry: RetryPolicy;
  concurrency: number;
  stalledIntervalMs: number;
  lockDurationMs: number;
  maxStalledCount: number;
  log: Logger;
  events?: RunnerEvents;
  /** Steady rate limit of the whole queue (e.g. a CRM's requests per 10 s). */
  limit?: QueueLimit;
  /**
   * The sink's remote may ask the whole queue to wait (RetryLaterError scope `queue`: a CRM's or the
   * telephony API's 429): the queue is held back that long in every process (queues/hold.ts). Else
   * such a wait delays the job alone, and the queue's worker has no limiter to read (3 commands
   * less per job inside BullMQ's scripts, docs/performance.md round 16).
   */
  queueWide?: boolean;
  /** Each attempt of a sink job is written to its call's timeline (workers/attempts.ts); absent: not recorded. */
  timeline?: CallTimeline;
}

/** `outcome`: given by workers/attempts.ts to a sink job's processor (its timeline entries; see SinkContext.outcome). */
export type Processor<T extends JobPayload> = (
  job: Job<T>,
  signal: AbortSignal,
  outcome?: AttemptOutcome,
) => Promise<unknown>;

/**
 * A job-scoped "retry later" may repeat this often before it counts as an ordinary failure. Waits
 * for Redis count among these deferrals (BullMQ keeps one counter) but are never limited themselves.
 */
const MAX_DEFERRALS = 200;

/** The window of the limiter of a queue without a limit of its own: its count never reaches HELD, only a hold does. */
const UNLIMITED_WINDOW_MS = 60_000;

/** First and longest wait of a job for Redis (doubling in between, with jitter: half to all of it). */
const REDIS_WAIT_MIN_MS = 250;
const REDIS_WAIT_MAX_MS = 5000;

/** The wait before a job runs again after Redis failed under it for the `waits`-th time in a row. */
function redisWaitMs(waits: number, random: () => number = Math.random): number {
  return backoffDelay(Math.max(0, waits) + 1, REDIS_WAIT_MIN_MS, REDIS_WAIT_MAX_MS, random);
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** How long a close waits for a worker's blocking connection to reconnect (its retries are at most 2 s apart). */
const BLOCKING_RECONNECT_WAIT_MS = 3000;

/**
 * Whether the worker's blocking connection is connected, or gets there within `ms` (true for a
 * worker without one). A connection still setting up for the first time counts as away.
 */
async function blockingReady(worker: Worker, ms: number): Promise<boolean> {
  const setUp = worker.backend.blockingClient;
  if (!setUp) return true;
  const client = await Promise.race([setUp.catch(() => null), sleep(0).then(() => null)]);
  if (!client) return false;
  if (client.status === 'ready') return true;
  let onReady!: () => void;
  let timer: NodeJS.Timeout | undefined;
  const ready = new Promise<boolean>((resolve) => {
    onReady = () => resolve(true);
    timer = setTimeout(() => resolve(client.status === 'ready'), ms);
  });
  client.once('ready', onReady);
  try {
    return await ready;
  } finally {
    clearTimeout(timer);
    client.off('ready', onReady);
  }
}

/** An error's whole message (a dead letter's reason, a log line's); unlike the fan-out's, no name, not cut. */
function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}

export interface RunningWorker {
  worker: Worker;
  queue: Queue;
  close(): Promise<void>;
}

export function runWorker<T extends JobPayload>(
  queueName: string,
  processor: Processor<T>,
  options: RunnerOptions,
): RunningWorker {
  const log = options.log.child({ queue: queueName });
  // A queue handle of our own, to pause on auth failures.
  const prefix = asKeys(options.prefix).queuePrefix(queueName);
  const queue = new Queue(queueName, { connection: options.connection, prefix });
  queue.on('error', (err) => logRepeated(log, 'error', 'queue error', queueName, err));

  // The backoff of a failure the timeline recorded was drawn there, with its next attempt's time.
  const retries = new PlannedRetries(options.retry);
  // Without a limit of its own but with queue-wide waits, one that never limits: BullMQ reads a
  // queue's hold only for a worker with a limiter (queues/hold.ts).
  const limiter = options.limit
    ? { max: options.limit.max, duration: options.limit.durationMs }
    : options.queueWide
      ? { max: HELD, duration: UNLIMITED_WINDOW_MS }
      : undefined;
  const holding = limiter ? holdsQueue(processor, queue, options.connection, log) : processor;
  const run = options.timeline ? recordAttempts(queueName, holding, options.timeline, retries, MAX_DEFERRALS) : holding;
  const workerOptions: WorkerOptions = {
    connection: options.connection,
    prefix,
    concurrency: options.concurrency,
    stalledInterval: options.stalledIntervalMs,
    lockDuration: options.lockDurationMs,
    maxStalledCount: options.maxStalledCount,
    autorun: true,
    settings: {
      backoffStrategy: (attemptsMade: number, type?: string, _err?: Error, job?: { id?: string }) => {
        if (type !== BACKOFF_STRATEGY) return 0;
        const planned = retries.take(job);
        if (planned !== undefined) return planned;
        const { schedule, backoffMs, maxBackoffMs } = options.retry;
        return schedule ? scheduleDelay(attemptsMade, schedule) : backoffDelay(attemptsMade, backoffMs, maxBackoffMs);
      },
    },
    limiter,
  };

  /** A disabling of the queue under way (see the 'disable' kind below). */
  let disabling: Promise<boolean> | null = null;
  /** Processor calls under way (see close). */
  let inFlight = 0;

  const worker: Worker<T> = new Worker<T>(
    queueName,
    async (job: Job<T>, token: string | undefined, signal?: AbortSignal) => {
      const started = Date.now();
      inFlight++;
      // Built only when a failure is logged: a pino child per job costs more than the job's bookkeeping.
      const jobLog = () => log.child({ jobId: job.id, attempt: job.attemptsMade + 1 });
      try {
        const result = await run(job, signal ?? new AbortController().signal);
        options.events?.completed?.(queueName, job, Date.now() - started, result);
        return result;
      } catch (err) {
        const kind = classify(err);
        if (kind === 'redis') {
          // Moving the job back to the delayed set works while Redis is full (BullMQ's script
          // deletes the job's lock first, and a script that has written may go on); while the
          // connection is away it waits for the reconnect. Should the move itself fail for Redis'
          // sake, it is tried again while the job's lock lasts; only then does the error go to BullMQ.
          // Deferrals before this run (the run under way counts as started).
          const waits = Math.max(0, job.attemptsStarted - job.attemptsMade - 1);
          const delayMs = redisWaitMs(waits);
          options.events?.deferred?.(queueName, job, delayMs, 'job');
          if (waits === 0 || waits % 20 === 0) {
            jobLog().warn(
              { reason: errorMessage(err), delayMs, waits },
              'Redis failed under the job: waiting for Redis, no attempt spent',
            );
          }
          const giveUpAt = Date.now() + options.lockDurationMs;
          for (let tries = 0; ; tries++) {
            try {
              await job.moveToDelayed(Date.now() + delayMs, token);
              throw new DelayedError();
            } catch (moveErr) {
              if (
                moveErr instanceof DelayedError ||
                !isRedisCondition(moveErr) ||
                Date.now() >= giveUpAt ||
                worker.closing
              )
                throw moveErr instanceof DelayedError ? moveErr : err;
              await sleep(backoffDelay(tries + 1, 100, 1000));
            }
          }
        }
        if (kind === 'permanent') {
          jobLog().warn({ reason: errorMessage(err) }, 'permanent failure: dead-lettered');
          throw new UnrecoverableError(errorMessage(err));
        }
        if (kind === 'retry-later' && err instanceof RetryLaterError) {
          const deferrals = job.attemptsStarted - job.attemptsMade;
          if (deferrals <= MAX_DEFERRALS) {
            options.events?.deferred?.(queueName, job, err.delayMs, err.scope);
            jobLog().info({ delayMs: err.delayMs, scope: err.scope, status: err.status }, 'remote asked to wait');
            // The job waits in the delayed set, its lock released: a wait longer than the lock is
            // no stall, and a shutdown has nothing to wait for. A queue-wide wait holds the queue's
            // other jobs back too: `holdsQueue` below held it already, and made the wait the hold's
            // when that was longer. Not BullMQ's worker.rateLimit and RateLimitError:
            // they put the job back in the waiting list and leave the wait to this worker's memory,
            // cut at 30 s (maximumRateLimitDelay) and raced by its concurrent fetches — the job was
            // taken again in the middle, left unlocked, run again early, and closing waited for it.
            await job.moveToDelayed(Date.now() + err.delayMs, token);
            throw new DelayedError();
          }
        }
        if (kind === 'auth') {
          const reason = errorMessage(err);
          jobLog().error({ reason }, 'credentials rejected: pausing the queue until an operator resumes it');
          options.events?.paused?.(queueName, reason);
          await pauseQueue(queue, options.connection, reason);
          await job.moveToDelayed(Date.now() + 1000, token);
          throw new DelayedError();
        }
        if (kind === 'disable') {
          const reason = errorMessage(err);
          // Jobs running at the same time get the same answer: the first to disable tells (one
          // disabling at a time in this process; later ones find the queue paused and marked).
          let first = false;
          if (disabling) await disabling;
          else {
            disabling = disableQueue(queue, options.connection, reason).finally(() => (disabling = null));
            first = await disabling;
          }
          if (first) {
            jobLog().warn(
              { reason },
              'endpoint disabled: its queue is paused until an operator re-enables it (resume it on the dashboard or with `callsync resume`)',
            );
          }
          // The job waits in the paused queue: nothing is dropped while the endpoint is disabled.
          await job.moveToDelayed(Date.now() + 1000, token);
          throw new DelayedError();
        }
        jobLog().warn(
          { reason: errorMessage(err), status: err instanceof SinkError ? err.status : undefined },
          'transient failure: will retry',
        );
        throw err;
      } finally {
        inFlight--;
      }
    },
    workerOptions,
  );

  worker.on('failed', (job, err) => {
    if (err instanceof DelayedError || err.name === 'DelayedError') return;
    const final =
      job === undefined ||
      err instanceof UnrecoverableError ||
      err.name === 'UnrecoverableError' ||
      job.attemptsMade >= (job.opts.attempts ?? 1);
    options.events?.failed?.(queueName, job, err, final);
    if (final && options.timeline) {
      recordStalledFailure(queueName, options.timeline, job, err);
      // A call the fan-out could not fan out: its timeline says it is an inbound dead letter.
      if (queueName === INBOUND_QUEUE && job?.id) {
        const data = job.data as CallReceivedJob | undefined;
        void options.timeline.fanOutFailed(job.id, err.message, data?.call);
      }
    }
    if (final) log.error({ jobId: job?.id, reason: err.message }, 'job dead-lettered');
  });
  worker.on('error', (err) => logRepeated(log, 'error', 'worker error', queueName, err));

  let closing: Promise<void> | undefined;
  return {
    worker: worker as unknown as Worker,
    queue,
    close() {
      closing ??= (async () => {
        // BullMQ 6's close waits for its blocking connection to end, and one that is not connected
        // (Redis away since the start, an untrusted certificate, or between two reconnect attempts)
        // never ends: the close would hang (taskforcesh/bullmq#4656). After an outage the shared
        // connection can be back while the blocking one still waits its turn (up to 2 s): give it
        // that long. Without Redis, then: let the processors under way finish (the shutdown's
        // grace bounds it), and close without waiting for the connection.
        const redisAway =
          options.connection.status !== 'ready' || !(await blockingReady(worker, BLOCKING_RECONNECT_WAIT_MS));
        while (redisAway && inFlight > 0) await sleep(50);
        await worker.close(redisAway).catch((err: unknown) => log.error({ err }, 'closing worker failed'));
        await queue.close().catch((err: unknown) => log.error({ err }, 'closing queue failed'));
      })();
      return closing;
    },
  };
}

/**
 * A queue-wide "retry later" holds the queue (queues/hold.ts) as the attempt ends — before its
 * timeline entry is written (workers/attempts.ts), so the entry's next attempt is when the job can
 * really run: a hold already in place for longer (another job's, another process') makes the wait
 * that long. Only for the waits the runner defers (MAX_DEFERRALS); a failed hold leaves the job
 * alone to wait.
 */
function holdsQueue<T extends JobPayload>(
  processor: Processor<T>,
  queue: Queue,
  connection: RedisClient,
  log: Logger,
): Processor<T> {
  return async (job, signal, outcome) => {
    try {
      return await processor(job, signal, outcome);
    } catch (err) {
      if (
        !(err instanceof RetryLaterError) ||
        err.scope !== 'queue' ||
        job.attemptsStarted - job.attemptsMade > MAX_DEFERRALS
      )
        throw err;
      let heldMs: number;
      try {
        heldMs = await holdQueue(queue, connection, err.delayMs);
      } catch (holdErr) {
        log
          .child({ jobId: job.id })
          .warn({ reason: errorMessage(holdErr) }, 'holding the queue back failed: only this job waits');
        throw err;
      }
      if (heldMs <= err.delayMs) throw err;
      throw err.lasting(heldMs);
    }
  };
}
