// ChannelEvent (spec 2.7) -> canonical call record: direction, from/to, state -> outcome, owner,
// forwarding, timestamps, recordings; clear errors naming the field for unusable events.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { ChannelEventError, normalizeChannelEvent, outcomeOf, parseChannelEvent } from '../src/model/channel-event.js';
import { toE164 } from '../src/model/phone.js';
import { channelEvent } from './support/fake-telephony.js';

const receivedAt = new Date('2025-01-01T10:00:00.000Z');

function errorOf(fn: () => unknown): ChannelEventError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ChannelEventError, `expected ChannelEventError, got ${String(err)}`);
    return err;
  }
  assert.fail('expected an error');
}

describe('normalizeChannelEvent', () => {
  it('maps a finished incoming call', () => {
    const raw = {
      eventId: 'ev-1',
      type: 'CALL',
      createdAt: '2025-01-01T09:01:05Z',
      call: {
        callSid: 'sid-1',
        channelId: 'ch-1',
        direction: 'INCOMING',
        from: '+49 211 1234567',
        to: '+4930987654',
        owner: 'user-7',
        startedAt: '2025-01-01T09:00:00Z',
        establishedAt: '2025-01-01T09:00:05Z',
        terminatedAt: '2025-01-01T09:01:05Z',
        state: 'FINISHED',
        terminatedReason: 'TERMINATED',
        forwarding: { target: '+4917000000', type: 'PARALLEL' },
      },
      recordings: [
        { downloadUrl: '/recordings/r1', type: 'call_recorder' },
        { downloadUrl: '/recordings/r2', type: 'voicemail' },
      ],
    };
    const call = normalizeChannelEvent(raw, receivedAt, { channelId: 'ch-1' });
    assert.deepEqual(call, {
      key: 'channel:ch-1:ev-1',
      source: 'channel',
      callId: 'sid-1',
      agentId: null,
      channelId: 'ch-1',
      eventId: 'ev-1',
      direction: 'in',
      from: '+492111234567',
      to: '+4930987654',
      fromRaw: '+49 211 1234567',
      toRaw: '+4930987654',
      startedAt: '2025-01-01T09:00:00.000Z',
      endedAt: '2025-01-01T09:01:05.000Z',
      durationSec: 60,
      outcome: 'answered',
      users: [],
      owner: 'user-7',
      forwarding: { target: '+4917000000', type: 'PARALLEL' },
      channel: null,
      summary: null,
      scenarios: [],
      transcript: null,
      recordings: [
        { downloadUrl: '/recordings/r1', type: 'call_recorder' },
        { downloadUrl: '/recordings/r2', type: 'voicemail' },
      ],
      payloadVersion: null,
      receivedAt: '2025-01-01T10:00:00.000Z',
      raw,
    });
    assert.equal(call.raw, raw, 'raw is the event verbatim');
  });

  it('outgoing: from is the channel number, to the remote party (caller -> callee, as sent)', () => {
    const call = normalizeChannelEvent(
      channelEvent({
        eventId: 'ev-2',
        call: { direction: 'OUTGOING', from: '+4930987654', to: '0049 151 2345678', owner: 'user-1' },
      }),
      receivedAt,
    );
    assert.equal(call.direction, 'out');
    assert.equal(call.from, '+4930987654');
    assert.equal(call.to, '+491512345678');
    assert.equal(call.owner, 'user-1');
  });

  it('a missed incoming call: no owner, no establishedAt, duration 0', () => {
    const call = normalizeChannelEvent(
      channelEvent({ eventId: 'ev-3', call: { state: 'MISSED', owner: null, establishedAt: null, from: '<unknown>' } }),
      receivedAt,
    );
    assert.equal(call.outcome, 'missed');
    assert.equal(call.owner, null);
    assert.equal(call.durationSec, 0);
    assert.equal(call.from, null, 'anonymous caller');
    assert.equal(call.fromRaw, '<unknown>');
  });

  it('an event of a running call has no end', () => {
    const call = normalizeChannelEvent(
      channelEvent({
        eventId: 'ev-4',
        call: { state: 'RINGING', establishedAt: null, terminatedAt: null, owner: null },
      }),
      receivedAt,
    );
    assert.equal(call.outcome, 'unknown');
    assert.equal(call.endedAt, null);
    assert.equal(call.durationSec, null);
  });

  it('keeps unknown fields and unknown states without failing', () => {
    const raw = channelEvent({ eventId: 'ev-5', future: { x: 1 }, call: { state: 'PARKED', mood: 'happy' } });
    const call = normalizeChannelEvent(raw, receivedAt);
    assert.equal(call.outcome, 'unknown');
    assert.deepEqual((call.raw as { future: unknown }).future, { x: 1 });
  });

  it('the key uses the polled channel and the event id; the call id is the callSid', () => {
    const a = normalizeChannelEvent(
      channelEvent({ eventId: 'ev-6', call: { callSid: 'same', channelId: null } }),
      receivedAt,
      { channelId: 'polled' },
    );
    const b = normalizeChannelEvent(
      channelEvent({ eventId: 'ev-7', call: { callSid: 'same', channelId: null } }),
      receivedAt,
      { channelId: 'polled' },
    );
    assert.equal(a.key, 'channel:polled:ev-6');
    assert.equal(a.channelId, 'polled');
    assert.notEqual(a.key, b.key, 'two events of one call are two deliveries');
    assert.equal(a.callId, b.callId);
  });

  it('falls back to establishedAt or createdAt for the start', () => {
    const call = normalizeChannelEvent(
      channelEvent({
        eventId: 'ev-8',
        createdAt: '2025-02-01T00:00:00Z',
        call: { startedAt: null, establishedAt: null },
      }),
      receivedAt,
    );
    assert.equal(call.startedAt, '2025-02-01T00:00:00.000Z');
  });
});

describe('outcomeOf', () => {
  const cases: [string | null, boolean, string | null, 'INCOMING' | 'OUTGOING', string][] = [
    ['FINISHED', true, 'u', 'INCOMING', 'answered'],
    ['FINISHED', false, 'u', 'INCOMING', 'answered'],
    ['FINISHED', false, null, 'INCOMING', 'missed'],
    ['FINISHED', false, 'u', 'OUTGOING', 'missed'],
    ['ESTABLISHED', true, 'u', 'INCOMING', 'answered'],
    ['RINGING', false, null, 'INCOMING', 'unknown'],
    ['MISSED', false, null, 'INCOMING', 'missed'],
    ['REJECTED', false, null, 'INCOMING', 'rejected'],
    ['BUSY', false, null, 'OUTGOING', 'busy'],
    ['TRANSFERRING', true, 'u', 'INCOMING', 'transferred'],
    ['TRANSFERRED', true, 'u', 'INCOMING', 'transferred'],
    ['TRANSFER_FAILED', true, 'u', 'INCOMING', 'failed'],
    ['CLIENT_ERROR', false, null, 'OUTGOING', 'failed'],
    ['UNKNOWN', false, null, 'INCOMING', 'unknown'],
    [null, true, null, 'INCOMING', 'answered'],
    [null, false, null, 'INCOMING', 'unknown'],
  ];
  for (const [state, established, owner, direction, expected] of cases) {
    it(`${state ?? '(no state)'} ${established ? 'established' : 'not established'} ${direction} owner=${owner} -> ${expected}`, () => {
      assert.equal(
        outcomeOf({ state, establishedAt: established ? '2025-01-01T00:00:00Z' : null, owner, direction }),
        expected,
      );
    });
  }
});

describe('unusable events', () => {
  it('names the missing field and the event', () => {
    const err = errorOf(() =>
      normalizeChannelEvent(
        { eventId: 'ev-x', type: 'CALL', call: { direction: 'INCOMING', startedAt: '2025-01-01T00:00:00Z' } },
        receivedAt,
        { channelId: 'c' },
      ),
    );
    assert.equal(err.message, 'ChannelEvent ev-x: call.callSid: required field missing');
    assert.deepEqual(err.fields, ['call.callSid']);
    assert.equal(err.eventId, 'ev-x');
  });

  it('an event without eventId', () => {
    const err = errorOf(() => normalizeChannelEvent({ type: 'CALL', call: {} }, receivedAt));
    assert.match(err.message, /^ChannelEvent \(no eventId\): eventId: required field missing/);
    assert.equal(err.eventId, null);
  });

  it('a direction in another case (incoming, Out) is read; it is needed, so one that is neither refuses', () => {
    for (const [given, direction] of [
      ['incoming', 'in'],
      [' Outgoing ', 'out'],
      ['IN', 'in'],
      ['out', 'out'],
    ] as const)
      assert.equal(
        normalizeChannelEvent(channelEvent({ eventId: `d-${given}`, call: { direction: given } }), receivedAt)
          .direction,
        direction,
        given,
      );
  });

  it('a bad direction, or no readable start time at all', () => {
    assert.match(
      errorOf(() => normalizeChannelEvent(channelEvent({ eventId: 'a', call: { direction: 'SIDEWAYS' } }), receivedAt))
        .message,
      /call\.direction: Invalid option/,
    );
    assert.match(
      errorOf(() =>
        normalizeChannelEvent(
          channelEvent({ eventId: 'b', createdAt: 'never', call: { startedAt: 'yesterday', establishedAt: null } }),
          receivedAt,
        ),
      ).message,
      /ChannelEvent b: call\.startedAt: required field missing or not an ISO-8601 timestamp/,
    );
  });

  it('never refuses a call for an optional field it cannot read: read as absent, reported, kept in raw', () => {
    const raw = channelEvent({
      eventId: 'odd-1',
      createdAt: 'soon',
      recordings: [
        { downloadUrl: '/r/1', type: 'hologram' },
        { type: 'voicemail' },
        'x',
        { downloadUrl: '/r/2', type: 'voicemail' },
      ],
      call: {
        startedAt: '2025-01-01T09:00:00Z',
        establishedAt: '',
        terminatedAt: 'later',
        forwarding: 'none',
        from: { number: '+4921112345' },
        owner: 42,
        state: ['FINISHED'],
        terminatedReason: false,
      },
    });
    const parsed = parseChannelEvent(raw);
    assert.equal(parsed.kind, 'call');
    if (parsed.kind !== 'call') return;
    assert.deepEqual(parsed.unread.map((u) => u.field).sort(), [
      'call.forwarding',
      'call.from',
      'call.state',
      'call.terminatedAt',
      'call.terminatedReason',
      'createdAt',
      'recordings.*',
      'recordings.*.downloadUrl',
      'recordings.*.type',
    ]);
    assert.ok(
      parsed.unread.every((u) => !u.detail.includes('+49')),
      'no value in the details',
    );
    const call = normalizeChannelEvent(raw, receivedAt, { channelId: 'c' });
    assert.equal(call.callId, 'call-odd-1');
    assert.equal(call.from, null);
    assert.equal(call.owner, '42');
    assert.equal(call.outcome, 'answered', 'no readable state, but an accepting owner on an incoming call');
    assert.equal(call.endedAt, null);
    assert.equal(call.forwarding, null);
    assert.deepEqual(call.recordings, [{ downloadUrl: '/r/2', type: 'voicemail' }]);
    assert.equal(call.startedAt, '2025-01-01T09:00:00.000Z');
    assert.deepEqual(call.raw, raw, 'the event verbatim');

    // An unreadable startedAt falls back to establishedAt, then createdAt.
    const fallback = normalizeChannelEvent(
      channelEvent({ eventId: 'odd-2', call: { startedAt: 'yesterday', establishedAt: '2025-01-01T09:00:05Z' } }),
      receivedAt,
      { channelId: 'c' },
    );
    assert.equal(fallback.startedAt, '2025-01-01T09:00:05.000Z');
  });

  it('an event without a type but with a call is a CALL event', () => {
    const raw = channelEvent({ eventId: 'nt-1' });
    delete raw.type;
    assert.equal(normalizeChannelEvent(raw, receivedAt, { channelId: 'c' }).eventId, 'nt-1');
    assert.deepEqual(
      errorOf(() => parseChannelEvent({ eventId: 'nt-2' })).fields,
      ['type'],
      'no type and no call: nothing to read',
    );
  });

  it('a CALL event without call, and not an object at all', () => {
    assert.match(
      errorOf(() => normalizeChannelEvent({ eventId: 'e', type: 'CALL' }, receivedAt)).message,
      /ChannelEvent e: call: required field missing/,
    );
    assert.match(errorOf(() => normalizeChannelEvent('garbage', receivedAt)).message, /expected an object, got string/);
    assert.match(errorOf(() => normalizeChannelEvent(null, receivedAt)).message, /got null/);
  });

  it('no channel anywhere', () => {
    const err = errorOf(() =>
      normalizeChannelEvent(channelEvent({ eventId: 'f', call: { channelId: null } }), receivedAt),
    );
    assert.deepEqual(err.fields, ['call.channelId']);
  });

  it('events of another type are recognised and skipped by parseChannelEvent', () => {
    const parsed = parseChannelEvent({ eventId: 'sms-1', type: 'SMS', sms: {} });
    assert.equal(parsed.kind, 'ignored');
    assert.throws(() => normalizeChannelEvent({ eventId: 'sms-1', type: 'SMS' }, receivedAt), ChannelEventError);
  });

  it('any JSON value either normalizes or throws ChannelEventError (never anything else)', () => {
    const eventLike = fc.record(
      {
        eventId: fc.oneof(fc.string(), fc.constant(null), fc.integer()),
        type: fc.oneof(fc.constant('CALL'), fc.string()),
        createdAt: fc.oneof(fc.constant('2025-01-01T00:00:00Z'), fc.string(), fc.constant(null)),
        call: fc.oneof(
          fc.constant(null),
          fc.record(
            {
              callSid: fc.oneof(fc.string(), fc.integer()),
              channelId: fc.oneof(fc.string(), fc.constant(null)),
              direction: fc.oneof(fc.constantFrom('INCOMING', 'OUTGOING'), fc.string()),
              from: fc.oneof(fc.string(), fc.constant(null)),
              to: fc.oneof(fc.string(), fc.constant(null)),
              startedAt: fc.oneof(
                fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
                fc.string(),
              ),
              establishedAt: fc.oneof(
                fc.constant(null),
                fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
              ),
              terminatedAt: fc.oneof(
                fc.constant(null),
                fc.date({ noInvalidDate: true }).map((d) => d.toISOString()),
              ),
              state: fc.oneof(fc.constantFrom('FINISHED', 'MISSED', 'BUSY', 'RINGING'), fc.string(), fc.constant(null)),
              owner: fc.oneof(fc.string(), fc.constant(null)),
              forwarding: fc.oneof(fc.constant(null), fc.record({ target: fc.string(), type: fc.string() })),
            },
            { requiredKeys: [] },
          ),
        ),
        recordings: fc.oneof(
          fc.constant(null),
          fc.array(fc.record({ downloadUrl: fc.string(), type: fc.constantFrom('voicemail', 'x') })),
        ),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.oneof(eventLike, fc.jsonValue()), (raw) => {
        try {
          const call = normalizeChannelEvent(raw, receivedAt, { channelId: 'c' });
          assert.equal(call.source, 'channel');
          assert.ok(!Number.isNaN(Date.parse(call.startedAt)));
        } catch (err) {
          if (!(err instanceof ChannelEventError)) throw err;
        }
      }),
      { numRuns: 2000 },
    );
  });
});

describe('toE164', () => {
  it('normalizes international forms and rejects the rest', () => {
    assert.equal(toE164('+49 (211) 123-45.67'), '+492111234567');
    assert.equal(toE164('0049211123'), '+49211123');
    assert.equal(toE164('0211123456'), null);
    assert.equal(toE164('anonymous'), null);
    assert.equal(toE164('+0123'), null);
    assert.equal(toE164(null), null);
  });

  it('reads the digits of any script as digits (an Arabic phone sends ٠١٢…), keeping what is not a number out', () => {
    assert.equal(toE164('+٤٩ ١٧٠ ١٢٣٤٥٦٧'), '+491701234567', 'Arabic-Indic');
    assert.equal(toE164('۰۰۴۹۱۷۰۱۲۳۴۵۶۷'), '+491701234567', 'Persian, with 00');
    assert.equal(toE164('+४९१७०१२३४५६७'), '+491701234567', 'Devanagari');
    assert.equal(toE164('＋４９ １７０ １２３４５６７'), '+491701234567', 'full-width, its plus too');
    assert.equal(toE164('٠١٧٠١٢٣٤٥٦٧'), null, 'national, as in ASCII');
    assert.equal(toE164('+٤٩١٧٠a١٢٣٤٥٦٧'), null);
  });
});
