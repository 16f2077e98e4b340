// One pino logger for the process. Secrets and transcript text are redacted by path; phone
// numbers are masked wherever they are logged (use maskPhone on any number you log).
import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * The logger for lines about one HTTP request: with its id (set by the request-context middleware),
 * built only when a line is logged. An explicit logger rather than AsyncLocalStorage, whose promise
 * hooks cost the ingress ~11 % of its CPU per webhook on Node 20 (docs/performance.md).
 */
export function requestLog(log: Logger, requestId: string | undefined): Logger {
  return requestId === undefined ? log : log.child({ requestId });
}

/**
 * Keys never written to logs, by the depth they sit at (0: the line's own keys and a child's
 * bindings; 1: one object down, `*.key`; 2: `*.*.key`; 3: `*.*.*.key`), array indices counted as
 * a level. Secrets and texts are redacted down to depth 1 (credentials in a config, transcript and
 * summary text in a call), the commonest deeper (job data, call records) down to 2 and 3.
 */
const SECRET_KEYS = [
  'password',
  'token',
  'accessToken',
  'secret',
  'authorization',
  'apiKey',
  'api_token',
  'refreshToken',
  'clientSecret',
  'secretAccessKey',
  'transcript',
  'transcription',
  'content',
  'raw',
  'body',
];
const REDACTED_AT: readonly ReadonlySet<string>[] = [
  new Set(SECRET_KEYS),
  new Set(SECRET_KEYS),
  new Set(['password', 'token', 'secret', 'authorization', 'accessToken', 'transcript', 'transcription', 'content']),
  new Set(['transcript', 'transcription', 'content']),
];
/** Keys of a `headers` object at depth 0 or 1 that carry credentials (`headers.cookie`, `*.headers["x-api-key"]`). */
const CREDENTIAL_HEADERS: ReadonlySet<string> = new Set(['authorization', 'cookie', 'x-api-key', 'x-api-token']);
const DEEPEST = REDACTED_AT.length - 1;
const CENSOR = '[redacted]';

/**
 * `value` with every key above censored where it sits, copied only along the paths that change
 * (the caller's object is never touched): each line costs a walk of at most four levels. It
 * replaces pino's `redact` option, which cloned every value of every line through all its wildcard
 * paths — ~50 KB allocated per line, ~20 % of what the worker allocated per call
 * (docs/performance.md, round 11). test/log-redaction.test.ts checks it against pino's own.
 */
function redactedIn(value: unknown, depth: number, headers: boolean): unknown {
  if (value === null || typeof value !== 'object') return value;
  if (Array.isArray(value)) {
    if (depth === DEEPEST) return value; // an index never matches a key
    let copy: unknown[] | undefined;
    for (let i = 0; i < value.length; i++) {
      const v: unknown = value[i];
      const r = redactedIn(v, depth + 1, false);
      if (r !== v) (copy ??= value.slice())[i] = r;
    }
    return copy ?? value;
  }
  const names = REDACTED_AT[depth]!;
  let copy: Record<string, unknown> | undefined;
  for (const key in value) {
    if (!Object.prototype.hasOwnProperty.call(value, key)) continue;
    const v: unknown = (value as Record<string, unknown>)[key];
    let r: unknown;
    if (names.has(key) || (headers && CREDENTIAL_HEADERS.has(key))) r = v === undefined ? v : CENSOR;
    else if (depth < DEEPEST) r = redactedIn(v, depth + 1, key === 'headers' && depth <= 1);
    else continue;
    if (r === v) continue;
    copy ??= copyOf(value);
    Object.defineProperty(copy, key, { value: r, enumerable: true, writable: true, configurable: true });
  }
  return copy ?? value;
}

/** A shallow copy with the same prototype and own properties (an Error stays an Error for the serializers). */
function copyOf(value: object): Record<string, unknown> {
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto === Object.prototype || proto === null) return { ...(value as Record<string, unknown>) };
  return Object.create(proto as object, Object.getOwnPropertyDescriptors(value)) as Record<string, unknown>;
}

/**
 * A line's object as written: `err` serialized first (what pino's `err` serializer makes of an
 * Error: type, message and stack with causes, its own fields), then redacted.
 */
function redactedLine(obj: Record<string, unknown>): Record<string, unknown> {
  const err = obj.err as { message?: unknown } | null | undefined;
  // pino's own test for an error: anything with a text `message`.
  const serialized =
    err && typeof err.message === 'string' ? { ...obj, err: pino.stdSerializers.err(err as Error) } : obj;
  return redactedIn(serialized, 0, false) as Record<string, unknown>;
}

/**
 * `+492116355340` -> `+49211****340`: keeps enough to recognise a number, not enough to dial it. A
 * short number keeps a shorter head, so at least 3 of its digits stay hidden (`6355340` -> `6****340`).
 */
export function maskPhone(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  const digits = value.replace(/[^\d+]/g, '');
  if (digits.length < 7) return '****';
  const keepHead = Math.min(digits.startsWith('+') ? 6 : 5, digits.length - 6);
  return `${digits.slice(0, keepHead)}****${digits.slice(-3)}`;
}

export interface LoggerOptions {
  level?: string;
  /** Where to write; default stdout. Tests pass a stream to read what was logged. */
  destination?: NodeJS.WritableStream;
}

/** The index after the JSON string that starts at `i` (a `"`). */
function stringEnd(text: string, i: number): number {
  for (let j = i + 1; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 92)
      j++; // backslash: skip the escaped character
    else if (c === 34) return j + 1;
  }
  return -1;
}

/** The index after the JSON value that starts at `i` (pino's compact output: no white space). */
function valueEnd(text: string, i: number): number {
  const first = text.charCodeAt(i);
  if (first === 34) return stringEnd(text, i);
  let depth = 0;
  for (let j = i; j < text.length; j++) {
    const c = text.charCodeAt(j);
    if (c === 34) {
      j = stringEnd(text, j) - 1;
      if (j < 0) return -1;
    } else if (c === 123 || c === 91) depth++;
    else if (c === 125 || c === 93) {
      if (depth === 0) return j;
      depth--;
      if (depth === 0) return j + 1;
    } else if (c === 44 && depth === 0) return j;
  }
  return -1;
}

/**
 * A line as strict JSON: each key once. pino appends a child's bindings to its parent's and the
 * logged object's keys after both, so a key bound twice (the worker binds `sink`, the sink binds it
 * again) or logged again is written twice — JSON.parse keeps the last, strict consumers reject the
 * line. Here each top-level key keeps its first place and its last (innermost) value, the one pino
 * means to win; values are moved as written (a large number keeps its digits). Nested objects come
 * from JSON.stringify and cannot repeat a key. A line without a repeated key is returned as it is.
 */
function strictLine(line: string): string {
  const end = line.endsWith('\n') ? line.length - 1 : line.length;
  if (line.charCodeAt(0) !== 123 || line.charCodeAt(end - 1) !== 125) return line;
  const members: { key: string; value: string }[] = [];
  const index = new Map<string, number>();
  let repeated = false;
  for (let i = 1; i < end - 1;) {
    if (line.charCodeAt(i) !== 34) return line;
    const keyEnd = stringEnd(line, i);
    if (keyEnd < 0 || line.charCodeAt(keyEnd) !== 58) return line;
    const stop = valueEnd(line, keyEnd + 1);
    if (stop < 0) return line;
    const key = line.slice(i, keyEnd);
    const value = line.slice(keyEnd + 1, stop);
    const at = index.get(key);
    if (at === undefined) {
      index.set(key, members.length);
      members.push({ key, value });
    } else {
      repeated = true;
      members[at]!.value = value;
    }
    i = line.charCodeAt(stop) === 44 ? stop + 1 : stop;
    if (stop === end - 1) break;
  }
  if (!repeated) return line;
  return `{${members.map((m) => `${m.key}:${m.value}`).join(',')}}${line.slice(end)}`;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  const root = pino(
    {
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      base: { service: 'callsync' },
      formatters: { log: redactedLine, bindings: redactedLine },
      // `err` is serialized by redactedLine (before redaction, as pino's `redact` saw it); a value
      // that is not an Error is written as it is, as pino's serializer would.
      serializers: { err: (value: unknown) => value },
      timestamp: pino.stdTimeFunctions.isoTime,
      hooks: { streamWrite: strictLine },
    },
    options.destination ?? process.stdout,
  );
  // A child's bindings are redacted as a line is (pino runs `formatters.bindings` on the root's
  // alone); every child inherits this from the root, its descendants too.
  const child = root.child;
  root.child = function redactedChild(this: Logger, bindings, childOptions) {
    return child.call(this, redactedLine(bindings as Record<string, unknown>), childOptions);
  } as typeof child;
  return root;
}

/** The shortest time between two lines of one kind of repeated error (a Redis outage, a refused connection). */
const REPEAT_LOG_INTERVAL_MS = 10_000;

interface RepeatState {
  quietUntil: number;
  /** Occurrences since the last line. */
  count: number;
  /** Where they happened since the last line (connection or queue names). */
  where: Set<string>;
}

const repeats = new Map<string, RepeatState>();

/**
 * Logs an error that repeats while something is away (every connection and queue reports each
 * failed reconnect): the first of a kind at once, then at most one line per
 * REPEAT_LOG_INTERVAL_MS with how many there were (`repeated`) and where. The kind is the message
 * and the error's text, so a different error still shows at once. Returns whether it logged.
 */
export function logRepeated(
  log: Logger,
  level: 'warn' | 'error',
  msg: string,
  where: string,
  err: { message: string },
  fields: object = {},
  now = Date.now(),
): boolean {
  const kind = `${msg}\u0000${err.message}`;
  let state = repeats.get(kind);
  if (!state) {
    // Bounded: kinds are few (messages × error texts); forget them all should a flood of distinct texts come.
    if (repeats.size > 1000) repeats.clear();
    state = { quietUntil: 0, count: 0, where: new Set() };
    repeats.set(kind, state);
  }
  state.count++;
  if (state.where.size < 20) state.where.add(where);
  if (now < state.quietUntil) return false;
  log[level](
    { ...fields, where: [...state.where].join(','), repeated: state.count, err: { message: err.message } },
    msg,
  );
  state.count = 0;
  state.where.clear();
  state.quietUntil = now + REPEAT_LOG_INTERVAL_MS;
  return true;
}
