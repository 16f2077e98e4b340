// The inbound log's record stores a webhook's transcript once, in the payload (src/model/call.ts,
// encodeCall; docs/reliability.md, section 3): read back, the call is the one the ingress accepted —
// for the platform's documented payloads, the legacy dialect, and random transcripts (chunks with
// and without times, plain text, odd values) — and its content hash is the one the whole record has.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import fc from 'fast-check';
import { encodeCall, type CanonicalCall } from '../src/model/call.js';
import { readWebhook, transcriptFromPayload } from '../src/model/webhook.js';
import { parseStoredCall } from '../queues/inbound.js';
import { webhookPayload } from './support/calls.js';

const fixture = (name: string) => readFileSync(new URL(`./fixtures/platform/${name}`, import.meta.url), 'utf8');

/** Accepts `text` as the ingress does, stores it both ways, reads both back. */
function roundTrip(text: string): { call: CanonicalCall; compact: string; full: string } {
  const { call } = readWebhook(JSON.parse(text), { agentId: null, receivedAt: new Date('2026-12-06T00:00:00Z') });
  assert.equal(transcriptFromPayload(call), call.transcript !== null);
  const compact = encodeCall(call, text, transcriptFromPayload(call));
  const full = encodeCall(call, text);
  assert.equal(compact.contentHash, full.contentHash, 'the content hash does not depend on where the transcript is');
  const back = parseStoredCall(compact.json);
  assert.deepEqual(back, parseStoredCall(full.json));
  assert.deepEqual(back, JSON.parse(JSON.stringify(call)));
  return { call, compact: compact.json, full: full.json };
}

test("the platform's documented payloads: the same call back, the transcript stored once; the legacy dialect (no transcript) as before", () => {
  const legacy = fixture('ai-assistant-webhook-legacy.json');
  assert.equal(roundTrip(legacy).compact, roundTrip(legacy).full);
  for (const name of ['spec-v2.json', 'ci-webhook-current.json']) {
    const text = fixture(name);
    const { call, compact, full } = roundTrip(text);
    const sentence = call.transcript?.chunks[0]?.content || call.transcript?.content;
    assert.ok(sentence, `${name} has a transcript`);
    const times = (s: string) => s.split(JSON.stringify(sentence).slice(1, -1)).length - 1;
    // As often as the payload has it (once, or twice where its text repeats a chunk), no more.
    assert.equal(times(compact), times(text), name);
    assert.ok(times(full) > times(compact), name);
    assert.ok(compact.length < full.length, `${name}: ${compact.length} < ${full.length}`);
  }
});

test('random transcripts (chunks, times, plain text, odd values) come back as they were read', () => {
  const time = fc.oneof(
    fc.constant(undefined),
    fc.constant(null),
    fc.integer({ min: -5, max: 4000 }),
    fc.constantFrom('00:00:01', '1:02', '12.5', 'soon', ''),
  );
  const chunk = fc.record(
    {
      speaker: fc.oneof(
        fc.constantFrom('agent', 'caller', 'AGENT', 'Customer', 'bot'),
        fc.integer(),
        fc.constant(null),
      ),
      content: fc.oneof(fc.string({ maxLength: 40 }), fc.integer(), fc.constant(null)),
      startTime: time,
      endTime: time,
    },
    { requiredKeys: [] },
  );
  const transcription = fc.oneof(
    fc.string({ maxLength: 200 }),
    fc.record({ content: fc.option(fc.string({ maxLength: 200 })), chunks: fc.array(chunk, { maxLength: 8 }) }),
    fc.record({ chunks: fc.oneof(fc.array(chunk, { maxLength: 8 }), fc.constant('none'), fc.constant(null)) }),
    fc.constantFrom(null, 7, [], { storedIn: 'raw' }),
  );
  fc.assert(
    fc.property(
      transcription,
      fc.constantFrom('inbound', 'outbound'),
      fc.integer({ min: 0, max: 7200 }),
      (t, direction, duration) => {
        const text = JSON.stringify(
          webhookPayload('call-rt', (p) => {
            p.assist.transcription = t;
            p.call.direction = direction;
            p.call.duration = duration;
            delete p.call.endTime;
          }),
        );
        roundTrip(text);
      },
    ),
    { numRuns: 500 },
  );
});

test('a payload that holds the marker or the placeholder text itself is stored and read as it came', () => {
  for (const patch of [
    (p: Record<string, any>) => (p.call.channel = { id: 'ch', transcript: { storedIn: 'raw' } }),
    (p: Record<string, any>) => (p.assist.callHeadline = '\u0000callsync-transcript-0123'),
    (p: Record<string, any>) => (p.assist.summary = { content: '{"storedIn":"raw"}' }),
  ]) {
    roundTrip(JSON.stringify(webhookPayload('call-marker', patch)));
  }
});

test('a call whose transcript was changed after it was read is stored whole', () => {
  const text = JSON.stringify(webhookPayload('call-changed'));
  const { call } = readWebhook(JSON.parse(text), { agentId: null, receivedAt: new Date() });
  call.transcript = { content: 'changed', chunks: [] };
  assert.equal(transcriptFromPayload(call), false);
  const stored = encodeCall(call, text, transcriptFromPayload(call)).json;
  assert.deepEqual(parseStoredCall(stored)?.transcript, { content: 'changed', chunks: [] });
});
