// One pino logger for the process. Secrets and transcript text are redacted by path; phone
// numbers are masked wherever they are logged (use maskPhone on any number you log).
import { pino, type Logger } from 'pino';

export type { Logger };

/** Paths never written to logs, whatever object they appear in. */
export const redactPaths = [
  'password', '*.password', 'token', '*.token', 'accessToken', '*.accessToken', 'secret', '*.secret',
  'authorization', '*.authorization', 'headers.authorization', 'headers.cookie', '*.headers.authorization',
  'apiKey', '*.apiKey', 'api_token', '*.api_token', 'refreshToken', '*.refreshToken', 'clientSecret', '*.clientSecret',
  'transcript', '*.transcript', 'transcription', '*.transcription', 'content', '*.content',
  'raw', '*.raw', 'body', '*.body',
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
      timestamp: pino.stdTimeFunctions.isoTime,
    },
    options.destination ?? process.stdout,
  );
}
