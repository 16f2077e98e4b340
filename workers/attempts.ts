// Every attempt of a sink job in its call's timeline (queues/timeline.ts): its start and its end —
// done with what was written, skipped with the reason, retry with the error kind and the next
// attempt's time, or dead-lettered with the redacted reason — in one command when it ends (or in the
// script that releases the call's lock in the sink's state, src/sinks/revisions.ts holdToEnd),
// written before the queue hears of the outcome. An attempt cut short (its worker killed, or the
// job's lock lost) never ends: the attempt that takes its job over (BullMQ counts the job's stalls)
// writes an `attempt` entry for it (`cutOff`) before the sink runs, once per stall.
//
// The next attempt's time of a transient failure is the backoff the runner then uses: the delay is
// drawn here (jitter included) and kept for the job until the runner's backoff strategy takes it.
import type { Job } from 'bullmq';
import { settledWithin } from '../queues/connection.js';
import { backoffDelay, scheduleDelay } from '../src/backoff.js';
import { classify, RetryLaterError, SinkError } from '../src/errors.js';
import { skipReason, timelineIdOf, type CallTimeline, type TimelineEntry } from '../queues/timeline.js';
import { traceAttempt } from '../src/telemetry.js';
import type { AttemptOutcome, SinkResult } from '../src/sinks/types.js';
import {
  endpointFromQueue,
  JobName,
  sinkNameFromQueue,
  type JobPayload,
  type RetryPolicy,
  type SinkDeliverJob,
} from '../queues/registry.js';

/** Backoff delays drawn when a failure was recorded, by job id, until the runner's strategy takes them. */
export class PlannedRetries {
  private readonly planned = new Map<string, number>();

  constructor(private readonly retry: RetryPolicy) {}

  /** Draws the backoff before retry `attemptsMade` (as the runner would) and keeps it for the job. */
  plan(job: Job, attemptsMade: number): number {
    const { schedule, backoffMs, maxBackoffMs } = this.retry;
    const delay = schedule
      ? scheduleDelay(attemptsMade, schedule)
      : backoffDelay(attemptsMade, backoffMs, maxBackoffMs);
    if (job.id !== undefined) this.planned.set(job.id, delay);
    return delay;
  }

  /** The delay drawn for the job, once (then forgotten); undefined when none was drawn. */
  take(job: { id?: string } | undefined): number | undefined {
    if (job?.id === undefined) return undefined;
    const delay = this.planned.get(job.id);
    this.planned.delete(job.id);
    return delay;
  }
}

/** How long an attempt's outcome waits for its timeline write at most. */
const OUTCOME_WRITE_MS = 2000;

type Processor<T extends JobPayload> = (job: Job<T>, signal: AbortSignal, outcome?: AttemptOutcome) => Promise<unknown>;

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Wraps a sink queue's processor so each attempt of a `sink.deliver` job lands in the call's
 * timeline. `maxDeferrals`: how often a job-scoped "retry later" waits before it counts as an
 * ordinary failure (the runner's rule, repeated here to tell the two apart).
 */
export function recordAttempts<T extends JobPayload>(
  queueName: string,
  processor: Processor<T>,
  timeline: CallTimeline,
  retries: PlannedRetries,
  maxDeferrals: number,
): Processor<T> {
  const sink = sinkNameFromQueue(queueName);
  if (sink === null) return processor;
  const endpoint = endpointFromQueue(queueName) ?? undefined;
  return async function recorded(job: Job<T>, signal: AbortSignal): Promise<unknown> {
    const data = job.data as SinkDeliverJob | undefined;
    const call = data?.kind === JobName.sinkDeliver ? data.call : undefined;
    if (!call || typeof call.key !== 'string') return processor(job, signal);
    const base = { sink, ...(endpoint ? { endpoint } : {}), jobId: job.id ?? '', attempt: job.attemptsMade + 1 };
    // A sink job's id begins with the call hash (queues/registry.ts sinkJobId): no hashing per event.
    const id = timelineIdOf(base.jobId, call);
    const started = Date.now();
    // Taken over from a worker that stopped mid-attempt: that attempt shows, once per stall.
    const stalls = job.stalledCounter ?? 0;
    if (stalls > 0)
      void timeline.sinkEvents(
        call,
        [{ at: started, event: 'attempt', ...base, cutOff: true }],
        id,
        `${queueName}:${base.jobId}:${stalls}`,
      );
    // The start and the outcome are written together when the attempt ends, and Redis has them
    // before the queue hears of the outcome: on a cluster the timeline and the queue are on different
    // masters, so a write only sent could be lost to a SIGKILL while the job's completion was not
    // (the chaos run on a cluster found 93 calls with an SMS "pending" for ever). Bounded: a timeline
    // that does not answer within OUTCOME_WRITE_MS never holds up or fails the work (see sinkEvents).
    const start = { at: started, event: 'attempt' as const, ...base };
    // A sink whose last step is its lock's release has these entries written by that script (one
    // command less; src/sinks/revisions.ts holdToEnd): on the one-slot layout, where the lock and the
    // timeline share a slot. Only when the attempt ends with that very result are they not written here.
    let writtenFor: unknown;
    const outcome: AttemptOutcome | undefined =
      timeline.keys.layout === 'one-slot'
        ? {
            entries: (r) => ({
              key: timeline.key(id),
              values: timeline.entryTexts(call, [start, outcomeEntry(base, Date.now() - started, r)]),
              max: timeline.maxEntries,
              ttlMs: timeline.ttlMs,
            }),
            written: (r) => void (writtenFor = r),
          }
        : undefined;
    try {
      type Result = SinkResult | undefined;
      const result = (await traceAttempt(
        id,
        base,
        () => processor(job, signal, outcome) as Promise<Result>,
        (r) => (r?.status === 'skipped' ? { outcome: 'skipped', skip: skipReason(r.reason) } : { outcome: 'done' }),
      )) as Result;
      if (writtenFor !== undefined && writtenFor === result) return result;
      const entry = outcomeEntry(base, Date.now() - started, result);
      await settledWithin([timeline.sinkEvents(call, [start, entry], id)], OUTCOME_WRITE_MS);
      return result;
    } catch (err) {
      const failure = failureEntry(job, err, base, Date.now() - started, retries, maxDeferrals);
      await settledWithin([timeline.sinkEvents(call, [start, failure], id)], OUTCOME_WRITE_MS);
      throw err;
    }
  };
}

/** The outcome entry of an attempt that returned `result`: done with what was written, or skipped with the reason. */
function outcomeEntry(
  base: Omit<TimelineEntry, 'at' | 'event'>,
  durationMs: number,
  result: Partial<SinkResult> | undefined,
): Omit<TimelineEntry, 'at'> {
  if (result?.status === 'skipped')
    return {
      event: 'skipped',
      ...base,
      durationMs,
      reason: result.reason ?? 'skipped',
      skip: skipReason(result.reason),
    };
  const entry: Omit<TimelineEntry, 'at'> = { event: 'done', ...base, durationMs };
  if (result?.refs) entry.refs = result.refs;
  if (result?.reason) entry.reason = result.reason;
  return entry;
}

/** How the runner will treat the failure (workers/runner.ts), as a timeline entry. */
function failureEntry(
  job: Job,
  err: unknown,
  base: Omit<TimelineEntry, 'at' | 'event'>,
  durationMs: number,
  retries: PlannedRetries,
  maxDeferrals: number,
): Omit<TimelineEntry, 'at'> {
  const kind = classify(err);
  const reason = describe(err);
  const status = err instanceof SinkError && err.status !== undefined ? ` (status ${err.status})` : '';
  const common = {
    ...base,
    durationMs,
    kind,
    reason: `${reason}${status && !reason.includes(String((err as SinkError).status)) ? status : ''}`,
  };
  // Redis failing under the job is no failure of the sink: the runner moves the job back to wait
  // for Redis, spending no attempt, its wait its own (not the backoff) — never a dead letter.
  if (kind === 'redis') return { event: 'retry', ...common };
  if (kind === 'permanent') return { event: 'dead-lettered', ...common };
  if (
    kind === 'retry-later' &&
    err instanceof RetryLaterError &&
    job.attemptsStarted - job.attemptsMade <= maxDeferrals
  ) {
    return { event: 'retry', ...common, nextAt: Date.now() + err.delayMs };
  }
  if (kind === 'auth' || kind === 'disable') return { event: 'retry', ...common, paused: true };
  if (job.attemptsMade + 1 >= (job.opts.attempts ?? 1)) return { event: 'dead-lettered', ...common };
  return { event: 'retry', ...common, nextAt: Date.now() + retries.plan(job, job.attemptsMade + 1) };
}

/** BullMQ's reason for a job it failed itself after too many stalls (no processor ran to say so). */
const STALLED_TOO_OFTEN = 'job stalled more than allowable limit';

/**
 * A job that BullMQ dead-lettered itself because its workers kept dying under it: no attempt ran to
 * write its end, so the timeline would show the sink pending for ever. Written from the worker's
 * 'failed' event: the attempt cut short, then the dead letter with BullMQ's reason.
 */
export function recordStalledFailure(
  queueName: string,
  timeline: CallTimeline,
  job: Job | undefined,
  err: Error,
): void {
  if (!job || err.message !== STALLED_TOO_OFTEN) return;
  const sink = sinkNameFromQueue(queueName);
  const data = job.data as SinkDeliverJob | undefined;
  const call = data?.kind === JobName.sinkDeliver ? data.call : undefined;
  if (sink === null || !call || typeof call.key !== 'string') return;
  const endpoint = endpointFromQueue(queueName) ?? undefined;
  const base = { sink, ...(endpoint ? { endpoint } : {}), jobId: job.id ?? '', attempt: job.attemptsMade + 1 };
  const id = timelineIdOf(base.jobId, call);
  void timeline.sinkEvents(
    call,
    [
      { event: 'attempt', ...base, cutOff: true },
      { event: 'dead-lettered', ...base, kind: 'transient', reason: err.message },
    ],
    id,
  );
}
