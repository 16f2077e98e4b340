// One pino logger for the process. Secrets and transcript text are redacted by path; phone
// numbers are masked wherever they are logged (use maskPhone on any number you log).
import { AsyncLocalStorage } from 'node:async_hooks';
import { pino, type Logger } from 'pino';

export type { Logger };

/** Fields added to every line logged inside a request or a job (`requestId`, `jobId`). */
export type LogContext = Record<string, string | undefined>;
const logContext = new AsyncLocalStorage<LogContext>();

/** Runs `fn` so that every line it logs, through any logger, carries `fields`. */
export function withLogContext<T>(fields: LogContext, fn: () => T): T {
  return logContext.run({ ...logContext.getStore(), ...fields }, fn);
}

/** Adds the context's fields unless the logger's own bindings already carry them (no duplicate keys). */
function contextMixin(_merge: object, _level: number, logger: Logger): object {
  const store = logContext.getStore();
  if (!store) return {};
  const bindings = String((logger as unknown as Record<symbol, unknown>)[pino.symbols.chindingsSym] ?? '');
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(store)) if (v !== undefined && !bindings.includes(`"${k}":`)) out[k] = v;
  return out;
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

/** `+492116355340` -> `+49211****340`: keeps enough to recognise a number, not enough to dial it. */
export function maskPhone(value: string | null | undefined): string | null {
  if (value === null || value === undefined) return null;
  const digits = value.replace(/[^\d+]/g, '');
  if (digits.length < 7) return '****';
  const keepHead = digits.startsWith('+') ? 6 : 5;
  return `${digits.slice(0, keepHead)}****${digits.slice(-3)}`;
}

export interface LoggerOptions {
  level?: string;
  /** Where to write; default stdout. Tests pass a stream to read what was logged. */
  destination?: NodeJS.WritableStream;
}

export function createLogger(options: LoggerOptions = {}): Logger {
  return pino(
    {
      level: options.level ?? process.env.LOG_LEVEL ?? 'info',
      base: { service: 'callsync' },
      redact: { paths: redactPaths, censor: '[redacted]' },
      mixin: contextMixin,
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    options.destination ?? process.stdout,
  );
}
