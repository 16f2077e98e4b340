// The SMTP mailer, through nodemailer (SMTP_URL: `smtp://user:pass@host:587` upgrades with STARTTLS
// when offered, `?requireTLS=true` insists on it, `smtps://` is TLS from the start). Imported by the
// e-mail sink's `create` only, so processes without an e-mail sink never load nodemailer.
import nodemailer from 'nodemailer';
import { smtpError, type Mailer } from './mailer.js';
import { redactRemoteText } from '../../redact.js';
import { traceClient } from '../../telemetry.js';

export interface SmtpMailerOptions {
  /** Connect, greeting and per-command socket timeouts in ms. Default 30 000. */
  timeoutMs?: number;
}

export function createSmtpMailer(url: string, options: SmtpMailerOptions = {}): Mailer {
  const timeout = options.timeoutMs ?? 30_000;
  // The URL inside the options object: createTransport's second argument is the messages' defaults,
  // where the timeouts were ignored (nodemailer's own applied: a server silent after DATA held the
  // job 10 minutes).
  const transport = nodemailer.createTransport({
    url,
    connectionTimeout: timeout,
    greetingTimeout: timeout,
    socketTimeout: timeout,
  } as Parameters<typeof nodemailer.createTransport>[0]);
  // A send's span (a child of the sink attempt when traces are on): the server and the message id, no address.
  const server = URL.canParse(url) ? new URL(url) : null;
  const attributes = {
    'network.protocol.name': 'smtp',
    ...(server ? { 'server.address': server.hostname } : {}),
    ...(server?.port ? { 'server.port': Number(server.port) } : {}),
  };
  return {
    send(m) {
      return traceClient('SMTP send', { ...attributes, 'callsync.message_id': m.messageId }, () => sendOne(m));
    },
    async close() {
      transport.close();
    },
  };

  async function sendOne(m: Parameters<Mailer['send']>[0]): Promise<{ response: string }> {
    try {
      const info = await transport.sendMail({
        from: m.from,
        to: m.to,
        subject: m.subject,
        text: m.text,
        html: m.html,
        messageId: m.messageId,
      });
      // nodemailer sends to the recipients the server accepted and lists the others here.
      const rejected = (info as { rejectedErrors?: { response?: unknown; message?: unknown }[] }).rejectedErrors ?? [];
      const refused = rejected.map((e) => redactRemoteText(String(e.response ?? e.message ?? 'refused'), 200));
      return { response: String(info.response ?? ''), ...(refused.length > 0 ? { refused } : {}) };
    } catch (err) {
      throw smtpError(err);
    }
  }
}
