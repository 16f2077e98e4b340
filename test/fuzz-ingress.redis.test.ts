// Property-based fuzzing of the ingress (fast-check): thousands of malformed bodies, headers,
// content types, paths and methods through Hono's app.request(), with a real Redis inbound log behind.
// Whatever comes in, the answer is a 202 (it was a valid call after all) or a 4xx with the error
// body — never a 5xx, never an exception — and the heap stays flat. Valid calls carrying deep
// structures, huge numbers and odd unicode in any charset are answered too, and every one
// acknowledged is found in the inbound log with its body stored exactly as sent.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import fc from 'fast-check';
import { Redis } from 'ioredis';
import type { Context, Hono } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { findLimitViolation } from '../src/ingress/middleware/json-limits.js';
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
const BODY_LIMIT = 64 * 1024;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

const webhook = (over: Partial<Config['webhook']> = {}): Config['webhook'] => ({
  allowedIps: [PLATFORM_IP, '212.9.46.32', '2001:db8::/32'],
  trustProxyHops: 0,
  authHeader: undefined,
  authTokens: [],
  bodyLimitBytes: BODY_LIMIT,
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
async function checkAnswer(
  app: Hono,
  sent: Sent,
  onAccepted?: (answer: { id: string; duplicate: boolean }) => void,
  onRefused?: (pointer: string) => void,
): Promise<number> {
  const res = await app.request(sent.path, {
    method: sent.method,
    headers: sent.headers,
    body: sent.body ?? undefined,
  });
  const text = await res.text();
  const where = `${sent.method} ${sent.path} ${JSON.stringify(sent.headers)} ${String(sent.body).slice(0, 200)}`;
  assert.ok(res.status < 500, `5xx (${res.status}) for ${where}: ${text}`);
  const body = JSON.parse(text) as Record<string, any>;
  if (res.status === 202) {
    assert.equal(typeof body.id, 'string', where);
    assert.equal(typeof body.duplicate, 'boolean', where);
    onAccepted?.(body as { id: string; duplicate: boolean });
    return res.status;
  }
  assert.ok(res.status >= 400 && res.status < 500, `unexpected ${res.status} for ${where}`);
  assert.match(res.headers.get('content-type') ?? '', /application\/json/);
  // One entry per problem (a 400 lists each field it could not read), at most 20.
  assert.ok(
    Array.isArray(body.errors) && body.errors.length >= 1 && body.errors.length <= 20,
    `error body for ${where}: ${text}`,
  );
  if (res.status !== 400) assert.equal(body.errors.length, 1, `one entry for a ${res.status}: ${text}`);
  for (const err of body.errors as Record<string, any>[]) {
    assert.equal(err.status, res.status);
    assert.equal(typeof err.title, 'string');
    assert.equal(typeof err.detail, 'string');
    assert.equal(typeof err.source?.pointer, 'string');
  }
  onRefused?.((body.errors as Record<string, any>[])[0]!.source.pointer as string);
  return res.status;
}

// ---- generators ----

const headerValue = fc
  .string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 80 })
  .map((s) => s.trim());
const headerName = fc.stringMatching(/^[a-z][a-z0-9-]{0,20}$/);

const contentType = fc.oneof(
  fc.constant('application/json'),
  fc.constantFrom(
    'Application/JSON',
    'application/json; charset=utf-8',
    'application/vnd.api+json',
    'application/json;',
    'application/jsonx',
    'application/json; charset=latin1',
    'application/json; charset="UTF-16LE"',
    'application/json; charset=shift_jis',
    'application/json; charset=',
    'application/json; charset="unterminated',
    'application/json; a="b;charset=utf-16be"; charset=utf-8',
    'text/plain',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'json',
    '',
    ' application/json',
    'application/ json',
  ),
  headerValue,
  fc.tuple(fc.constant('application/'), headerValue).map(([a, b]) => a + b),
);

/** Bodies that are not JSON, not an object, or a JSON object of the wrong shape. */
const junkBody = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.uint8Array({ maxLength: 300 }),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.constantFrom(
    '',
    ' ',
    '\n',
    'null',
    '[]',
    '{}',
    '{"call":null}',
    '{"call":{}}',
    '"x"',
    '1e999',
    '{"__proto__":{"x":1}}',
    '{"a":'.repeat(50),
    '\uFEFF{}',
    '['.repeat(5000),
  ),
);

const payloadPath = fc.constantFrom(
  ['version'],
  ['call'],
  ['call', 'id'],
  ['call', 'from'],
  ['call', 'to'],
  ['call', 'startTime'],
  ['call', 'endTime'],
  ['call', 'duration'],
  ['call', 'direction'],
  ['call', 'users'],
  ['call', 'users', '0'],
  ['call', 'users', '0', 'userId'],
  ['assist'],
  ['assist', 'summary'],
  ['assist', 'summary', 'keyPoints'],
  ['assist', 'callScenarios'],
  ['assist', 'callScenarios', '0', 'smartAnswers'],
  ['assist', 'transcription'],
  ['assist', 'transcription', 'chunks'],
  ['assist', 'transcription', 'chunks', '0', 'speaker'],
  ['assist', 'transcription', 'chunks', '0', 'startTime'],
);
const edgeValue = fc.oneof(
  fc.jsonValue({ maxDepth: 3 }),
  fc.constantFrom(
    -1,
    0,
    1e20,
    -1e20,
    8.64e15,
    1.5,
    1e11,
    '',
    ' ',
    'in',
    'out',
    '+49',
    '0',
    'NaN',
    '1e400',
    '2026-13-45T99:00:00Z',
    [],
    {},
  ),
  // Hostile in a known field: nesting around the limit, huge and imprecise numbers, broken text.
  fc.constantFrom(
    1e308,
    -0,
    2 ** 53 + 2,
    5e-324,
    '9'.repeat(400),
    '\ud800',
    'x\udfff',
    '\u202ein\u202c',
    'in\u0000',
    '😀',
    { __proto__: null, id: 'x' },
  ),
  fc.integer({ min: 1, max: 80 }).map((n) => JSON.parse(`${'['.repeat(n)}"in"${']'.repeat(n)}`) as unknown),
);

/** A valid payload with one to three fields replaced by anything, or removed: the normalizer's edges. */
const mutatedPayload = fc
  .record({
    id: fc.integer({ min: 0, max: 1e9 }),
    minimal: fc.boolean(),
    edits: fc.array(fc.record({ path: payloadPath, value: fc.option(edgeValue, { nil: undefined }) }), {
      minLength: 1,
      maxLength: 3,
    }),
  })
  .map(({ id, minimal, edits }) => {
    const payload: Record<string, any> = minimal ? minimalPayload(`fz-${id}`) : webhookPayload(`fz-${id}`);
    for (const { path, value } of edits) {
      let target: any = payload;
      for (const key of path.slice(0, -1))
        target = target !== null && typeof target === 'object' ? target[key] : undefined;
      if (target === null || typeof target !== 'object') continue;
      const last = path[path.length - 1]!;
      if (value === undefined) delete target[last];
      // A copy: fast-check may hand the same value object to two edits, and setting it inside itself
      // would make a cycle no JSON can carry (seen: version.direction = version).
      else target[last] = structuredClone(value);
    }
    return payload;
  });

const extraHeaders = fc.dictionary(headerName, headerValue, { maxKeys: 5 });

// ---- hostile but well-formed: deep, huge, odd ----

/** Deepest nesting of a JSON text, counted by its brackets outside strings (independent of the walk). */
function textDepth(text: string): number {
  let depth = 0;
  let max = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
    } else if (ch === '"') inString = true;
    else if (ch === '[' || ch === '{') max = Math.max(max, ++depth);
    else if (ch === ']' || ch === '}') depth--;
  }
  return max;
}

const MAX_DEPTH = 64;
const ODD_UNITS = [
  '\ud800',
  '\udfff',
  '\ud83d',
  '\u202e',
  '\u202c',
  '\u200f',
  '\u200b',
  '\u200d',
  '\u2028',
  '\u0000',
  '\u0007',
  '\ufeff',
  '\ufffd',
  'é',
  'e\u0301',
  'ß',
  '€',
  '😀',
  '👩‍👩‍👧',
  '中',
  '"',
  '\\',
  '/',
  '~',
  ' ',
];
/** Strings of odd code units: lone surrogates, bidi controls, zero-width, NUL, emoji, combining marks. */
const oddString = fc
  .array(fc.oneof(fc.constantFrom(...ODD_UNITS), fc.string({ maxLength: 3 })), { maxLength: 12 })
  .map((a) => a.join(''));
/** Numbers as JSON text, beyond and near a double's range and precision. */
const hugeNumber = fc.oneof(
  fc.constantFrom(
    '1e400',
    '-1e400',
    '1E+309',
    '1e308',
    '-1.7976931348623157e308',
    '5e-324',
    '1e-400',
    '-0',
    '0.0',
    '12345678901234567890',
    '9007199254740993',
    '1E+2',
  ),
  fc.double({ noNaN: true, noDefaultInfinity: true }).map((d) => JSON.stringify(d)),
  fc.stringMatching(/^-?[1-9][0-9]{15,30}$/),
);
/** Nesting near and beyond the limit, arrays and objects mixed, as JSON text. */
const deepValue = fc
  .record({
    levels: fc.oneof(
      fc.integer({ min: MAX_DEPTH - 4, max: MAX_DEPTH + 2 }),
      fc.integer({ min: 1, max: 200 }),
      fc.constantFrom(1000, 5000),
    ),
    objects: fc.boolean(),
    key: fc.constantFrom('k', 'a/b', 'm~n', '', '__proto__', '\ud800'),
    leaf: fc.oneof(
      fc.constant('0'),
      hugeNumber,
      oddString.map((v) => JSON.stringify(v)),
    ),
  })
  .map(({ levels, objects, key, leaf }) => {
    const open = objects ? `{${JSON.stringify(key)}:` : '[';
    return `${open.repeat(levels)}${leaf}${(objects ? '}' : ']').repeat(levels)}`;
  });
const hostileValue = fc.oneof(
  deepValue,
  hugeNumber,
  oddString.map((v) => JSON.stringify(v)),
  fc.array(hugeNumber, { maxLength: 5 }).map((a) => `[${a.join(',')}]`),
);

/** Where a hostile value goes in a valid payload (JSON text of the payload with one member added). */
const hostileSpot = fc.constantFrom(
  'top',
  'channel',
  'call.channel',
  'keyPoints',
  'users',
  'chunk',
  'summary.content',
  'call.id',
  'key',
  'call.duration',
);

function placeHostile(payload: Record<string, any>, spot: string, value: string, odd: string): string {
  const mark = '\u0000hostile\u0000';
  switch (spot) {
    case 'top':
      payload.extra = mark;
      break;
    case 'channel':
      payload.channel = mark;
      break;
    case 'call.channel':
      payload.call.channel = mark;
      break;
    case 'keyPoints':
      payload.assist = { summary: { content: 's', keyPoints: [mark, 'plain'], topics: [] } };
      break;
    case 'users':
      payload.call.users = [mark];
      break;
    case 'chunk':
      payload.assist = {
        transcription: {
          content: 't',
          chunks: [{ speaker: 'caller', startTime: 0, endTime: 1, content: 'x', extra: mark }],
        },
      };
      break;
    case 'summary.content':
      payload.assist = { summary: { content: mark, keyPoints: [], topics: [] } };
      break;
    case 'call.id':
      payload.call.id = mark;
      break;
    case 'call.duration':
      // Beside a readable endTime: not needed, so never a refusal (README, "Bad times").
      payload.call.duration = mark;
      break;
    case 'key':
      payload[odd] = mark;
      break;
  }
  // A function, not the string: a value holding `$&` or `$'` would be read as a replacement pattern
  // and break the JSON (a generated "$&" did, once, in CI).
  return JSON.stringify(payload).replace(JSON.stringify(mark), () => value);
}

/** How the body goes on the wire: its bytes and content type; latin1 only for text it can hold. */
function encode(text: string, how: string): { bytes: Uint8Array; type: string; decoded: string } {
  switch (how) {
    case 'utf-8-bom':
      return {
        bytes: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(text)]),
        type: 'application/json',
        decoded: text,
      };
    case 'utf-16le':
      return {
        bytes: Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')]),
        type: 'application/json; charset=utf-16le',
        decoded: text,
      };
    case 'latin1':
      // Bytes 0x80-0x9F are windows-1252 characters (€, “…) when declared latin1: leave those out.
      if ([...text].every((ch) => ch.charCodeAt(0) < 0x80 || (ch.charCodeAt(0) >= 0xa0 && ch.charCodeAt(0) <= 0xff)))
        return { bytes: Buffer.from(text, 'latin1'), type: 'application/json; charset="ISO-8859-1"', decoded: text };
      return encode(text, 'utf-8');
    default:
      return { bytes: Buffer.from(text), type: 'application/json; charset=utf-8', decoded: text };
  }
}

describe('ingress under fuzzing', () => {
  const prefix = uniquePrefix('fuzz');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const acceptor = new InboundAcceptor(new InboundLog(redis, prefix), { dedupeWindowMs: 60_000, timeoutMs: 5000 });
  const remoteAddress = (c: Context) => c.req.header('x-test-peer') ?? PLATFORM_IP;
  const plain = createIngressApp({ webhook: webhook(), acceptor, ready: async () => true, log, remoteAddress });
  // Behind one trusted proxy, with a shared secret: X-Forwarded-For and the token are fuzzed too.
  const guarded = createIngressApp({
    webhook: webhook({
      trustedProxies: ['10.0.0.1'],
      trustProxyHops: 1,
      authHeader: 'x-callsync-token',
      authTokens: ['s3cret-token'],
    }),
    acceptor,
    ready: async () => true,
    log,
    remoteAddress: () => '10.0.0.1',
  });
  const statuses = new Map<number, number>();
  const count = (s: number) => statuses.set(s, (statuses.get(s) ?? 0) + 1);
  /** Every 202 of the valid-call properties: its id, and the body text it must be stored with (null for a duplicate). */
  const acknowledged: { id: string; text: string | null }[] = [];
  let serial = 0;

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
        count(
          await checkAnswer(plain, {
            method: 'POST',
            path: '/webhooks/ai-agent',
            headers: { ...headers, 'content-type': type },
            body,
          }),
        );
      }),
      { numRuns: RUNS },
    );
  });

  test('valid payloads with fields broken or removed: 202 or 400 with a pointer, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        mutatedPayload,
        fc.option(fc.stringMatching(/^[A-Za-z0-9._:@%-]{0,40}$/), { nil: undefined }),
        async (payload, agent) => {
          const path = agent === undefined ? '/webhooks/ai-agent' : `/webhooks/ai-agent/${agent}`;
          const body = JSON.stringify(payload);
          const status = await checkAnswer(
            plain,
            { method: 'POST', path, headers: { 'content-type': 'application/json' }, body },
            (a) => acknowledged.push({ id: a.id, text: a.duplicate ? null : body }),
          );
          assert.ok([202, 400, 404].includes(status), `status ${status}`);
          count(status);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test('deep structures, huge numbers and odd unicode in any charset: within the limits 202 unless in the call id, never 5xx', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.boolean(),
        hostileSpot,
        hostileValue,
        oddString,
        fc.constantFrom('utf-8', 'utf-8-bom', 'utf-16le', 'latin1'),
        async (minimal, spot, value, odd, how) => {
          const id = `fz-hostile-${++serial}`;
          const text = placeHostile(minimal ? minimalPayload(id) : webhookPayload(id), spot, value, odd);
          const wire = encode(text, how);
          const depth = textDepth(text);
          let pointer: string | null = null;
          const status = await checkAnswer(
            plain,
            {
              method: 'POST',
              path: '/webhooks/ai-agent/fz-agent',
              headers: { 'content-type': wire.type },
              body: wire.bytes,
            },
            (a) => acknowledged.push({ id: a.id, text: a.duplicate ? null : wire.decoded }),
            (p) => (pointer = p),
          );
          // 413 exactly when the bytes are over the body limit (deep UTF-16 bodies can be).
          assert.equal(
            status === 413,
            wire.bytes.byteLength > BODY_LIMIT,
            `status ${status} for ${wire.bytes.byteLength} bytes`,
          );
          assert.ok(status === 202 || status === 400 || status === 413, `status ${status} for ${text.slice(0, 200)}`);
          // Never refused for what identifies nothing: within the shape limits, whatever the value
          // anywhere but the call id (odd text, huge numbers, nesting up to the limit), the call is accepted.
          const withinLimits = findLimitViolation(JSON.parse(text)) === null;
          if (withinLimits && spot !== 'call.id' && status !== 413)
            assert.equal(status, 202, `refused at ${pointer}: ${text.slice(0, 200)}`);
          // Beyond the depth limit is always refused, with a pointer to the first container past it.
          if (depth > MAX_DEPTH && status !== 413) {
            assert.equal(status, 400, `depth ${depth} accepted`);
            assert.equal(pointer!.split('/').length - 1, MAX_DEPTH, `pointer ${pointer!.slice(0, 100)}`);
          }
          count(status);
        },
      ),
      { numRuns: RUNS },
    );
  });

  test('every call acknowledged is in the inbound log, its body stored exactly as sent', async () => {
    assert.ok(
      acknowledged.length > RUNS / 4,
      `only ${acknowledged.length} acknowledged: the properties above did not run`,
    );
    const stored = new Map((await new InboundLog(redis, prefix).entries()).map((e) => [e.id, e.text]));
    for (const { id, text } of acknowledged) {
      const entry = stored.get(id);
      assert.ok(entry !== undefined, `acknowledged ${id} is not in the inbound log`);
      if (text !== null) assert.ok(entry.endsWith(`"raw":${text}}`), `${id} is stored as sent`);
      // What the fan-out does next: parse the entry and serialize it again, without a stack overflow.
      assert.doesNotThrow(() => JSON.stringify(JSON.parse(entry)), id);
    }
  });

  test('methods, paths, peers, forwarded-for chains and tokens: 4xx or 202, never 5xx', async () => {
    const method = fc.constantFrom('GET', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'POST', 'POST', 'POST');
    const path = fc.oneof(
      fc.constantFrom(
        '/webhooks/ai-agent',
        '/webhooks/ai-agent/',
        '/webhooks/ai-agent/a/b',
        '/webhooks/AI-agent',
        '/webhooks/ai-agent?x=1',
        '//webhooks/ai-agent',
      ),
      fc.stringMatching(/^[A-Za-z0-9._~%-]{1,60}$/).map((s) => `/webhooks/ai-agent/${s}`),
    );
    const forwarded = fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), headerValue), { maxLength: 4 }).map((a) => a.join(', '));
    const token = fc.oneof(fc.constant('s3cret-token'), headerValue);
    await fc.assert(
      fc.asyncProperty(
        method,
        path,
        forwarded,
        token,
        fc.boolean(),
        fc.integer({ min: 0, max: 1e9 }),
        async (m, p, xff, tok, useGuarded, id) => {
          const headers: Record<string, string> = {
            'content-type': 'application/json',
            'x-forwarded-for': xff,
            'x-callsync-token': tok,
          };
          if (!useGuarded) headers['x-test-peer'] = xff.split(',')[0]?.trim() || PLATFORM_IP;
          const body = m === 'GET' ? null : JSON.stringify(minimalPayload(`fz-route-${id}`));
          count(await checkAnswer(useGuarded ? guarded : plain, { method: m, path: p, headers, body }));
        },
      ),
      { numRuns: RUNS },
    );
  });

  test('the heap stays flat over thousands of bad requests', async () => {
    const round = async () =>
      fc.assert(
        fc.asyncProperty(junkBody, contentType, async (body, type) => {
          await checkAnswer(plain, {
            method: 'POST',
            path: '/webhooks/ai-agent',
            headers: { 'content-type': type },
            body,
          });
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
