// The webhook ingress through Hono's app.request() (no socket), with a real Redis inbound log behind it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import type { Context } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { clientIp } from '../src/ingress/middleware/ip-allow.js';
import { createLogger } from '../src/log.js';
import { InboundLog } from '../queues/inbound.js';
import type { Config } from '../src/config/index.js';
import { minimalPayload, webhookPayload } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { webhookConfig } from './support/webhook-config.js';

const PLATFORM_IP = '217.116.118.254';
const log = createLogger({ level: 'silent' });

const webhook = (over: Partial<Config['webhook']> = {}): Config['webhook'] =>
  webhookConfig({ allowedIps: ['217.116.118.254', '212.9.46.32'], ...over });

describe('ingress', () => {
  const prefix = uniquePrefix('ingress');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const inbound = new InboundLog(redis, prefix);
  const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1500 });
  // The peer address comes from a test header here; the real server reads it from the socket.
  const remoteAddress = (c: Context) => c.req.header('x-test-peer') ?? PLATFORM_IP;
  const makeApp = (over: Partial<Config['webhook']> = {}) =>
    createIngressApp({
      webhook: webhook(over),
      acceptor,
      ready: async () => (await redis.ping()) === 'PONG',
      log,
      remoteAddress,
    });
  const app = makeApp();

  const post = (path: string, body: unknown, headers: Record<string, string> = {}, target = app) =>
    target.request(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });

  before(async () => {
    // Without an offline queue, commands fail until the connection is up.
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('a valid webhook is stored in Redis before the 202', async () => {
    const res = await post('/webhooks/ai-agent/agent-9', webhookPayload('ing-1'));
    assert.equal(res.status, 202);
    const body = (await res.json()) as { id: string; duplicate: boolean };
    assert.equal(body.duplicate, false);
    const entry = await inbound.find(body.id);
    assert.ok(entry, 'entry is in Redis');
    assert.ok(entry.call, 'entry holds a readable call');
    assert.equal(entry.call.callId, 'ing-1');
    assert.equal(entry.call.agentId, 'agent-9');
    assert.equal(entry.call.summary?.topics[0], 'appointment');
  });

  test('the same call again is a duplicate with the first id, and queued once', async () => {
    const first = (await (await post('/webhooks/ai-agent/agent-9', webhookPayload('dup-1'))).json()) as { id: string };
    const again = await post('/webhooks/ai-agent/agent-9', webhookPayload('dup-1'));
    assert.equal(again.status, 202);
    assert.deepEqual(await again.json(), { id: first.id, duplicate: true });
    // Another agent's call with the same id is a different call.
    const other = (await (await post('/webhooks/ai-agent/agent-10', webhookPayload('dup-1'))).json()) as {
      duplicate: boolean;
    };
    assert.equal(other.duplicate, false);
    const entries = await inbound.entries();
    assert.equal(entries.filter((e) => e.call?.callId === 'dup-1').length, 2);
  });

  test('a vCon without dates sent again unchanged is a duplicate, though its start is its arrival', async () => {
    // Before: the start came from the arrival time and counted as content, so every resend was an update.
    const vcon = {
      vcon: '0.0.1',
      uuid: 'rep-vc-1',
      parties: [{ tel: '+12345678901' }, { tel: '+19876543210' }],
      analysis: [{ type: 'summary', vendor: 'x', body: 'hi' }],
    };
    const first = (await (await post('/webhooks/ai-agent/probe', vcon)).json()) as { id: string };
    await new Promise((resolve) => setTimeout(resolve, 5));
    const again = await post('/webhooks/ai-agent/probe', vcon);
    assert.deepEqual(await again.json(), { id: first.id, duplicate: true });
    // Other content is still an update.
    const changed = { ...vcon, analysis: [{ type: 'summary', vendor: 'x', body: 'hi again' }] };
    const update = (await (await post('/webhooks/ai-agent/probe', changed)).json()) as { update?: true };
    assert.equal(update.update, true);
  });

  test('400 for invalid JSON, with the spec error body', async () => {
    const res = await post('/webhooks/ai-agent', '{"version": "v1", "call": ');
    assert.equal(res.status, 400);
    const body = (await res.json()) as any;
    assert.equal(body.errors[0].status, 400);
    assert.equal(body.errors[0].title, 'Bad Request');
    assert.match(body.errors[0].detail, /not valid JSON/);
    assert.deepEqual(body.errors[0].source, { pointer: '/' });
  });

  test('every error body locates its problem: a field, the whole body or request (/), or a header by name', async () => {
    const pointer = async (res: Response | Promise<Response>) =>
      ((await (await res).json()) as any).errors[0].source.pointer as string;
    // Whole body: not JSON, empty, not an object, too large.
    assert.equal(await pointer(post('/webhooks/ai-agent', '{')), '/');
    assert.equal(await pointer(post('/webhooks/ai-agent', '')), '/');
    assert.equal(await pointer(post('/webhooks/ai-agent', '[1,2]')), '/');
    assert.equal(
      await pointer(
        post(
          '/webhooks/ai-agent',
          webhookPayload('big', (p) => (p.assist.transcription.content = 'x'.repeat(4096))),
          {},
          makeApp({ bodyLimitBytes: 2048 }),
        ),
      ),
      '/',
    );
    // A field.
    assert.equal(
      await pointer(
        post(
          '/webhooks/ai-agent',
          webhookPayload('f', (p) => delete p.call.from),
        ),
      ),
      '/call/from',
    );
    // A header, by its name.
    assert.equal(
      await pointer(post('/webhooks/ai-agent', 'version=v1', { 'content-type': 'text/plain' })),
      'content-type',
    );
    const secured = makeApp({ authHeader: 'x-callsync-token', authTokens: ['s3cret-value'] });
    assert.equal(await pointer(post('/webhooks/ai-agent', minimalPayload('p1'), {}, secured)), 'x-callsync-token');
    assert.equal(
      await pointer(post('/webhooks/ai-agent', minimalPayload('p2'), { 'x-callsync-token': 'guess' }, secured)),
      'x-callsync-token',
    );
    // The request as a whole: the sender's address, the method, an unknown path.
    assert.equal(
      await pointer(post('/webhooks/ai-agent', minimalPayload('p3'), { 'x-test-peer': '203.0.113.9' })),
      '/',
    );
    assert.equal(await pointer(app.request('/webhooks/ai-agent', { method: 'GET' })), '/');
    assert.equal(await pointer(app.request('/nowhere')), '/');
  });

  test('400 for a missing or ill-typed required field, pointing at it', async () => {
    const missing = await post(
      '/webhooks/ai-agent',
      webhookPayload('x', (p) => delete p.call.id),
    );
    assert.equal(missing.status, 400);
    assert.deepEqual(((await missing.json()) as any).errors[0].source, { pointer: '/call/id' });
    const illTyped = await post(
      '/webhooks/ai-agent',
      webhookPayload('x', (p) => (p.call.startTime = { when: 'now' })),
    );
    assert.equal(illTyped.status, 400);
    const body = (await illTyped.json()) as any;
    assert.deepEqual(body.errors[0].source, { pointer: '/call/startTime' });
    assert.equal(body.errors[0].status, 400);
    const empty = await post('/webhooks/ai-agent', '');
    assert.equal(empty.status, 400);
    const array = await post('/webhooks/ai-agent', '[1,2]');
    assert.equal(array.status, 400);
  });

  test('415 for a declared non-JSON content type; none, text/json and +json are read as JSON', async () => {
    for (const type of ['text/plain', 'application/x-www-form-urlencoded']) {
      const res = await app.request('/webhooks/ai-agent', {
        method: 'POST',
        headers: type ? { 'content-type': type } : {},
        body: 'version=v1',
      });
      assert.equal(res.status, 415, type);
      const body = (await res.json()) as any;
      assert.equal(body.errors[0].status, 415);
      assert.equal(body.errors[0].title, 'Unsupported Media Type');
    }
    const charset = await post('/webhooks/ai-agent', minimalPayload('cs-1'), {
      'content-type': 'application/json; charset=utf-8',
    });
    assert.equal(charset.status, 202);
    // Before: 415 for each of these, and the call was lost. (Bytes: a string body gets text/plain.)
    const bytes = (text: string) => new TextEncoder().encode(text);
    const untyped = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      body: bytes(JSON.stringify(minimalPayload('ct-none'))),
    });
    assert.equal(untyped.status, 202, 'no content type');
    for (const [i, type] of ['text/json', 'application/vnd.call+json; charset=utf-8'].entries())
      assert.equal((await post('/webhooks/ai-agent', minimalPayload(`ct-${i}`), { 'content-type': type })).status, 202);
    // Without a content type, a body that is not JSON is what it is: a 400.
    const form = await app.request('/webhooks/ai-agent', { method: 'POST', body: bytes('version=v1') });
    assert.equal(form.status, 400);
  });

  test('a trailing slash on a webhook route is the same route', async () => {
    // Before: 404 for `/webhooks/ai-agent/`.
    for (const path of ['/webhooks/ai-agent/', '/webhooks/ai-agent/agent-9/']) {
      const res = await post(path, minimalPayload('slash-1'));
      assert.equal(res.status, 202, path);
    }
  });

  test('413 above the body limit, declared or streamed (chunked)', async () => {
    const small = makeApp({ bodyLimitBytes: 2048 });
    const big = webhookPayload('big', (p) => (p.assist.transcription.content = 'x'.repeat(4096)));
    const declared = await post('/webhooks/ai-agent', big, {}, small);
    assert.equal(declared.status, 413);
    assert.equal(((await declared.json()) as any).errors[0].status, 413);
    // A chunked body has no Content-Length: the limit is enforced while it streams.
    const bytes = new TextEncoder().encode(JSON.stringify(big));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 512) controller.enqueue(bytes.slice(i, i + 512));
        controller.close();
      },
    });
    const chunked = await small.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    assert.equal(chunked.status, 413);
  });

  test('a chunked body under the limit is accepted', async () => {
    const bytes = new TextEncoder().encode(JSON.stringify(webhookPayload('chunked-ok')));
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (let i = 0; i < bytes.length; i += 100) controller.enqueue(bytes.slice(i, i + 100));
        controller.close();
      },
    });
    const res = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: stream,
      duplex: 'half',
    } as RequestInit);
    assert.equal(res.status, 202);
  });

  test('403 for an address outside the allow list; both platform addresses pass', async () => {
    const denied = await post('/webhooks/ai-agent', minimalPayload('ip-1'), { 'x-test-peer': '203.0.113.9' });
    assert.equal(denied.status, 403);
    const body = (await denied.json()) as any;
    assert.equal(body.errors[0].status, 403);
    assert.equal(body.errors[0].title, 'Forbidden');
    for (const ip of ['217.116.118.254', '212.9.46.32', '::ffff:212.9.46.32']) {
      const ok = await post('/webhooks/ai-agent', minimalPayload(`ip-ok-${ip}`), { 'x-test-peer': ip });
      assert.equal(ok.status, 202, ip);
    }
  });

  test('a forged X-Forwarded-For never gets a request in', async () => {
    // No trusted hops: the header is ignored entirely.
    const forged = await post('/webhooks/ai-agent', minimalPayload('xff-1'), {
      'x-test-peer': '203.0.113.9',
      'x-forwarded-for': PLATFORM_IP,
    });
    assert.equal(forged.status, 403);
    // A trusted proxy at 10.0.0.5: only the entry the proxy appended counts, not one the client sent before it.
    const behindProxy = makeApp({ trustedProxies: ['10.0.0.5'], trustProxyHops: 1, allowedIps: [PLATFORM_IP] });
    const forgedLeft = await post(
      '/webhooks/ai-agent',
      minimalPayload('xff-2'),
      { 'x-test-peer': '10.0.0.5', 'x-forwarded-for': `${PLATFORM_IP}, 203.0.113.9` },
      behindProxy,
    );
    assert.equal(forgedLeft.status, 403);
    const real = await post(
      '/webhooks/ai-agent',
      minimalPayload('xff-3'),
      { 'x-test-peer': '10.0.0.5', 'x-forwarded-for': `198.51.100.1, ${PLATFORM_IP}` },
      behindProxy,
    );
    assert.equal(real.status, 202);
    assert.equal(clientIp('10.0.0.5', '1.1.1.1, 2.2.2.2', ['10.0.0.5'], 1), '2.2.2.2');
    assert.equal(clientIp('10.0.0.5', '1.1.1.1, 2.2.2.2', ['10.0.0.5'], 0), '10.0.0.5');
    assert.equal(clientIp('10.0.0.6', '1.1.1.1, 2.2.2.2', ['10.0.0.5'], 1), '10.0.0.6');
  });

  test('CIDRs, IPv6 and "*" in the allow list', async () => {
    const cidr = makeApp({ allowedIps: ['198.51.100.0/24', '2001:db8::/32'] });
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c1'), { 'x-test-peer': '198.51.100.77' }, cidr)).status,
      202,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c2'), { 'x-test-peer': '198.51.101.1' }, cidr)).status,
      403,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c3'), { 'x-test-peer': '2001:db8::1' }, cidr)).status,
      202,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c4'), { 'x-test-peer': '2001:db9::1' }, cidr)).status,
      403,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c5'), { 'x-test-peer': '::ffff:198.51.100.2' }, cidr)).status,
      202,
    );
    const any = makeApp({ allowedIps: '*' });
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('c6'), { 'x-test-peer': '203.0.113.1' }, any)).status,
      202,
    );
  });

  test('shared credential: 401 when missing or wrong; any configured value (rotation) passes', async () => {
    const secured = makeApp({ authHeader: 'x-callsync-token', authTokens: ['old-secret', 'new-secret'] });
    const missing = await post('/webhooks/ai-agent', minimalPayload('a1'), {}, secured);
    assert.equal(missing.status, 401);
    assert.equal(((await missing.json()) as any).errors[0].title, 'Unauthorized');
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('a2'), { 'x-callsync-token': 'guess' }, secured)).status,
      401,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('a3'), { 'x-callsync-token': 'old-secret' }, secured)).status,
      202,
    );
    assert.equal(
      (await post('/webhooks/ai-agent', minimalPayload('a4'), { 'x-callsync-token': 'new-secret' }, secured)).status,
      202,
    );
    // The allow list is checked first.
    assert.equal(
      (
        await post(
          '/webhooks/ai-agent',
          minimalPayload('a5'),
          { 'x-callsync-token': 'new-secret', 'x-test-peer': '203.0.113.1' },
          secured,
        )
      ).status,
      403,
    );
  });

  test('healthz, readyz, 404 and 405 bodies', async () => {
    assert.equal((await app.request('/healthz')).status, 200);
    assert.deepEqual(await (await app.request('/readyz')).json(), { status: 'ready' });
    const missing = await app.request('/nope');
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as any).errors[0].status, 404);
    const wrongMethod = await app.request('/webhooks/ai-agent', { method: 'GET' });
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.get('allow'), 'POST');
  });
});

describe('ingress without Redis', () => {
  test('answers 503 with Retry-After within two seconds, never 2xx, never hangs', async () => {
    // Nothing listens on port 1: every enqueue fails.
    const redis = new Redis('redis://127.0.0.1:1', {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      lazyConnect: true,
      retryStrategy: () => 200,
    });
    redis.on('error', () => undefined);
    redis.connect().catch(() => undefined);
    const app = createIngressApp({
      webhook: webhook({ allowedIps: '*' }),
      acceptor: new InboundAcceptor(new InboundLog(redis, 'unused'), { dedupeWindowMs: 1000, timeoutMs: 1500 }),
      ready: async () => (await redis.ping()) === 'PONG',
      log,
      remoteAddress: () => PLATFORM_IP,
    });
    const started = Date.now();
    const res = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(minimalPayload('down-1')),
    });
    const elapsed = Date.now() - started;
    assert.equal(res.status, 503);
    assert.ok(res.headers.get('retry-after'));
    assert.equal(((await res.json()) as any).errors[0].status, 503);
    assert.ok(elapsed < 2500, `answered after ${elapsed} ms`);
    const ready = await app.request('/readyz');
    assert.equal(ready.status, 503);
    redis.disconnect();
  });
});
