// The one registry of queues and jobs: names, payload types (a tagged union) and default options.
// Every producer and worker goes through here, so a queue name or payload shape lives in one place.
import type { DefaultJobOptions } from 'bullmq';
import { callHash, type CanonicalCall } from '../src/model/call.js';

/**
 * Calls the fan-out could not handle from the inbound log (queues/inbound.ts): retried with the
 * retry policy, then kept as dead letters. Accepted calls themselves are in the log, not here.
 */
export const INBOUND_QUEUE = 'inbound';
/** Channel events the poller could not parse: kept with the reason, retryable after a fix. */
export const POLL_DEAD_LETTER_QUEUE = 'poll-dead-letters';

/**
 * Each configured sink has its own queue, so one slow or paused sink never holds up another; a sink
 * with endpoints (the signed webhook) has one queue per endpoint, `sink-<sink>.<endpoint>`, so each
 * endpoint retries, pauses and dead-letters on its own. Sink and endpoint names have no `.`.
 */
export function sinkQueueName(sinkName: string, endpoint?: string): string {
  return endpoint === undefined ? `sink-${sinkName}` : `sink-${sinkName}.${endpoint}`;
}

export function sinkNameFromQueue(queueName: string): string | null {
  if (!queueName.startsWith('sink-')) return null;
  const rest = queueName.slice('sink-'.length);
  const dot = rest.indexOf('.');
  return dot === -1 ? rest : rest.slice(0, dot);
}

/** The endpoint of an endpoint queue (`sink-<sink>.<endpoint>`), else null. */
export function endpointFromQueue(queueName: string): string | null {
  if (!queueName.startsWith('sink-')) return null;
  const dot = queueName.indexOf('.');
  return dot === -1 ? null : queueName.slice(dot + 1);
}

/**
 * The sink job id of one revision of a call: the call hash for its first revision, the call hash
 * and the content hash for an update. Each revision gets its own job (BullMQ would drop an update
 * added under the id of the first revision's job, which it keeps for a day), and fanning the same
 * revision out again still adds nothing. The same id in every sink queue of the call: the id the
 * dashboard shows.
 */
export function sinkJobId(call: Pick<CanonicalCall, 'key' | 'revision'>): string {
  const base = callHash(call.key);
  const revision = call.revision;
  return revision?.update && revision.content ? `${base}-${revision.content}` : base;
}

export const JobName = {
  callReceived: 'call.received',
  sinkDeliver: 'sink.deliver',
  pollDeadLetter: 'poll.dead-letter',
} as const;

/** A call the fan-out of the inbound log could not handle (queues/inbound.ts, workers/fanout.ts). */
export interface CallReceivedJob {
  kind: typeof JobName.callReceived;
  /** Null when the log entry was not a readable call record, or one that cannot be stored as a job (see `text`). */
  call: CanonicalCall | null;
  /**
   * With `call: null`: the text the log entry held, as acknowledged (whole; or its first 64 Ki
   * characters when the entry itself was parked, see workers/fanout.ts).
   */
  text?: string;
  /** Why the log's fan-out gave it up. */
  reason?: string;
}

export interface SinkDeliverJob {
  kind: typeof JobName.sinkDeliver;
  sink: string;
  /** The endpoint of an endpoint queue (shown with the job; the queue decides where it goes). */
  endpoint?: string;
  call: CanonicalCall;
}

export interface PollDeadLetterJob {
  kind: typeof JobName.pollDeadLetter;
  channelId: string;
  reason: string;
  event: unknown;
}

export type JobPayload = CallReceivedJob | SinkDeliverJob | PollDeadLetterJob;

/** Retry policy of every queue unless its config says otherwise. */
export interface RetryPolicy {
  /** Tries per job before it goes to the dead letters. Default 12 (16–32 min of backoff with the defaults, ~24 on average). */
  attempts: number;
  /** First backoff delay in ms; doubles each try, with jitter. Default 1000. */
  backoffMs: number;
  /** Upper bound of a single backoff delay in ms. Default 15 min. */
  maxBackoffMs: number;
  /**
   * A fixed schedule instead of the doubling: the delays in ms before retry 1, 2, …, the last one
   * repeating (src/backoff.ts `scheduleDelay`). A sink's own `retry` option sets it (the signed webhook's).
   */
  schedule?: readonly number[];
}

/** @internal Exported for its tests only (test/crm-webhook.redis.test.ts, test/poller.redis.test.ts …). */
export const defaultRetryPolicy: RetryPolicy = { attempts: 12, backoffMs: 1000, maxBackoffMs: 15 * 60_000 };

/** Name of the custom backoff strategy registered on every worker (see workers/runner.ts). */
export const BACKOFF_STRATEGY = 'capped-exponential-jitter';

const DAY_S = 24 * 3600;

export function defaultJobOptions(policy: RetryPolicy): DefaultJobOptions {
  return {
    attempts: policy.attempts,
    backoff: { type: BACKOFF_STRATEGY, delay: policy.backoffMs },
    // Completed jobs are evidence for a while, then go; failed ones are the dead letters and stay
    // two weeks (bounded in count so a flood of failures cannot exhaust Redis memory).
    removeOnComplete: { age: DAY_S, count: 10_000 },
    removeOnFail: { age: 14 * DAY_S, count: 100_000 },
  };
}
