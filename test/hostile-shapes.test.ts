// Hostile shapes of data at the entrances, without servers: what the platform's API answers (channel
// events, history entries) nested deeper than anything can store, with times no date can hold; Push
// API forms with field names from Object.prototype or an identifying field twice. The same through
// a running callsync: test/hostile-shapes.redis.test.ts.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { describe, test } from 'node:test';
import { callHash, callKey, encodeCall } from '../src/model/call.js';
import { normalizeChannelEvent } from '../src/model/channel-event.js';
import { normalizeHistoryEntry } from '../src/model/history.js';
import { MAX_KEPT_DEPTH, TOO_DEEP_MARKER, withinDepth } from '../src/model/json-depth.js';
import { assemblePushCall, parsePushEvent } from '../src/model/push.js';
import { InvalidPayloadError, readWebhook } from '../src/model/webhook.js';
import { webhookPayload } from './support/calls.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';

/** `{"a":[[[…]]]}`-like: `depth` arrays nested inside the key `key` of `base` (JSON.parse copes with any depth). */
function nestedIn(base: Record<string, unknown>, key: string, depth: number): Record<string, unknown> {
  const text = JSON.stringify(base);
  return JSON.parse(`${text.slice(0, -1)},"${key}":${'['.repeat(depth)}1${']'.repeat(depth)}}`) as Record<
    string,
    unknown
  >;
}

/** How deep `value` nests (the value itself is level 1), without recursion. */
function depthOf(value: unknown): number {
  let deepest = 0;
  const stack: [unknown, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop()!;
    if (v === null || typeof v !== 'object') continue;
    deepest = Math.max(deepest, d);
    for (const child of Object.values(v)) stack.push([child, d + 1]);
  }
  return deepest;
}

describe('withinDepth: what the API answers nested too deep is kept up to 64 levels', () => {
  test('a value within the limit is itself, not a copy', () => {
    const event = channelEvent({ eventId: 'd-1' });
    const out = withinDepth(event);
    assert.equal(out.value, event);
    assert.equal(out.cut, 0);
  });

  test('100,000 levels in one field: the rest of the event as read, that field cut at 64 levels, storable', () => {
    const event = nestedIn(channelEvent({ eventId: 'd-2' }), 'x-trace', 100_000);
    assert.throws(() => JSON.stringify(event), RangeError, 'what the inbound log could not store');
    const { value, cut, firstCutUnder } = withinDepth(event);
    assert.equal(cut, 1);
    assert.equal(firstCutUnder, 'x-trace');
    assert.equal(depthOf(value), MAX_KEPT_DEPTH);
    const { ['x-trace']: trace, ...rest } = value as Record<string, unknown>;
    const { ['x-trace']: _original, ...restRead } = event;
    assert.deepEqual(rest, restRead, 'every other field as read');
    let inner: unknown = trace;
    for (let level = 2; level < MAX_KEPT_DEPTH; level++) inner = (inner as unknown[])[0];
    assert.deepEqual(inner, [TOO_DEEP_MARKER]);
    assert.ok(JSON.stringify(value).length < 1000);
  });

  test('own __proto__ keys stay keys of the copy, never its prototype', () => {
    const event = JSON.parse(
      `{"eventId":"d-3","__proto__":{"polluted":1},"deep":${'['.repeat(100)}${']'.repeat(100)}}`,
    ) as object;
    const { value } = withinDepth(event);
    assert.equal(Object.getPrototypeOf(value), Object.prototype);
    assert.deepEqual(Object.keys(value as object), ['eventId', '__proto__', 'deep']);
    assert.equal(({} as Record<string, unknown>).polluted, undefined);
    assert.match(JSON.stringify(value), /^\{"eventId":"d-3","__proto__":\{"polluted":1\},"deep":/);
  });
});

describe('channel events and history entries from the API', () => {
  test('a history entry nested 100,000 levels deep, or lasting 1e300 s, is a call that can be stored', () => {
    const base = {
      id: 'h-deep',
      type: 'CALL',
      source: '+492111234567',
      target: '+4915112345678',
      direction: 'INCOMING',
      status: 'PICKUP',
      created: '2026-10-05T08:00:00Z',
      duration: 95,
    };
    const deep = normalizeHistoryEntry(nestedIn(base, 'extra', 100_000), { receivedAt: new Date() });
    assert.doesNotThrow(() => encodeCall(deep));
    assert.equal(deep.durationSec, 95);
    // Before: new Date(…).toISOString() threw a RangeError, and `callsync backfill` stopped at this
    // entry on every run.
    const long = normalizeHistoryEntry({ ...base, duration: 1e300 }, { receivedAt: new Date() });
    assert.equal(long.durationSec, null);
    assert.equal(long.endedAt, null);
    assert.equal(long.startedAt, '2026-10-05T08:00:00.000Z');
  });

  test('event ids differing only in a lone surrogate are two calls, not one and its duplicate', () => {
    // callHash reads the key as UTF-8, where every lone surrogate is U+FFFD: "e\ud800" and
    // "e\udfff" had one key, so the second event was answered as the first's duplicate and lost.
    const ids = ['e\ud800', 'e\udfff', 'e\ufffd', 'e%uD800', 'e'];
    const keys = ids.map(
      (eventId) => normalizeChannelEvent(channelEvent({ eventId }), new Date(), { channelId: 'ch\ud800' }).key,
    );
    assert.equal(new Set(keys.map(callHash)).size, ids.length, keys.join(' | '));
    // An id without lone surrogates keeps the key it had.
    assert.equal(callKey('channel', 'ch1', 'ev-1:a%b'), 'channel:ch1:ev-1%3Aa%25b');
    assert.equal(
      normalizeHistoryEntry(
        { id: 'h\udc00', direction: 'INCOMING', created: '2026-10-05T08:00:00Z' },
        { receivedAt: new Date() },
      ).key,
      'history:-:h%uDC00',
    );
  });

  test('a channel event nested deep, made storable by withinDepth, normalizes as any other', () => {
    const { value } = withinDepth(nestedIn(channelEvent({ eventId: 'd-4', channelId: 'ch1' }), 'x', 50_000));
    const call = normalizeChannelEvent(value, new Date(), { channelId: 'ch1' });
    assert.equal(call.eventId, 'd-4');
    assert.doesNotThrow(() => encodeCall(call));
  });
});

describe('Push API forms: field names are only names', () => {
  const base = 'event=newCall&callId=p-1&direction=in&from=492111234567&to=4915799912345';

  test('__proto__, constructor, toString, hasOwnProperty as fields or lists are kept, never a refusal', () => {
    for (const extra of [
      '__proto__[]=a',
      'constructor[]=a',
      'toString[]=a&toString[]=b',
      'hasOwnProperty[]=a',
      '__proto__=a',
      'constructor=a',
      'valueOf=a',
    ]) {
      // Before: `toString[]=a` threw a TypeError (Object.prototype's toString has no push), which the
      // source answered as "the body is not UTF-8"; `__proto__=a` was dropped.
      const event = parsePushEvent(`${base}&${extra}`);
      assert.equal(event.callId, 'p-1', extra);
      const stored = JSON.parse(JSON.stringify({ at: 1, event })) as { at: number; event: typeof event };
      const name = extra.split('=')[0]!;
      const raw = assemblePushCall('p-1', { newCall: stored }, new Date())!;
      assert.equal(raw, null, 'open until its hangup');
      const closed = assemblePushCall('p-1', { newCall: stored, hangup: stored }, new Date())!;
      const kept = (closed.raw as { newCall: Record<string, unknown> }).newCall;
      assert.ok(Object.hasOwn(kept, name), `${extra}: ${JSON.stringify(kept)}`);
      assert.equal(Object.getPrototypeOf(kept), Object.prototype);
      assert.equal(closed.callId, 'p-1');
      assert.equal(closed.from, '+492111234567');
    }
    assert.equal(({} as Record<string, unknown>).a, undefined);
  });

  test('the call id or the event twice with two values is refused pointing at it; twice the same is one', () => {
    for (const [body, pointer] of [
      [`${base}&callId=p-2`, '/callId'],
      [`${base}&event=hangup`, '/event'],
    ] as const) {
      const err = (() => {
        try {
          parsePushEvent(body);
        } catch (e) {
          return e;
        }
        return null;
      })();
      assert.ok(err instanceof InvalidPayloadError, body);
      assert.equal(err.pointer, pointer);
    }
    assert.equal(parsePushEvent(`${base}&callId=p-1`).callId, 'p-1');
    // Any other field twice: the last, as before.
    assert.equal(parsePushEvent(`${base}&from=492119999999`).fields.from, '492119999999');
  });
});

describe('a failed delivery of a call with a long transcript', () => {
  test("the error's echo of it is found without collecting the transcript's phrases (a 64 MB heap is enough)", () => {
    // Before: every run of 4 words of every text went into a set — for this transcript of 600,000
    // words 110 MB of heap and 1.5 s, at each failed attempt of the call (an 8 MB body's worth).
    const script = `
      import { scrubEchoes } from './src/redact.ts';
      const chunks = [];
      for (let i = 0; i < 600_000; i += 20)
        chunks.push(Array.from({ length: 20 }, (_, j) => 'w' + (i + j)).join(' '));
      const content = chunks.join(' ');
      const message = 'HubSpot answered 400: "w300001 w300002 W300003, w300004" rejected (code 7)';
      console.log(scrubEchoes(message, { texts: [content, ...chunks], names: [], numbers: [] }));
    `;
    const out = execFileSync(
      process.execPath,
      ['--max-old-space-size=64', '--import', 'tsx', '--input-type=module', '-e', script],
      { cwd: new URL('..', import.meta.url), encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
    );
    assert.equal(out.trim(), 'HubSpot answered 400: "…" rejected (code 7)');
  });
});

describe('webhook: a duration that cannot be the call between its start and its end', () => {
  const read = (duration: unknown) =>
    readWebhook(
      webhookPayload('dur', (p) => (p.call.duration = duration)),
      { agentId: 'a', receivedAt: new Date() },
    );

  test('longer than from start to end (1e300, 1.8e308, 1e29 s): the span is the duration, the field unread', () => {
    // The fixture's call lasts 135 s from startTime to endTime. Before, 1e300 became the record's
    // duration: HubSpot refused "1e+303" as hs_call_duration and Pipedrive its duration, each
    // dead-lettering a call whose times were fine.
    for (const duration of [1e300, 1.7976931348623157e308, 1.2345678901234568e29, 10_000_000]) {
      const { call, unread } = read(duration);
      assert.equal(call.durationSec, 135, String(duration));
      assert.deepEqual(
        unread.map((u) => u.pointer),
        ['/call/duration'],
        String(duration),
      );
    }
  });

  test('within a minute of the span, in seconds or milliseconds, or shorter (talk time): kept as sent', () => {
    for (const [duration, seconds] of [
      [135, 135],
      [135_000, 135],
      [190, 190],
      [120, 120],
      [0, 0],
    ] as const) {
      const { call, unread } = read(duration);
      assert.equal(call.durationSec, seconds, String(duration));
      assert.ok(!unread.some((u) => u.pointer === '/call/duration'), String(duration));
    }
  });
});

describe("the API's answer with a byte-order mark", () => {
  test('a channel page or a history page that begins with a BOM is read (as the ingress reads a webhook)', async () => {
    // Before: JSON.parse met U+FEFF: "answered 200 with a body that is not JSON", at every poll of
    // the page — the channel stopped there.
    const api = await FakeTelephony.start();
    try {
      const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, retries: 0 });
      const event = channelEvent({ eventId: 'bom-1', channelId: 'ch1' });
      api.inject({
        on: 'events',
        status: 200,
        body: `\ufeff${JSON.stringify({ events: [event], position: 'p1' })}`,
      });
      const page = await client.readChannelEvents('ch1', undefined, 10);
      assert.deepEqual(page.events, [event]);
      // The page's `limit` is only an echo of what was asked: a value of another shape is not a reason
      // to refuse the page (which the poller would read again, and again).
      for (const limit of ['"10"', '1.5', '-3', '{"n":10}', '1e400', 'null']) {
        const body = `${JSON.stringify({ events: [event], position: 'p1' }).slice(0, -1)},"limit":${limit}}`;
        api.inject({ on: 'events', status: 200, body });
        const odd = await client.readChannelEvents('ch1', undefined, 10);
        assert.deepEqual(odd, { events: [event], limit: 10, position: 'p1' }, limit);
      }
      api.inject({ on: 'history', status: 200, body: `\ufeff${JSON.stringify({ items: [], totalCount: 0 })}` });
      const history = await client.readHistory({
        types: ['CALL'],
        from: '2026-01-01T00:00:00Z',
        to: '2026-01-02T00:00:00Z',
        offset: 0,
        limit: 10,
      });
      assert.deepEqual(history, { items: [], totalCount: 0 });
    } finally {
      await api.close();
    }
  });
});
