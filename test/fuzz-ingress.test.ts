// Property-based fuzzing of the ingress (fast-check): thousands of malformed bodies, headers,
// content types, paths and methods through Hono's app.request(), with a real Redis inbound log behind.
// Whatever comes in, the answer is a 202 (it was a valid call after all) or a 4xx with the error
// body — never a 5xx, never an exception — and the heap stays flat.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import type { Context, Hono } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createLogger } from '../src/log.js';
import { InboundLog } from '../queues/inbound.js';
import type { Config } from '../src/config/index.js';
import { minimalPayload, webhookPayload } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const PLATFORM_IP = '217.116.118.254';
/** Runs per property; FUZZ_RUNS scales them (CI keeps the default). */
const RUNS = Number(process.env.FUZZ_RUNS ?? 600);
const log = createLogger({ level: 'silent' });

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const webhook = (over: Partial<Config['webhook']> = {}): Config['webhook'] => ({
  allowedIps: [PLATFORM_IP, '212.9.46.32', '2001:db8::/32'],
  trustProxyHops: 0,
  authHeader: undefined,
  authTokens: [],
  bodyLimitBytes: 64 * 1024,
  dedupeWindowMs: 60_000,
  enqueueTimeoutMs: 5000,
  ...over,
});

interface Sent {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string | Uint8Array | null;
}

/** Asserts the one contract: 202 with `{id, duplicate}`, or a 4xx whose body is the spec's error shape. */
async function checkAnswer(app: Hono, sent: Sent): Promise<number> {
  const res = await app.request(sent.path, { method: sent.method, headers: sent.headers, body: sent.body ?? undefined });
  const text = await res.text();
  const where = `${sent.method} ${sent.path} ${JSON.stringify(sent.headers)} ${String(sent.body).slice(0, 200)}`;
  assert.ok(res.status < 500, `5xx (${res.status}) for ${where}: ${text}`);
  const body = JSON.parse(text) as Record<string, any>;
  if (res.status === 202) {
    assert.equal(typeof body.id, 'string', where);
    assert.equal(typeof body.duplicate, 'boolean', where);
    return res.status;
  }
  assert.ok(res.status >= 400 && res.status < 500, `unexpected ${res.status} for ${where}`);
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  // One entry per problem (a 400 lists each field it could not read), at most 20.
  assert.ok(Array.isArray(body.errors) && body.errors.length >= 1 && body.errors.length <= 20, `error body for ${where}: ${text}`);
  if (res.status !== 400) assert.equal(body.errors.length, 1, `one entry for a ${res.status}: ${text}`);
  for (const err of body.errors as Record<string, any>[]) {
    assert.equal(err.status, res.status);
    assert.equal(typeof err.title, 'string');
    assert.equal(typeof err.detail, 'string');
    assert.equal(typeof err.source?.pointer, 'string');
  }
  return res.status;
}

// ---- generators ----

const headerValue = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 }).map((s) => s.trim());
const headerName = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);

const contentType = fc.oneof(
  fc.constant('application/json'),
  fc.constantFrom('Application/JSON', 'application/json; charset=utf-8', 'application/vnd.api+json', 'application/json;', 'application/jsonx',
    'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'json', '', ' application/json', 'application/ json'),
  headerValue,
  fc.tuple(fc.constant('application/'), headerValue).map(([a, b]) => a + b),
);

/** Bodies that are not JSON, not an object, or a JSON object of the wrong shape. */
const junkBody = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.uint8Array({ maxLength: 300 }),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.constantFrom('', ' ', '\n', 'null', '[]', '{}', '{"call":null}', '{"call":{}}', '"x"', '1e999', '{"__proto__":{"x":1}}', '{"a":'.repeat(50),
    '\uFEFF{}', '[' .repeat(5000)),
);

const payloadPath = fc.constantFrom(
  ['version'], ['call'], ['call', 'id'], ['call', 'from'], ['call', 'to'], ['call', 'startTime'], ['call', 'endTime'], ['call', 'duration'],
  ['call', 'direction'], ['call', 'users'], ['call', 'users', '0'], ['call', 'users', '0', 'userId'], ['assist'], ['assist', 'summary'],
  ['assist', 'summary', 'keyPoints'], ['assist', 'callScenarios'], ['assist', 'callScenarios', '0', 'smartAnswers'], ['assist', 'transcription'],
  ['assist', 'transcription', 'chunks'], ['assist', 'transcription', 'chunks', '0', 'speaker'], ['assist', 'transcription', 'chunks', '0', 'startTime'],
);
const edgeValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(-1, 0, 1e20, -1e20, 8.64e15, 1.5, 1e11, '', ' ', 'in', 'out', '+49', '0', 'NaN', '1e400', '2026-13-45T99:00:00Z', [], {}),
);

/** A valid payload with one to three fields replaced by anything, or removed: the normalizer's edges. */
const mutatedPayload = fc
  .record({
    id: fc.integer({ min: 0, max: 1e9 }),
    minimal: fc.boolean(),
    edits: fc.array(fc.record({ path: payloadPath, value: fc.option(edgeValue, { nil: undefined }) }), { minLength: 1, maxLength: 3 }),
  })
  .map(({ id, minimal, edits }) => {
    const payload: Record<string, any> = minimal ? minimalPayload(`fz-${id}`) : webhookPayload(`fz-${id}`);
    for (const { path, value } of edits) {
      let target: any = payload;
      for (const key of path.slice(0, -1)) target = target !== null && typeof target === 'object' ? target[key] : undefined;
      if (target === null || typeof target !== 'object') continue;
      const last = path[path.length - 1]!;
      if (value === undefined) delete target[last];
      else target[last] = value;
    }
    return payload;
  });

const extraHeaders = fc.dictionary(headerName, headerValue, { maxKeys: 5 });

describe('ingress under fuzzing', () => {
  const prefix = uniquePrefix('fuzz');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const acceptor = new InboundAcceptor(new InboundLog(redis, prefix), { dedupeWindowMs: 60_000, timeoutMs: 5000 });
  const remoteAddress = (c: Context) => c.req.header('x-test-peer') ?? PLATFORM_IP;
  const plain = createIngressApp({ webhook: webhook(), acceptor, ready: async () => true, log, remoteAddress });
  // Behind one trusted proxy, with a shared secret: X-Forwarded-For and the token are fuzzed too.
  const guarded = createIngressApp({
    webhook: webhook({ trustedProxies: ['10.0.0.1'], trustProxyHops: 1, authHeader: 'x-callsync-token', authTokens: ['s3cret-token'] }),
    acceptor,
    ready: async () => true,
    log,
    remoteAddress: () => '10.0.0.1',
  });
  const statuses = new Map<number, number>();
  const count = (s: number) => statuses.set(s, (statuses.get(s) ?? 0) + 1);

  before(async () => {
    // Without an offline queue, commands fail until the connection is up.
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
    log.info({ statuses: Object.fromEntries(statuses) }, 'fuzz statuses');
  });

  test('malformed bodies with any content type: 4xx with the error body, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(junkBody, contentType, extraHeaders, async (body, type, headers) => {
        count(await checkAnswer(plain, { method: 'POST', path: '/webhooks/ai-agent', headers: { ...headers, 'content-type': type }, body }));
      }),
      { numRuns: RUNS },
    );
  });

  test('valid payloads with fields broken or removed: 202 or 400 with a pointer, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(mutatedPayload, fc.option(fc.stringMatching(/^[A-Za-z0-9._:@%-]{0,40}$/), { nil: undefined }), async (payload, agent) => {
        const path = agent === undefined ? '/webhooks/ai-agent' : `/webhooks/ai-agent/${agent}`;
        const status = await checkAnswer(plain, { method: 'POST', path, headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) });
        assert.ok([202, 400, 404].includes(status), `status ${status}`);
        count(status);
      }),
      { numRuns: RUNS },
    );
  });

  test('methods, paths, peers, forwarded-for chains and tokens: 4xx or 202, never 5xx', async () => {
    const method = fc.constantFrom('GET', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'POST', 'POST', 'POST');
    const path = fc.oneof(
      fc.constantFrom('/webhooks/ai-agent', '/webhooks/ai-agent/', '/webhooks/ai-agent/a/b', '/webhooks/AI-agent', '/webhooks/ai-agent?x=1', '//webhooks/ai-agent'),
      fc.stringMatching(/^[A-Za-z0-9._~%-]{1,60}$/).map((s) => `/webhooks/ai-agent/${s}`),
    );
    const forwarded = fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), headerValue), { maxLength: 4 }).map((a) => a.join(', '));
    const token = fc.oneof(fc.constant('s3cret-token'), headerValue);
    await fc.assert(
      fc.asyncProperty(method, path, forwarded, token, fc.boolean(), fc.integer({ min: 0, max: 1e9 }), async (m, p, xff, tok, useGuarded, id) => {
        const headers: Record<string, string> = { 'content-type': 'application/json', 'x-forwarded-for': xff, 'x-callsync-token': tok };
        if (!useGuarded) headers['x-test-peer'] = xff.split(',')[0]?.trim() || PLATFORM_IP;
        const body = m === 'GET' ? null : JSON.stringify(minimalPayload(`fz-route-${id}`));
        count(await checkAnswer(useGuarded ? guarded : plain, { method: m, path: p, headers, body }));
      }),
      { numRuns: RUNS },
    );
  });

  test('the heap stays flat over thousands of bad requests', async () => {
    const round = async () =>
      fc.assert(
        fc.asyncProperty(junkBody, contentType, async (body, type) => {
          await checkAnswer(plain, { method: 'POST', path: '/webhooks/ai-agent', headers: { 'content-type': type }, body });
        }),
        { numRuns: RUNS * 2 },
      );
    await round(); // warm-up: JIT, caches, fast-check's own state
    gc();
    const base = process.memoryUsage().heapUsed;
    for (let i = 0; i < 3; i++) await round();
    gc();
    const grown = process.memoryUsage().heapUsed - base;
    assert.ok(grown < 8 * 1024 * 1024, `heap grew by ${(grown / 1048576).toFixed(1)} MiB over ${RUNS * 6} requests`);
  });
});
