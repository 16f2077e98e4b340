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

/** Paths never written to logs, whatever object they appear in. */
export const redactPaths = [
  'password', '*.password', 'token', '*.token', 'accessToken', '*.accessToken', 'secret', '*.secret',
  'authorization', '*.authorization', 'headers.authorization', 'headers.cookie', '*.headers.authorization',
  'apiKey', '*.apiKey', 'api_token', '*.api_token', 'refreshToken', '*.refreshToken', 'clientSecret', '*.clientSecret',
  'transcript', '*.transcript', 'transcription', '*.transcription', 'content', '*.content',
  'raw', '*.raw', 'body', '*.body',
  // Headers carrying credentials, and the same secrets and texts nested deeper (job data, call records).
  '*.headers.cookie', 'headers["x-api-key"]', '*.headers["x-api-key"]', 'headers["x-api-token"]', '*.headers["x-api-token"]',
  'secretAccessKey', '*.secretAccessKey', '*.*.password', '*.*.token', '*.*.secret', '*.*.authorization', '*.*.accessToken',
  '*.*.transcript', '*.*.transcription', '*.*.content', '*.*.*.transcript', '*.*.*.transcription', '*.*.*.content',
];

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

/**
 * A line as strict JSON: each key once. pino appends a child's bindings to its parent's and the
 * logged object's keys after both, so a key bound twice (the worker binds `sink`, the sink binds it
 * again) or logged again is written twice — JSON.parse keeps the last, strict consumers reject the
 * line. Parsed and written again, each key keeps its first place and its last (innermost) value,
 * the one pino means to win. About 1.5 µs a line, paid only for lines written.
 */
export function strictLine(line: string): string {
  try {
    return `${JSON.stringify(JSON.parse(line))}\n`;
  } catch {
    return line;
  }
}

export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      base: { service: 'callsync' },
      redact: { paths: redactPaths, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      hooks: { streamWrite: strictLine },
    },
    options.destination ?? process.stdout,
  );
}
