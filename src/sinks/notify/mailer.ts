// E-mail delivery behind a small interface, and how SMTP failures are sorted. The one
// implementation (./smtp.ts, nodemailer) is imported only by a process that runs an e-mail sink.
import { AuthError, PermanentError, requestCertainlyNotSent, TransientError, type SinkError } from '../../errors.js';
import { redactRemoteText } from '../../redact.js';

interface MailMessage {
  from: string;
  to: string[];
  subject: string;
  text: string;
  html: string;
  /** `<id@domain>`: stable per call and rule, so a mail client can spot a duplicate. */
  messageId: string;
}

export interface Mailer {
  /**
   * Hands the message to the server; resolves with the server's answer once it took the message for
   * at least one recipient. `refused`: the server's refusals of the other recipients (RCPT TO
   * answered 4xx/5xx), redacted — the message went without them.
   */
  send(message: MailMessage): Promise<{ response: string; refused?: string[] }>;
  close(): Promise<void>;
}

interface NodemailerError extends Error {
  code?: string;
  originalCode?: string;
  responseCode?: number;
  timeoutType?: string;
}

/** Timeouts that end a connection before any message command was sent. */
const SETUP_TIMEOUTS = new Set(['CONNECT_TIMEOUT', 'GREETING_TIMEOUT', 'UPGRADE_TIMEOUT', 'DNS_TIMEOUT']);

/**
 * A TLS handshake that failed (a certificate not trusted, expired or for another name; no TLS at
 * all on the port): no message command went over the connection. OpenSSL's verify codes and Node's.
 */
const TLS_HANDSHAKE_CODE =
  /^(CERT_\w+|UNABLE_TO_\w+|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|HOSTNAME_MISMATCH|INVALID_CA|INVALID_PURPOSE|ERR_TLS_CERT_ALTNAME_INVALID|ERR_SSL_WRONG_VERSION_NUMBER)$/;

/** True when the server may have accepted the message although the send failed. */
export function smtpOutcomeUnknown(err: unknown): boolean {
  const e = (err instanceof Error && err.cause instanceof Error ? err.cause : err) as NodemailerError;
  if (typeof e?.responseCode === 'number') return false; // the server answered with a refusal
  if (['EAUTH', 'EENVELOPE', 'EMESSAGE', 'EDNS', 'ETLS', 'EREQUIRETLS'].includes(e?.code ?? '')) return false;
  if (e?.code === 'ETIMEDOUT' && SETUP_TIMEOUTS.has(e.timeoutType ?? '')) return false;
  if ([e?.code, e?.originalCode].some((c) => c === 'ECONNREFUSED' || c === 'ENOTFOUND' || c === 'EAI_AGAIN'))
    return false;
  if ([e?.code, e?.originalCode].some((c) => typeof c === 'string' && TLS_HANDSHAKE_CODE.test(c))) return false;
  return !requestCertainlyNotSent(e);
}

/**
 * Sorts an SMTP failure into the sink error kinds; the original stays the `cause`. The server's text
 * is redacted: a refusal names the recipient (`550 <anna@example.com>: mailbox unavailable`).
 */
export function smtpError(err: unknown): SinkError {
  const e = err as NodemailerError;
  const message = `SMTP: ${redactRemoteText(e?.message ?? String(err))}`;
  const status = typeof e?.responseCode === 'number' ? e.responseCode : undefined;
  if (e?.code === 'EAUTH' || status === 530 || status === 535) return new AuthError(message, { status, cause: err });
  if (status !== undefined)
    return status >= 500
      ? new PermanentError(message, { status, cause: err })
      : new TransientError(message, { status, cause: err });
  if (e?.code === 'EENVELOPE' || e?.code === 'EMESSAGE') return new PermanentError(message, { cause: err });
  return new TransientError(message, { cause: err });
}
