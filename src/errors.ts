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
//   redis       -> Redis itself could not serve the job's own reads and writes (out of memory,
//                  read-only, loading, connection lost — see isRedisCondition): the job waits and
//                  runs again later without spending an attempt, as the fan-out waits for Redis
//   transient   -> anything else: exponential backoff with jitter, then dead letters
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

// ---------------------------------------------------------------------------------------------
// Remote error text. A CRM, the telephony API, an SMTP server or S3 often echoes what we sent it
// (numbers, names, summary sentences) in its error answer, and that text becomes an error message,
// then a log line and a dead letter's reason. Every remote text passes `redactRemoteText` where it
// enters (errorFromHttp, the CRM client, the telephony and OAuth errors, the SMTP and S3 errors);
// the delivery of a call then also removes that call's own texts (`scrubEchoes`, workers/deliver.ts).
// ---------------------------------------------------------------------------------------------

/**
 * Characters of a remote's text kept in a message: the first 239 and the last 60 beyond that. Room
 * for the vendor's code after an echo of our data, which the delivery removes afterwards.
 */
export const MAX_REMOTE_TEXT = 300;
const REMOTE_TEXT_TAIL = 60;

/** A digit run needs this many digits to count as a possible phone number. */
const MIN_PHONE_DIGITS = 7;

/**
 * `+4915112345678` -> `+****678`; shorter runs keep 2 digits (`6355340` -> `****40`). Unlike
 * maskPhone (src/log.ts, numbers callsync knows are numbers) it keeps no leading digits: in free
 * text a digit run may be anything, and its head plus tail could be all of it.
 */
export function maskDigitRun(run: string): string {
  const digits = run.replace(/\D/g, '');
  const plus = run.trimStart().startsWith('+') ? '+' : '';
  return `${plus}****${digits.slice(digits.length >= 9 ? -3 : -2)}`;
}

/**
 * Kept as they are: ISO dates and times, IPv4 addresses (with a port), and numbers followed by a
 * unit (`86400000 ms`, `1048576 bytes`). Everything else with 7 or more digits in one run (spaces,
 * `-`, `.`, `/`, parentheses between them) is masked, whether it is a phone number or a record id.
 */
const DIGIT_RUN = new RegExp(
  [
    String.raw`(\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?)?)`,
    String.raw`(\b\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5})?\b)`,
    String.raw`(\d+\s?(?:ms|s|sec|seconds|bytes|B|KB|KiB|MB|MiB|GB|chars|characters)\b)`,
    // Not inside a word or an id (`a1b2-1234-5678`), not before `-x` / `.x` (`12345678-abcd-…`).
    String.raw`(?<![\w\-.])(\+?\(?\d[\d ()\-./]*\d)(?!\w|[\-.]\w)`,
  ].join('|'),
  'g',
);

const EMAIL = /[\w.%+-]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)/g;
const QUERY_VALUE = /([?&][\w.\-[\]]+=)[^&\s"'<>#]+/g;
const CREDENTIAL = /\b(Bearer|Basic|Token)\s+[\w\-.~+/=]{16,}/gi;

/** Masks the digit runs that may be phone numbers (see DIGIT_RUN), keeps the rest of the text. */
export function maskDigitRuns(text: string): string {
  return text.replace(DIGIT_RUN, (match, date?: string, ip?: string, quantity?: string, run?: string) => {
    if (date !== undefined || ip !== undefined || quantity !== undefined || run === undefined) return match;
    return run.replace(/\D/g, '').length >= MIN_PHONE_DIGITS ? maskDigitRun(run) : match;
  });
}

/** Cuts a text to `max` characters: its beginning and its end (where vendors put a code or category). */
export function clipText(text: string, max: number = MAX_REMOTE_TEXT): string {
  if (text.length <= max) return text;
  const tail = Math.min(REMOTE_TEXT_TAIL, Math.max(0, max - 1));
  const head = max - 1 - tail;
  return `${text.slice(0, head)}…${tail > 0 ? text.slice(-tail) : ''}`;
}

/**
 * A remote's error text made fit for logs and dead letters: on one line, phone-number-like digit
 * runs masked (`+****678`), e-mail addresses masked (`***@example.com`), query-string values and
 * bearer-like credentials replaced by `…`, cut to MAX_REMOTE_TEXT (300) characters. What an operator
 * needs stays: the vendor's words, error codes and categories, field names, dates. Idempotent.
 */
export function redactRemoteText(text: string, max: number = MAX_REMOTE_TEXT): string {
  const oneLine = text.replace(/\s+/g, ' ').trim();
  const masked = maskDigitRuns(
    oneLine
      .replace(EMAIL, (_m, domain: string) => `***@${domain}`)
      .replace(QUERY_VALUE, '$1…')
      .replace(CREDENTIAL, '$1 …'),
  );
  return clipText(masked, max);
}

/** What a call itself holds that must not come back in an error text (see workers/deliver.ts). */
export interface EchoValues {
  /** Free texts (summary, key points, transcript): any run of 4 of their words in a row is removed. */
  texts?: Iterable<string>;
  /** Names: each of their words is removed wherever it stands. */
  names?: Iterable<string>;
  /** Phone numbers as the call holds them: masked like any digit run. */
  numbers?: Iterable<string>;
}

const WORD = /[\p{L}\p{N}]+(?:['’][\p{L}\p{N}]+)*/gu;
/** Words in a row that count as an echo of a text; shorter texts count only whole. */
const ECHO_WORDS = 4;

function wordsOf(text: string): string[] {
  return (text.match(WORD) ?? []).map((w) => w.toLowerCase());
}

/**
 * Removes from `text` what it echoes of the given values: runs of 4 words of a free text (or a
 * shorter text whole), every word of a name, the numbers. Each removed stretch becomes `…`.
 */
export function scrubEchoes(text: string, values: EchoValues): string {
  let out = text;
  for (const n of values.numbers ?? []) {
    const number = n.trim();
    if (number.replace(/\D/g, '').length >= 3) out = out.split(number).join(maskDigitRun(number));
  }
  const phrases = new Set<string>();
  const lengths = new Set<number>();
  for (const t of values.texts ?? []) {
    const words = wordsOf(t);
    if (words.length === 0 || words.join(' ').length < 3) continue;
    const n = Math.min(ECHO_WORDS, words.length);
    lengths.add(n);
    for (let i = 0; i + n <= words.length; i++) phrases.add(words.slice(i, i + n).join(' '));
  }
  const nameWords = new Set<string>();
  for (const name of values.names ?? []) for (const w of wordsOf(name)) if (w.length >= 2) nameWords.add(w);
  if (phrases.size === 0 && nameWords.size === 0) return out;

  const spans = [...out.matchAll(WORD)].map((m) => ({ start: m.index, end: m.index + m[0].length, word: m[0].toLowerCase() }));
  const hit = spans.map((s) => nameWords.has(s.word));
  for (const n of lengths) {
    for (let i = 0; i + n <= spans.length; i++) {
      if (!phrases.has(spans.slice(i, i + n).map((s) => s.word).join(' '))) continue;
      for (let j = i; j < i + n; j++) hit[j] = true;
    }
  }
  let result = '';
  let at = 0;
  for (let i = 0; i < spans.length; i++) {
    if (!hit[i]) continue;
    let j = i;
    // One `…` for a stretch of removed words and what stands between them.
    while (j + 1 < spans.length && hit[j + 1]) j++;
    result += `${out.slice(at, spans[i]!.start)}…`;
    at = spans[j]!.end;
    i = j;
  }
  return result + out.slice(at);
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

/**
 * Redis replies about Redis, never about the command: full (`maxmemory`), a replica or read-only,
 * loading its data, a cluster or failover in progress, a script blocking it, persistence failing,
 * no more clients, credentials or ACLs refused. The same command succeeds once Redis is well again.
 */
const REDIS_CONDITION_REPLY = /^(OOM|READONLY|LOADING|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|NOREPLICAS|BUSY|MISCONF|NOAUTH|WRONGPASS|NOPERM|ERR max number of clients)\b/;
/** ioredis' own errors for a connection that is gone or gave up (not a remote's network error). */
const REDIS_CONNECTION_ERROR_NAMES = new Set(['MaxRetriesPerRequestError', 'ClusterAllFailedError']);
const REDIS_CONNECTION_MESSAGES = /^(Connection is closed\.|Stream isn't writeable and enableOfflineQueue options is false|Command timed out|Too many Cluster redirections|Cluster is disconnect(ed|ing)\.|None of startup nodes is available|Cluster isn't ready and enableOfflineQueue options is false)/;

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
  if (!(err instanceof SinkError) && REDIS_CONNECTION_MESSAGES.test(err.message)) return true;
  return err.cause !== undefined && isRedisCondition(err.cause, depth + 1);
}

/**
 * The kind of any thrown value: typed sink errors keep theirs (a transient one that wraps a Redis
 * condition is `redis`), Redis failing under the job is `redis`, everything else unknown is transient.
 */
export function classify(err: unknown): SinkErrorKind {
  if (err instanceof SinkError && err.kind !== 'transient') return err.kind;
  return isRedisCondition(err) ? 'redis' : 'transient';
}
