// Errors of the telephony REST API: one type, TelephonyApiError, with the kind a caller acts on
// (the poller waits, backs off or stops; a sink maps it to its SinkError: src/sinks/telephony-errors.ts)
// and the spec's DetailedError body (section 7) kept as typed data and spelled out in the message
// that logs and dead letters show. The client is not a sink: it throws no SinkError.
// The API's texts are redacted on the way in (redactRemoteText): an error about an SMS may echo its
// recipient or text.
import { z } from 'zod';
import { errorFromHttp, networkReason, RetryLaterError } from '../errors.js';
import { redactRemoteText } from '../redact.js';

/** One entry of the spec's error body `{ errors: [ { status, title, detail, source: { pointer } } ] }`. */
export interface ApiProblem {
  status: number | null;
  title: string | null;
  detail: string | null;
  /** JSON pointer locating the error in the request (`source.pointer`). */
  pointer: string | null;
}

/**
 * What a caller does about a failure: `permanent` — the same request fails again; `transient` —
 * try again later (backoff); `auth` — the credentials were refused, nothing works until they are
 * fixed; `retry-later` — the API said when to come back (`retryAfterMs`).
 */
export type TelephonyErrorKind = 'permanent' | 'transient' | 'auth' | 'retry-later';

interface TelephonyErrorOptions {
  /** `GET /channels/{id}/events`, `OAuth token refresh`, … */
  operation: string;
  status?: number;
  problems?: ApiProblem[];
  /** `retry-later`: how long the API asked to wait. */
  retryAfterMs?: number;
  cause?: unknown;
}

/** A failed request of the platform API: its kind, the HTTP status if any, and what the API said. */
export class TelephonyApiError extends Error {
  readonly status: number | undefined;
  readonly operation: string;
  readonly problems: ApiProblem[];
  /** `retry-later`: the wait the API asked for (Retry-After, or the default for a 429 without it); else 0. */
  readonly retryAfterMs: number;
  constructor(
    readonly kind: TelephonyErrorKind,
    message: string,
    options: TelephonyErrorOptions,
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.operation = options.operation;
    this.status = options.status;
    this.problems = options.problems ?? [];
    this.retryAfterMs = Math.max(0, Math.ceil(options.retryAfterMs ?? 0));
  }
}

const problemSchema = z.looseObject({
  status: z.union([z.number(), z.string()]).nullish(),
  title: z.string().nullish(),
  detail: z.string().nullish(),
  source: z.looseObject({ pointer: z.string().nullish() }).nullish(),
});
const errorBodySchema = z.looseObject({ errors: z.array(z.unknown()) });

/** A text of the API, redacted; null stays null. */
function redacted(text: string | null | undefined): string | null {
  return text === null || text === undefined ? null : redactRemoteText(text);
}

/** Parses an error body (titles and details redacted); an unknown shape yields no problems (the status alone then speaks). */
function parseProblems(body: string): ApiProblem[] {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return [];
  }
  const parsed = errorBodySchema.safeParse(json);
  if (!parsed.success) return [];
  const problems: ApiProblem[] = [];
  for (const item of parsed.data.errors) {
    const p = problemSchema.safeParse(item);
    if (!p.success) continue;
    const status = typeof p.data.status === 'string' ? Number.parseInt(p.data.status, 10) : p.data.status;
    problems.push({
      status: typeof status === 'number' && Number.isFinite(status) ? status : null,
      title: redacted(p.data.title),
      detail: redacted(p.data.detail),
      pointer: redacted(p.data.source?.pointer),
    });
  }
  return problems;
}

/** `Unauthorized: token expired (at /data/token)`; several problems are joined with `; `. */
function describeProblems(problems: ApiProblem[]): string {
  return problems
    .map((p) => {
      const text = [p.title, p.detail].filter((s): s is string => s !== null && s !== '').join(': ');
      const at = p.pointer ? ` (at ${p.pointer})` : '';
      return redactRemoteText(`${text || 'error'}${at}`);
    })
    .join('; ');
}

export interface ResponseFailure {
  status: number;
  operation: string;
  /** The response body as text (read at most a few KB). */
  body: string;
  retryAfter: string | null;
  /** Delay used for a 429 without Retry-After. */
  defaultRetryAfterMs?: number;
}

/** Sorts an API error answer (by the HTTP rules of ../errors.ts) into a TelephonyApiError carrying the DetailedError problems. */
export function telephonyErrorFromResponse(f: ResponseFailure): TelephonyApiError {
  const problems = parseProblems(f.body);
  const detail =
    problems.length > 0
      ? describeProblems(problems)
      : f.body.trim().startsWith('<')
        ? undefined
        : redactRemoteText(f.body) || undefined;
  const sorted = errorFromHttp({
    status: f.status,
    what: `Telephony API ${f.operation}`,
    detail,
    retryAfter: f.retryAfter,
    defaultRetryAfterMs: f.defaultRetryAfterMs,
  });
  return new TelephonyApiError(sorted.kind as TelephonyErrorKind, sorted.message, {
    operation: f.operation,
    status: f.status,
    problems,
    ...(sorted instanceof RetryLaterError ? { retryAfterMs: sorted.delayMs } : {}),
  });
}

/**
 * A non-idempotent request (SMS send) left this process but no answer came back (timeout, reset):
 * the platform may or may not have acted on it. Callers with a "never twice" policy must not
 * resend blindly. Transient by kind, so a caller that does not know it still retries with backoff.
 */
export class OutcomeUnknownError extends TelephonyApiError {
  constructor(operation: string, reason: string, options?: { status?: number; cause?: unknown }) {
    super('transient', `Telephony API ${operation}: outcome unknown (${reason})`, { operation, ...options });
  }
}

/** The API answered 2xx with a body that does not match the spec's record. */
export class ResponseValidationError extends TelephonyApiError {
  constructor(operation: string, message: string) {
    super('permanent', `Telephony API ${operation}: ${message}`, { operation });
  }
}

/** A network failure (refused, reset, DNS, timeout) of an API request. */
export function telephonyNetworkError(operation: string, cause: unknown): TelephonyApiError {
  const reason =
    cause instanceof Error ? (cause.name === 'TimeoutError' ? 'timed out' : networkReason(cause)) : String(cause);
  return new TelephonyApiError('transient', `Telephony API ${operation} failed: ${reason}`, { operation, cause });
}
