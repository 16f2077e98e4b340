// The liberal webhook parser: spec v1/v2 payloads and every deviation seen in production.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { durationSeconds, InvalidPayloadError, normalizeWebhook, readWebhook } from '../src/model/webhook.js';
import { minimalPayload, webhookPayload } from './support/calls.js';

const receivedAt = new Date('2026-04-08T10:05:00Z');
const normalize = (body: unknown, agentId: string | null = 'agent-1') =>
  normalizeWebhook(body, { agentId, receivedAt });

function rejects(body: unknown, pointer: string, detail?: RegExp) {
  assert.throws(
    () => normalize(body),
    (err: unknown) => {
      assert.ok(err instanceof InvalidPayloadError, `expected InvalidPayloadError, got ${String(err)}`);
      assert.equal(err.pointer, pointer);
      if (detail) assert.match(err.detail, detail);
      return true;
    },
  );
}

test('a full v2 payload becomes the canonical record', () => {
  const call = normalize(webhookPayload('c-42'));
  assert.equal(call.key, 'ai-agent:agent-1:c-42');
  assert.equal(call.source, 'ai-agent');
  assert.equal(call.callId, 'c-42');
  assert.equal(call.agentId, 'agent-1');
  assert.equal(call.direction, 'in');
  assert.equal(call.from, '+492116355340');
  assert.equal(call.to, '+4921155550100');
  assert.equal(call.startedAt, '2026-04-08T10:00:00.000Z');
  assert.equal(call.endedAt, '2026-04-08T10:02:15.000Z');
  assert.equal(call.durationSec, 135);
  assert.equal(call.outcome, 'answered');
  assert.equal(call.payloadVersion, 'v2');
  assert.equal(call.users[0]?.fullName, 'Ada Lovelace');
  assert.deepEqual(call.summary?.topics, ['appointment', 'rescheduling']);
  assert.equal(call.summary?.keyPoints.length, 2);
  assert.equal(call.scenarios[0]?.name, 'Appointment booking');
  assert.deepEqual(call.scenarios[0]?.smartAnswers[0]?.setItems[0], {
    question: 'Preferred day?',
    answer: 'Friday',
    title: 'Day',
  });
  assert.equal(call.scenarios[0]?.smartAnswers[0]?.setItems[1]?.title, null);
  assert.equal(call.transcript?.chunks.length, 3);
  assert.deepEqual(call.transcript?.chunks[0], {
    speaker: 'caller',
    startOffsetMs: 3000,
    endOffsetMs: 6000,
    content: 'Hello, I need to move my appointment.',
  });
  assert.equal(call.transcript?.chunks[2]?.startOffsetMs, 70_000);
  assert.equal(call.receivedAt, '2026-04-08T10:05:00.000Z');
});

test('the original payload is kept verbatim, unknown fields included', () => {
  const payload = webhookPayload('c-raw', (p) => {
    p.headline = 'Rescheduled appointment';
    p.llmProvider = { name: 'some-llm', model: 'x' };
    p.assist.callScenarios[0].capturedAnswers = [{ key: 'day', value: 'Friday' }];
  });
  const call = normalize(payload);
  assert.deepEqual(call.raw, payload);
  assert.equal((call.raw as any).assist.callScenarios[0].classification, 'reschedule');
});

test('v1 with only the required parts: no summary, no scenarios, no transcript', () => {
  const call = normalize(minimalPayload('c-min'));
  assert.equal(call.payloadVersion, 'v1');
  assert.equal(call.summary, null);
  assert.deepEqual(call.scenarios, []);
  assert.equal(call.transcript, null);
  assert.deepEqual(call.users, []);
});

for (const part of ['summary', 'callScenarios', 'transcription'] as const) {
  test(`v2 without ${part} (absent, and null)`, () => {
    for (const mode of ['absent', 'null']) {
      const call = normalize(
        webhookPayload(`c-no-${part}`, (p) => {
          if (mode === 'absent') delete p.assist[part];
          else p.assist[part] = null;
        }),
      );
      if (part === 'summary') assert.equal(call.summary, null);
      else assert.ok(call.summary);
      if (part === 'callScenarios') assert.deepEqual(call.scenarios, []);
      else assert.equal(call.scenarios.length, 1);
      if (part === 'transcription') assert.equal(call.transcript, null);
      else assert.ok(call.transcript);
    }
  });
}

test('assist: null and users: null are absent parts', () => {
  const call = normalize(
    webhookPayload('c-null', (p) => {
      p.assist = null;
      p.call.users = null;
    }),
  );
  assert.equal(call.summary, null);
  assert.equal(call.transcript, null);
  assert.deepEqual(call.users, []);
});

test('version without the v, and as a number', () => {
  assert.equal(normalize(webhookPayload('a', (p) => (p.version = '2'))).payloadVersion, 'v2');
  assert.equal(normalize(webhookPayload('b', (p) => (p.version = 1))).payloadVersion, 'v1');
  assert.equal(normalize(webhookPayload('c', (p) => (p.version = 'V2'))).payloadVersion, 'v2');
});

test('numbers without +, with spaces, with 00, and anonymous callers', () => {
  const call = normalize(
    webhookPayload('n', (p) => {
      p.call.from = '492116355340';
      p.call.to = '0049 211 555 501-00';
    }),
  );
  assert.equal(call.from, '+492116355340');
  assert.equal(call.to, '+4921155550100');
  assert.equal(call.toRaw, '0049 211 555 501-00');
  const anon = normalize(webhookPayload('anon', (p) => (p.call.from = '<unknown>')));
  assert.equal(anon.from, null);
  assert.equal(anon.fromRaw, '<unknown>');
  const numeric = normalize(webhookPayload('num', (p) => (p.call.from = 492116355340)));
  assert.equal(numeric.from, '+492116355340');
});

test('ISO-8601 strings and epoch seconds where the spec says epoch milliseconds', () => {
  const iso = normalize(
    webhookPayload('iso', (p) => {
      p.call.startTime = '2026-04-08T10:00:00Z';
      p.call.endTime = '2026-04-08T12:02:15+02:00';
    }),
  );
  assert.equal(iso.startedAt, '2026-04-08T10:00:00.000Z');
  assert.equal(iso.endedAt, '2026-04-08T10:02:15.000Z');
  const seconds = normalize(
    webhookPayload('sec', (p) => {
      p.call.startTime = 1775642400;
      p.call.endTime = '1775642535';
    }),
  );
  assert.equal(seconds.startedAt, '2026-04-08T10:00:00.000Z');
  assert.equal(seconds.durationSec, 135);
});

test('epoch microseconds are recognised; a start that cannot be a call is refused at /call/startTime', () => {
  // Before: 1775642400000000 (µs) was taken as ms, a call in the year 58237; 12345 a call in 1970.
  const micro = normalize(
    webhookPayload('us', (p) => {
      p.call.startTime = 1775642400000000;
      p.call.endTime = '1775642535000000';
      // The chunks' times in µs too: 3 s to 6 s into the call (before: read as absent, counted).
      p.assist.transcription.chunks[0].startTime = 1775642403000000;
      p.assist.transcription.chunks[0].endTime = 1775642406000000;
    }),
  );
  assert.equal(micro.startedAt, '2026-04-08T10:00:00.000Z');
  assert.equal(micro.durationSec, 135);
  assert.deepEqual(
    [micro.transcript!.chunks[0]!.startOffsetMs, micro.transcript!.chunks[0]!.endOffsetMs],
    [3000, 6000],
  );
  const at = (startTime: unknown) =>
    webhookPayload('bad-start', (p) => {
      p.call.startTime = startTime;
      delete p.call.endTime;
    });
  rejects(at(12345), '/call/startTime', /1970-01-01T03:25:45.000Z is before 2000-01-01/);
  rejects(at(0), '/call/startTime', /before 2000-01-01/);
  rejects(at('1999-12-31T23:59:59Z'), '/call/startTime', /before 2000-01-01/);
  rejects(at(Date.parse('2026-04-09T10:05:01Z')), '/call/startTime', /more than a day after the call arrived/);
  // A sender's clock up to a day ahead is a clock, not a wrong unit: kept.
  assert.equal(normalize(at('2026-04-09T10:05:00Z')).startedAt, '2026-04-09T10:05:00.000Z');
  assert.equal(normalize(at('2000-01-01T00:00:00Z')).startedAt, '2000-01-01T00:00:00.000Z');
});

test('durations in milliseconds are recognised from start and end', () => {
  assert.equal(normalize(webhookPayload('ms', (p) => (p.call.duration = 135000))).durationSec, 135);
  assert.equal(normalize(webhookPayload('s', (p) => (p.call.duration = 135))).durationSec, 135);
  assert.equal(normalize(webhookPayload('str', (p) => (p.call.duration = '135'))).durationSec, 135);
  // Without an end time the spec's unit (seconds) holds, and the end is derived.
  const noEnd = normalize(webhookPayload('noend', (p) => delete p.call.endTime));
  assert.equal(noEnd.durationSec, 135);
  assert.equal(noEnd.endedAt, '2026-04-08T10:02:15.000Z');
  // Without a duration it is derived from start and end.
  assert.equal(normalize(webhookPayload('nodur', (p) => delete p.call.duration)).durationSec, 135);
  assert.equal(durationSeconds(2000, 0, 2000), 2); // 2000 ms call: 2000 read as ms
  assert.equal(durationSeconds(2, 0, 2000), 2);
});

test('upper-case enums and inbound/outbound words', () => {
  assert.equal(normalize(webhookPayload('a', (p) => (p.call.direction = 'IN'))).direction, 'in');
  assert.equal(normalize(webhookPayload('b', (p) => (p.call.direction = 'OUT'))).direction, 'out');
  assert.equal(normalize(webhookPayload('c', (p) => (p.call.direction = 'inbound'))).direction, 'in');
  assert.equal(normalize(webhookPayload('d', (p) => (p.call.direction = 'Outbound'))).direction, 'out');
  const upper = normalize(
    webhookPayload('e', (p) => {
      p.assist.transcription.chunks[0].speaker = 'CALLER';
      p.assist.transcription.chunks[1].speaker = 'CALLEE';
    }),
  );
  assert.equal(upper.transcript?.chunks[0]?.speaker, 'caller');
  assert.equal(upper.transcript?.chunks[1]?.speaker, 'callee');
});

test('chunk times as offsets from the call start (ms, and seconds)', () => {
  const ms = normalize(
    webhookPayload('off-ms', (p) => {
      p.assist.transcription.chunks = [
        { speaker: 'caller', startTime: 3000, endTime: 6000, content: 'a' },
        { speaker: 'callee', startTime: 7000, endTime: 9500, content: 'b' },
      ];
    }),
  );
  assert.deepEqual(
    ms.transcript?.chunks.map((c) => [c.startOffsetMs, c.endOffsetMs]),
    [
      [3000, 6000],
      [7000, 9500],
    ],
  );
  const sec = normalize(
    webhookPayload('off-s', (p) => {
      p.assist.transcription.chunks = [
        { speaker: 'caller', startTime: 3, endTime: 6, content: 'a' },
        { speaker: 'callee', startTime: 70, endTime: 72.5, content: 'b' },
      ];
    }),
  );
  assert.deepEqual(
    sec.transcript?.chunks.map((c) => [c.startOffsetMs, c.endOffsetMs]),
    [
      [3000, 6000],
      [70000, 72500],
    ],
  );
});

test('extra objects and fields are accepted and kept (channel, LLM provider, headline)', () => {
  const call = normalize(
    webhookPayload('extra', (p) => {
      p.channel = { id: 'ch-1', name: 'Support' };
      p.llmProvider = { name: 'x' };
      p.headline = 'Moved appointment';
      p.call.extraField = 1;
    }),
  );
  assert.deepEqual(call.channel, { id: 'ch-1', name: 'Support' });
});

test('the agent id comes from the path, else from the payload', () => {
  assert.equal(
    normalize(
      webhookPayload('p', (p) => (p.agentId = 'payload-agent')),
      'path-agent',
    ).agentId,
    'path-agent',
  );
  assert.equal(
    normalize(
      webhookPayload('p', (p) => (p.agentId = 'payload-agent')),
      null,
    ).agentId,
    'payload-agent',
  );
  assert.equal(normalize(webhookPayload('p'), null).key, 'ai-agent:-:p');
});

test('users: entries that are not readable users are dropped, numbers taken as text', () => {
  const call = normalize(
    webhookPayload('x', (p) => {
      p.call.users = [
        { userId: 42, firstName: 'Ada', lastName: null },
        'not a user',
        null,
        { userId: 'u-2', firstName: { given: 'Bob' } },
        ['u-3'],
        { fullName: 'Grace Hopper', accountId: 7 },
      ];
    }),
  );
  assert.deepEqual(call.users, [
    { userId: '42', accountId: null, fullUserId: null, firstName: 'Ada', lastName: null, fullName: 'Ada' },
    { userId: null, accountId: '7', fullUserId: null, firstName: null, lastName: null, fullName: 'Grace Hopper' },
  ]);
});

test('optional texts: numbers as their text, null and absent alike', () => {
  const call = normalize(
    webhookPayload('x', (p) => {
      p.assist.summary.content = 123;
      p.assist.summary.keyPoints = ['one', null, 2, { k: 'v' }];
      p.assist.callScenarios[0].name = null;
      delete p.assist.transcription.content;
      p.assist.transcription.chunks[0].speaker = null;
      p.assist.transcription.chunks[0].content = 5;
    }),
  );
  assert.equal(call.summary?.content, '123');
  assert.deepEqual(call.summary?.keyPoints, ['one', '2']);
  assert.equal(call.scenarios[0]?.name, '');
  assert.equal(call.transcript?.chunks[0]?.speaker, 'unknown');
  assert.equal(call.transcript?.chunks[0]?.content, '5');
  assert.equal(call.transcript?.content, call.transcript?.chunks.map((c) => c.content).join('\n'));
});

test('what cannot be understood is rejected with a pointer to the field', () => {
  rejects([], '', /JSON object/);
  rejects('text', '', /JSON object/);
  rejects(
    webhookPayload('x', (p) => delete p.version),
    '/version',
    /missing/,
  );
  rejects(
    webhookPayload('x', (p) => delete p.call),
    '/call',
    /missing/,
  );
  rejects(
    webhookPayload('x', (p) => (p.call = 'nope')),
    '/call',
  );
  rejects(
    webhookPayload('x', (p) => delete p.call.id),
    '/call/id',
    /missing/,
  );
  rejects(
    webhookPayload('x', (p) => (p.call.id = '  ')),
    '/call/id',
  );
  rejects(
    webhookPayload('x', (p) => (p.call.id = { a: 1 })),
    '/call/id',
  );
  rejects(
    webhookPayload('x', (p) => delete p.call.from),
    '/call/from',
    /missing/,
  );
  rejects(
    webhookPayload('x', (p) => (p.call.to = ['+49'])),
    '/call/to',
  );
  rejects(
    webhookPayload('x', (p) => (p.call.startTime = 'yesterday')),
    '/call/startTime',
    /not a time/,
  );
  rejects(
    webhookPayload('x', (p) => (p.call.direction = 'sideways')),
    '/call/direction',
    /direction/,
  );
  rejects(
    webhookPayload('x', (p) => {
      delete p.call.endTime;
      delete p.call.duration;
    }),
    '/call/endTime',
    /missing/,
  );
});

test('optional fields of a shape callsync cannot read are read as absent and reported, never refused (issue 20)', () => {
  // These were 400s before: only the required fields may refuse a call.
  const cases: [
    patch: (p: Record<string, any>) => void,
    field: string,
    pointer: string,
    check: (call: ReturnType<typeof normalize>) => void,
  ][] = [
    [
      (p) => (p.assist.transcription.chunks = 'nope'),
      '/assist/transcription/chunks',
      '/assist/transcription/chunks',
      (c) => assert.deepEqual(c.transcript?.chunks, []),
    ],
    [
      (p) => (p.assist.transcription.chunks[1].startTime = 'soon'),
      '/assist/transcription/chunks/*/startTime',
      '/assist/transcription/chunks/1/startTime',
      (c) => assert.equal(c.transcript?.chunks[1]?.startOffsetMs, c.transcript?.chunks[0]?.endOffsetMs),
    ],
    [
      (p) => (p.assist.transcription.chunks[0].endTime = { at: 1 }),
      '/assist/transcription/chunks/*/endTime',
      '/assist/transcription/chunks/0/endTime',
      (c) => assert.equal(c.transcript?.chunks[0]?.endOffsetMs, 3000),
    ],
    [
      (p) => (p.assist.transcription.chunks[0].content = ['a']),
      '/assist/transcription/chunks/*/content',
      '/assist/transcription/chunks/0/content',
      (c) => assert.equal(c.transcript?.chunks[0]?.content, ''),
    ],
    [
      (p) => (p.assist.summary.content = { text: 'x' }),
      '/assist/summary/content',
      '/assist/summary/content',
      (c) => assert.equal(c.summary?.content, ''),
    ],
    [
      (p) => (p.assist.callScenarios[0].name = true),
      '/assist/callScenarios/*/name',
      '/assist/callScenarios/0/name',
      (c) => assert.equal(c.scenarios[0]?.name, ''),
    ],
    [
      (p) => (p.assist.summary = ['just', 'a list']),
      '/assist/summary',
      '/assist/summary',
      (c) => assert.equal(c.summary, null),
    ],
    [(p) => (p.assist = 'not an object'), '/assist', '/assist', (c) => assert.equal(c.transcript, null)],
    [(p) => (p.call.users = { userId: 'w0' }), '/call/users', '/call/users', (c) => assert.deepEqual(c.users, [])],
  ];
  for (const [patch, field, pointer, check] of cases) {
    const body = webhookPayload('x', patch);
    const { call, unread } = readWebhook(body, { agentId: null, receivedAt });
    assert.deepEqual(
      unread.map((u) => [u.field, u.pointer]),
      [[field, pointer]],
      field,
    );
    assert.doesNotMatch(unread[0]!.detail, /soon|just|nope|12345/, 'the detail names types, never the value');
    assert.deepEqual(call.raw, body, 'the original keeps the value');
    check(call);
  }
  // A plain-text summary is the summary's content (both shapes).
  assert.deepEqual(normalize(webhookPayload('x', (p) => (p.assist.summary = 'just text'))).summary, {
    content: 'just text',
    keyPoints: [],
    topics: [],
  });
});

test('every problem is reported at once; pointer and detail are the first', () => {
  const body = webhookPayload('x', (p) => {
    delete p.version;
    p.call.id = '';
    p.call.direction = 'sideways';
    delete p.call.endTime;
    delete p.call.duration;
    p.assist.transcription.chunks[1].startTime = 'soon'; // optional: read as absent, not listed
  });
  assert.throws(
    () => normalize(body),
    (err: unknown) => {
      assert.ok(err instanceof InvalidPayloadError);
      assert.deepEqual(
        err.problems.map((p) => p.pointer),
        ['/version', '/call/id', '/call/direction', '/call/endTime'],
      );
      assert.equal(err.pointer, '/version');
      assert.match(err.detail, /missing/);
      assert.match(err.problems[2]!.detail, /"sideways" is not a direction/);
      assert.match(err.message, /and 3 more/);
      return true;
    },
  );
  // One problem: a list of one.
  assert.throws(
    () => normalize(webhookPayload('x', (p) => delete p.call.from)),
    (err: unknown) => err instanceof InvalidPayloadError && err.problems.length === 1,
  );
});

test('an agent id that names the call must be readable as an id: refused, never read as absent (it is part of the key)', () => {
  const bad: [value: unknown, detail: RegExp][] = [
    [JSON.parse('12345678901234567890'), /2\^53/],
    [{ id: 'a' }, /expected text, got an object/],
    [true, /expected text, got a boolean/],
    [['a'], /expected text, got an array/],
  ];
  for (const [value, detail] of bad) {
    for (const [patch, pointer] of [
      [(p: Record<string, any>) => (p.agentId = value), '/agentId'],
      [(p: Record<string, any>) => (p.call.agentId = value), '/call/agentId'],
    ] as const) {
      const body = webhookPayload('x', patch);
      assert.throws(
        () => normalize(body, null),
        (err: InvalidPayloadError) => err.pointer === pointer && detail.test(err.detail),
        `${pointer} ${JSON.stringify(value)}`,
      );
      // The URL path's agent id names the call: the payload's then identifies nothing and is not read.
      assert.equal(normalize(body, 'path-agent').agentId, 'path-agent');
    }
  }
  // call.agentId wins over agentId: a bad top-level one beside a good call.agentId is not read.
  assert.equal(
    normalize(
      webhookPayload('x', (p) => ((p.call.agentId = 'call-agent'), (p.agentId = { no: 1 }))),
      null,
    ).agentId,
    'call-agent',
  );
});
