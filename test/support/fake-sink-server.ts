// Loopback fakes of callsync's HTTP sinks for the chaos test and the end-to-end benchmark, each one
// restartable on the same port (stopped = connection refused, like a remote that is down):
//  - FakeWebhookReceiver: a Standard Webhooks receiver (verifies `webhook-signature`, keeps one record
//    per `webhook-id` like a real receiver that dedupes), answering 422 for calls marked as poison,
//    or whatever `answer` says for a call (401, 410 Gone, a redirect …: the spec's "Delivery success
//    and failure", github.com/standard-webhooks/standard-webhooks spec/standard-webhooks.md);
//  - FakeSmsApi: the platform's `POST /v2/sessions/sms` (HTTP Basic, 204), counting texts per recipient.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';

export interface ServerReply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

abstract class RestartableServer {
  private server: Server | null = null;
  private readonly sockets = new Set<Socket>();
  port = 0;
  /** Requests seen, including rejected ones. */
  requests = 0;

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.server !== null;
  }

  protected abstract handle(req: IncomingMessage, body: string): ServerReply;

  /** Listens (again) on the same port. */
  async start(): Promise<this> {
    if (this.server) return this;
    const server = createServer((req, res) => this.onRequest(req, res));
    server.keepAliveTimeout = 5000;
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
    return this;
  }

  /** Stops accepting connections; requests already being answered finish, idle keep-alive sockets close. */
  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = null;
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeIdleConnections();
    const force = setTimeout(() => {
      for (const s of this.sockets) s.destroy();
    }, 2000);
    await closed;
    clearTimeout(force);
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      this.requests++;
      let reply: ServerReply;
      try {
        reply = this.handle(req, Buffer.concat(chunks).toString('utf8'));
      } catch (err) {
        reply = { status: 500, body: { message: String(err) } };
      }
      // A stopped server answers what it has and closes the connection.
      const headers: Record<string, string> = { ...reply.headers, ...(this.server ? {} : { connection: 'close' }) };
      if (reply.body !== undefined) headers['content-type'] = 'application/json';
      res.writeHead(reply.status, headers);
      res.end(reply.body === undefined ? undefined : JSON.stringify(reply.body));
    });
  }
}

export interface WebhookRecord {
  webhookId: string;
  callId: string;
  /** How many times this message arrived (1 + redeliveries). */
  deliveries: number;
  /** Time of the first arrival (ms). */
  firstAt: number;
}

export class FakeWebhookReceiver extends RestartableServer {
  /** One record per webhook-id, as a deduplicating receiver keeps them. */
  readonly records = new Map<string, WebhookRecord>();
  /** webhook-ids seen per call id: more than one means the same call became two records. */
  readonly byCall = new Map<string, Set<string>>();
  /** Calls answered with 422 (a permanent rejection). */
  readonly poison = new Set<string>();
  /** Answers instead of accepting (after the signature check): per call id, or undefined to accept. */
  answer: ((callId: string) => ServerReply | undefined) | null = null;
  rejectedSignatures = 0;
  private readonly verifier: Webhook;

  constructor(readonly secret: string) {
    super();
    this.verifier = new Webhook(secret);
  }

  get url(): string {
    return `${this.origin}/hooks/calls`;
  }

  protected handle(req: IncomingMessage, body: string): ServerReply {
    if (req.method !== 'POST' || req.url !== '/hooks/calls') return { status: 404, body: { message: 'no such hook' } };
    const headers = {
      'webhook-id': String(req.headers['webhook-id'] ?? ''),
      'webhook-timestamp': String(req.headers['webhook-timestamp'] ?? ''),
      'webhook-signature': String(req.headers['webhook-signature'] ?? ''),
    };
    let payload: { data?: { callId?: string } };
    try {
      payload = this.verifier.verify(body, headers) as typeof payload;
    } catch (err) {
      this.rejectedSignatures++;
      return { status: 401, body: { message: `signature: ${(err as Error).message}` } };
    }
    const callId = payload.data?.callId ?? '';
    if (this.poison.has(callId)) return { status: 422, body: { message: `call ${callId} cannot be processed` } };
    const answer = this.answer?.(callId);
    if (answer) return answer;
    const id = headers['webhook-id'];
    const existing = this.records.get(id);
    if (existing) existing.deliveries++;
    else this.records.set(id, { webhookId: id, callId, deliveries: 1, firstAt: Date.now() });
    const ids = this.byCall.get(callId) ?? new Set<string>();
    ids.add(id);
    this.byCall.set(callId, ids);
    return { status: 204 };
  }
}

export class FakeSmsApi extends RestartableServer {
  /** Texts accepted per recipient. */
  readonly byRecipient = new Map<string, { count: number; firstAt: number; message: string }>();
  readonly tokenId = 'chaos-token-id';
  readonly token = 'chaos-token-secret';

  /** TELEPHONY_API_URL. */
  get url(): string {
    return `${this.origin}/v2`;
  }

  protected handle(req: IncomingMessage, body: string): ServerReply {
    if (req.method !== 'POST' || req.url !== '/v2/sessions/sms') {
      return {
        status: 404,
        body: { errors: [{ status: 404, title: 'Not Found', detail: `${req.method} ${req.url}` }] },
      };
    }
    const expected = `Basic ${Buffer.from(`${this.tokenId}:${this.token}`).toString('base64')}`;
    if (req.headers.authorization !== expected)
      return { status: 401, body: { errors: [{ status: 401, title: 'Unauthorized', detail: 'bad credentials' }] } };
    const sms = JSON.parse(body) as { smsId?: string; recipient?: string; message?: string };
    if (!sms.smsId || !sms.recipient || !sms.message)
      return {
        status: 400,
        body: { errors: [{ status: 400, title: 'Bad Request', detail: 'smsId, recipient and message are required' }] },
      };
    const seen = this.byRecipient.get(sms.recipient);
    if (seen) seen.count++;
    else this.byRecipient.set(sms.recipient, { count: 1, firstAt: Date.now(), message: sms.message });
    return { status: 204 };
  }
}
