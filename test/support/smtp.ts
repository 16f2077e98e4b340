/**
 * A real SMTP server on loopback (smtp-server) that keeps every message it accepts, with a small
 * MIME reader for the tests' assertions (headers, text and HTML parts, quoted-printable and
 * base64 decoded). STARTTLS is offered with smtp-server's built-in self-signed certificate and
 * AUTH is only allowed after it, like a submission port (587).
 *
 * ```ts
 * const smtp = await TestSmtpServer.start({ user: 'u', pass: 'p' });
 * env.SMTP_URL = smtp.url; // smtp://u:p@127.0.0.1:<port>?requireTLS=true&tls.rejectUnauthorized=false
 * // ... smtp.messages[0].subject / .text / .html / .secure
 * await smtp.close();
 * ```
 */
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';

export interface ReceivedMail {
  /** SMTP envelope. */
  from: string;
  to: string[];
  /** Whether the session had switched to TLS (STARTTLS) before the message. */
  secure: boolean;
  user: string | undefined;
  raw: string;
  headers: Record<string, string>;
  subject: string;
  text: string | undefined;
  html: string | undefined;
}

export interface TestSmtpOptions {
  /** Credentials required (after STARTTLS). Default: none (no AUTH). */
  user?: string;
  pass?: string;
  /** Reply to DATA with this SMTP error instead of accepting (e.g. `{ code: 550, message: 'rejected' }`). */
  rejectData?: { code: number; message: string };
  /** Refuse RCPT TO of these addresses (lower case) with this SMTP error; the others are accepted. */
  rejectRcpt?: Record<string, { code: number; message: string }>;
}

export class TestSmtpServer {
  readonly messages: ReceivedMail[] = [];
  readonly url: string;
  rejectData: TestSmtpOptions['rejectData'];
  rejectRcpt: TestSmtpOptions['rejectRcpt'];

  private constructor(
    private readonly server: SMTPServer,
    port: number,
    options: TestSmtpOptions,
  ) {
    const auth =
      options.user !== undefined
        ? `${encodeURIComponent(options.user)}:${encodeURIComponent(options.pass ?? '')}@`
        : '';
    this.url = `smtp://${auth}127.0.0.1:${port}?requireTLS=true&tls.rejectUnauthorized=false`;
    this.rejectData = options.rejectData;
    this.rejectRcpt = options.rejectRcpt;
  }

  static async start(options: TestSmtpOptions = {}): Promise<TestSmtpServer> {
    const holder: { self?: TestSmtpServer } = {};
    const requireAuth = options.user !== undefined;
    const server = new SMTPServer({
      logger: false,
      authOptional: !requireAuth,
      authMethods: ['PLAIN', 'LOGIN'],
      onAuth(auth, _session, callback) {
        if (auth.username === options.user && auth.password === (options.pass ?? ''))
          return callback(null, { user: auth.username });
        return callback(new Error('Invalid username or password'));
      },
      onRcptTo(address, _session, callback) {
        const reject = holder.self?.rejectRcpt?.[address.address.toLowerCase()];
        if (!reject) return callback();
        const err = new Error(reject.message) as Error & { responseCode: number };
        err.responseCode = reject.code;
        return callback(err);
      },
      onData(stream, session, callback) {
        const chunks: Buffer[] = [];
        stream.on('data', (c: Buffer) => chunks.push(c));
        stream.on('end', () => {
          const reject = holder.self?.rejectData;
          if (reject) {
            const err = new Error(reject.message) as Error & { responseCode: number };
            err.responseCode = reject.code;
            return callback(err);
          }
          const raw = Buffer.concat(chunks).toString('utf8');
          holder.self?.messages.push({
            from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
            to: session.envelope.rcptTo.map((r) => r.address),
            secure: session.secure,
            user: typeof session.user === 'string' ? session.user : undefined,
            raw,
            ...parseMime(raw),
          });
          callback();
        });
      },
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const { port } = server.server.address() as AddressInfo;
    holder.self = new TestSmtpServer(server, port, options);
    return holder.self;
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

// ---- a small MIME reader: enough for what nodemailer writes ----

function parseHeaders(block: string): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const line of block.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return headers;
}

function split(raw: string): { headers: Record<string, string>; body: string } {
  const m = /\r?\n\r?\n/.exec(raw);
  if (!m) return { headers: parseHeaders(raw), body: '' };
  return { headers: parseHeaders(raw.slice(0, m.index)), body: raw.slice(m.index + m[0].length) };
}

export function decodeQuotedPrintable(text: string): string {
  const bytes: number[] = [];
  const soft = text.replace(/=\r?\n/g, '');
  for (let i = 0; i < soft.length; i++) {
    const c = soft[i] as string;
    if (c === '=' && /^[0-9A-Fa-f]{2}$/.test(soft.slice(i + 1, i + 3))) {
      bytes.push(Number.parseInt(soft.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(...Buffer.from(c, 'utf8'));
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

function decodeBody(body: string, encoding: string | undefined): string {
  switch ((encoding ?? '').toLowerCase()) {
    case 'quoted-printable':
      return decodeQuotedPrintable(body);
    case 'base64':
      return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
    default:
      return body;
  }
}

/** RFC 2047 encoded words (`=?UTF-8?Q?...?=`, `=?UTF-8?B?...?=`). */
export function decodeEncodedWords(value: string): string {
  return value
    .replace(/\?=\s+=\?/g, '?==?')
    .replace(/=\?([^?]+)\?([QqBb])\?([^?]*)\?=/g, (_m, _charset: string, kind: string, data: string) =>
      kind.toUpperCase() === 'B'
        ? Buffer.from(data, 'base64').toString('utf8')
        : decodeQuotedPrintable(data.replace(/_/g, ' ')),
    );
}

function parseMime(raw: string): {
  headers: Record<string, string>;
  subject: string;
  text: string | undefined;
  html: string | undefined;
} {
  const { headers, body } = split(raw);
  const parts: { type: string; content: string }[] = [];
  const walk = (h: Record<string, string>, b: string, depth: number) => {
    const type = h['content-type'] ?? 'text/plain';
    const boundary = /boundary="?([^";]+)"?/i.exec(type)?.[1];
    if (type.toLowerCase().startsWith('multipart/') && boundary && depth < 5) {
      const sections = b.split(`--${boundary}`).slice(1);
      for (const section of sections) {
        if (section.startsWith('--')) break;
        const inner = split(section.replace(/^\r?\n/, ''));
        walk(inner.headers, inner.body.replace(/\r?\n$/, ''), depth + 1);
      }
      return;
    }
    parts.push({ type: type.toLowerCase(), content: decodeBody(b, h['content-transfer-encoding']) });
  };
  walk(headers, body, 0);
  return {
    headers,
    subject: decodeEncodedWords(headers.subject ?? ''),
    text: parts.find((p) => p.type.startsWith('text/plain'))?.content,
    html: parts.find((p) => p.type.startsWith('text/html'))?.content,
  };
}
