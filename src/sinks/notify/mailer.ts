// E-mail delivery behind a small interface; the one implementation speaks SMTP through nodemailer
// (SMTP_URL: `smtp://user:pass@host:587` upgrades with STARTTLS when offered, `?requireTLS=true`
// insists on it, `smtps://` is TLS from the start).
import nodemailer from 'nodemailer';
import { requestCertainlyNotSent } from '../../telephony/errors.js';
import { AuthError, PermanentError, TransientError, type SinkError } from '../errors.js';

export interface MailMessage {
  from: string;
  to: string[];
  subject: string;
  text: string;
  html: string;
  /** `<id@domain>`: stable per call and rule, so a mail client can spot a duplicate. */
  messageId: string;
}

export interface Mailer {
  /** Hands the message to the server; resolves with the server's answer. */
  send(message: MailMessage): Promise<{ response: string }>;
  close(): Promise<void>;
}

export interface SmtpMailerOptions {
  /** Connect, greeting and per-command socket timeouts in ms. Default 30 000. */
  timeoutMs?: number;
}

export function createSmtpMailer(url: string, options: SmtpMailerOptions = {}): Mailer {
  const timeout = options.timeoutMs ?? 30_000;
  const transport = nodemailer.createTransport(url, {
    connectionTimeout: timeout,
    greetingTimeout: timeout,
    socketTimeout: timeout,
  } as Parameters<typeof nodemailer.createTransport>[1]);
  return {
    async send(m) {
      try {
        const info = await transport.sendMail({ from: m.from, to: m.to, subject: m.subject, text: m.text, html: m.html, messageId: m.messageId });
        return { response: String(info.response ?? '') };
      } catch (err) {
        throw smtpError(err);
      }
    },
    async close() {
      transport.close();
    },
  };
}

interface NodemailerError extends Error {
  code?: string;
  originalCode?: string;
  responseCode?: number;
  timeoutType?: string;
}

/** Timeouts that end a connection before any message command was sent. */
const SETUP_TIMEOUTS = new Set(['CONNECT_TIMEOUT', 'GREETING_TIMEOUT', 'UPGRADE_TIMEOUT', 'DNS_TIMEOUT']);

/** True when the server may have accepted the message although the send failed. */
export function smtpOutcomeUnknown(err: unknown): boolean {
  const e = (err instanceof Error && err.cause instanceof Error ? err.cause : err) as NodemailerError;
  if (typeof e?.responseCode === 'number') return false; // the server answered with a refusal
  if (['EAUTH', 'EENVELOPE', 'EMESSAGE', 'EDNS', 'ETLS', 'EREQUIRETLS'].includes(e?.code ?? '')) return false;
  if (e?.code === 'ETIMEDOUT' && SETUP_TIMEOUTS.has(e.timeoutType ?? '')) return false;
  if ([e?.code, e?.originalCode].some((c) => c === 'ECONNREFUSED' || c === 'ENOTFOUND' || c === 'EAI_AGAIN')) return false;
  return !requestCertainlyNotSent(e);
}

/** Sorts an SMTP failure into the sink error kinds; the original stays the `cause`. */
export function smtpError(err: unknown): SinkError {
  const e = err as NodemailerError;
  const message = `SMTP: ${e?.message ?? String(err)}`;
  const status = typeof e?.responseCode === 'number' ? e.responseCode : undefined;
  if (e?.code === 'EAUTH' || status === 530 || status === 535) return new AuthError(message, { status, cause: err });
  if (status !== undefined) return status >= 500 ? new PermanentError(message, { status, cause: err }) : new TransientError(message, { status, cause: err });
  if (e?.code === 'EENVELOPE' || e?.code === 'EMESSAGE') return new PermanentError(message, { cause: err });
  return new TransientError(message, { cause: err });
}
