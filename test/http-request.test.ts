// The sinks' HTTP client on node:http (src/http-request.ts), against real local servers: what the CRM
// client and the telephony client relied on `fetch` for (status, headers, body, no redirects
// followed, a deadline's TimeoutError, streamed uploads, keep-alive), and what fetch did not do
// (a bounded answer, network errors that name their code).
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { deadline } from '../src/deadline.js';
import { PermanentError, TransientError } from '../src/errors.js';
import { AnswerTooLargeError, answerHeadOf, httpRequest } from '../src/http-request.js';
import { CrmHttp } from '../src/sinks/crm/http.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { OutcomeUnknownError, TelephonyApiError } from '../src/telephony/errors.js';

type Handler = (req: IncomingMessage, body: Buffer, res: ServerResponse) => void;

/** A server whose next answers are `handler`; counts connections and keeps what it was sent. */
async function serve(): Promise<{
  url: string;
  handle(h: Handler): void;
  connections: () => number;
  close(): Promise<void>;
  server: Server;
}> {
  let handler: Handler = (_req, _body, res) => res.end('{}');
  let connections = 0;
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => handler(req, Buffer.concat(parts), res));
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    handle: (h) => {
      handler = h;
    },
    connections: () => connections,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A port nothing listens on (a server opened and closed). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** Writes `chunk` for ever (as fast as the client reads) after `first`, until the client goes away. */
function writeEndlessly(res: ServerResponse, chunk: Buffer, first = ''): void {
  const more = () => {
    while (!res.destroyed && res.write(chunk));
    if (!res.destroyed) res.once('drain', more);
  };
  if (first !== '') res.write(first);
  more();
}

function crm(baseUrl: string, timeoutMs = 2000): CrmHttp {
  return new CrmHttp({
    crm: 'SomeCrm',
    sink: 'crm',
    baseUrl,
    headers: { authorization: 'Bearer t0ken' },
    timeoutMs,
    now: () => new Date(),
    authHint: '',
    errorDetail: () => undefined,
    rateLimitDelayMs: () => 1000,
  });
}

// One server for every test (each sets its answers with `handle`; they run one after another).
let s: Awaited<ReturnType<typeof serve>>;
before(async () => {
  s = await serve();
});
after(() => s.close());

describe('httpRequest (node:http)', () => {
  it('sends the method, headers and body with its length; answers status, headers (any case, repeats joined) and text', async () => {
    let seen: { method?: string; length?: string; auth?: string; body?: string } = {};
    s.handle((req, body, res) => {
      seen = {
        method: req.method,
        length: req.headers['content-length'],
        auth: req.headers.authorization,
        body: body.toString(),
      };
      res.setHeader('X-Rate', ['1', '2']);
      res.writeHead(201, { 'content-type': 'application/json' });
      res.end('{"ümlaut":"ä"}');
    });
    const body = '{"name":"Jörg"}';
    const answer = await httpRequest(new URL(`${s.url}/v1/x?q=1`), {
      method: 'PATCH',
      headers: { authorization: 'Bearer a', 'content-type': 'application/json' },
      body,
    });
    assert.deepEqual(seen, { method: 'PATCH', length: String(Buffer.byteLength(body)), auth: 'Bearer a', body });
    assert.equal(answer.status, 201);
    assert.equal(answer.ok, true);
    assert.equal(answer.headers.get('Content-Type'), 'application/json');
    assert.equal(answer.headers.get('x-rate'), '1, 2');
    assert.equal(answer.headers.get('x-absent'), null);
    assert.equal(answer.text, '{"ümlaut":"ä"}');
  });

  it('streams an async iterable body (chunked without a length), and reuses one connection for requests in turn', async () => {
    s.handle((req, body, res) => res.end(JSON.stringify({ te: req.headers['transfer-encoding'], n: body.length })));
    async function* parts() {
      for (let i = 0; i < 50; i++) yield Buffer.alloc(64 * 1024, i);
    }
    const a = await httpRequest(new URL(s.url), { method: 'POST', body: parts() });
    assert.deepEqual(JSON.parse(a.text), { te: 'chunked', n: 50 * 64 * 1024 });
    const before = s.connections();
    assert.ok(before >= 1);
    for (let i = 0; i < 5; i++) await httpRequest(new URL(s.url), { method: 'GET' });
    assert.equal(s.connections(), before, 'requests in turn reuse the keep-alive connection');
  });

  it('a redirect is answered as it is, never followed', async () => {
    s.handle((_req, _body, res) => {
      res.writeHead(302, { location: `${s.url}/elsewhere` });
      res.end();
    });
    const answer = await httpRequest(new URL(`${s.url}/a`), { method: 'POST', body: '{}' });
    assert.equal(answer.status, 302);
    assert.equal(answer.ok, false);
    assert.equal(answer.headers.get('location'), `${s.url}/elsewhere`);
  });

  it('an answer larger than maxBodyBytes fails as soon as it passes it (an endless one too)', async () => {
    s.handle((_req, _body, res) => {
      res.writeHead(200);
      writeEndlessly(res, Buffer.alloc(64 * 1024, 0x61));
    });
    const started = Date.now();
    const err = await httpRequest(new URL(s.url), { method: 'GET', maxBodyBytes: 1024 * 1024 }).catch(
      (e: unknown) => e,
    );
    assert.ok(err instanceof AnswerTooLargeError, String(err));
    assert.ok(Date.now() - started < 5000);
    // The status and headers that came are kept with the error, for a caller whom they tell enough.
    assert.equal(answerHeadOf(err)?.status, 200);
  });

  it("a signal ends the request with its reason (a deadline's TimeoutError), the server still silent", async () => {
    s.handle(() => undefined);
    const limit = deadline(100);
    const err = await httpRequest(new URL(s.url), { method: 'GET', signal: limit.signal }).catch((e: unknown) => e);
    limit.clear();
    assert.equal((err as Error).name, 'TimeoutError');
    const aborted = AbortSignal.abort(new Error('shutting down'));
    const early = await httpRequest(new URL(s.url), { method: 'GET', signal: aborted }).catch((e: unknown) => e);
    assert.equal((early as Error).message, 'shutting down');
  });

  it('a refused connection rejects with its code; another protocol is refused', async () => {
    const port = await closedPort();
    const err = await httpRequest(new URL(`http://127.0.0.1:${port}/`), { method: 'GET' }).catch((e: unknown) => e);
    assert.equal((err as NodeJS.ErrnoException).code, 'ECONNREFUSED');
    const ftp = await httpRequest(new URL('ftp://127.0.0.1/'), { method: 'GET' }).catch((e: unknown) => e);
    assert.equal((ftp as NodeJS.ErrnoException).code, 'ERR_INVALID_URL');
  });
});

describe('the CRM client and the telephony client on it', () => {
  it('a CRM that answers without end is cut off (a transient error naming the limit), not read until the timeout', async () => {
    s.handle((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      writeEndlessly(res, Buffer.alloc(256 * 1024, 0x20), '{"results":[');
    });
    const err = await crm(s.url, 60_000)
      .request({ method: 'GET', path: '/v1/things' })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TransientError, String(err));
    assert.match(err.message, /^SomeCrm GET \/v1\/things failed: the answer's body is larger than 16777216 bytes$/);
  });

  it('a CRM that cannot be reached: the message names the cause (ECONNREFUSED), not "fetch failed"', async () => {
    const port = await closedPort();
    const err = await crm(`http://127.0.0.1:${port}`)
      .request({ method: 'POST', path: '/v1/things', body: { a: 1 } })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TransientError, String(err));
    assert.match(err.message, /^SomeCrm POST \/v1\/things failed: connect ECONNREFUSED 127\.0\.0\.1:\d+$/);
  });

  it('a CRM request past its time limit: "timed out"', async () => {
    s.handle(() => undefined);
    const err = await crm(s.url, 150)
      .request({ method: 'GET', path: '/slow' })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TransientError, String(err));
    assert.equal(err.message, 'SomeCrm GET /slow failed: timed out');
  });

  it('a 3xx from the CRM stays a permanent error naming where it points', async () => {
    s.handle((_req, _body, res) => {
      res.writeHead(301, { location: 'https://api.example/v9/x?token=secret' });
      res.end();
    });
    const err = await crm(s.url)
      .request({ method: 'GET', path: '/v1/things' })
      .catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError, String(err));
    assert.match(err.message, /redirect to https:\/\/api\.example\/v9\/x \(redirects are not followed\)$/);
  });

  it('an SMS POST redirected is a permanent error naming where (not an "outcome unknown" fetch failure to retry)', async () => {
    s.handle((_req, _body, res) => {
      res.writeHead(307, { location: 'https://api.example/v2/sessions/sms?sig=abc' });
      res.end();
    });
    const client = createTelephonyClient({
      baseUrl: `${s.url}/v2`,
      auth: { kind: 'basic', tokenId: 'token-id', token: 'token-secret' },
      timeoutMs: 2000,
    });
    const err = await client
      .sendSms({ smsId: 's1', recipient: '+4915112345678', message: 'hi' })
      .catch((e: unknown) => e);
    assert.ok(err instanceof TelephonyApiError && !(err instanceof OutcomeUnknownError), String(err));
    assert.equal(err.kind, 'permanent');
    assert.equal(err.status, 307);
    assert.match(
      err.message,
      /answered 307 redirect to https:\/\/api\.example\/v2\/sessions\/sms \(redirects are not followed/,
    );
    assert.doesNotMatch(err.message, /sig=abc|fetch failed/);
  });
  describe('an SMS send answered with a status, its body too large or cut off: the status decides', () => {
    const sms = () =>
      createTelephonyClient({
        baseUrl: `${s.url}/v2`,
        auth: { kind: 'basic', tokenId: 'token-id', token: 'token-secret' },
        timeoutMs: 60_000,
      }).sendSms({ smsId: 's1', recipient: '+4915112345678', message: 'hi' });

    it('answered 200 with an endless body: sent (not an "outcome unknown" that keeps the SMS from being confirmed)', async () => {
      s.handle((_req, _body, res) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        writeEndlessly(res, Buffer.alloc(256 * 1024, 0x20), '{"id":"sms-1","pad":"');
      });
      await sms();
    });

    it('answered 202, then the connection cut mid-body: sent', async () => {
      s.handle((_req, _body, res) => {
        res.writeHead(202, { 'content-type': 'application/json', 'content-length': '1000' });
        res.write('{"id":"sms-1"', () => res.destroy());
      });
      await sms();
    });

    it('answered 400 with an endless body: a permanent error with its status, not a send of unknown outcome', async () => {
      s.handle((_req, _body, res) => {
        res.writeHead(400, { 'content-type': 'application/json' });
        writeEndlessly(res, Buffer.alloc(256 * 1024, 0x20), '{"message":"');
      });
      const err = await sms().catch((e: unknown) => e);
      assert.ok(err instanceof TelephonyApiError && !(err instanceof OutcomeUnknownError), String(err));
      assert.equal(err.kind, 'permanent');
      assert.equal(err.status, 400);
    });

    it('a connection cut before any status: still an outcome unknown (the SMS may have been sent)', async () => {
      s.handle((_req, _body, res) => res.socket?.destroy());
      const err = await sms().catch((e: unknown) => e);
      assert.ok(err instanceof OutcomeUnknownError, String(err));
    });
  });
});
