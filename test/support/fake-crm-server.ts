// Plumbing shared by the fake HubSpot and Pipedrive servers: a node:http server on 127.0.0.1:0 that
// records every request and can answer the next ones from a script (429 storms, 500s, 401s, resets).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface RecordedRequest {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string | string[] | undefined>;
  /** Parsed JSON body, or undefined. */
  body: unknown;
  rawBody: string;
  /** The body's bytes (binary uploads). */
  rawBytes: Buffer;
}

export interface ScriptedAnswer {
  /** Only requests this matches consume the step (default: any). */
  match?: (req: RecordedRequest) => boolean;
  /** How many matching requests get this answer (default 1). */
  times?: number;
  /** Required unless `dropAfterHandling` or `hold`. */
  status?: number;
  headers?: Record<string, string>;
  body?: unknown;
  /** Handle the request normally, then destroy the socket instead of answering (a crash after the write). */
  dropAfterHandling?: boolean;
  /** Handle the request normally (the record is written), then answer this status and raw body instead (a broken proxy, an unexpected shape). */
  rawAfterHandling?: { status: number; body: string };
  /** Handle the request normally, but only once this settles (a slow remote; the request is recorded at once). */
  hold?: Promise<unknown>;
}

export interface Reply {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export abstract class FakeCrmServer {
  readonly requests: RecordedRequest[] = [];
  private readonly script: ScriptedAnswer[] = [];
  private server: Server | null = null;
  url = '';

  /** Answers for the next matching requests, in order, before normal handling resumes. */
  enqueue(...steps: ScriptedAnswer[]): void {
    this.script.push(...steps.map((s) => ({ ...s, times: s.times ?? 1 })));
  }

  /** Requests other than the fake's own bookkeeping, optionally by method and path prefix. */
  requestsTo(method?: string, pathPrefix?: string): RecordedRequest[] {
    return this.requests.filter(
      (r) =>
        (method === undefined || r.method === method) && (pathPrefix === undefined || r.path.startsWith(pathPrefix)),
    );
  }

  protected abstract handle(req: RecordedRequest): Reply;
  /** Headers on every answer to `req` (rate-limit headers). */
  protected commonHeaders(_req: RecordedRequest): Record<string, string> {
    return {};
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.onRequest(req, res));
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    const { port } = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${port}`;
    return this;
  }

  async stop(): Promise<void> {
    if (!this.server) return;
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server!.close(() => resolve()));
    this.server = null;
  }

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const rawBytes = Buffer.concat(chunks);
    const rawBody = rawBytes.toString('utf8');
    const u = new URL(req.url ?? '/', 'http://fake');
    let body: unknown;
    try {
      body = rawBody ? JSON.parse(rawBody) : undefined;
    } catch {
      body = undefined;
    }
    const recorded: RecordedRequest = {
      method: req.method ?? 'GET',
      path: u.pathname,
      query: Object.fromEntries(u.searchParams),
      headers: req.headers,
      body,
      rawBody,
      rawBytes,
    };
    this.requests.push(recorded);

    const stepIndex = this.script.findIndex((s) => s.match === undefined || s.match(recorded));
    const step = stepIndex >= 0 ? this.script[stepIndex] : undefined;
    if (step) {
      step.times = (step.times ?? 1) - 1;
      if (step.times <= 0) this.script.splice(stepIndex, 1);
      if (step.hold) {
        await step.hold.catch(() => undefined);
        this.send(res, this.handleSafely(recorded), recorded);
        return;
      }
      if (step.rawAfterHandling) {
        this.handle(recorded);
        res.writeHead(step.rawAfterHandling.status, { 'content-type': 'application/json;charset=utf-8' });
        res.end(step.rawAfterHandling.body);
        return;
      }
      if (step.dropAfterHandling) {
        this.handle(recorded);
        req.socket.destroy();
        return;
      }
      this.send(res, { status: step.status ?? 200, body: step.body, headers: step.headers }, recorded);
      return;
    }
    this.send(res, this.handleSafely(recorded), recorded);
  }

  private handleSafely(recorded: RecordedRequest): Reply {
    try {
      return this.handle(recorded);
    } catch (err) {
      return { status: 500, body: { message: String(err) } };
    }
  }

  private send(res: ServerResponse, reply: Reply, req: RecordedRequest): void {
    const headers: Record<string, string> = { ...this.commonHeaders(req), ...reply.headers };
    if (reply.body !== undefined) headers['content-type'] = 'application/json;charset=utf-8';
    res.writeHead(reply.status, headers);
    res.end(reply.body === undefined ? undefined : JSON.stringify(reply.body));
  }
}
