// The ingress edge against hostile input: shape limits (nesting, entries, values, numbers beyond a
// double), charsets and byte-order marks, ids that would collide, odd unicode. Through app.request()
// with a real Redis inbound log (what is stored, not only the status), then end to end over a real
// port into the archive folder.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { createIngressApp } from '../src/ingress/app.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { charsetParameter } from '../src/charset.js';
import { encodingOf, firstInvalidUtf8 } from '../src/ingress/charset.js';
import { DEFAULT_JSON_LIMITS, findLimitViolation, MAX_POINTER_CHARS } from '../src/ingress/middleware/json-limits.js';
import { createLogger } from '../src/log.js';
import { callKey, callKeySegment, type CanonicalCall } from '../src/model/call.js';
import { renderArchiveJson, renderTranscriptText } from '../src/sinks/archive/render.js';
import { InboundLog } from '../queues/inbound.js';
import { ConfigError, loadConfig, type Config } from '../src/config/index.js';
import { minimalPayload, webhookPayload } from './support/calls.js';
import { webhookConfig } from './support/webhook-config.js';
import { startTestCallsync, type TestCallsync } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const log = createLogger({ level: 'silent' });

const webhook = webhookConfig;

/** `n` arrays inside each other around `inner`. */
const nest = (n: number, inner = '') => `${'['.repeat(n)}${inner}${']'.repeat(n)}`;
/** The payload's JSON with one more top-level member, written as JSON text. */
const withMember = (payload: object, name: string, json: string) =>
  `${JSON.stringify(payload).slice(0, -1)},${JSON.stringify(name)}:${json}}`;
/** The pointer of `n` nested first elements under `base`. */
const zeros = (base: string, n: number) => `${base}${'/0'.repeat(n)}`;

interface ErrorBody {
  errors: { status: number; title: string; detail: string; source: { pointer: string } }[];
}

describe('json limits: the walk', () => {
  test('depth: the body is level 1; the container one level too deep is named', () => {
    assert.equal(findLimitViolation(JSON.parse(nest(64))), null);
    const v = findLimitViolation(JSON.parse(nest(65)));
    assert.equal(v?.pointer, zeros('', 64));
    assert.match(v!.detail, /nesting deeper than 64 levels/);
    assert.equal(findLimitViolation({ a: { b: [1] } }, { ...DEFAULT_JSON_LIMITS, maxDepth: 2 })?.pointer, '/a/b');
  });

  test('a million levels: no recursion, no stack overflow', () => {
    const deep = JSON.parse(nest(1_000_000)) as unknown;
    assert.equal(findLimitViolation(deep)?.pointer, zeros('', 64));
    assert.equal(findLimitViolation(deep, { ...DEFAULT_JSON_LIMITS, maxDepth: 2_000_000 })?.detail, undefined);
  });

  test('entries of one array or object, and values in all', () => {
    const limits = { maxDepth: 64, maxEntries: 3, maxValues: 10 };
    assert.equal(findLimitViolation({ a: [1, 2, 3] }, limits), null);
    assert.deepEqual(findLimitViolation({ a: [1, 2, 3, 4] }, limits), {
      pointer: '/a',
      detail: 'array with 4 elements (at most 3)',
    });
    assert.deepEqual(findLimitViolation({ a: { w: 1, x: 2, y: 3, z: 4 } }, limits), {
      pointer: '/a',
      detail: 'object with 4 keys (at most 3)',
    });
    assert.equal(findLimitViolation([1, 2, 3, 4], limits)?.pointer, '');
    // 1 (root) + 3 arrays + 6 numbers = 10 values: fine; one more is the 11th, at /2/2.
    assert.equal(
      findLimitViolation(
        [
          [1, 2],
          [3, 4],
          [5, 6],
        ],
        limits,
      ),
      null,
    );
    assert.deepEqual(
      findLimitViolation(
        [
          [1, 2],
          [3, 4],
          [5, 6, 7],
        ],
        limits,
      ),
      { pointer: '/2/2', detail: 'more than 10 values in the body' },
    );
  });

  test('numbers beyond a double are refused where they are; huge finite ones pass', () => {
    assert.equal(findLimitViolation(JSON.parse('{"a":[1,{"b":1e400}]}'))?.pointer, '/a/1/b');
    assert.equal(findLimitViolation(JSON.parse('-1e400'))?.pointer, '');
    assert.equal(findLimitViolation(JSON.parse('[1e308, -1.7e308, 5e-324, 12345678901234567890]')), null);
  });

  test('pointers escape ~ and / (RFC 6901); own __proto__ keys are walked like any key', () => {
    const body = JSON.parse(`{"a/b~c":{"__proto__":${nest(70)}}}`) as unknown;
    assert.equal(findLimitViolation(body)?.pointer, zeros('/a~1b~0c/__proto__', 62));
  });

  test('a huge pointer is cut to its first whole segments, and the detail says so', () => {
    const long = 'k'.repeat(100);
    let text = '1';
    for (let i = 0; i < 70; i++) text = `{"${long}":${text}}`;
    const v = findLimitViolation(JSON.parse(text));
    const kept = Math.floor(MAX_POINTER_CHARS / (long.length + 1));
    assert.equal(v?.pointer, `/${long}`.repeat(kept));
    assert.match(v!.detail, new RegExp(`the pointer names the first ${kept} of 64 levels`));
    const huge = JSON.parse(`{"${'x'.repeat(5000)}":${nest(70)}}`) as unknown;
    const cut = findLimitViolation(huge);
    assert.equal(cut?.pointer, '');
    assert.match(cut!.detail, /first 0 of 64 levels/);
  });
});

describe('json limits: configuration', () => {
  test('WEBHOOK_MAX_DEPTH / _ENTRIES / _VALUES reach the ingress; defaults 64, 100,000, 1,000,000; depth at most 1000', async () => {
    assert.deepEqual(loadConfig({}).webhook.jsonLimits, DEFAULT_JSON_LIMITS);
    const config = loadConfig({ WEBHOOK_MAX_DEPTH: '3', WEBHOOK_MAX_ENTRIES: '10', WEBHOOK_MAX_VALUES: '1000' });
    assert.deepEqual(config.webhook.jsonLimits, { maxDepth: 3, maxEntries: 10, maxValues: 1000 });
    const app = createIngressApp({
      webhook: { ...config.webhook, allowedIps: '*' },
      acceptor: { accept: async () => ({ id: 'not-stored', duplicate: false }) },
      ready: async () => true,
      log,
    });
    const send = (extra: string) =>
      app.request('/webhooks/ai-agent', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: withMember(minimalPayload('cfg'), 'x', extra),
      });
    assert.equal((await send(nest(2))).status, 202); // the body is level 1, x level 2, its element 3
    const deep = await send(nest(3));
    assert.equal(deep.status, 400);
    assert.equal(((await deep.json()) as ErrorBody).errors[0]!.source.pointer, '/x/0/0');
    assert.equal((await send('[1,2,3,4,5,6,7,8,9,10]')).status, 202);
    assert.equal((await send('[1,2,3,4,5,6,7,8,9,10,11]')).status, 400);
    for (const env of [{ WEBHOOK_MAX_DEPTH: '1001' }, { WEBHOOK_MAX_DEPTH: '0' }, { WEBHOOK_MAX_ENTRIES: 'many' }]) {
      assert.throws(
        () => loadConfig(env),
        (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.startsWith(Object.keys(env)[0]!)),
        JSON.stringify(env),
      );
    }
  });
});

describe('charset parameter', () => {
  test('read case-insensitively, quoted or not, among other parameters', () => {
    assert.equal(charsetParameter('application/json'), null);
    assert.equal(charsetParameter('application/json; charset=utf-8'), 'utf-8');
    assert.equal(charsetParameter('application/json;CHARSET=Latin1'), 'Latin1');
    assert.equal(charsetParameter('application/json; charset="ISO-8859-1"'), 'ISO-8859-1');
    assert.equal(charsetParameter('application/json; foo="a;charset=x"; charset=utf-16le'), 'utf-16le');
    assert.equal(charsetParameter('application/json; foo=bar ; charset = windows-1252 ; x=y'), 'windows-1252');
    assert.equal(charsetParameter('application/json; charset='), '');
    assert.equal(charsetParameter('application/json; charset="a\\"b"'), 'a"b');
  });

  test('labels resolve as WHATWG matches them: case-insensitive, ASCII whitespace around ignored', () => {
    assert.equal(encodingOf('application/json'), 'utf-8');
    assert.equal(encodingOf('application/json; charset=" UTF8\t"'), 'utf-8');
    assert.equal(encodingOf('application/json; charset=ISO_8859-1'), 'windows-1252');
    assert.equal(encodingOf('application/json; charset=US-ASCII'), 'windows-1252');
    assert.equal(encodingOf('application/json; charset=utf-16'), 'utf-16le');
    assert.throws(() => encodingOf('application/json; charset="utf-8\u00a0"'), /415|not supported/);
  });

  test('the first invalid UTF-8 byte is found (overlong, surrogates, truncated, beyond U+10FFFF)', () => {
    const at = (bytes: number[]) => firstInvalidUtf8(Uint8Array.from(bytes));
    assert.equal(at([...Buffer.from('ok ü € 😀')]), -1);
    assert.equal(at([0x61, 0xff]), 1);
    assert.equal(at([0x61, 0xc0, 0x80]), 1); // overlong NUL
    assert.equal(at([0x61, 0x62, 0xed, 0xa0, 0x80]), 2); // a UTF-16 surrogate, CESU-8 style
    assert.equal(at([0xe2, 0x82]), 0); // cut short
    assert.equal(at([0xf4, 0x90, 0x80, 0x80]), 0); // beyond U+10FFFF
    assert.equal(at([0x4d, 0xfc, 0x6c]), 1); // latin1 "Mül"
  });
});

describe('ingress edge (app.request, real Redis inbound log)', () => {
  const prefix = uniquePrefix('edge');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const inbound = new InboundLog(redis, prefix);
  const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1500 });
  const makeApp = (over: Partial<Config['webhook']> = {}) =>
    createIngressApp({ webhook: webhook(over), acceptor, ready: async () => true, log });
  const app = makeApp();

  const post = (body: string | Uint8Array, type = 'application/json', target = app) =>
    target.request('/webhooks/ai-agent/edge', { method: 'POST', headers: { 'content-type': type }, body });
  /** Posts, expects a 202, and returns the stored inbound log entry's text and call. */
  const accepted = async (body: string | Uint8Array, type = 'application/json') => {
    const res = await post(body, type);
    const answer = await res.text();
    assert.equal(res.status, 202, answer);
    const { id } = JSON.parse(answer) as { id: string };
    const entry = await inbound.find(id);
    assert.ok(entry?.call, 'the entry is in the inbound log and readable');
    return { text: entry.text, call: entry.call };
  };
  const refused = async (body: string | Uint8Array, status: number, type = 'application/json', target = app) => {
    const res = await post(body, type, target);
    const answer = (await res.json()) as ErrorBody;
    assert.equal(res.status, status, JSON.stringify(answer).slice(0, 300));
    assert.equal(answer.errors.length, 1);
    assert.equal(answer.errors[0]!.status, status);
    return answer.errors[0]!;
  };
  const storedIds = async () => new Set((await inbound.entries()).map((e) => e.call?.callId));

  before(async () => {
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('a latin1 body is decoded as latin1: "Müller" is stored as "Müller", verbatim', async () => {
    const payload = webhookPayload('latin-1', (p) => {
      p.call.users[0].lastName = 'Müller';
      p.call.users[0].fullName = 'Jürgen Müller';
      p.assist.summary.content = 'Grüße aus Köln, 5 € Gebühr';
    });
    const json = JSON.stringify(payload);
    // windows-1252 is what WHATWG decodes latin1 as: € is byte 0x80 there, so the € survives too.
    const bytes = Uint8Array.from(json, (ch) => (ch === '€' ? 0x80 : ch.charCodeAt(0)));
    assert.ok(
      bytes.every((b, i) => json[i] === '€' || json.charCodeAt(i) === b),
      'one byte per character',
    );
    for (const [i, type] of [
      'application/json; charset=latin1',
      'application/json; charset="ISO-8859-1"',
      'application/json;Charset=windows-1252',
    ].entries()) {
      payload.call.id = `latin-${i}`;
      const body = JSON.stringify(payload);
      const { text, call } = await accepted(
        Uint8Array.from(body, (ch) => (ch === '€' ? 0x80 : ch.charCodeAt(0))),
        type,
      );
      assert.equal(call.users[0]?.lastName, 'Müller', type);
      assert.equal(call.summary?.content, 'Grüße aus Köln, 5 € Gebühr', type);
      assert.ok(text.endsWith(`"raw":${body}}`), 'the original is stored as the decoded text, verbatim');
    }
  });

  test('a body that is not UTF-8 and says nothing is a 400 naming the byte, not stored as "M\uFFFDller"', async () => {
    const json = JSON.stringify(webhookPayload('latin-undeclared', (p) => (p.call.users[0].lastName = 'Müller')));
    const err = await refused(Buffer.from(json, 'latin1'), 400);
    assert.match(
      err.detail,
      new RegExp(`not valid UTF-8 text \\(at byte ${json.indexOf('ü')}\\); declare the charset`),
    );
    assert.equal(err.source.pointer, '/');
    // A UTF-16 surrogate written as three bytes (CESU-8) is not UTF-8 either, even when declared.
    const cesu = Buffer.concat([
      Buffer.from(JSON.stringify(minimalPayload('cesu')).slice(0, -1) + ',"x":"'),
      Buffer.from([0xed, 0xa0, 0x80]),
      Buffer.from('"}'),
    ]);
    assert.match(
      (await refused(cesu, 400, 'application/json; charset=utf-8')).detail,
      /not valid UTF-8 text \(at byte \d+\)/,
    );
    const ids = await storedIds();
    assert.ok(!ids.has('latin-undeclared') && !ids.has('cesu'));
  });

  test('a UTF-8 byte-order mark is accepted and not stored; UTF-16 with its mark, or declared, too', async () => {
    const json = (id: string) => JSON.stringify(webhookPayload(id, (p) => (p.call.users[0].lastName = 'Müller 😀')));
    for (const type of ['application/json', 'application/json; charset=utf-8']) {
      const { text, call } = await accepted(`\uFEFF${json(`bom-${type}`)}`, type);
      assert.equal(call.callId, `bom-${type}`);
      assert.ok(text.endsWith(`"raw":${json(`bom-${type}`)}}`), 'stored without the mark');
    }
    const utf16le = (s: string) => Buffer.from(s, 'utf16le');
    const utf16be = (s: string) => utf16le(s).swap16();
    const cases: [string, Buffer, string][] = [
      [
        'u16-le-mark',
        Buffer.concat([Buffer.from([0xff, 0xfe]), utf16le(json('u16-le-mark'))]),
        'application/json; charset=utf-16le',
      ],
      ['u16-le-bare', utf16le(json('u16-le-bare')), 'application/json; charset=UTF-16LE'],
      ['u16-be-bare', utf16be(json('u16-be-bare')), 'application/json; charset=utf-16be'],
      [
        'u16-be-mark',
        Buffer.concat([Buffer.from([0xfe, 0xff]), utf16be(json('u16-be-mark'))]),
        'application/json; charset=utf-16',
      ],
      // The mark wins over the label (and over no label), as WHATWG decodes.
      [
        'u16-le-mark-only',
        Buffer.concat([Buffer.from([0xff, 0xfe]), utf16le(json('u16-le-mark-only'))]),
        'application/json',
      ],
    ];
    for (const [id, bytes, type] of cases) {
      const { text, call } = await accepted(bytes, type);
      assert.equal(call.users[0]?.lastName, 'Müller 😀', id);
      assert.ok(text.endsWith(`"raw":${json(id)}}`), id);
    }
    // An unpaired surrogate in UTF-16 is not text.
    assert.match(
      (
        await refused(
          Buffer.concat([utf16le('{"a":"'), Buffer.from([0x00, 0xd8]), utf16le('"}')]),
          400,
          'application/json; charset=utf-16le',
        )
      ).detail,
      /not valid UTF-16LE/,
    );
  });

  test('an unsupported charset is a 415 naming it, before the body is read', async () => {
    for (const charset of ['shift_jis', 'klingon', 'utf-32', 'x-user-defined', '']) {
      const err = await refused(
        JSON.stringify(minimalPayload(`cs-${charset}`)),
        415,
        `application/json; charset="${charset}"`,
      );
      assert.equal(err.title, 'Unsupported Media Type');
      assert.ok(err.detail.startsWith(`charset ${JSON.stringify(charset)} is not supported`), err.detail);
      assert.match(err.detail, /utf-8/);
    }
    const ids = await storedIds();
    assert.ok(!ids.has('cs-shift_jis') && !ids.has('cs-klingon'));
  });

  test('a compressed body (Content-Encoding) is a 415 naming the coding, not a charset error; identity is read as it is', async () => {
    const { gzipSync } = await import('node:zlib');
    const text = JSON.stringify(minimalPayload('ce-gzip'));
    for (const [coding, body] of [
      ['gzip', gzipSync(text)],
      ['br', text],
      ['gzip, identity', text],
    ] as const) {
      const res = await app.request('/webhooks/ai-agent/edge', {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-encoding': coding },
        body: typeof body === 'string' ? body : new Uint8Array(body),
      });
      const answer = (await res.json()) as ErrorBody;
      assert.equal(res.status, 415, `${coding}: ${JSON.stringify(answer)}`);
      assert.equal(answer.errors[0]!.source.pointer, 'content-encoding');
      assert.match(answer.errors[0]!.detail, /content encoding .* is not supported: send the body uncompressed/);
    }
    assert.ok(!(await storedIds()).has('ce-gzip'));
    const plain = await app.request('/webhooks/ai-agent/edge', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-encoding': 'Identity' },
      body: JSON.stringify(minimalPayload('ce-identity')),
    });
    assert.equal(plain.status, 202, await plain.text());
  });

  test('5,000 nested arrays in an unknown field: 400 pointing where the nesting passed 64 levels, nothing stored', async () => {
    const err = await refused(withMember(minimalPayload('deep-unknown'), 'x', nest(5000)), 400);
    assert.equal(err.title, 'Bad Request');
    assert.match(err.detail, /nesting deeper than 64 levels/);
    assert.equal(err.source.pointer, zeros('/x', 63));
    assert.ok(!(await storedIds()).has('deep-unknown'));
  });

  test('100,000 levels in channel or assist.summary.keyPoints: 400 with a pointer, not 500', async () => {
    const channel = await refused(withMember(minimalPayload('deep-channel'), 'channel', nest(100_000)), 400);
    assert.equal(channel.source.pointer, zeros('/channel', 63));
    const inCall = JSON.stringify(minimalPayload('deep-call-channel')).replace(
      '"users":[]',
      `"users":[],"channel":${nest(100_000)}`,
    );
    assert.equal((await refused(inCall, 400)).source.pointer, zeros('/call/channel', 62));
    const keyPoints = JSON.stringify(webhookPayload('deep-keypoints')).replace(
      '"keyPoints":[',
      `"keyPoints":[${nest(100_000)},`,
    );
    assert.equal((await refused(keyPoints, 400)).source.pointer, zeros('/assist/summary/keyPoints', 61));
  });

  test('nesting up to the limit is accepted and stored verbatim; one more level is refused', async () => {
    // The body is level 1, "x" level 2: 63 arrays under it reach level 64.
    const atLimit = withMember(webhookPayload('depth-64'), 'x', nest(63, '"bottom"'));
    const { text } = await accepted(atLimit);
    assert.ok(text.endsWith(`"raw":${atLimit}}`));
    const over = withMember(webhookPayload('depth-65'), 'x', nest(64, '"bottom"'));
    assert.equal((await refused(over, 400)).source.pointer, zeros('/x', 63));
  });

  test('too many elements, keys or values: 400 with a pointer to where the limit was hit', async () => {
    const elements = (n: number) => `[${new Array<string>(n).fill('0').join(',')}]`;
    await accepted(withMember(minimalPayload('entries-100000'), 'x', elements(100_000)));
    const err = await refused(withMember(minimalPayload('entries-100001'), 'x', elements(100_001)), 400);
    assert.equal(err.detail, 'request body: array with 100001 elements (at most 100000)');
    assert.equal(err.source.pointer, '/x');
    // Smaller limits through the configuration.
    const fewKeys = makeApp({ jsonLimits: { maxEntries: 20 } });
    const keys = JSON.stringify(
      webhookPayload(
        'keys',
        (p) => (p.assist.extra = Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, i]))),
      ),
    );
    const tooManyKeys = await refused(keys, 400, 'application/json', fewKeys);
    assert.deepEqual(tooManyKeys.source, { pointer: '/assist/extra' });
    assert.match(tooManyKeys.detail, /object with 21 keys \(at most 20\)/);
    // The v2 fixture holds 60 values; the 51st is the second transcript chunk.
    const fewValues = makeApp({ jsonLimits: { maxValues: 50 } });
    assert.equal(
      (
        await post(
          JSON.stringify(webhookPayload('values-60')),
          'application/json',
          makeApp({ jsonLimits: { maxValues: 60 } }),
        )
      ).status,
      202,
    );
    const values = await refused(JSON.stringify(webhookPayload('values')), 400, 'application/json', fewValues);
    assert.match(values.detail, /more than 50 values in the body/);
    assert.equal(values.source.pointer, '/assist/transcription/chunks/1');
  });

  test('numbers beyond a double are a 400 where they are; huge finite numbers are stored verbatim', async () => {
    const inf = await refused(withMember(minimalPayload('inf'), 'x', '{"y":[1,2,-1e400]}'), 400);
    assert.equal(inf.source.pointer, '/x/y/2');
    assert.match(inf.detail, /beyond the range of a double/);
    assert.equal(
      (await refused(JSON.stringify(minimalPayload('inf-duration')).replace('"duration":60', '"duration":1e400'), 400))
        .source.pointer,
      '/call/duration',
    );
    const huge = withMember(
      minimalPayload('huge-finite'),
      'x',
      '[1e308,-1.7976931348623157e308,5e-324,12345678901234567890,1E+2]',
    );
    const { text } = await accepted(huge);
    assert.ok(text.endsWith(`"raw":${huge}}`), 'stored as sent, digits and all');
  });

  test('call and agent ids that would collide are refused: numbers beyond 2^53, lone surrogates', async () => {
    // Both arrive as 12345678901234567000 (and both "a\ud800" and "a\udbff" hash as "a\uFFFD"):
    // the second call would be answered as a duplicate of the first and never delivered.
    for (const id of ['12345678901234567890', '12345678901234567891', '"a\\ud800"', '"a\\udbff"', '1.5']) {
      const body = JSON.stringify(minimalPayload('ID')).replace('"ID"', id);
      const err = await refused(body, 400);
      assert.equal(err.source.pointer, '/call/id', id);
    }
    const agent = JSON.stringify({ ...minimalPayload('agent-surrogate'), agentId: 'PLACEHOLDER' }).replace(
      '"PLACEHOLDER"',
      '"x\\udc00"',
    );
    // The payload's agent id is part of the call key when it names the call: one that cannot be an
    // id is refused like a call id (read as absent, two agents' calls could share a key).
    const res = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: agent,
    });
    assert.equal(res.status, 400);
    assert.equal(((await res.json()) as ErrorBody).errors[0]!.source.pointer, '/agentId');
    // A numeric id within 2^53 and a surrogate pair are fine.
    const safe = await accepted(JSON.stringify(minimalPayload('ID')).replace('"ID"', '9007199254740991'));
    assert.equal(safe.call.callId, '9007199254740991');
    assert.equal((await accepted(JSON.stringify(minimalPayload('id-😀')))).call.callId, 'id-😀');
  });

  test('lone surrogates elsewhere are stored as sent and archived faithfully', async () => {
    const body = withMember(webhookPayload('lone-text'), '\ud800key', '"\\udfff"').replace(
      '"content":"The caller',
      '"content":"\\ud83d The caller',
    );
    const { text, call } = await accepted(body);
    assert.ok(text.endsWith(`"raw":${body}}`), 'the escapes are stored verbatim');
    assert.ok(call.summary?.content.startsWith('\ud83d The caller'));
    // The archive's JSON document escapes them (well-formed JSON.stringify), so it reads back the same.
    const doc = JSON.parse(renderArchiveJson(call as CanonicalCall)) as {
      original: Record<string, unknown>;
      call: CanonicalCall;
    };
    assert.equal(doc.original['\ud800key'], '\udfff');
    assert.ok(doc.call.summary?.content.startsWith('\ud83d The caller'));
    assert.doesNotThrow(() => renderTranscriptText(call as CanonicalCall));
  });

  test('__proto__ keys are stored as sent, never reach the record, and are walked', async () => {
    const body = JSON.stringify(minimalPayload('proto'))
      .replace('{"version"', '{"__proto__":{"assist":{"summary":{"content":"injected"}}},"version"')
      .replace('"users":[]', '"users":[],"__proto__":{"channel":"injected","id":"other"}');
    const { text, call } = await accepted(body);
    assert.ok(text.endsWith(`"raw":${body}}`));
    assert.equal(call.callId, 'proto');
    assert.equal(call.summary, null);
    assert.equal(call.channel, null);
    assert.equal(({} as Record<string, unknown>).channel, undefined, 'Object.prototype untouched');
    const raw = JSON.parse(text).raw as object;
    assert.ok(Object.hasOwn(raw, '__proto__'));
    assert.equal(
      (await refused(withMember(minimalPayload('proto-deep'), '__proto__', nest(100)), 400)).source.pointer,
      zeros('/__proto__', 63),
    );
  });

  test('odd but valid unicode (RTL override, zero-width, NUL, emoji, combining) is stored exactly', async () => {
    const odd = [
      '\u202Eevil\u202C',
      'a\u200Bb\u200D',
      'nul\u0000byte',
      '😀👩‍👩‍👧',
      'e\u0301',
      '\uFEFFmid-bom',
      '\u2028\u2029',
    ];
    const payload = webhookPayload('odd-unicode', (p) => {
      p.assist.summary.keyPoints = odd;
      p.assist.transcription.chunks[0].content = odd.join(' ');
      p[odd.join('|')] = odd;
    });
    const body = JSON.stringify(payload);
    const { text, call } = await accepted(body);
    assert.ok(text.endsWith(`"raw":${body}}`));
    assert.deepEqual(call.summary?.keyPoints, odd);
    assert.deepEqual(call.raw, payload);
  });
});

describe('ingress edge end to end (real port, fan-out, archive folder)', () => {
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-edge-'));
    cs = await startTestCallsync({ ARCHIVE_DIR: dir });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const send = async (body: string | Uint8Array, type = 'application/json') => {
    const res = await fetch(`${cs.url}/webhooks/ai-agent/edge`, {
      method: 'POST',
      headers: { 'content-type': type },
      body,
    });
    return { status: res.status, body: (await res.json()) as Record<string, any> };
  };
  /** Archived files by name, found wherever the archive put them. */
  const archived = async (): Promise<Map<string, string>> => {
    const files = new Map<string, string>();
    for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
      // Skip the archive's temp files (renamed into place as they are found).
      if (!entry.isFile() || entry.name.endsWith('.tmp')) continue;
      const text = await readFile(join(entry.parentPath, entry.name), 'utf8').catch(() => null);
      if (text !== null) files.set(entry.name, text);
    }
    return files;
  };
  const archivedCall = (callId: string) =>
    waitFor(
      async () => {
        const files = await archived();
        // Objects are named `<callId>-<16 hex of the call key's hash>` (callKeySegment).
        const base = `${callKeySegment({ key: callKey('ai-agent', 'edge', callId), callId })}`;
        const json = files.get(`${base}.json`);
        const text = files.get(`${base}.txt`);
        return json && text ? { doc: JSON.parse(json) as { original: unknown; call: CanonicalCall }, text } : null;
      },
      { what: `${callId} archived`, timeoutMs: 20_000 },
    );

  test('poison bodies are refused at the edge and delivery goes on; latin1, BOM and odd text are archived as sent', async () => {
    // The two poison webhooks of the issue: today a 202 that stopped the fan-out, and a 500.
    assert.equal((await send(withMember(webhookPayload('poison-unknown'), 'x', nest(5000)))).status, 400);
    assert.equal((await send(withMember(webhookPayload('poison-channel'), 'channel', nest(100_000)))).status, 400);

    const latin = webhookPayload('edge-latin1', (p) => {
      p.call.users[0].fullName = 'Jürgen Müller';
      p.assist.summary.content = 'Grüße aus Köln';
    });
    assert.equal(
      (await send(Buffer.from(JSON.stringify(latin), 'latin1'), 'application/json; charset=iso-8859-1')).status,
      202,
    );
    const bom = webhookPayload('edge-bom');
    assert.equal((await send(`\uFEFF${JSON.stringify(bom)}`)).status, 202);
    const deepest = withMember(webhookPayload('edge-depth-64'), 'x', nest(63, '"bottom"'));
    assert.equal((await send(deepest)).status, 202);
    const lone = withMember(webhookPayload('edge-lone'), 'note', '"\\ud800"').replace(
      '"content":"The caller',
      '"content":"\\udfff The caller',
    );
    assert.equal((await send(lone)).status, 202);

    const l = await archivedCall('edge-latin1');
    assert.deepEqual(l.doc.original, latin);
    assert.ok(l.text.includes('Users: Jürgen Müller'), 'the readable transcript shows Müller');
    assert.ok(l.text.includes('Grüße aus Köln'));
    assert.deepEqual((await archivedCall('edge-bom')).doc.original, bom);
    assert.deepEqual((await archivedCall('edge-depth-64')).doc.original, JSON.parse(deepest));
    const s = await archivedCall('edge-lone');
    // The JSON document keeps the lone surrogates (escaped); the UTF-8 text file cannot, and shows U+FFFD.
    assert.deepEqual(s.doc.original, JSON.parse(lone));
    assert.ok(s.text.includes('\uFFFD The caller'));
    const files = await archived();
    assert.ok(
      ![...files.keys()].some((name) => name.startsWith('poison-')),
      'nothing of the refused bodies was archived',
    );
  });
});
