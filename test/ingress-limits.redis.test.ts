// The ingress' HTTP server against slow and many clients, over real sockets on loopback: a body
// trickled slower than WEBHOOK_REQUEST_TIMEOUT_MS and headers slower than HTTP_HEADERS_TIMEOUT_MS
// get a 408 and a closed connection (nothing acknowledged); connections beyond
// HTTP_MAX_CONNECTIONS are refused while the open ones keep working; keep-alive idle time does not
// count against the headers timeout. Also the proxy trust end to end, with real peer addresses
// (127.0.0.2 and 127.0.0.3 reach a server on 127.0.0.1 over Linux' loopback).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { minimalPayload } from './support/calls.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, waitFor } from './support/redis.js';

const PLATFORM_IP = '217.116.118.254';
/** Bound on every wait: far beyond the short timeouts set here, far below Node's defaults (60 s / 300 s). */
const BOUND_MS = 10_000;

/** A raw HTTP/1.1 client connection: what it received, and whether the server closed it. */
class Raw {
  readonly socket: Socket;
  received = '';
  readonly closed: Promise<void>;
  private readonly opened: Promise<void>;

  constructor(port: number, localAddress = '127.0.0.1') {
    this.socket = connect({ port, host: '127.0.0.1', localAddress });
    this.socket.setEncoding('utf8');
    this.socket.on('data', (d: string) => (this.received += d));
    this.socket.on('error', () => undefined);
    this.opened = new Promise((resolve, reject) => {
      this.socket.once('connect', () => resolve());
      this.socket.once('error', reject);
    });
    this.closed = new Promise((resolve) => this.socket.once('close', () => resolve()));
  }

  get isClosed(): boolean {
    return this.socket.destroyed || this.socket.readyState === 'closed';
  }

  async send(text: string): Promise<void> {
    await this.opened;
    this.socket.write(text);
  }

  /** Sends a request and waits for the n-th response's status line and full body (Content-Length). */
  async request(text: string, nth = 1): Promise<number> {
    await this.send(text);
    await bounded(
      waitFor(() => responses(this.received).length >= nth, { timeoutMs: BOUND_MS, what: 'a response' }),
      'a response',
    );
    return responses(this.received)[nth - 1]!;
  }

  close(): void {
    this.socket.destroy();
  }
}

/** Status codes of the complete responses in a raw stream. */
function responses(stream: string): number[] {
  const statuses: number[] = [];
  let rest = stream;
  for (;;) {
    const head = /^HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(rest);
    if (!head) return statuses;
    const length = Number(/content-length: *(\d+)/i.exec(head[2]!)?.[1] ?? 0);
    if (rest.length < head[0].length + length) return statuses;
    statuses.push(Number(head[1]));
    rest = rest.slice(head[0].length + length);
  }
}

/** The first complete response's status and its body's first error (the spec's error body), else null. */
interface SpecError {
  status: number;
  title: string;
  detail: string;
  source: { pointer: string };
}
function firstError(stream: string): { status: number; error: SpecError | null } {
  const head = /^HTTP\/1\.1 (\d{3})[^\r]*\r\n([\s\S]*?)\r\n\r\n/.exec(stream);
  assert.ok(head, `a response: ${JSON.stringify(stream.slice(0, 200))}`);
  const length = Number(/content-length: *(\d+)/i.exec(head[2]!)?.[1] ?? 0);
  const body = stream.slice(head[0].length, head[0].length + length);
  const json =
    /content-type: *application\/json/i.test(head[2]!) && body ? (JSON.parse(body) as { errors: SpecError[] }) : null;
  return { status: Number(head[1]), error: json?.errors[0] ?? null };
}

/** Asserts the first response is `status` with the spec's error body for the request as a whole. */
function assertErrorBody(stream: string, status: number, detail: RegExp): void {
  const { status: got, error } = firstError(stream);
  assert.equal(got, status);
  assert.ok(error, `${status} carries the error body`);
  assert.equal(error.status, status);
  assert.equal(typeof error.title, 'string');
  assert.match(error.detail, detail);
  assert.equal(error.source.pointer, '/');
}

async function bounded<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not within ${BOUND_MS} ms`)), BOUND_MS);
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

const get = (path: string) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`;
function post(path: string, body: string, headers: Record<string, string> = {}): string {
  const extra = Object.entries(headers)
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  return `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
}

/** Writes `text` a byte at a time, every `everyMs`, until the connection closes or it is all sent. */
async function trickle(raw: Raw, text: string, everyMs: number): Promise<number> {
  let sent = 0;
  while (sent < text.length && !raw.isClosed) {
    await raw.send(text[sent++]!);
    await sleep(everyMs);
  }
  return sent;
}

describe('ingress request timeout, proxy trust and connection cap', () => {
  let cs: OpsCallsync;
  let port: number;
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const stored = async (callId: string) =>
    (await new InboundLog(redis, cs.prefix).entries()).some((e) => e.call?.callId === callId);
  const open: Raw[] = [];
  const raw = (localAddress?: string) => {
    const r = new Raw(port, localAddress);
    open.push(r);
    return r;
  };

  before(async () => {
    cs = await startOpsCallsync({
      CALLSYNC_ROLE: 'ingress',
      SPOOL_ENABLED: 'false',
      WEBHOOK_ALLOWED_IPS: `${PLATFORM_IP},127.0.0.1`,
      TRUSTED_PROXIES: '127.0.0.3',
      WEBHOOK_REQUEST_TIMEOUT_MS: '1000',
      HTTP_HEADERS_TIMEOUT_MS: '1000',
      HTTP_MAX_CONNECTIONS: '4',
    });
    port = Number(new URL(cs.url).port);
  });
  after(async () => {
    for (const r of open) r.close();
    await cs.stop();
    redis.disconnect();
  });

  test('the server takes its limits from the configuration', () => {
    const server = cs.callsync.server!;
    assert.equal(server.requestTimeout, 1000);
    assert.equal(server.headersTimeout, 1000);
    assert.equal(server.maxConnections, 4);
    assert.equal(server.keepAliveTimeout, 65_000);
  });

  test('a body trickled slower than the request timeout: 408, connection closed, nothing stored', async () => {
    // The same request sent at once is accepted: the test can tell the two apart.
    const quick = raw();
    assert.equal(
      await quick.request(post('/webhooks/ai-agent/agent-1', JSON.stringify(minimalPayload('quick-1')))),
      202,
    );
    assert.ok(await stored('quick-1'));
    quick.close();

    const slow = raw();
    const text = post('/webhooks/ai-agent/agent-1', JSON.stringify(minimalPayload('slow-1')));
    const bodyStart = text.indexOf('\r\n\r\n') + 4;
    await slow.send(text.slice(0, bodyStart));
    // ~250 bytes at one per 50 ms would take over 12 s.
    const sent = await bounded(trickle(slow, text.slice(bodyStart), 50), 'the slow body cut off');
    await bounded(slow.closed, 'the connection closed');
    assert.ok(sent < text.length - bodyStart, `the whole body went through (${sent} bytes)`);
    assert.deepEqual(responses(slow.received), [408]);
    assertErrorBody(slow.received, 408, /did not arrive in time/);
    assert.equal(await stored('slow-1'), false, 'a cut-off body is never acknowledged');
    // Not an internal error: nothing logged at error level for it, one warning saying what happened.
    assert.deepEqual(
      cs.logs.filter((l) => Number(l.level) >= 50),
      [],
    );
    const line = cs.logs.find((l) => String(l.msg).startsWith('webhook not received'));
    assert.ok(line, 'a line about the cut-off request');
    assert.equal(line.status, 408);
    assert.match(String(line.msg), /WEBHOOK_REQUEST_TIMEOUT_MS/);
  });

  test('headers trickled slower than the headers timeout: 408 and closed, the handler never runs', async () => {
    const slow = raw();
    const sent = await bounded(
      trickle(slow, post('/webhooks/ai-agent', JSON.stringify(minimalPayload('slow-h'))), 50),
      'slow headers cut off',
    );
    await bounded(slow.closed, 'the connection closed');
    assert.ok(sent < 150, `${sent} bytes of headers went through`);
    assert.deepEqual(responses(slow.received), [408]);
    assertErrorBody(slow.received, 408, /did not arrive in time/);
    // A connection that sends nothing at all is closed too.
    const silent = raw();
    await bounded(silent.closed, 'a silent connection closed');
    assert.deepEqual(responses(silent.received), [408]);
    assertErrorBody(silent.received, 408, /did not arrive in time/);
  });

  test("what Node's HTTP parser refuses carries the error body too: 400 for what is not HTTP, 431 for headers too large", async () => {
    const garbage = raw();
    await garbage.send('HELLO THERE\r\n\r\n');
    await bounded(garbage.closed, 'the connection closed');
    assertErrorBody(garbage.received, 400, /not valid HTTP/);

    const badLength = raw();
    await badLength.send('POST /webhooks/ai-agent HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n');
    await bounded(badLength.closed, 'the connection closed');
    assertErrorBody(badLength.received, 400, /not valid HTTP/);

    // Node's limit on the headers is 16 KiB.
    const huge = raw();
    await huge.send(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Filler: ${'a'.repeat(20_000)}\r\n\r\n`);
    await bounded(huge.closed, 'the connection closed');
    assertErrorBody(huge.received, 431, /headers are too large/);

    // A connection that was answered before gets no answer of the parser's (one may be under way), only closed.
    const used = raw();
    assert.equal(await used.request(get('/healthz')), 200);
    await used.send('HELLO THERE\r\n\r\n');
    await bounded(used.closed, 'the connection closed');
    assert.deepEqual(responses(used.received), [200]);
  });

  test('forwarded headers over real sockets: read from the trusted proxy, ignored (and the connection closed) from anyone else', async () => {
    const viaProxy = raw('127.0.0.3');
    assert.equal(
      await viaProxy.request(
        post('/webhooks/ai-agent', JSON.stringify(minimalPayload('e2e-proxy')), { 'X-Forwarded-For': PLATFORM_IP }),
      ),
      202,
    );
    assert.ok(await stored('e2e-proxy'));
    viaProxy.close();
    const forged = raw('127.0.0.2');
    assert.equal(
      await forged.request(
        post('/webhooks/ai-agent', JSON.stringify(minimalPayload('e2e-forged')), { 'X-Forwarded-For': PLATFORM_IP }),
      ),
      403,
    );
    await bounded(forged.closed, 'the refused connection closed');
    assert.equal(await stored('e2e-forged'), false);
    const line = cs.logs.find((l) => l.msg === 'webhook refused' && l.status === 403);
    assert.ok(line, 'a refusal line');
    assert.equal(line.peer, '127.0.0.2');
    assert.equal(line.forwardedFor, PLATFORM_IP);
    assert.match(String(line.hint), /peer 127\.0\.0\.2 is not in TRUSTED_PROXIES/);
    assert.match(String(line.requestId), /^[0-9a-f-]{36}$/);
  });

  test('connections beyond the cap are refused while the open ones keep working', async () => {
    for (const r of open.splice(0)) r.close();
    await bounded(
      waitFor(async () => (await connections()) === 0, { timeoutMs: BOUND_MS, what: 'no connections' }),
      'idle server',
    );
    const held = [raw(), raw(), raw(), raw()];
    for (const r of held) assert.equal(await r.request(get('/healthz')), 200);
    const extra = raw();
    await bounded(extra.closed, 'the connection over the cap closed');
    assert.equal(extra.received, '', 'refused without an answer');
    // The open ones still work (keep-alive).
    assert.equal(await held[0]!.request(get('/healthz'), 2), 200);
    assert.equal(
      await held[3]!.request(post('/webhooks/ai-agent', JSON.stringify(minimalPayload('capped-1'))), 2),
      202,
    );
    // One closes: a new connection is served again.
    held[1]!.close();
    await bounded(
      waitFor(async () => (await connections()) < 4, { timeoutMs: BOUND_MS, what: 'a free slot' }),
      'a free slot',
    );
    assert.equal(await raw().request(get('/healthz')), 200);
    assert.ok(
      cs.logs.some((l) => l.msg === 'connection refused: HTTP_MAX_CONNECTIONS reached' && l.maxConnections === 4),
    );
  });

  const connections = () =>
    new Promise<number>((resolve, reject) =>
      cs.callsync.server!.getConnections((err, n) => (err ? reject(err) : resolve(n))),
    );
});

describe('ingress headers timeout and keep-alive', () => {
  let cs: OpsCallsync;
  let port: number;
  const open: Raw[] = [];

  before(async () => {
    cs = await startOpsCallsync({
      CALLSYNC_ROLE: 'ingress',
      SPOOL_ENABLED: 'false',
      WEBHOOK_REQUEST_TIMEOUT_MS: '60000',
      HTTP_HEADERS_TIMEOUT_MS: '500',
    });
    port = Number(new URL(cs.url).port);
  });
  after(async () => {
    for (const r of open) r.close();
    await cs.stop();
  });

  test('slow headers are cut off by the headers timeout alone (the request timeout is a minute)', async () => {
    const slow = new Raw(port);
    open.push(slow);
    await bounded(trickle(slow, get('/healthz'), 100), 'slow headers cut off');
    await bounded(slow.closed, 'the connection closed');
    assert.deepEqual(responses(slow.received), [408]);
    assertErrorBody(slow.received, 408, /did not arrive in time/);
  });

  test('a keep-alive connection idle for longer than the headers timeout serves its next request', async () => {
    const conn = new Raw(port);
    open.push(conn);
    assert.equal(await conn.request(get('/healthz')), 200);
    await sleep(1500);
    assert.equal(conn.isClosed, false, 'closed while idle');
    assert.equal(await conn.request(get('/healthz'), 2), 200);
  });
});
