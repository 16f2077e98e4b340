// The error classes of callsync, at the root of the source tree, importing only src/redact.ts (to
// redact a remote's text in errorFromHttp): sinks and the telephony client throw them; the queue
// runner sorts by class.
// (Modelled on BullMQ's src/classes/errors/ and inngest-js' RetryAfterError: one class per
// behaviour, data on the instance, `instanceof` to tell them apart.)
//
// The kinds the queue runner knows how to treat:
//   permanent   -> dead letters at once, with the reason
//   retry-later -> wait exactly the given time without spending an attempt (per job or whole queue)
//   auth        -> pause the sink's whole queue until an operator resumes it
//   disable     -> the same, and the queue is marked disabled with the reason (a webhook endpoint
//                  answered 410 Gone or a redirect: it takes no more messages as configured)
//   redis       -> Redis itself could not serve the job's own reads and writes (out of memory,
//                  read-only, loading, connection lost — see isRedisCondition): the job waits and
//                  runs again later without spending an attempt, as the fan-out waits for Redis
//   transient   -> anything else: exponential backoff with jitter, then dead letters
import { redactRemoteText } from './redact.js';

export type SinkErrorKind = 'permanent' | 'retry-later' | 'auth' | 'disable' | 'redis' | 'transient';

export abstract class SinkError extends Error {
  abstract readonly kind: SinkErrorKind;
  /** HTTP status of the remote answer, when there was one. */
  readonly status: number | undefined;
  constructor(message: string, options?: { status?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options?.status;
  }
}

/** Will never succeed as sent (a 4xx other than 408/429, invalid data). */
export class PermanentError extends SinkError {
  readonly kind = 'permanent' as const;
}

/** Timeouts, resets, 5xx: retry with backoff. */
export class TransientError extends SinkError {
  readonly kind = 'transient' as const;
}

/** Credentials rejected (401/403): retrying every job would only hammer the remote. */
export class AuthError extends SinkError {
  readonly kind = 'auth' as const;
}

/**
 * The remote said it takes no more messages at this address (a webhook endpoint's `410 Gone`, or a
 * redirect, which callsync does not follow): its queue is disabled — paused, marked with the
 * reason — until an operator re-enables it. The job waits in the queue; nothing is dropped.
 */
export class EndpointDisabledError extends SinkError {
  readonly kind = 'disable' as const;
}

/**
 * The remote asked us to wait (429, 503 with Retry-After). `scope: 'queue'` pauses the whole sink
 * queue (a rate limit shared by every job); `scope: 'job'` delays only this job.
 */
export class RetryLaterError extends SinkError {
  readonly kind = 'retry-later' as const;
  readonly delayMs: number;
  readonly scope: 'job' | 'queue';
  constructor(
    message: string,
    delayMs: number,
    options?: { status?: number; cause?: unknown; scope?: 'job' | 'queue' },
  ) {
    super(message, options);
    this.delayMs = Math.max(0, Math.ceil(delayMs));
    this.scope = options?.scope ?? 'job';
  }

  /** The same wait for longer (a queue held longer already: workers/runner.ts), this error its cause. */
  lasting(delayMs: number): RetryLaterError {
    return new RetryLaterError(this.message, delayMs, { status: this.status, cause: this, scope: this.scope });
  }
}

/**
 * A job that can never be processed as it is, raised by code that runs jobs but is not a sink: the
 * fan-out (a job without a call record, a route to a sink without a queue, sink jobs that cannot be
 * stored), the delivery wrapper (a sink job without a call record), the poller's dead letters (a
 * channel event that still cannot be read). Not a SinkError; the runner treats it as `permanent`.
 */
export class UnprocessableJobError extends Error {
  readonly kind = 'permanent' as const;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
  }
}

/**
 * A remote's "retry later" is waited at least a second and at most a day: a `Retry-After` of 0, a
 * date in the past (or `-5`, which `Date.parse` reads as a year) would make a request loop of the
 * runner's deferrals (MAX_DEFERRALS, workers/runner.ts), and one of years would hold the job — and a
 * queue-wide wait the whole queue — for ever. A day covers the longest wait a CRM names (HubSpot's
 * daily limit, until midnight).
 */
const REMOTE_WAIT_MS = { min: 1000, max: 24 * 3600_000 } as const;

/**
 * A wait as a reason says it: `850 ms` below 10 s, else whole seconds (`3600 s`). A wait of 16 min
 * or more in milliseconds has 7 digits, which the timeline and the logs mask as a phone number may
 * be (`****000 ms`): the reason no longer said how long. At most a day (REMOTE_WAIT_MS) is 5 digits.
 */
export function waitText(ms: number): string {
  return ms < 10_000 ? `${Math.max(0, Math.round(ms))} ms` : `${Math.ceil(ms / 1000)} s`;
}

export function remoteWaitMs(ms: number): number {
  return Math.min(Math.max(ms, REMOTE_WAIT_MS.min), REMOTE_WAIT_MS.max);
}

/** Parses a Retry-After header (seconds or HTTP date) into milliseconds; undefined when absent or unusable. */
export function parseRetryAfter(value: string | null | undefined, now: number = Date.now()): number | undefined {
  if (value === null || value === undefined || value.trim() === '') return undefined;
  const trimmed = value.trim();
  if (/^\d+(\.\d+)?$/.test(trimmed)) return Math.round(Number(trimmed) * 1000);
  const date = Date.parse(trimmed);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, date - now);
}

export interface HttpFailure {
  status: number;
  /** Short description of what was attempted, e.g. `HubSpot POST /crm/v3/objects/calls`. */
  what: string;
  /** The remote's error text (already stripped of secrets); redacted here (redactRemoteText). */
  detail?: string;
  retryAfter?: string | null;
  /** Whether a 429 / 503 pauses the whole queue (shared rate limit) or delays only this job. */
  rateLimitScope?: 'job' | 'queue';
  /** Delay used for a 429 without Retry-After. Default 10 s. */
  defaultRetryAfterMs?: number;
}

/** Sorts an HTTP error answer into the kinds above. */
export function errorFromHttp(f: HttpFailure): SinkError {
  const detail = f.detail === undefined ? '' : redactRemoteText(f.detail);
  const message = `${f.what} answered ${f.status}${detail ? `: ${detail}` : ''}`;
  const retryAfterMs = parseRetryAfter(f.retryAfter);
  if (f.status === 429 || (f.status === 503 && retryAfterMs !== undefined)) {
    return new RetryLaterError(message, remoteWaitMs(retryAfterMs ?? f.defaultRetryAfterMs ?? 10_000), {
      status: f.status,
      scope: f.rateLimitScope ?? 'job',
    });
  }
  if (f.status === 401 || f.status === 403) return new AuthError(message, { status: f.status });
  if (f.status === 408 || f.status >= 500) return new TransientError(message, { status: f.status });
  return new PermanentError(message, { status: f.status });
}

/** Network-level failures (refused, reset, timeout, DNS) are transient. */
export function errorFromNetwork(what: string, cause: unknown): TransientError {
  const reason = cause instanceof Error ? (cause.name === 'TimeoutError' ? 'timed out' : cause.message) : String(cause);
  return new TransientError(`${what} failed: ${reason}`, { cause });
}

/** `fetch failed` hides the useful part in `cause`. */
export function networkReason(err: Error): string {
  const cause = (err as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as { code?: unknown }).code;
    return typeof code === 'string' ? `${err.message} (${code})` : `${err.message} (${cause.message})`;
  }
  return err.message;
}

/** Network codes for which the request certainly never reached the server (so even a POST may be resent). */
const NOT_SENT_CODES = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'UND_ERR_CONNECT_TIMEOUT',
  'ERR_INVALID_URL',
]);

export function requestCertainlyNotSent(err: unknown): boolean {
  let current: unknown = err;
  for (let depth = 0; depth < 4 && current instanceof Error; depth++) {
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string' && NOT_SENT_CODES.has(code)) return true;
    // src/http-request.ts: failed before its connection was up (TCP, TLS handshake).
    if ((current as { notSent?: unknown }).notSent === true) return true;
    current = (current as { cause?: unknown }).cause;
  }
  return false;
}

/**
 * Redis replies about Redis, never about the command: full (`maxmemory`), a replica or read-only,
 * loading its data, a cluster or failover in progress, a script blocking it, persistence failing,
 * no more clients, credentials or ACLs refused. The same command succeeds once Redis is well again.
 */
const REDIS_CONDITION_REPLY =
  /^(OOM|READONLY|LOADING|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|NOREPLICAS|BUSY|MISCONF|NOAUTH|WRONGPASS|NOPERM|ERR max number of clients)\b/;
/** ioredis' own errors for a connection that is gone or gave up (not a remote's network error). */
const REDIS_CONNECTION_ERROR_NAMES = new Set(['MaxRetriesPerRequestError', 'ClusterAllFailedError']);
const REDIS_CONNECTION_MESSAGES =
  /^(Connection is closed\.|Stream isn't writeable and enableOfflineQueue options is false|Command timed out|Too many Cluster redirections|Cluster is disconnect(ed|ing)\.|None of startup nodes is available|Cluster isn't ready and enableOfflineQueue options is false)/;

/**
 * True when `err` (or what it wraps) is Redis failing callsync's own read or write: a `ReplyError`
 * about Redis' state (REDIS_CONDITION_REPLY) or ioredis giving up on its connection. Deliberately
 * narrower than the ingress' and fan-out's `isRedisUnavailable` (queues/connection.ts): a network
 * code such as ECONNRESET may be a remote's (a CRM, S3, an SMTP server) and stays transient here.
 */
export function isRedisCondition(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 5) return false;
  if (err.name === 'ReplyError') return REDIS_CONDITION_REPLY.test(err.message);
  if (REDIS_CONNECTION_ERROR_NAMES.has(err.name)) return true;
  if (
    !(err instanceof SinkError) &&
    !(err instanceof UnprocessableJobError) &&
    REDIS_CONNECTION_MESSAGES.test(err.message)
  )
    return true;
  return err.cause !== undefined && isRedisCondition(err.cause, depth + 1);
}

/**
 * The kind of any thrown value: typed sink errors keep theirs (a transient one that wraps a Redis
 * condition is `redis`), an UnprocessableJobError is `permanent`, Redis failing under the job is
 * `redis`, everything else unknown is transient.
 */
export function classify(err: unknown): SinkErrorKind {
  if (err instanceof UnprocessableJobError) return err.kind;
  if (err instanceof SinkError && err.kind !== 'transient') return err.kind;
  return isRedisCondition(err) ? 'redis' : 'transient';
}
