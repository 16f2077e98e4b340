// Who may post webhooks when proxies stand in front: the proxy-trust matrix (trusted / untrusted
// peer × no, forged, multi-hop and malformed X-Forwarded-For × the allow list), and the log line
// every refusal writes. Through Hono's app.request() with a real Redis inbound log behind.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import type { Context } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { forwardedAddress, resolveClient } from '../src/ingress/middleware/ip-allow.js';
import { requestContext } from '../src/ops/request-context.js';
import { InboundLog } from '../queues/inbound.js';
import type { Config } from '../src/config/index.js';
import { SourceRefusal, type Source } from '../src/sources/types.js';
import { minimalPayload } from './support/calls.js';
import { memoryLog } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const PLATFORM_IP = '217.116.118.254';
const PROXY = '10.0.0.5';
const STRANGER = '203.0.113.9';

const webhook = (over: Partial<Config['webhook']> = {}): Config['webhook'] => ({
  allowedIps: [PLATFORM_IP, '2001:db8:a::/64'],
  trustedProxies: ['10.0.0.0/8', '2001:db8:f::/48', '::ffff:192.0.2.0/120'],
  authHeader: undefined,
  authTokens: [],
  bodyLimitBytes: 1024 * 1024,
  dedupeWindowMs: 60_000,
  enqueueTimeoutMs: 1500,
  ...over,
});

interface Case {
  peer: string;
  headers?: Record<string, string>;
  hops?: number;
  expect: 202 | 403;
  why: string;
}

// Peers: a trusted proxy (v4, v4-mapped v6, v6, and one inside a mapped CIDR), an untrusted direct
// client, and the platform connecting directly.
const matrix: Case[] = [
  // No forwarded header: the peer is the client.
  { peer: PROXY, expect: 403, why: 'a trusted proxy that names no client is itself the client' },
  { peer: STRANGER, expect: 403, why: 'a stranger is a stranger' },
  { peer: PLATFORM_IP, expect: 202, why: 'the platform connecting directly' },
  // A forged header naming an allowed address.
  {
    peer: STRANGER,
    headers: { 'x-forwarded-for': PLATFORM_IP },
    expect: 403,
    why: 'forged X-Forwarded-For from an untrusted peer is ignored',
  },
  {
    peer: STRANGER,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}, ${PROXY}` },
    expect: 403,
    why: 'a forged chain that ends in a proxy address is still ignored',
  },
  {
    peer: PLATFORM_IP,
    headers: { 'x-forwarded-for': STRANGER },
    expect: 202,
    why: 'an allowed direct peer is not judged by a header it sent',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': PLATFORM_IP },
    expect: 202,
    why: 'the trusted proxy says the platform connected to it',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}, ${STRANGER}` },
    expect: 403,
    why: 'an entry the client put left of the one the proxy appended never decides',
  },
  {
    peer: '::ffff:10.0.0.5',
    headers: { 'x-forwarded-for': PLATFORM_IP },
    expect: 202,
    why: 'an IPv4-mapped peer matches its IPv4 proxy entry',
  },
  {
    peer: '192.0.2.77',
    headers: { 'x-forwarded-for': PLATFORM_IP },
    expect: 202,
    why: 'a mapped CIDR in TRUSTED_PROXIES covers its IPv4 addresses',
  },
  {
    peer: '2001:db8:f::1',
    headers: { 'x-forwarded-for': '[2001:db8:a::7]:443' },
    expect: 202,
    why: 'IPv6 proxy, IPv6 client with brackets and port',
  },
  {
    peer: '2001:db8:e::1',
    headers: { 'x-forwarded-for': '2001:db8:a::7' },
    expect: 403,
    why: 'an IPv6 peer outside the proxy range is untrusted',
  },
  // Several hops: walked right to left through trusted proxies only.
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `198.51.100.7, ${PLATFORM_IP}, 10.1.2.3` },
    expect: 202,
    why: 'two trusted proxies, then the platform',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}, 198.51.100.7, 10.1.2.3` },
    expect: 403,
    why: 'the walk stops at the first untrusted address',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `198.51.100.7, ${PLATFORM_IP}, 10.1.2.3` },
    hops: 1,
    expect: 403,
    why: 'one hop allowed: the client is the second proxy',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `198.51.100.7, ${PLATFORM_IP}, 10.1.2.3` },
    hops: 2,
    expect: 202,
    why: 'two hops allowed: the platform',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}` },
    hops: 0,
    expect: 403,
    why: 'zero hops: the header is not read',
  },
  {
    peer: STRANGER,
    headers: { 'x-forwarded-for': `198.51.100.7, ${PLATFORM_IP}, 10.1.2.3` },
    expect: 403,
    why: 'a multi-hop chain from an untrusted peer is ignored',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': '10.9.9.9, 10.8.8.8' },
    expect: 403,
    why: 'a chain of proxies only: the leftmost proxy is the client',
  },
  // Malformed entries: the entry reached becomes the client, never allowed, never a crash.
  { peer: PROXY, headers: { 'x-forwarded-for': 'not-an-ip' }, expect: 403, why: 'a malformed entry from the proxy' },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}, unknown` },
    expect: 403,
    why: 'a malformed rightmost entry stops the walk',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `garbage, ${PLATFORM_IP}` },
    expect: 202,
    why: 'junk left of the client does not matter',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': ' , ,, ' },
    expect: 403,
    why: 'empty entries only: the proxy is the client',
  },
  {
    peer: PROXY,
    headers: { 'x-forwarded-for': `${PLATFORM_IP}%eth0x, ::ffff:999.1.1.1` },
    expect: 403,
    why: 'not an address after all',
  },
  { peer: PROXY, headers: { 'x-forwarded-for': `1.2.3.4:99999999` }, expect: 403, why: 'a port that is no port' },
  {
    peer: STRANGER,
    headers: { 'x-forwarded-for': 'not-an-ip' },
    expect: 403,
    why: 'a malformed header from a stranger',
  },
  {
    peer: PLATFORM_IP,
    headers: { 'x-forwarded-for': 'not-an-ip' },
    expect: 202,
    why: 'the platform directly, with junk it did not mean',
  },
  // The standard Forwarded header is never read.
  {
    peer: PROXY,
    headers: { forwarded: `for=${PLATFORM_IP}` },
    expect: 403,
    why: 'Forwarded from a trusted proxy is not read',
  },
  {
    peer: STRANGER,
    headers: { forwarded: `for=${PLATFORM_IP}` },
    expect: 403,
    why: 'Forwarded from a stranger is not read',
  },
];

describe('proxy trust', () => {
  const prefix = uniquePrefix('proxy');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const inbound = new InboundLog(redis, prefix);
  const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1500 });
  // The peer address comes from a test header here; test/ingress-limits.redis.test.ts uses real sockets.
  const remoteAddress = (c: Context) => c.req.header('x-test-peer');
  const memory = memoryLog('info');
  const makeApp = (over: Partial<Config['webhook']> = {}) =>
    createIngressApp({
      webhook: webhook(over),
      acceptor,
      ready: async () => true,
      log: memory.log,
      remoteAddress,
      before: [requestContext({ log: memory.log })],
    });

  before(async () => {
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('the matrix: peers × forwarded headers × allow list', async () => {
    const apps = new Map<number | undefined, ReturnType<typeof makeApp>>();
    const failures: string[] = [];
    let n = 0;
    for (const c of matrix) {
      if (!apps.has(c.hops)) apps.set(c.hops, makeApp({ trustProxyHops: c.hops }));
      const callId = `matrix-${n++}`;
      const res = await apps.get(c.hops)!.request('/webhooks/ai-agent', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-test-peer': c.peer, ...c.headers },
        body: JSON.stringify(minimalPayload(callId)),
      });
      const body = (await res.json()) as any;
      if (res.status !== c.expect)
        failures.push(
          `${c.why}: peer ${c.peer} ${JSON.stringify(c.headers ?? {})} hops ${c.hops ?? 'all'} -> ${res.status}, expected ${c.expect}`,
        );
      const stored = (await inbound.entries()).some((e) => e.call?.callId === callId);
      if (stored !== (c.expect === 202)) failures.push(`${c.why}: stored=${stored}`);
      if (res.status === 403) assert.equal(body.errors[0].title, 'Forbidden');
    }
    assert.deepEqual(failures, []);
  });

  test('a refused direct client gets its connection closed; a refused request through a trusted proxy does not', async () => {
    const app = makeApp();
    const post = (headers: Record<string, string>) =>
      app.request('/webhooks/ai-agent', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(minimalPayload('close-1')),
      });
    const direct = await post({ 'x-test-peer': STRANGER, 'x-forwarded-for': PLATFORM_IP });
    assert.equal(direct.status, 403);
    assert.equal(direct.headers.get('connection'), 'close');
    const viaProxy = await post({ 'x-test-peer': PROXY, 'x-forwarded-for': STRANGER });
    assert.equal(viaProxy.status, 403);
    assert.equal(viaProxy.headers.get('connection'), null);
  });

  test('resolveClient: the walk, step by step', () => {
    const trusted = (ip: string) => ip.startsWith('10.');
    assert.deepEqual(resolveClient('10.0.0.1', '1.1.1.1, 10.0.0.2', trusted), {
      client: '1.1.1.1',
      peer: '10.0.0.1',
      hops: 2,
      malformed: false,
    });
    assert.deepEqual(resolveClient('9.9.9.9', '1.1.1.1', trusted), {
      client: '9.9.9.9',
      peer: '9.9.9.9',
      hops: 0,
      malformed: false,
    });
    assert.deepEqual(resolveClient('10.0.0.1', 'x'.repeat(500), trusted), {
      client: 'x'.repeat(64),
      peer: '10.0.0.1',
      hops: 1,
      malformed: true,
    });
    assert.deepEqual(resolveClient(undefined, '1.1.1.1', trusted), {
      client: undefined,
      peer: undefined,
      hops: 0,
      malformed: false,
    });
    assert.equal(forwardedAddress('[::1]'), '::1');
    assert.equal(forwardedAddress('1.2.3.4:80'), '1.2.3.4');
    assert.equal(forwardedAddress('::ffff:1.2.3.4'), '1.2.3.4');
    assert.equal(forwardedAddress('1.2.3.4.5'), undefined);
    assert.equal(forwardedAddress('_hidden'), undefined);
  });
});

describe('refusal log lines', () => {
  const prefix = uniquePrefix('refusal');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const acceptor = new InboundAcceptor(new InboundLog(redis, prefix), { dedupeWindowMs: 60_000, timeoutMs: 1500 });
  const remoteAddress = (c: Context) => c.req.header('x-test-peer') ?? PLATFORM_IP;

  before(async () => {
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  const setup = (over: Partial<Config['webhook']> = {}, sources?: Source[]) => {
    const memory = memoryLog('info');
    const app = createIngressApp({
      webhook: webhook(over),
      ...(sources ? { sources } : {}),
      acceptor,
      ready: async () => true,
      log: memory.log,
      remoteAddress,
      before: [requestContext({ log: memory.log })],
    });
    const post = (body: string | object, headers: Record<string, string> = {}, path = '/webhooks/ai-agent') =>
      app.request(path, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
    const refusals = () => memory.lines.filter((l) => l.msg === 'webhook refused');
    return { app, post, refusals, lines: memory.lines };
  };

  test('a 403 logs the peer, the forwarded chain as received and a hint about TRUSTED_PROXIES', async () => {
    const { post, refusals } = setup({ trustedProxies: [] });
    const res = await post(minimalPayload('log-403'), {
      'x-test-peer': STRANGER,
      'x-forwarded-for': `${PLATFORM_IP},  198.51.100.1`,
      'x-request-id': 'req-forged-0001',
    });
    assert.equal(res.status, 403);
    const [line, ...more] = refusals();
    assert.equal(more.length, 0, 'one line per refusal');
    assert.equal(line!.status, 403);
    assert.equal(line!.requestId, 'req-forged-0001');
    assert.equal(line!.peer, STRANGER);
    assert.equal(line!.forwardedFor, `${PLATFORM_IP},  198.51.100.1`);
    assert.match(String(line!.hint), /set TRUSTED_PROXIES to the proxy's address/);
    assert.match(String(line!.detail), /203\.0\.113\.9 is not allowed/);

    // Configured proxies, but this peer is not one of them: the hint says so.
    const other = setup();
    await other.post(minimalPayload('log-403b'), { 'x-test-peer': STRANGER, 'x-forwarded-for': PLATFORM_IP });
    assert.match(String(other.refusals()[0]!.hint), /peer 203\.0\.113\.9 is not in TRUSTED_PROXIES/);
    // A trusted proxy that forwarded nothing, or only the Forwarded header.
    await other.post(minimalPayload('log-403c'), { 'x-test-peer': PROXY, forwarded: `for=${PLATFORM_IP}` });
    assert.match(
      String(other.refusals()[1]!.hint),
      /trusted proxy 10\.0\.0\.5 sent no X-Forwarded-For \(the Forwarded header is not read\)/,
    );
    // A malformed entry, and a long header: truncated.
    await other.post(minimalPayload('log-403d'), { 'x-test-peer': PROXY, 'x-forwarded-for': `${'9'.repeat(300)}` });
    const long = other.refusals()[2]!;
    assert.match(String(long.hint), /is not an IP address/);
    assert.equal(String(long.forwardedFor).length, 200);
    // A plain stranger without headers: told what the allow list is called.
    await other.post(minimalPayload('log-403e'), { 'x-test-peer': STRANGER });
    assert.equal(other.refusals()[3]!.forwardedFor, null);
    assert.match(String(other.refusals()[3]!.hint), /not in WEBHOOK_ALLOWED_IPS/);
  });

  test('a 400 lists every problem in the body and in the log line, without payload text or phone numbers', async () => {
    const { post, refusals } = setup();
    const res = await post(
      {
        call: {
          from: '+492116355340',
          to: '+4921155550100',
          startTime: 'yesterday-ish',
          direction: '+492116355340',
          users: [],
        },
      },
      { 'x-request-id': 'req-bad-payload-1' },
    );
    assert.equal(res.status, 400);
    const body = (await res.json()) as any;
    const pointers = body.errors.map((e: any) => e.source.pointer);
    assert.deepEqual(pointers, ['/version', '/call/id', '/call/startTime', '/call/direction', '/call/endTime']);
    for (const e of body.errors) {
      assert.equal(e.status, 400);
      assert.equal(e.title, 'Bad Request');
    }
    assert.match(body.errors[0].detail, /required field is missing/);
    assert.match(body.errors[3].detail, /is not a direction/);
    const [line] = refusals();
    assert.equal(line!.status, 400);
    assert.equal(line!.requestId, 'req-bad-payload-1');
    assert.equal(line!.pointer, '/version');
    assert.deepEqual(
      (line!.errors as any[]).map((e) => e.pointer),
      pointers,
    );
    assert.match(String((line!.errors as any[])[3].detail), /is not a direction/);
    const text = JSON.stringify(refusals());
    assert.ok(!text.includes('2116355340'), text);
    assert.ok(!text.includes('yesterday'), text);
  });

  test('invalid JSON: the log line keeps the reason, not the body text', async () => {
    const { post, refusals } = setup();
    const res = await post('{"call": {"from": "+492116355340", "note": I need to move my appointment}}');
    assert.equal(res.status, 400);
    const [line] = refusals();
    assert.match(String(line!.detail), /not valid JSON/);
    const text = JSON.stringify(line);
    for (const secret of ['2116355340', 'I need', 'appointment'])
      assert.ok(!text.includes(secret), `${secret} in ${text}`);
  });

  test('a huge agent id (part of the call key) is logged cut short on a duplicate, not in full', async () => {
    const { post, lines } = setup();
    const payload = minimalPayload(`huge-agent-${uniquePrefix()}`);
    payload.call.agentId = 'agent-'.repeat(5_000);
    assert.equal((await post(payload)).status, 202);
    assert.equal((await post(payload)).status, 202);
    const line = lines.find((l) => l.msg === 'duplicate webhook acknowledged');
    assert.ok(line, 'the duplicate is logged');
    const logged = String(line.agentId);
    assert.ok(logged.length < 300, `${logged.length} characters of agent id in one log line`);
    assert.match(logged, /^agent-agent-.*… \(30000 characters\)$/);
  });

  test('many problems: the body lists twenty, the last says how many more', async () => {
    // The built-in sources refuse a call only for the few fields that identify it; a source of one's
    // own (src/sources, a plugin) may name fifty problems.
    const strict: Source = {
      name: 'strict',
      paths: ['/webhooks/strict'],
      body: 'json',
      receive: async () => {
        const problems = Array.from({ length: 50 }, (_, i) => ({ pointer: `/parties/${i}`, detail: 'not a party' }));
        throw new SourceRefusal(400, problems[0]!.detail, problems[0]!.pointer, problems);
      },
    };
    const { post } = setup({}, [strict]);
    const res = await post({ parties: [] }, {}, '/webhooks/strict');
    assert.equal(res.status, 400);
    const body = (await res.json()) as any;
    assert.equal(body.errors.length, 20);
    assert.equal(body.errors[0].source.pointer, '/parties/0');
    assert.equal(body.errors[19].detail, '31 more problems not listed');
  });

  test('every 4xx of the webhook route writes one refusal line with its status', async () => {
    const { app, post, refusals, lines } = setup({
      authHeader: 'x-callsync-token',
      authTokens: ['s3cret-value-1'],
      bodyLimitBytes: 512,
    });
    const statuses: number[] = [];
    statuses.push((await post(minimalPayload('r-401'))).status);
    statuses.push((await post(minimalPayload('r-401b'), { 'x-callsync-token': 'wrong' })).status);
    statuses.push(
      (await post({ ...minimalPayload('r-413'), pad: 'x'.repeat(1000) }, { 'x-callsync-token': 's3cret-value-1' }))
        .status,
    );
    statuses.push((await post('a=1', { 'x-callsync-token': 's3cret-value-1', 'content-type': 'text/plain' })).status);
    statuses.push((await app.request('/webhooks/ai-agent', { method: 'GET' })).status);
    statuses.push(
      (await post(minimalPayload('r-400'), { 'x-callsync-token': 's3cret-value-1' }, '/webhooks/ai-agent/bad%20agent'))
        .status,
    );
    assert.deepEqual(statuses, [401, 401, 413, 415, 405, 400]);
    assert.deepEqual(
      refusals().map((l) => l.status),
      statuses,
    );
    for (const l of refusals()) {
      assert.match(String(l.requestId), /^[0-9a-f-]{36}$/);
      assert.equal(typeof l.detail, 'string');
      assert.ok(Array.isArray(l.errors));
    }
    assert.ok(!JSON.stringify(lines).includes('s3cret-value-1'));
  });
});
