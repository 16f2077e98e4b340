// The error classes of callsync, at the root of the source tree and importing nothing: sinks, the
// telephony client, the poller and the mailer throw them; the queue runner sorts by class.
// (Modelled on BullMQ's src/classes/errors/ and inngest-js' RetryAfterError: one class per
// behaviour, data on the instance, `instanceof` to tell them apart.)
//
// The kinds the queue runner knows how to treat:
//   permanent   -> dead letters at once, with the reason
//   retry-later -> wait exactly the given time without spending an attempt (per job or whole queue)
//   auth        -> pause the sink's whole queue until an operator resumes it
//   disable     -> the same, and the queue is marked disabled with the reason (a webhook endpoint
//                  answered 410 Gone or a redirect: it takes no more messages as configured)
//   transient   -> anything else: exponential backoff with jitter, then dead letters
export type SinkErrorKind = 'permanent' | 'retry-later' | 'auth' | 'disable' | 'transient';

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
  constructor(message: string, delayMs: number, options?: { status?: number; cause?: unknown; scope?: 'job' | 'queue' }) {
    super(message, options);
    this.delayMs = Math.max(0, Math.ceil(delayMs));
    this.scope = options?.scope ?? 'job';
  }
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
  /** The remote's error text (already stripped of secrets). */
  detail?: string;
  retryAfter?: string | null;
  /** Whether a 429 / 503 pauses the whole queue (shared rate limit) or delays only this job. */
  rateLimitScope?: 'job' | 'queue';
  /** Delay used for a 429 without Retry-After. Default 10 s. */
  defaultRetryAfterMs?: number;
}

/** Sorts an HTTP error answer into the kinds above. */
export function errorFromHttp(f: HttpFailure): SinkError {
  const message = `${f.what} answered ${f.status}${f.detail ? `: ${f.detail}` : ''}`;
  const retryAfterMs = parseRetryAfter(f.retryAfter);
  if (f.status === 429 || (f.status === 503 && retryAfterMs !== undefined)) {
    return new RetryLaterError(message, retryAfterMs ?? f.defaultRetryAfterMs ?? 10_000, {
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

/** The kind of any thrown value: typed sink errors keep theirs, everything unknown is transient. */
export function classify(err: unknown): SinkErrorKind {
  return err instanceof SinkError ? err.kind : 'transient';
}
