// The telephony API client against the loopback fake API: auth, retries, Retry-After, DetailedError,
// validation, OAuth refresh, SMS outcome handling, streamed downloads, env options.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { RetryLaterError, SinkError } from '../src/errors.js';
import { sinkErrorOf } from '../src/sinks/telephony-errors.js';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { createTelephonyClient, type TelephonyClientOptions } from '../src/telephony/client.js';
import {
  OutcomeUnknownError,
  ResponseValidationError,
  TelephonyApiError,
  type TelephonyErrorKind,
} from '../src/telephony/errors.js';

/** The client throws TelephonyApiError (it is not a sink), of this kind. */
const isKind = (err: unknown, kind: TelephonyErrorKind): err is TelephonyApiError =>
  err instanceof TelephonyApiError && err.kind === kind;
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';

const fast = { retryMinDelayMs: 10, retryMaxDelayMs: 50, timeoutMs: 2000 } satisfies Partial<TelephonyClientOptions>;

describe('telephony client: channel inbox', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start();
    api.addEvents(
      'ch1',
      Array.from({ length: 25 }, (_, i) => channelEvent({ eventId: `e${i}`, channelId: 'ch1' })),
    );
  });
  after(() => api.close());

  it('reads pages with limit and position as query parameters, authenticated as HTTP Basic', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const first = await client.readChannelEvents('ch1', undefined, 10);
    assert.equal(first.events.length, 10);
    assert.equal(first.limit, 10);
    const second = await client.readChannelEvents('ch1', first.position, 10);
    assert.deepEqual((second.events[0] as { eventId: string }).eventId, 'e10');
    const third = await client.readChannelEvents('ch1', second.position, 10);
    assert.equal(third.events.length, 5);
    const empty = await client.readChannelEvents('ch1', third.position, 10);
    assert.equal(empty.events.length, 0);
    assert.equal(empty.position, third.position);
    const reqs = api.inboxRequests('ch1');
    assert.equal(reqs[0]?.query.limit, '10');
    assert.equal(reqs[0]?.query.position, undefined);
    assert.equal(reqs[1]?.query.position, first.position);
    assert.equal(reqs[0]?.authorization, `Basic ${Buffer.from('token-id:token-secret').toString('base64')}`);
  });

  it('waits for Retry-After on 429 and then succeeds', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'events', status: 429, retryAfter: '1' });
    const started = Date.now();
    const page = await client.readChannelEvents('ch1', undefined, 5);
    const elapsed = Date.now() - started;
    assert.equal(page.events.length, 5);
    assert.ok(elapsed >= 950, `waited ${elapsed} ms`);
    assert.ok(elapsed < 3000, `waited ${elapsed} ms`);
  });

  it('throws a retry-later error when Retry-After is longer than the client waits itself', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast, maxRetryAfterMs: 5000 });
    api.inject({
      on: 'events',
      status: 429,
      retryAfter: '120',
      detail: 'rate limit of 10 requests per second exceeded',
    });
    const err = await client.readChannelEvents('ch1', undefined, 5).then(
      () => assert.fail('expected an error'),
      (e: unknown) => e,
    );
    assert.ok(isKind(err, 'retry-later'));
    assert.equal(err.retryAfterMs, 120_000);
    // The client is not a sink: none of its errors is a SinkError (a sink maps them: sinkErrorOf).
    assert.ok(!(err instanceof SinkError));
    assert.equal(err.status, 429);
    assert.match(err.message, /rate limit of 10 requests per second exceeded/);
  });

  it('retries a burst of 5xx with backoff and succeeds', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast, retries: 4 });
    const before = api.inboxRequests('ch1').length;
    api.inject({ on: 'events', status: 500, times: 3 });
    const page = await client.readChannelEvents('ch1', undefined, 5);
    assert.equal(page.events.length, 5);
    assert.equal(api.inboxRequests('ch1').length - before, 4);
  });

  it('gives up after the retries with a transient error carrying the DetailedError', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast, retries: 2 });
    api.inject({ on: 'events', status: 503, times: 3, title: 'Service Unavailable', detail: 'maintenance' });
    const err = (await client.readChannelEvents('ch1', undefined, 5).catch((e: unknown) => e)) as TelephonyApiError;
    assert.ok(isKind(err, 'transient'));
    assert.equal(err.status, 503);
    assert.deepEqual(err.problems, [
      { status: 503, title: 'Service Unavailable', detail: 'maintenance', pointer: null },
    ]);
    assert.match(err.message, /GET \/channels\/\{channelId\}\/events answered 503: Service Unavailable: maintenance/);
  });

  it('retries network errors (dropped connection)', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'events', drop: true, times: 2 });
    const page = await client.readChannelEvents('ch1', undefined, 3);
    assert.equal(page.events.length, 3);
  });

  it('times out a slow answer, then retries', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast, timeoutMs: 200 });
    api.inject({ on: 'events', delayMs: 600 });
    const page = await client.readChannelEvents('ch1', undefined, 3);
    assert.equal(page.events.length, 3);
    const failing = createTelephonyClient({
      baseUrl: api.url,
      auth: api.basicAuth,
      ...fast,
      timeoutMs: 200,
      retries: 0,
    });
    api.inject({ on: 'events', delayMs: 600 });
    const err = await failing.readChannelEvents('ch1', undefined, 3).catch((e: unknown) => e);
    assert.ok(isKind(err, 'transient'));
    assert.match(err.message, /timed out/);
  });

  it('401 and 403 are auth errors, not retried', async () => {
    const client = createTelephonyClient({
      baseUrl: api.url,
      auth: { kind: 'basic', tokenId: 'token-id', token: 'wrong' },
      ...fast,
    });
    const before = api.inboxRequests('ch1').length;
    const err = (await client.readChannelEvents('ch1', undefined, 3).catch((e: unknown) => e)) as TelephonyApiError;
    assert.ok(isKind(err, 'auth'));
    assert.equal(err.status, 401);
    assert.equal(err.problems[0]?.title, 'Unauthorized');
    assert.equal(api.inboxRequests('ch1').length - before, 1);
    assert.ok(!err.message.includes('wrong'), 'the token never appears in the message');

    const ok = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'events', status: 403, detail: 'token lacks the channels scope' });
    const forbidden = await ok.readChannelEvents('ch1', undefined, 3).catch((e: unknown) => e);
    assert.ok(isKind(forbidden, 'auth'));
    assert.match(forbidden.message, /token lacks the channels scope/);
  });

  it('a 4xx with a pointer is a permanent error naming the field', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const err = (await client
      .readChannelEvents('ch1', 'not-a-position', 3)
      .catch((e: unknown) => e)) as TelephonyApiError;
    assert.ok(isKind(err, 'permanent'));
    assert.equal(err.status, 400);
    assert.deepEqual(err.problems[0], {
      status: 400,
      title: 'Bad Request',
      detail: 'unknown position',
      pointer: '/position',
    });
    assert.match(err.message, /unknown position \(at \/position\)/);
  });

  it('an inbox missing a required field is a clear validation error; unknown fields are fine', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'events', status: 200, body: { events: [], limit: 10, position: 'p', nextPageHint: 'extra' } });
    const page = await client.readChannelEvents('ch1', undefined, 10);
    assert.equal(page.position, 'p');
    api.inject({ on: 'events', status: 200, body: { events: [], limit: 10 } });
    const err = await client.readChannelEvents('ch1', undefined, 10).catch((e: unknown) => e);
    assert.ok(err instanceof ResponseValidationError);
    assert.match(err.message, /ChannelInbox of channel ch1: position: /);
    api.inject({ on: 'events', status: 200, body: 'not json' });
    const notJson = await client.readChannelEvents('ch1', undefined, 10).catch((e: unknown) => e);
    assert.ok(notJson instanceof ResponseValidationError);
  });

  it('a channel id is escaped in the path and the path is configurable', async () => {
    api.addEvents('a/b', [channelEvent({ eventId: 'x1' })]);
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const page = await client.readChannelEvents('a/b', undefined, 5);
    assert.equal(page.events.length, 1);
    const custom = createTelephonyClient({
      baseUrl: api.url,
      auth: api.basicAuth,
      ...fast,
      channelEventsPath: '/inbox/{channelId}',
    });
    const err = (await custom.readChannelEvents('ch1', undefined, 1).catch((e: unknown) => e)) as TelephonyApiError;
    assert.equal(err.status, 404);
    assert.equal(api.requests.at(-1)?.path, '/v2/inbox/ch1');
  });
});

describe('telephony client: OAuth', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start({
      basic: null,
      oauth: {
        clientId: 'client-1',
        clientSecret: 'secret-1',
        refreshToken: 'refresh-1',
        accessTokenTtlSec: 2,
        rotateRefreshToken: true,
      },
    });
    api.addEvents('ch1', [channelEvent({ eventId: 'e1' })]);
  });
  after(() => api.close());

  it('gets an access token first, refreshes it before it expires, with a rotated refresh token', async () => {
    const issued: string[] = [];
    const client = createTelephonyClient({
      baseUrl: api.url,
      auth: api.oauthAuth,
      ...fast,
      onTokens: (t) => issued.push(t.refreshToken ?? ''),
    });
    await client.readChannelEvents('ch1', undefined, 5);
    assert.equal(api.tokenRefreshes, 1);
    // The token lives 2 s; refreshed a fifth of its life (400 ms) early.
    await new Promise((r) => setTimeout(r, 1700));
    await client.readChannelEvents('ch1', undefined, 5);
    assert.equal(api.tokenRefreshes, 2);
    assert.equal(issued.length, 2);
    assert.notEqual(issued[0], issued[1]);
    assert.equal(api.requests.filter((r) => r.status === 401).length, 0, 'never sent an expired token');
    assert.match(api.inboxRequests().at(-1)?.authorization ?? '', /^Bearer at-/);
  });

  it('on 401 refreshes once and retries', async () => {
    // A fake of its own: the shared one rotates refresh tokens and has 2 s tokens.
    const fresh = await FakeTelephony.start({
      basic: null,
      oauth: { clientId: 'c', clientSecret: 's', refreshToken: 'r', accessTokenTtlSec: 600 },
    });
    try {
      fresh.addEvents('ch1', [channelEvent({ eventId: 'e1' })]);
      const c = createTelephonyClient({ baseUrl: fresh.url, auth: fresh.oauthAuth, ...fast });
      await c.readChannelEvents('ch1', undefined, 5);
      fresh.revokeAccessTokens();
      const page = await c.readChannelEvents('ch1', undefined, 5);
      assert.equal(page.events.length, 1);
      assert.equal(fresh.tokenRefreshes, 2);
      assert.deepEqual(
        fresh.inboxRequests().map((r) => r.status),
        [200, 401, 200],
      );
      // A 401 that persists after the refresh is an auth error (one refresh, not a loop).
      fresh.inject({ on: 'events', status: 401, times: 2 });
      const err = await c.readChannelEvents('ch1', undefined, 5).catch((e: unknown) => e);
      assert.ok(isKind(err, 'auth'));
      assert.equal(fresh.tokenRefreshes, 3);
    } finally {
      await fresh.close();
    }
  });

  it('a refresh token the server rejects is an auth error naming the OAuth error', async () => {
    const client = createTelephonyClient({
      baseUrl: api.url,
      auth: {
        kind: 'oauth',
        tokenUrl: api.tokenUrl,
        clientId: 'client-1',
        clientSecret: 'secret-1',
        refreshToken: 'stale-refresh-token',
      },
      ...fast,
    });
    const err = await client.readChannelEvents('ch1', undefined, 5).catch((e: unknown) => e);
    assert.ok(isKind(err, 'auth'), String(err));
    assert.match(err.message, /invalid_grant/);
    assert.ok(!err.message.includes('stale-refresh-token'), 'the refresh token never appears in the message');
  });
});

describe('telephony client: a token server quoting what it was sent', () => {
  // Spring Security OAuth2 answers `Invalid refresh token: <token>`: a UUID (kept by the masking as an
  // id) or a JWT (no space after "token") was in the error's message and every log line of it.
  const REFRESH_UUID = 'f4c2a9e0-7b1d-4c3e-9a55-0d2b6e8f1a37';
  const REFRESH_JWT = 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYWxsc3luYyJ9.c2lnbmF0dXJlLXZhbHVl';
  const SECRET = 'client-secret-9f8e7d6c';
  for (const token of [REFRESH_UUID, REFRESH_JWT]) {
    it(`names neither the refresh token nor the client secret (${token.slice(0, 8)}…)`, async () => {
      const server = createHttpServer((req, res) => {
        req.resume();
        req.on('end', () => {
          res.writeHead(400, { 'content-type': 'application/json' });
          res.end(
            JSON.stringify({
              error: 'invalid_grant',
              error_description: `Invalid refresh token: ${token} (client secret ${encodeURIComponent(SECRET)})`,
            }),
          );
        });
      });
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      try {
        const client = createTelephonyClient({
          baseUrl: url,
          auth: {
            kind: 'oauth',
            tokenUrl: `${url}/oauth/token`,
            clientId: 'c',
            clientSecret: SECRET,
            refreshToken: token,
          },
          ...fast,
        });
        const err = (await client.readChannelEvents('ch1', undefined, 5).catch((e: unknown) => e)) as Error;
        assert.ok(isKind(err, 'auth'), String(err));
        assert.match(err.message, /invalid_grant \(Invalid refresh token: \[redacted\]/);
        assert.ok(!err.message.includes(token), err.message);
        assert.ok(!err.message.includes(SECRET) && !err.message.includes(encodeURIComponent(SECRET)), err.message);
      } finally {
        server.close();
      }
    });
  }
});

describe('telephony client: sendSms', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start();
  });
  after(() => api.close());
  const sms = { smsId: 's0', recipient: '+4915112345678', message: 'We missed your call' };

  it('posts the SendWebSmsRequest', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    await client.sendSms(sms);
    assert.deepEqual(api.sms, [sms]);
  });

  it('402 is a permanent error with the DetailedError text', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'sms', status: 402, title: 'Payment Required', detail: 'insufficient balance' });
    const err = (await client.sendSms(sms).catch((e: unknown) => e)) as TelephonyApiError;
    assert.ok(isKind(err, 'permanent'));
    assert.equal(err.status, 402);
    assert.match(err.message, /Payment Required: insufficient balance/);
  });

  it('is never retried: a 500 is one request and a transient error', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const smsRequests = () => api.requests.filter((r) => r.path === '/v2/sessions/sms').length;
    const before = smsRequests();
    api.inject({ on: 'sms', status: 500 });
    const err = await client.sendSms(sms).catch((e: unknown) => e);
    assert.ok(isKind(err, 'transient'));
    assert.ok(!(err instanceof OutcomeUnknownError));
    assert.equal(smsRequests(), before + 1);
  });

  it('a timeout after sending is OutcomeUnknownError (transient)', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast, timeoutMs: 200 });
    api.inject({ on: 'sms', delayMs: 500 });
    const err = await client.sendSms({ ...sms, smsId: 's-timeout' }).catch((e: unknown) => e);
    assert.ok(err instanceof OutcomeUnknownError);
    assert.ok(isKind(err, 'transient'));
    assert.match(err.message, /outcome unknown \(no answer within 200 ms\)/);
    // The fake did take it (it answers late): exactly the case the caller must not resend blindly.
    await new Promise((r) => setTimeout(r, 400));
    assert.ok(api.sms.some((s) => s.smsId === 's-timeout'));
  });

  it('a dropped connection or a 504 is OutcomeUnknownError; a refused connection is not', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'sms', drop: true });
    assert.ok((await client.sendSms(sms).catch((e: unknown) => e)) instanceof OutcomeUnknownError);
    api.inject({ on: 'sms', status: 504 });
    assert.ok((await client.sendSms(sms).catch((e: unknown) => e)) instanceof OutcomeUnknownError);

    const port = await freePort();
    const refused = createTelephonyClient({ baseUrl: `http://127.0.0.1:${port}/v2`, auth: api.basicAuth, ...fast });
    const err = await refused.sendSms(sms).catch((e: unknown) => e);
    assert.ok(isKind(err, 'transient'));
    assert.ok(!(err instanceof OutcomeUnknownError), String(err));
  });

  it('rejects an invalid request before sending', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const before = api.requests.length;
    const err = await client
      .sendSms({ smsId: '', recipient: '+49151', message: 'x', sendAt: 1 })
      .catch((e: unknown) => e);
    assert.ok(isKind(err, 'permanent'));
    assert.match(err.message, /smsId is required; sendAt is in the past/);
    assert.equal(api.requests.length, before);
  });

  it('429 on send is retry-later (for a sink: the whole queue)', async () => {
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'sms', status: 429, retryAfter: '7' });
    const err = await client.sendSms(sms).catch((e: unknown) => e);
    assert.ok(isKind(err, 'retry-later'));
    assert.equal(err.retryAfterMs, 7000);
    // A sink using the client waits the whole queue: one account shares one rate limit.
    const forSink = sinkErrorOf(err);
    assert.ok(forSink instanceof RetryLaterError && forSink.delayMs === 7000 && forSink.scope === 'queue');
  });
});

describe('telephony client: download', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start();
  });
  after(() => api.close());

  it('streams a recording with the content type and length, authenticated', async () => {
    const url = api.addRecording('rec-1', { size: 3 * 1024 * 1024 + 17, contentType: 'audio/mpeg' });
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    const dl = await client.download(url);
    assert.equal(dl.contentType, 'audio/mpeg');
    assert.equal(dl.contentLength, 3 * 1024 * 1024 + 17);
    const hash = createHash('sha256');
    let bytes = 0;
    for await (const chunk of dl.body) {
      hash.update(chunk as Buffer);
      bytes += (chunk as Buffer).length;
    }
    assert.equal(bytes, 3 * 1024 * 1024 + 17);
    assert.equal(hash.digest('hex'), api.recordingSha256('rec-1'));
  });

  it('retries a 5xx before the body starts; 404 is permanent', async () => {
    const url = api.addRecording('rec-2', { size: 1000 });
    const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, ...fast });
    api.inject({ on: 'recording', status: 502, times: 2 });
    const dl = await client.download(url);
    let n = 0;
    for await (const c of dl.body) n += (c as Buffer).length;
    assert.equal(n, 1000);
    const err = await client.download('/recordings/missing').catch((e: unknown) => e);
    assert.ok(isKind(err, 'permanent'));
    assert.equal(err.status, 404);
  });

  it('resolves relative URLs against the API root and refuses other origins', () => {
    const client = createTelephonyClient({
      baseUrl: 'https://api.example.com/v2/',
      auth: { kind: 'bearer', accessToken: 't' },
    });
    assert.equal(client.resolveDownloadUrl('/recordings/1'), 'https://api.example.com/v2/recordings/1');
    assert.equal(client.resolveDownloadUrl('recordings/1'), 'https://api.example.com/v2/recordings/1');
    assert.equal(client.resolveDownloadUrl('/v2/recordings/1?x=1'), 'https://api.example.com/v2/recordings/1?x=1');
    assert.equal(client.resolveDownloadUrl('https://api.example.com/files/1'), 'https://api.example.com/files/1');
    assert.throws(
      () => client.resolveDownloadUrl('https://evil.example.net/r/1'),
      (e) => isKind(e, 'permanent'),
    );
    assert.throws(
      () => client.resolveDownloadUrl('//evil.example.net/r/1'),
      (e) => isKind(e, 'permanent'),
    );
  });

  it('follows a download redirect to another origin without sending the API credentials there', async () => {
    const { createServer: createHttp } = await import('node:http');
    const seen: (string | undefined)[] = [];
    const storage = createHttp((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(200, { 'content-type': 'audio/ogg', 'content-length': '4' });
      res.end('OggS');
    });
    await new Promise<void>((r) => storage.listen(0, '127.0.0.1', r));
    const storagePort = (storage.address() as import('node:net').AddressInfo).port;
    const apiServer = createHttp((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(302, { location: `http://localhost:${storagePort}/signed/rec-9?sig=abc` });
      res.end();
    });
    await new Promise<void>((r) => apiServer.listen(0, '127.0.0.1', r));
    const apiPort = (apiServer.address() as import('node:net').AddressInfo).port;
    try {
      const client = createTelephonyClient({
        baseUrl: `http://127.0.0.1:${apiPort}/v2`,
        auth: { kind: 'bearer', accessToken: 'secret-token' },
      });
      const dl = await client.download('/recordings/rec-9');
      let body = '';
      for await (const c of dl.body) body += (c as Buffer).toString('utf8');
      assert.equal(body, 'OggS');
      assert.equal(dl.contentType, 'audio/ogg');
      assert.deepEqual(seen, ['Bearer secret-token', undefined]);
    } finally {
      await new Promise<void>((r) => storage.close(() => r()));
      await new Promise<void>((r) => apiServer.close(() => r()));
    }
  });

  it('a stalled body fails with a transient error after the idle timeout', async () => {
    // A server that sends headers and a first chunk, then nothing.
    const { createServer: createHttp } = await import('node:http');
    const server = createHttp((_req, res) => {
      res.writeHead(200, { 'content-type': 'audio/wav', 'content-length': '100000' });
      res.write(Buffer.alloc(10));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const { port } = server.address() as import('node:net').AddressInfo;
    try {
      const client = createTelephonyClient({
        baseUrl: `http://127.0.0.1:${port}/v2`,
        auth: { kind: 'bearer', accessToken: 't' },
        downloadIdleTimeoutMs: 300,
      });
      const dl = await client.download('/recordings/1');
      const err = await (async () => {
        for await (const _c of dl.body) void _c;
      })().catch((e: unknown) => e);
      assert.ok(isKind(err, 'transient'), String(err));
      assert.match(err.message, /no data for 300 ms/);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    }
  });
});

// The API client's settings are a section of the one configuration (src/config/sections.ts):
// read and reported by loadConfig, with every other configuration problem.
const telephonyOf = (env: Record<string, string>) =>
  loadConfig({ ARCHIVE_DIR: '/tmp/callsync-telephony-config', ...env }).telephony;

describe('the telephony section of the configuration', () => {
  it('is null without TELEPHONY_API_URL', () => {
    assert.equal(telephonyOf({}), null);
    assert.equal(telephonyOf({ TELEPHONY_API_URL: ' ' }), null);
  });

  it('reads a personal access token, a bearer token, or OAuth refresh settings', () => {
    const basic = telephonyOf({
      TELEPHONY_API_URL: 'https://api.example.com/v2',
      TELEPHONY_TOKEN_ID: 'id',
      TELEPHONY_TOKEN: 'tok',
      TELEPHONY_TIMEOUT_MS: '5000',
    });
    assert.deepEqual(basic?.auth, { kind: 'basic', tokenId: 'id', token: 'tok' });
    assert.equal(basic?.timeoutMs, 5000);
    const bearer = telephonyOf({ TELEPHONY_API_URL: 'https://api.example.com/v2', TELEPHONY_ACCESS_TOKEN: 'at' });
    assert.deepEqual(bearer?.auth, { kind: 'bearer', accessToken: 'at' });
    const oauth = telephonyOf({
      TELEPHONY_API_URL: 'https://api.example.com/v2',
      TELEPHONY_OAUTH_TOKEN_URL: 'https://login.example.com/token',
      TELEPHONY_OAUTH_CLIENT_ID: 'c',
      TELEPHONY_OAUTH_CLIENT_SECRET: 's',
      TELEPHONY_OAUTH_REFRESH_TOKEN: 'r',
      TELEPHONY_ACCESS_TOKEN: 'at',
      TELEPHONY_CHANNEL_EVENTS_PATH: '/channels/{channelId}/inbox',
    });
    assert.equal(oauth?.auth.kind, 'oauth');
    assert.equal(oauth?.channelEventsPath, '/channels/{channelId}/inbox');
  });

  it('lists every problem, in the format of every other configuration problem', () => {
    assert.throws(
      () =>
        telephonyOf({
          TELEPHONY_API_URL: 'https://api.example.com/v2',
          TELEPHONY_OAUTH_CLIENT_ID: 'c',
          TELEPHONY_TOKEN_ID: 'id',
          TELEPHONY_RETRIES: '-1',
          TELEPHONY_CHANNEL_EVENTS_PATH: '/events',
        }),
      (err: unknown) => {
        assert.ok(err instanceof ConfigError);
        assert.equal(err.problems.length, 4, err.message);
        assert.match(err.message, /^Invalid configuration:/);
        assert.match(
          err.message,
          /TELEPHONY_OAUTH_TOKEN_URL, TELEPHONY_OAUTH_CLIENT_SECRET, TELEPHONY_OAUTH_REFRESH_TOKEN/,
        );
        assert.match(err.message, /TELEPHONY_RETRIES/);
        assert.match(err.message, /\{channelId\}/);
        return true;
      },
    );
    assert.throws(() => telephonyOf({ TELEPHONY_API_URL: 'https://api.example.com/v2' }), /no credentials/);
  });
});

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address() as import('node:net').AddressInfo;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}
