// Errors of the telephony REST API, sorted into the error kinds of ../errors.ts so the
// queue runner, the poller and the SMS channel treat them alike, with the spec's DetailedError
// body (section 7) kept as typed data and spelled out in the message that logs and dead letters show.
// The API's texts are redacted on the way in (redactRemoteText): an error about an SMS may echo its
// recipient or text.
import { z } from 'zod';
import { PermanentError, TransientError, errorFromHttp, networkReason, type SinkError } from '../errors.js';
import { redactRemoteText } from '../redact.js';

/** One entry of the spec's error body `{ errors: [ { status, title, detail, source: { pointer } } ] }`. */
export interface ApiProblem {
  status: number | null;
  title: string | null;
  detail: string | null;
  /** JSON pointer locating the error in the request (`source.pointer`). */
  pointer: string | null;
}

/** A telephony API failure: the sink error kind plus what the API said. */
export type TelephonyError = SinkError & {
  /** `GET /channels/{id}/events` etc. */
  readonly operation: string;
  readonly problems: ApiProblem[];
};

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

function attach<E extends SinkError>(err: E, operation: string, problems: ApiProblem[]): E & TelephonyError {
  Object.defineProperty(err, 'operation', { value: operation, enumerable: true });
  Object.defineProperty(err, 'problems', { value: problems, enumerable: true });
  return err as E & TelephonyError;
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

/** Sorts an API error answer into a sink error carrying the DetailedError problems. */
export function telephonyErrorFromResponse(f: ResponseFailure): TelephonyError {
  const problems = parseProblems(f.body);
  const detail =
    problems.length > 0
      ? describeProblems(problems)
      : f.body.trim().startsWith('<')
        ? undefined
        : redactRemoteText(f.body) || undefined;
  const err = errorFromHttp({
    status: f.status,
    what: `Telephony API ${f.operation}`,
    detail,
    retryAfter: f.retryAfter,
    // One account shares one rate limit: a 429 concerns every job of the queue.
    rateLimitScope: 'queue',
    defaultRetryAfterMs: f.defaultRetryAfterMs,
  });
  return attach(err, f.operation, problems);
}

/**
 * A non-idempotent request (SMS send) left this process but no answer came back (timeout, reset):
 * the platform may or may not have acted on it. Callers with a "never twice" policy must not
 * resend blindly. Transient by kind, so a caller that does not know it still retries with backoff.
 */
export class OutcomeUnknownError extends TransientError {
  readonly operation: string;
  readonly problems: ApiProblem[] = [];
  constructor(operation: string, reason: string, options?: { status?: number; cause?: unknown }) {
    super(`Telephony API ${operation}: outcome unknown (${reason})`, options);
    this.operation = operation;
  }
}

/** The API answered 2xx with a body that does not match the spec's record. */
export class ResponseValidationError extends PermanentError {
  readonly operation: string;
  readonly problems: ApiProblem[] = [];
  constructor(operation: string, message: string) {
    super(`Telephony API ${operation}: ${message}`);
    this.operation = operation;
  }
}

/** A network failure (refused, reset, DNS, timeout) of an API request. */
export function telephonyNetworkError(operation: string, cause: unknown): TelephonyError {
  const reason =
    cause instanceof Error ? (cause.name === 'TimeoutError' ? 'timed out' : networkReason(cause)) : String(cause);
  return attach(new TransientError(`Telephony API ${operation} failed: ${reason}`, { cause }), operation, []);
}
