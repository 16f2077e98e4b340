// The hand-written reading of the required fields (src/model/webhook.ts, `requiredFieldsFast`) is
// zod's for every payload it takes, and leaves every payload zod refuses to zod (which alone builds
// the refusal, with its pointers).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { requiredFieldsFast, webhookPayloadSchema } from '../src/model/webhook.js';
import { minimalPayload, webhookPayload } from './support/calls.js';

function agrees(fields: Record<string, unknown>): 'fast' | 'zod' {
  const fast = requiredFieldsFast(fields);
  const zod = webhookPayloadSchema.safeParse(fields);
  if (fast === null) return 'zod';
  assert.ok(zod.success, `fast path took a payload zod refuses: ${JSON.stringify(fields)}`);
  assert.deepEqual(fast, zod.data);
  return 'fast';
}

test('the common payloads take the fast path, with zod’s reading', () => {
  assert.equal(agrees(webhookPayload('c-1')), 'fast');
  assert.equal(agrees(minimalPayload()), 'fast');
});

const call = (patch: Record<string, unknown>) => {
  const p = minimalPayload() as Record<string, any>;
  Object.assign(p.call, patch);
  for (const k of Object.keys(patch)) if (patch[k] === '<absent>') delete p.call[k];
  return p;
};

test('values at the edges: the fast path agrees with zod or leaves them to it', () => {
  const cases: Record<string, unknown>[] = [
    { ...minimalPayload(), version: 2 },
    { ...minimalPayload(), version: ' V2 ' },
    { ...minimalPayload(), version: '' },
    { ...minimalPayload(), version: null },
    { ...minimalPayload(), version: true },
    { ...minimalPayload(), call: [] },
    { ...minimalPayload(), call: null },
    { version: 'v1' },
    call({ id: 12345 }),
    call({ id: 2 ** 60 }),
    call({ id: 1.5 }),
    call({ id: '  ' }),
    call({ id: 'a\ud800b' }),
    call({ id: '<absent>' }),
    call({ from: 492116355340, to: null }),
    call({ from: {} }),
    call({ startTime: '2026-04-08T10:00:00Z' }),
    call({ startTime: '1775642400' }),
    call({ startTime: 1775642400 }),
    call({ startTime: 1775642400000.6 }),
    call({ startTime: 'yesterday' }),
    call({ startTime: 9e15 }),
    call({ startTime: true }),
    call({ endTime: null }),
    call({ endTime: '<absent>' }),
    call({ endTime: 'nope' }),
    call({ endTime: ' 1775642460000 ' }),
    call({ duration: '60' }),
    call({ duration: ' 60.5 ' }),
    call({ duration: -1 }),
    call({ duration: '-1' }),
    call({ duration: '1e3' }),
    call({ duration: null }),
    call({ duration: '<absent>' }),
    call({ duration: [] }),
    call({ direction: ' Inbound ' }),
    call({ direction: 'MISSED_OUTGOING' }),
    call({ direction: 'sideways' }),
    call({ direction: 1 }),
    call({ direction: null }),
  ];
  for (const c of cases) agrees(c);
});

test('any JSON in the required fields: the fast path agrees with zod or leaves them to it', () => {
  const scalar = fc.oneof(
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.string(),
    fc.constantFrom('v2', '2', ' in ', 'OUT', '60', '-0', '2026-04-08T10:00:00Z', '1775642400', '\ud800'),
  );
  const value = fc.oneof(scalar, fc.constant([]), fc.constant({}), fc.constant(undefined));
  fc.assert(
    fc.property(
      fc.record({
        version: value,
        id: value,
        from: value,
        to: value,
        startTime: value,
        endTime: value,
        duration: value,
        direction: value,
      }),
      (r) => {
        const { version, ...rest } = r;
        agrees({ version, call: { ...rest, users: [] } });
      },
    ),
    { numRuns: 3000 },
  );
});
