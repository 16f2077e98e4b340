// vCon in and out: the vCon the archive writes validates against the working group's JSON schema
// (a copy in test/fixtures/vcon), a vCon posted in becomes the canonical call, and a call survives
// the round trip (parties, transcript, summary, key points, topics).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { CanonicalCall } from '../src/model/call.js';
import { isVcon, normalizeVcon, renderVcon, vconUuid } from '../src/model/vcon.js';
import { InvalidPayloadError } from '../src/model/webhook.js';
import { createIngressApp } from '../src/ingress/app.js';
import { createLogger } from '../src/log.js';
import { aiAgentSource } from '../src/sources/ai-agent.js';
import type { Refusal } from '../queues/timeline.js';
import { webhookConfig } from './support/webhook-config.js';
import { sampleCall, webhookPayload } from './support/calls.js';

// ajv 6 (a devDependency; eslint uses the same one): draft-07 is its default meta-schema.
const Ajv = createRequire(import.meta.url)('ajv') as new (options: Record<string, unknown>) => {
  compile(schema: unknown): ((data: unknown) => boolean) & { errors?: { dataPath: string; message?: string }[] | null };
};
const schema: unknown = JSON.parse(
  readFileSync(new URL('./fixtures/vcon/vcon_json_schema.json', import.meta.url), 'utf8'),
);
const validate = new Ajv({ allErrors: true, format: 'full' }).compile(schema);

function assertValid(vcon: unknown): void {
  const ok = validate(vcon);
  assert.ok(ok, JSON.stringify(validate.errors));
}

const receivedAt = new Date('2026-10-05T12:00:00Z');

function withTranscript(): CanonicalCall {
  const call = sampleCall('c-vcon', { agentId: 'agent-1' });
  assert.ok(call.transcript && call.transcript.chunks.length >= 2, 'fixture has transcript chunks');
  assert.ok(call.summary && call.summary.topics.length > 0, 'fixture has topics');
  return call;
}

describe('vCon written by the archive', () => {
  test('a call with transcript and summary gives a vCon valid against the schema', () => {
    const vcon = renderVcon(withTranscript());
    assertValid(vcon);
    const v = vcon as {
      parties: { tel?: string }[];
      dialog: { type: string; originator?: number }[];
      analysis: { type: string; vendor: string }[];
    };
    assert.equal(v.parties.length, 2);
    assert.ok(v.dialog.length >= 2 && v.dialog.every((d) => d.type === 'text'));
    const call = withTranscript();
    const expected = ['summary', ...(call.summary!.keyPoints.length > 0 ? ['key_points'] : []), 'topics'];
    assert.deepEqual(
      v.analysis.map((a) => a.type),
      expected,
    );
    assert.ok(v.analysis.every((a) => a.vendor === 'callsync'));
  });

  test('a missed call without transcript, and an anonymous caller, are valid vCons too', () => {
    const call: CanonicalCall = {
      ...withTranscript(),
      transcript: null,
      summary: null,
      outcome: 'missed',
      from: null,
      fromRaw: 'anonymous',
    };
    const vcon = renderVcon(call) as {
      dialog: { type: string; disposition?: string }[];
      parties: Record<string, unknown>[];
    };
    assertValid(vcon);
    assert.deepEqual(
      vcon.dialog.map((d) => [d.type, d.disposition]),
      [['incomplete', 'no-answer']],
    );
    assert.equal(vcon.parties[0]!.tel, undefined);
  });

  test('utterance offsets out of range still give a valid vCon (the call start stands in)', () => {
    const call = withTranscript();
    const odd: CanonicalCall = {
      ...call,
      transcript: {
        content: 'x',
        chunks: [{ speaker: 'caller', startOffsetMs: 1e300, endOffsetMs: Infinity, content: 'x' }],
      },
    };
    assertValid(renderVcon(odd));
  });

  test('the uuid is a stable version 8 UUID per call', () => {
    const call = withTranscript();
    assert.equal(vconUuid(call), vconUuid({ ...call }));
    assert.notEqual(vconUuid(call), vconUuid({ ...call, key: `${call.key}x` }));
    assert.match(vconUuid(call), /^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
  });

  test('the validator is not vacuous: broken vCons fail it', () => {
    const good = renderVcon(withTranscript());
    assert.equal(validate({ ...good, uuid: undefined }), false);
    assert.equal(validate({ ...good, created_at: 'yesterday' }), false);
    assert.equal(validate({ ...good, dialog: [{ type: 'chat', start: '2026-10-05T12:00:00Z' }] }), false);
    assert.equal(validate({ ...good, analysis: [{ type: 'summary', body: 'x' }] }), false);
  });
});

describe('vCon posted in', () => {
  test("the draft's own example vCons are calls, read whole (test/fixtures/vcon/SOURCE.md)", () => {
    const example = (name: string) =>
      JSON.parse(readFileSync(new URL(`./fixtures/vcon/examples/${name}`, import.meta.url), 'utf8')) as unknown;
    const simple = example('simple-vcon.vcon');
    assert.equal(isVcon(simple), true);
    const bare = normalizeVcon(simple, { agentId: null, receivedAt });
    assert.deepEqual(bare.unread, []);
    assert.equal(bare.call.callId, '0199e054-ed10-8035-b9a2-279e0d16bc46');
    assert.equal(bare.call.from, '+12345678901');
    assert.equal(bare.call.to, '+19876543210');
    assert.equal(bare.call.startedAt, receivedAt.toISOString(), 'no dialog and no created_at: when it came');
    assert.equal(bare.call.transcript, null);
    assert.equal(bare.call.summary, null);

    const recorded = example('ab_call_ext_rec.vcon');
    assert.equal(isVcon(recorded), true);
    const { call, unread } = normalizeVcon(recorded, { agentId: 'agent-1', receivedAt });
    assert.deepEqual(unread, []);
    assert.equal(call.key, 'ai-agent:agent-1:0199e054-ed10-8035-b9a2-279e0d16bc46');
    assert.equal(call.startedAt, '2022-06-21T17:53:26.000Z');
    assert.equal(call.endedAt, '2022-06-21T17:53:59.120Z');
    assert.equal(call.durationSec, 33);
    assert.equal(call.outcome, 'answered');
    assert.deepEqual(call.raw, recorded, 'kept as sent');
  });

  test('isVcon tells a vCon from the platform payload', () => {
    assert.equal(isVcon(renderVcon(withTranscript())), true);
    assert.equal(isVcon(webhookPayload('c-1')), false);
    assert.equal(isVcon({ uuid: 'x' }), false);
    assert.equal(isVcon(null), false);
  });

  test('round trip: parties, transcript, summary, key points and topics come back', () => {
    const call = withTranscript();
    const vcon = JSON.parse(JSON.stringify(renderVcon(call))) as Record<string, unknown>;
    const { call: back, unread } = normalizeVcon(vcon, { agentId: 'agent-1', receivedAt });
    assert.deepEqual(unread, [], 'a vCon callsync wrote is read whole');
    assert.equal(back.source, 'ai-agent');
    assert.equal(back.callId, vcon.uuid);
    assert.equal(back.key, `ai-agent:agent-1:${String(vcon.uuid)}`);
    assert.equal(back.from, call.from);
    assert.equal(back.to, call.to);
    assert.equal(
      back.startedAt,
      new Date(Date.parse(call.startedAt) + call.transcript!.chunks[0]!.startOffsetMs).toISOString(),
    );
    const shift = call.transcript!.chunks[0]!.startOffsetMs;
    assert.deepEqual(
      back.transcript!.chunks,
      call.transcript!.chunks.map((c) => ({
        ...c,
        startOffsetMs: c.startOffsetMs - shift,
        endOffsetMs: c.endOffsetMs - shift,
      })),
    );
    assert.deepEqual(back.summary, call.summary);
    assert.equal(back.payloadVersion, 'vcon');
    assert.deepEqual(back.raw, vcon);
    // Written again, the same uuid: the call is the same one.
    assert.equal((renderVcon(back) as { uuid: string }).uuid, vcon.uuid);
  });

  test("a speaker callsync cannot place keeps its name: read from the party's name or the originator's text, written as a party of its own", () => {
    const sent = {
      uuid: 'u-label',
      parties: [{ tel: '+4915112345678' }, { tel: '+4921155550100' }, { name: 'Front desk' }, { tel: '+4930123' }],
      dialog: [
        { type: 'text', start: '2026-10-05T09:00:00Z', duration: 2, originator: 2, body: 'hello' },
        { type: 'text', start: '2026-10-05T09:00:02Z', duration: 2, originator: 'Reception', body: 'hi' },
        { type: 'text', start: '2026-10-05T09:00:04Z', duration: 2, originator: 3, body: 'no name' },
        { type: 'text', start: '2026-10-05T09:00:06Z', duration: 2, originator: 0, body: 'caller' },
      ],
    };
    const { call, unread } = normalizeVcon(sent, { agentId: 'agent-1', receivedAt });
    assert.deepEqual(
      call.transcript?.chunks.map((c) => [c.speaker, c.speakerLabel]),
      [
        ['unknown', 'Front desk'],
        ['unknown', 'Reception'],
        ['unknown', undefined],
        ['caller', undefined],
      ],
      'a party without a name gives no label (never its number)',
    );
    assert.deepEqual(
      unread.map((u) => u.field),
      ['/dialog/*/originator'],
      'still counted',
    );
    const vcon = JSON.parse(JSON.stringify(renderVcon(call))) as {
      parties: { name?: string; tel?: string }[];
      dialog: { originator?: number; parties: number[] }[];
    };
    assertValid(vcon);
    assert.deepEqual(vcon.parties.slice(2), [{ name: 'Front desk' }, { name: 'Reception' }]);
    assert.deepEqual(
      vcon.dialog.map((d) => d.originator),
      [2, 3, undefined, 0],
    );
    const back = normalizeVcon(vcon, { agentId: 'agent-1', receivedAt }).call;
    assert.deepEqual(back.transcript?.chunks, call.transcript?.chunks, 'read back, the same speakers and labels');
  });

  test('only the uuid refuses a vCon: what callsync cannot read elsewhere is read as absent and reported', () => {
    // Before: a 400 for a bad created_at, a party that is not an object, an analysis that is not a
    // list, a dialog without a start or with a duration beyond reason — none of them identifies the call.
    assert.throws(
      () => normalizeVcon({ uuid: '', parties: [] }, { agentId: null, receivedAt }),
      (e: unknown) => e instanceof InvalidPayloadError && e.pointer === '/uuid',
    );
    const odd = {
      uuid: 'u-odd',
      created_at: 'yesterday',
      parties: ['x', { tel: '+4915112345678' }],
      dialog: [
        { type: 'text' },
        'hello',
        { type: 'text', start: '2026-10-05T09:00:00Z', duration: 1e300, originator: 1, body: 'kept' },
        { type: 'text', start: '2026-10-05T09:00:05Z', duration: 5, originator: 0, body: 'read' },
      ],
      analysis: {},
    };
    const { call, unread } = normalizeVcon(odd, { agentId: null, receivedAt });
    assert.equal(call.callId, 'u-odd');
    assert.equal(call.from, null);
    assert.equal(call.to, '+4915112345678');
    assert.equal(call.startedAt, '2026-10-05T09:00:00.000Z');
    assert.deepEqual(
      call.transcript?.chunks.map((c) => [c.speaker, c.content]),
      [
        ['callee', 'kept'],
        ['caller', 'read'],
      ],
    );
    assert.equal(call.summary, null);
    assert.deepEqual(call.raw, odd, 'kept as sent');
    assert.deepEqual(
      unread.map((u) => [u.field, u.pointer]),
      [
        ['/created_at', '/created_at'],
        ['/parties/*', '/parties/0'],
        ['/analysis', '/analysis'],
        ['/dialog/*/start', '/dialog/0/start'],
        ['/dialog/*', '/dialog/1'],
        ['/dialog/*/duration', '/dialog/2/duration'],
      ],
    );
    for (const detail of unread.map((u) => u.detail)) assert.doesNotMatch(detail, /yesterday|hello/, 'never the value');
    // A dialog list that is not a list, and no dates at all: the call starts when it came.
    const bare = normalizeVcon({ uuid: 'u-bare', parties: [], dialog: 'none' }, { agentId: null, receivedAt });
    assert.equal(bare.call.startedAt, receivedAt.toISOString());
    assert.deepEqual(
      bare.unread.map((u) => u.field),
      ['/dialog'],
    );
  });

  test('numbers as text, a body that is an object with text read by it; what is still unread is counted, never dropped silently', () => {
    // Before: the number's tel, the {text} bodies and the plain key points were read as absent, and
    // nothing counted (nor the originator of no party).
    const odd = {
      vcon: '0.0.1',
      uuid: 'vcb-1',
      created_at: '2026-04-08T10:00:00Z',
      parties: [{ tel: 4921163553400 }, { tel: '+4921155550100' }],
      dialog: [
        { type: 'text', start: '2026-04-08T10:00:01Z', duration: 3, parties: [0], originator: 0, body: { text: 'hi' } },
        { type: 'text', start: '2026-04-08T10:00:05Z', duration: 2, parties: [1], originator: 1, body: 'hello' },
        { type: 'text', start: '2026-04-08T10:00:08Z', duration: 1, parties: [1], originator: 5, body: 'who?' },
        { type: 'text', start: '2026-04-08T10:00:09Z', duration: 1, parties: [1], originator: 1, body: [true] },
      ],
      analysis: [
        { type: 'summary', vendor: 'v', body: { text: 'sum' } },
        { type: 'key_points', vendor: 'v', body: 'a; b' },
        { type: 'topics', vendor: 'v', encoding: 'json', body: '["billing", 7, {"x": 1}]' },
        'not an analysis',
      ],
    };
    const { call, unread } = normalizeVcon(odd, { agentId: 'agent-1', receivedAt });
    assert.equal(call.fromRaw, '4921163553400');
    assert.equal(call.from, '+4921163553400');
    assert.equal(call.to, '+4921155550100');
    assert.deepEqual(
      call.transcript?.chunks.map((c) => [c.speaker, c.content]),
      [
        ['caller', 'hi'],
        ['callee', 'hello'],
        ['unknown', 'who?'],
      ],
    );
    assert.deepEqual(call.summary, { content: 'sum', keyPoints: ['a; b'], topics: ['billing', '7'] });
    assert.deepEqual(call.raw, odd, 'kept as sent');
    assert.deepEqual(
      unread.map((u) => [u.field, u.pointer]),
      [
        ['/analysis/*', '/analysis/3'],
        ['/dialog/*/originator', '/dialog/2/originator'],
        ['/dialog/*/body', '/dialog/3/body'],
        ['/analysis/*/body/*', '/analysis/2/body/2'],
      ],
    );
    // A body of no readable shape: absent, not an empty summary.
    const bare = normalizeVcon(
      { uuid: 'vcb-2', parties: [{ tel: true }], analysis: [{ type: 'summary', body: { html: '<b>x</b>' } }] },
      { agentId: null, receivedAt },
    );
    assert.equal(bare.call.summary, null);
    assert.equal(bare.call.fromRaw, null);
    assert.deepEqual(
      bare.unread.map((u) => u.field),
      ['/analysis/*/body', '/parties/*/tel'],
    );
  });

  test('durations beyond reason and dates beyond range are read as absent, never a crash; many dialogs are fine', () => {
    const base = { uuid: 'u-1', parties: [{}, {}] };
    for (const duration of [-1, 1e300, 'long', null]) {
      const { call, unread } = normalizeVcon(
        { ...base, dialog: [{ type: 'text', start: '2026-10-05T09:00:00Z', duration }] },
        { agentId: null, receivedAt },
      );
      assert.equal(call.endedAt, '2026-10-05T09:00:00.000Z', String(duration));
      assert.equal(unread[0]?.pointer, '/dialog/0/duration', String(duration));
    }
    const edge = normalizeVcon(
      { ...base, dialog: [{ type: 'text', start: '+275760-09-13T00:00:00Z', duration: 600000 }] },
      { agentId: null, receivedAt },
    );
    assert.equal(edge.call.startedAt, '+275760-09-13T00:00:00.000Z');
    assert.equal(edge.unread[0]?.pointer, '/dialog/0/duration');
    const many = Array.from({ length: 150_000 }, (_, i) => ({
      type: 'text',
      start: new Date(Date.parse('2026-10-05T09:00:00Z') + i).toISOString(),
      body: 'x',
      encoding: 'none',
    }));
    const { call } = normalizeVcon({ ...base, dialog: many }, { agentId: null, receivedAt });
    assert.equal(call.transcript?.chunks.length, 150_000);
    assert.equal(call.startedAt, '2026-10-05T09:00:00.000Z');
  });

  test('base64url bodies and a transcript given only as analysis are read', () => {
    const { call: back } = normalizeVcon(
      {
        uuid: '019f15a6-a752-826f-b9a2-279e0d16bc46',
        created_at: '2026-10-05T09:00:00Z',
        parties: [{ tel: '+4921155550100' }, { tel: '+4915112345678' }],
        dialog: [
          {
            type: 'recording',
            start: '2026-10-05T09:00:00Z',
            duration: 42,
            parties: [0, 1],
            url: 'https://example.com/a.mp3',
          },
        ],
        analysis: [
          { type: 'transcript', vendor: 'x', encoding: 'none', body: 'Hello there' },
          {
            type: 'summary',
            vendor: 'x',
            encoding: 'base64url',
            body: Buffer.from('Wants a callback').toString('base64url'),
          },
        ],
      },
      { agentId: null, receivedAt },
    );
    assert.equal(back.transcript?.content, 'Hello there');
    assert.deepEqual(back.transcript?.chunks, []);
    assert.equal(back.summary?.content, 'Wants a callback');
    assert.equal(back.durationSec, 42);
    assert.equal(back.from, '+4921155550100');
  });
});

describe('a vCon posted to the AI-agent route', () => {
  // Through app.request(), no Redis: an acceptor that takes every call, refusals kept in a list.
  function ingress() {
    const kept: Refusal[] = [];
    const app = createIngressApp({
      webhook: webhookConfig(),
      acceptor: { accept: async () => ({ id: 'id-1', duplicate: false }) },
      ready: async () => true,
      log: createLogger({ level: 'silent' }),
      refusals: { refused: (r: Refusal) => void kept.push(r) },
      sources: [aiAgentSource()],
    });
    const post = (body: unknown) =>
      app.request('/webhooks/ai-agent/probe', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    return { kept, post };
  }
  const parties = [{ tel: '+12345678901' }, { tel: '+19876543210' }];

  test('without a usable uuid: 400 pointing at /uuid (not /version and /call), kept without a call id', async () => {
    // Before: a body with `vcon` but no string uuid, or no parties array, was read as the platform's
    // payload and refused for its `/version` and `/call`.
    const { kept, post } = ingress();
    const refused = [
      { vcon: '0.0.1', parties, dialog: [] },
      { vcon: '0.0.1', uuid: 123, parties, dialog: [] },
      { vcon: '0.0.1', uuid: '  ', parties },
      { vcon: '0.0.1' },
      { vcon: '0.0.1', parties: {} },
      { uuid: null, parties },
      // A lone surrogate: no id (it hashes as U+FFFD, two calls would share a key), as for call.id.
      { vcon: '0.0.1', uuid: 'v-\ud800', parties },
    ];
    for (const body of refused) {
      const res = await post(body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const answer = (await res.json()) as { errors: { source: { pointer: string } }[] };
      assert.deepEqual(
        answer.errors.map((e) => e.source.pointer),
        ['/uuid'],
        JSON.stringify(body),
      );
    }
    assert.deepEqual(
      kept.map((r) => [r.callId, r.pointer]),
      refused.map(() => [null, '/uuid']),
    );
  });

  test('with a uuid, anything else missing or unreadable is accepted', async () => {
    const { kept, post } = ingress();
    for (const body of [
      { vcon: '0.0.1', uuid: 'v-1' },
      { vcon: '0.0.1', uuid: 'v-2', parties: {} },
      { vcon: '0.0.1', uuid: 'v-3', parties, dialog: [] },
    ])
      assert.equal((await post(body)).status, 202, JSON.stringify(body));
    assert.deepEqual(kept, []);
    // A `parties` that is no list is read as absent and reported, as `dialog` and `analysis` are.
    const { unread } = normalizeVcon({ vcon: '0.0.1', uuid: 'v-2', parties: {} }, { agentId: null, receivedAt });
    assert.deepEqual(
      unread.map((u) => u.field),
      ['/parties'],
    );
  });
});
