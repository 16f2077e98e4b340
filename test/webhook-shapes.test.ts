// Issue 20 and 23 (item 6) in the webhook parser: only the required fields refuse a call; every
// optional field callsync reads takes any JSON type (read as absent when unreadable, kept in the
// original); the fields the platform sends in two shapes are read in both; the legacy AI Assistant
// Webhook becomes the same canonical call; bad times are refused or repaired by the README's rule.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import fc from 'fast-check';
import { encodeCall } from '../src/model/call.js';
import {
  CHUNK_TIME_SLACK_MS,
  InvalidPayloadError,
  normalizeWebhook,
  readWebhook,
  sentCallId,
  transcriptFromPayload,
} from '../src/model/webhook.js';
import { parseStoredCall } from '../queues/inbound.js';
import { renderTranscriptText } from '../src/sinks/archive/render.js';
import { minimalPayload, webhookPayload } from './support/calls.js';

const receivedAt = new Date('2026-04-08T10:05:00Z');
const read = (body: unknown) => readWebhook(body, { agentId: 'agent-1', receivedAt });
const normalize = (body: unknown) => normalizeWebhook(body, { agentId: 'agent-1', receivedAt });

function refused(body: unknown, pointer: string, detail: RegExp) {
  assert.throws(
    () => normalize(body),
    (err: unknown) => {
      assert.ok(err instanceof InvalidPayloadError, `expected InvalidPayloadError, got ${String(err)}`);
      assert.equal(err.pointer, pointer);
      assert.match(err.detail, detail);
      return true;
    },
  );
}

/** The v2 fixture with every optional part the platform sends, in the platform's current shapes. */
function fullPayload(id = 'shapes'): Record<string, any> {
  return webhookPayload(id, (p) => {
    p.agentId = 'payload-agent';
    p.call.agentId = 'call-agent';
    p.call.channel = { id: 'ch-1', name: 'Support' };
    p.assist.callHeadline = { content: 'Appointment moved' };
    p.assist.provider = { llm: 'AZURE' };
  });
}

/** The archived text's times are clock times: `[mm:ss]` / `[hh:mm:ss]` and a duration of digits. */
function assertSaneTimes(text: string): void {
  for (const line of text.split('\n')) {
    if (line.startsWith('[')) assert.match(line, /^\[\d{2}:\d{2}(:\d{2})?\] /, line.slice(0, 40));
    if (line.startsWith('Started:'))
      assert.match(line, /^Started: \d{4}-\d\d-\d\dT[\d:.]+Z( {4}Duration: \d{2}:\d{2}(:\d{2})?)?$/);
  }
}

test('the documented payloads (test/fixtures/platform) are read whole: no field unread', () => {
  const corpus = new URL('./fixtures/platform/', import.meta.url);
  const files = readdirSync(corpus).filter((f) => f.endsWith('.json'));
  assert.ok(files.length >= 4);
  for (const file of files) {
    const { unread } = read(JSON.parse(readFileSync(new URL(file, corpus), 'utf8')));
    assert.deepEqual(unread, [], file);
  }
});

test('a refusal names the call id the documented payloads carry, in each shape (sentCallId)', () => {
  const corpus = new URL('./fixtures/platform/', import.meta.url);
  for (const file of readdirSync(corpus).filter((f) => f.endsWith('.json'))) {
    const body = JSON.parse(readFileSync(new URL(file, corpus), 'utf8')) as unknown;
    assert.equal(sentCallId(body), read(body).call.callId, file);
  }
  assert.equal(sentCallId({ call: { id: '  c-7 ' } }), 'c-7');
  assert.equal(sentCallId({ call: { id: 42 } }), '42');
  for (const body of [null, [], { call: null }, { call: { id: '  ' } }, { call: { id: {} } }, { id: 'x' }])
    assert.equal(sentCallId(body), null, JSON.stringify(body));
});

// ---- both shapes ------------------------------------------------------------------------------

test('callHeadline: text or {content}', () => {
  assert.equal(normalize(webhookPayload('h1', (p) => (p.assist.callHeadline = 'As text'))).title, 'As text');
  assert.equal(
    normalize(webhookPayload('h2', (p) => (p.assist.callHeadline = { content: 'As object' }))).title,
    'As object',
  );
  assert.equal(normalize(webhookPayload('h3', (p) => (p.assist.callHeadline = { content: '  ' }))).title, undefined);
  const r = read(webhookPayload('h4', (p) => (p.assist.callHeadline = { text: 'no content key' })));
  assert.equal(r.call.title, undefined);
  assert.deepEqual(
    r.unread.map((u) => u.field),
    ['/assist/callHeadline'],
  );
});

test('provider: text, or an object kept as its text (one value: the value; several: key: value pairs)', () => {
  assert.equal(normalize(webhookPayload('p1', (p) => (p.assist.provider = 'acme-ai'))).provider, 'acme-ai');
  assert.equal(normalize(webhookPayload('p2', (p) => (p.assist.provider = { llm: 'AZURE' }))).provider, 'AZURE');
  assert.equal(
    normalize(webhookPayload('p3', (p) => (p.assist.provider = { llm: 'AZURE', stt: 'DEEPGRAM', region: { a: 1 } })))
      .provider,
    'llm: AZURE, stt: DEEPGRAM',
  );
  const r = read(webhookPayload('p4', (p) => (p.assist.provider = { llm: null })));
  assert.equal(r.call.provider, undefined);
  assert.deepEqual(
    r.unread.map((u) => u.field),
    ['/assist/provider'],
  );
});

test('summary: the spec object or plain text; transcription: the spec object or plain text', () => {
  assert.deepEqual(normalize(webhookPayload('s1', (p) => (p.assist.summary = 'Moved to Friday.'))).summary, {
    content: 'Moved to Friday.',
    keyPoints: [],
    topics: [],
  });
  assert.equal(normalize(webhookPayload('s2')).summary?.topics[0], 'appointment');
  assert.deepEqual(normalize(webhookPayload('s3', (p) => (p.assist.transcription = 'Caller: hi'))).transcript, {
    content: 'Caller: hi',
    chunks: [],
  });
});

test('channel: {id, name} or a string id, at the top or in call', () => {
  const obj = normalize(webhookPayload('c1', (p) => (p.call.channel = { id: 'ch-1', name: 'Support' })));
  assert.equal(obj.channelId, 'ch-1');
  assert.deepEqual(obj.channel, { id: 'ch-1', name: 'Support' });
  const str = normalize(webhookPayload('c2', (p) => (p.channel = 'ch-2')));
  assert.equal(str.channelId, 'ch-2');
  assert.equal(str.channel, 'ch-2');
  const bad = read(webhookPayload('c3', (p) => (p.call.channel = [1, 2])));
  assert.equal(bad.call.channelId, null);
  assert.deepEqual(
    bad.unread.map((u) => u.field),
    ['/call/channel'],
  );
});

test('key points and topics: text or numbers; an object, list or boolean is left out and counted, never sent on as JSON', () => {
  const r = read(
    webhookPayload('kp1', (p) => {
      p.assist.summary.keyPoints = ['Call back', { text: 'Moved to Friday' }, true, 42, null];
      p.assist.summary.topics = [['a'], 'billing'];
    }),
  );
  assert.deepEqual(r.call.summary?.keyPoints, ['Call back', '42']);
  assert.deepEqual(r.call.summary?.topics, ['billing']);
  assert.deepEqual(
    r.unread.map((u) => [u.field, u.pointer, u.detail]),
    [
      ['/assist/summary/keyPoints/*', '/assist/summary/keyPoints/1', 'expected text, got an object'],
      ['/assist/summary/topics/*', '/assist/summary/topics/0', 'expected text, got an array'],
    ],
  );
});

test('a chunk speaker callsync cannot place is read as unknown and counted, not dropped silently', () => {
  const r = read(
    webhookPayload('sp1', (p) => {
      p.assist.transcription.chunks[0].speaker = 'Customer Service';
      p.assist.transcription.chunks[1].speaker = 12345;
      p.assist.transcription.chunks[2].speaker = '';
    }),
  );
  assert.deepEqual(
    r.call.transcript?.chunks.map((c) => c.speaker),
    ['unknown', 'unknown', 'unknown'],
  );
  assert.deepEqual(
    r.unread.map((u) => [u.field, u.pointer]),
    [['/assist/transcription/chunks/*/speaker', '/assist/transcription/chunks/0/speaker']],
  );
  // The roles callsync places, and a speaker not sent, are read: nothing counted.
  const placed = read(
    webhookPayload('sp2', (p) => {
      p.assist.transcription.chunks[0].speaker = 'CALLER';
      p.assist.transcription.chunks[1].speaker = 'agent';
      p.assist.transcription.chunks[2].speaker = null;
    }),
  );
  assert.deepEqual(
    placed.call.transcript?.chunks.map((c) => c.speaker),
    ['caller', 'callee', 'unknown'],
  );
  assert.deepEqual(placed.unread, []);
});

test("an unplaced speaker's label is kept on the chunk, shown by the archive, and left out of the content hash", () => {
  const payload = webhookPayload('sp3', (p) => {
    p.assist.transcription.chunks[0].speaker = '  Customer Service ';
    p.assist.transcription.chunks[1].speaker = 12345;
    p.assist.transcription.chunks[2].speaker = '';
  });
  const { call } = read(payload);
  assert.deepEqual(
    call.transcript?.chunks.map((c) => [c.speaker, c.speakerLabel]),
    [
      ['unknown', 'Customer Service'],
      ['unknown', '12345'],
      ['unknown', undefined],
    ],
  );
  const text = renderTranscriptText(call);
  assert.match(text, /\] Customer Service: /);
  assert.match(text, /\] 12345: /);
  assert.match(text, /\] Speaker: /, 'an empty label is no label: the archive says Speaker');
  // Stored once in the payload, the transcript read back from it keeps the labels.
  const rawJson = JSON.stringify(payload);
  const stored = parseStoredCall(encodeCall(call, rawJson, transcriptFromPayload(call)).json);
  assert.deepEqual(stored?.transcript, call.transcript);
  // The hash is the one of the record without labels (as before labels were kept): a resend of a
  // call accepted then is still a duplicate, both where the transcript is stored once and twice.
  const unlabelled = {
    ...call,
    transcript: { ...call.transcript!, chunks: call.transcript!.chunks.map(({ speakerLabel: _l, ...c }) => c) },
  };
  const before = encodeCall(unlabelled).contentHash;
  assert.equal(encodeCall(call).contentHash, before);
  assert.equal(encodeCall(call, rawJson, true).contentHash, before);
  assert.equal(encodeCall(read(structuredClone(payload)).call, rawJson, true).contentHash, before);
  // A label is one line of at most 100 characters; the whole of it stays in the original.
  const long = read(
    webhookPayload('sp4', (p) => {
      p.assist.transcription.chunks[0].speaker = `Front\n\tdesk ${'x'.repeat(200)}`;
    }),
  ).call;
  assert.equal(long.transcript?.chunks[0]?.speakerLabel, `Front desk ${'x'.repeat(89)}`);
});

test('reading the other shape changes nothing for dedupe: the same payload twice has the same content hash, another headline another', () => {
  const a = encodeCall(normalize(fullPayload('d1'))).contentHash;
  const b = encodeCall(normalize(fullPayload('d1'))).contentHash;
  const c = encodeCall(
    normalize(
      webhookPayload(
        'd1',
        (p) => Object.assign(fullPayload('d1'), p) && (p.assist.callHeadline = { content: 'Other' }),
      ),
    ),
  ).contentHash;
  assert.equal(a, b);
  assert.notEqual(a, c);
  // `{content: X}` and `X` are the same headline: one is not an update of the other.
  const asText = webhookPayload('d2', (p) => (p.assist.callHeadline = 'Same'));
  const asObject = webhookPayload('d2', (p) => (p.assist.callHeadline = { content: 'Same' }));
  assert.equal(encodeCall(normalize(asText)).contentHash, encodeCall(normalize(asObject)).contentHash);
});

// ---- the legacy AI Assistant Webhook ------------------------------------------------------------

const legacy = (patch: (p: Record<string, any>) => void = () => undefined): Record<string, any> => {
  const p: Record<string, any> = {
    callHeadline: 'Customer asked about pricing',
    call: {
      id: 'legacy-1',
      caller: '+491751234567',
      callee: '+498912345678',
      startTime: 1718202000000,
      endTime: 1718202300000,
      duration: 300,
      direction: 'outbound',
    },
    channel: { id: 'channel_98765', name: 'Sales' },
    summary: 'Pricing explained.',
  };
  patch(p);
  return p;
};

test('legacy: recognised by its shape, the same canonical call (title, summary, channel, numbers, direction)', () => {
  const { call, dialect, unread } = read(legacy());
  assert.equal(dialect, 'legacy');
  assert.deepEqual(unread, []);
  assert.equal(call.key, 'ai-agent:agent-1:legacy-1');
  assert.equal(call.title, 'Customer asked about pricing');
  assert.deepEqual(call.summary, { content: 'Pricing explained.', keyPoints: [], topics: [] });
  assert.equal(call.channelId, 'channel_98765');
  assert.equal(call.direction, 'out');
  assert.equal(call.from, '+491751234567');
  assert.equal(call.to, '+498912345678');
  assert.equal(call.durationSec, 300);
  assert.equal(call.startedAt, '2024-06-12T14:20:00.000Z');
  assert.equal(call.payloadVersion, 'legacy');
  assert.deepEqual(call.raw, legacy());
  // Only the duration (seconds, as the legacy webhook sends it): the end is derived.
  assert.equal(normalize(legacy((p) => delete p.call.endTime)).endedAt, '2024-06-12T14:25:00.000Z');
});

test('legacy: refusals and unread fields name the legacy fields', () => {
  refused(
    legacy((p) => delete p.call.caller),
    '/call/caller',
    /missing/,
  );
  refused(
    legacy((p) => (p.call.callee = { n: 1 })),
    '/call/callee',
    /expected a string/,
  );
  refused(
    legacy((p) => (p.call.direction = 'sideways')),
    '/call/direction',
    /direction/,
  );
  const r = read(legacy((p) => (p.summary = ['a'])));
  assert.equal(r.call.summary, null);
  assert.deepEqual(
    r.unread.map((u) => [u.field, u.pointer]),
    [['/summary', '/summary']],
  );
  // With `version` or `from`/`to` it is the current payload, refused as one.
  refused(
    legacy((p) => (p.version = 'v2')),
    '/call/from',
    /missing/,
  );
});

// ---- bad times (issue 23, item 6) ---------------------------------------------------------------

test('bad times: a negative duration or an end before the start, with nothing else giving the end, is refused with a pointer', () => {
  refused(
    webhookPayload('t1', (p) => {
      delete p.call.endTime;
      p.call.duration = -5;
    }),
    '/call/duration',
    /negative/,
  );
  refused(
    webhookPayload('t2', (p) => {
      delete p.call.endTime;
      p.call.duration = '-5';
    }),
    '/call/duration',
    /negative/,
  );
  refused(
    webhookPayload('t3', (p) => {
      p.call.endTime = p.call.startTime - 1000;
      delete p.call.duration;
    }),
    '/call/endTime',
    /ends before it starts/,
  );
  refused(
    legacy((p) => {
      p.call.endTime = 1718201000000;
      delete p.call.duration;
    }),
    '/call/endTime',
    /ends before it starts/,
  );
  // The same start and end is a call of 0 s.
  assert.equal(
    normalize(
      webhookPayload('t4', (p) => {
        p.call.endTime = p.call.startTime;
        p.call.duration = 0;
      }),
    ).durationSec,
    0,
  );
});

test('the end from one of endTime and duration: the other, unreadable, is read as absent and counted, not refused', () => {
  for (const [duration, id] of [
    [-5, 'd-negative'],
    ['five', 'd-text'],
    [{ s: 5 }, 'd-object'],
  ] as const) {
    const { call, unread } = read(webhookPayload(id, (p) => (p.call.duration = duration)));
    const given = webhookPayload(id).call;
    assert.equal(call.durationSec, Math.round((given.endTime - given.startTime) / 1000), id);
    assert.deepEqual(
      unread.map((u) => u.field),
      ['/call/duration'],
      id,
    );
  }
  const { call, unread } = read(
    webhookPayload('e-bad', (p) => {
      p.call.endTime = -1e20;
      p.call.duration = 60;
    }),
  );
  assert.equal(call.durationSec, 60);
  assert.equal(call.endedAt, new Date(Date.parse(call.startedAt) + 60_000).toISOString());
  assert.deepEqual(
    unread.map((u) => u.field),
    ['/call/endTime'],
  );
  // An end before the start beside a duration: the end is read from the duration.
  const early = read(webhookPayload('e-early', (p) => (p.call.endTime = p.call.startTime - 1000)));
  assert.equal(early.call.durationSec, webhookPayload('x').call.duration);
  assert.equal(
    early.call.endedAt,
    new Date(Date.parse(early.call.startedAt) + webhookPayload('x').call.duration * 1000).toISOString(),
  );
  assert.deepEqual(
    early.unread.map((u) => u.field),
    ['/call/endTime'],
  );
  // Neither readable: refused, as before.
  refused(
    webhookPayload('neither', (p) => {
      p.call.endTime = 'later';
      p.call.duration = -5;
    }),
    '/call/endTime',
    /./,
  );
});

test('bad times: chunk times outside the call are read as absent (the chunk follows the one before), never archived as nonsense', () => {
  const body = webhookPayload('t5', (p) => {
    p.assist.transcription.chunks[0].startTime = 1e300;
    p.assist.transcription.chunks[0].endTime = 1e300;
    p.assist.transcription.chunks[1].startTime = -1e300;
    p.assist.transcription.chunks[2].endTime = p.call.endTime + CHUNK_TIME_SLACK_MS + 1000;
  });
  const { call, unread } = read(body);
  assert.deepEqual(unread.map((u) => u.field).sort(), [
    '/assist/transcription/chunks/*/endTime',
    '/assist/transcription/chunks/*/startTime',
  ]);
  assert.deepEqual(
    call.transcript?.chunks.map((c) => [c.startOffsetMs, c.endOffsetMs]),
    [
      [0, 0],
      [0, 9500],
      [70000, 70000],
    ],
  );
  const text = renderTranscriptText(call);
  assertSaneTimes(text);
  assert.match(text, /^\[00:00\] Caller: Hello/m);
  // Offsets: 1e300 does not turn the other offsets' unit; within a minute past the end is kept.
  const offsets = normalize(
    webhookPayload('t6', (p) => {
      p.assist.transcription.chunks = [
        { speaker: 'caller', startTime: 3, endTime: 6, content: 'a' },
        { speaker: 'callee', startTime: 1e300, endTime: 1e300, content: 'b' },
        { speaker: 'caller', startTime: 120, endTime: 130, content: 'c' },
      ];
    }),
  );
  assert.deepEqual(
    offsets.transcript?.chunks.map((c) => [c.startOffsetMs, c.endOffsetMs]),
    [
      [3000, 6000],
      [6000, 6000],
      [120000, 130000],
    ],
  );
});

// ---- every JSON type in every optional field ----------------------------------------------------

/** Every optional field the parser reads (the leaves and the objects and lists that hold them). */
const OPTIONAL_PATHS: (string | number)[][] = [
  ['call', 'users'],
  ['call', 'users', 0],
  ...['userId', 'accountId', 'fullUserId', 'firstName', 'lastName', 'fullName'].map((f) => ['call', 'users', 0, f]),
  ['call', 'channel'],
  ['call', 'channel', 'id'],
  ['channel'],
  ['assist'],
  ['assist', 'summary'],
  ['assist', 'summary', 'content'],
  ['assist', 'summary', 'keyPoints'],
  ['assist', 'summary', 'keyPoints', 0],
  ['assist', 'summary', 'topics'],
  ['assist', 'summary', 'topics', 0],
  ['assist', 'callScenarios'],
  ['assist', 'callScenarios', 0],
  ['assist', 'callScenarios', 0, 'name'],
  ['assist', 'callScenarios', 0, 'smartAnswers'],
  ['assist', 'callScenarios', 0, 'smartAnswers', 0],
  ['assist', 'callScenarios', 0, 'smartAnswers', 0, 'setName'],
  ['assist', 'callScenarios', 0, 'smartAnswers', 0, 'setItems'],
  ['assist', 'callScenarios', 0, 'smartAnswers', 0, 'setItems', 0],
  ...['question', 'answer', 'title'].map((f) => ['assist', 'callScenarios', 0, 'smartAnswers', 0, 'setItems', 0, f]),
  ['assist', 'transcription'],
  ['assist', 'transcription', 'content'],
  ['assist', 'transcription', 'chunks'],
  ['assist', 'transcription', 'chunks', 0],
  ...['speaker', 'startTime', 'endTime', 'content'].map((f) => ['assist', 'transcription', 'chunks', 1, f]),
  ['assist', 'callHeadline'],
  ['assist', 'callHeadline', 'content'],
  ['assist', 'provider'],
  ['assist', 'provider', 'llm'],
];

const json = fc.jsonValue({ maxDepth: 3 });
/** One arbitrary per JSON type, so each type is tried in each field. */
const JSON_TYPES: Record<string, fc.Arbitrary<unknown>> = {
  string: fc.string(),
  number: fc.oneof(
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.integer(),
    fc.constantFrom(1e300, -1e300, 1e11, -0.5),
  ),
  boolean: fc.boolean(),
  null: fc.constant(null),
  object: fc.dictionary(fc.string(), json, { maxKeys: 4 }),
  array: fc.array(json, { maxLength: 4 }),
};

function setAt(root: Record<string, any>, path: (string | number)[], value: unknown): void {
  let at: any = root;
  for (const key of path.slice(0, -1)) at = at[key];
  at[path.at(-1)!] = value;
}

test('property: every JSON type in every optional field is accepted, kept verbatim, and read into a sane record', () => {
  for (const path of OPTIONAL_PATHS) {
    for (const [type, arbitrary] of Object.entries(JSON_TYPES)) {
      const run = () =>
        fc.assert(
          fc.property(arbitrary, (value) => {
            const body = fullPayload('prop');
            setAt(body, path, value);
            const sent = JSON.parse(JSON.stringify(body)) as unknown;
            const { call, unread } = read(body);
            assert.deepEqual(JSON.parse(JSON.stringify(call.raw)), sent, 'the original is kept');
            // The record can be stored and rendered, and says nothing absurd about time.
            encodeCall(call, JSON.stringify(body));
            assertSaneTimes(renderTranscriptText(call));
            for (const ch of call.transcript?.chunks ?? []) {
              assert.ok(
                Number.isSafeInteger(ch.startOffsetMs) && Number.isSafeInteger(ch.endOffsetMs),
                'whole offsets',
              );
              assert.ok(
                ch.startOffsetMs >= 0 && ch.endOffsetMs <= (call.durationSec ?? 0) * 1000 + CHUNK_TIME_SLACK_MS,
                'offsets inside the call',
              );
            }
            // The metric's label: a closed set of pointers, array indexes as *.
            for (const u of unread) assert.match(u.field, /^(\/([A-Za-z]+|\*))+$/, u.field);
          }),
          { numRuns: 15, seed: 20 },
        );
      try {
        run();
      } catch (err) {
        throw new Error(`${path.join('.')} as ${type}: ${(err as Error).message}`, { cause: err });
      }
    }
  }
});

test('property: the required fields alone refuse — a body whose required fields are intact is never refused', () => {
  fc.assert(
    fc.property(
      fc.dictionary(fc.constantFrom(...OPTIONAL_PATHS.map((p) => p.join('.'))), json, { maxKeys: 6 }),
      (patch) => {
        const body = fullPayload('prop-many');
        // Shallow paths first, so a value set on a parent does not make a child's parent disappear.
        for (const key of Object.keys(patch).sort((a, b) => a.split('.').length - b.split('.').length)) {
          const path = key.split('.').map((k) => (/^\d+$/.test(k) ? Number(k) : k));
          try {
            setAt(body, path, patch[key]);
          } catch {
            // the parent is no longer an object or list: that value is simply not set
          }
        }
        read(body);
      },
    ),
    { numRuns: 300, seed: 21 },
  );
  // And a body with only the required fields is a call.
  assert.equal(normalize(minimalPayload('only-required')).summary, null);
});
