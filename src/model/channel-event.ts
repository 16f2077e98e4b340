// Channel events (spec 2.7: ChannelEvent / ChannelCall / Recording), read from a channel's inbox by
// the poller, validated and normalized into the canonical call record. Unknown fields are kept
// (in `raw`) and never break parsing; a missing or unusable required field is a ChannelEventError
// naming the event and the field.
import { z } from 'zod';
import { callKey, RECORDING_TYPES, type CanonicalCall, type Direction, type Outcome, type Recording } from './call.js';
import { toE164 } from './phone.js';
import { parseUtc } from './utc-time.js';

type RecordingType = (typeof RECORDING_TYPES)[number];

// What identifies a call, and what the record cannot be without, may refuse an event (README
// STYLE: "only what identifies a call may refuse it"): `eventId`, `call.callSid`, `call.direction`,
// and a readable start (`startedAt`, else `establishedAt`, else `createdAt`). Every other field is
// read by hand: a value of a shape callsync cannot read is read as absent, reported as an unread
// field (the poller logs and counts it), and kept verbatim in `raw`.
const channelEventSchema = z.looseObject({
  eventId: z.string().min(1, 'expected a non-empty event id'),
  /** Only CALL is documented; other types are recognised and skipped (see parseChannelEvent). */
  type: z.string().min(1).nullish(),
});

const channelCallSchema = z.looseObject({
  callSid: z.string().min(1, 'expected a non-empty call id'),
  /** In any case; `IN` and `OUT` too. Needed to tell the caller from the callee: anything else refuses. */
  direction: z.preprocess(
    (v) => {
      if (typeof v !== 'string') return v;
      const d = v.trim().toUpperCase();
      return d === 'IN' ? 'INCOMING' : d === 'OUT' ? 'OUTGOING' : d;
    },
    z.enum(['INCOMING', 'OUTGOING']),
  ),
});

interface ParsedChannelRecording {
  downloadUrl: string;
  type: RecordingType;
}

export interface ParsedChannelEvent {
  eventId: string;
  type: string;
  createdAt: string | null;
  recordings: ParsedChannelRecording[];
}

export interface ParsedChannelCall {
  callSid: string;
  channelId: string | null;
  direction: 'INCOMING' | 'OUTGOING';
  establishedAt: string | null;
  forwarding: { target: string | null; type: string | null } | null;
  from: string | null;
  owner: string | null;
  startedAt: string | null;
  /** Kept as a string: a state added later maps to `unknown` instead of failing the event. */
  state: string | null;
  terminatedAt: string | null;
  terminatedReason: string | null;
  to: string | null;
}

/**
 * An optional field of a channel event whose value callsync could not read: read as absent, kept
 * verbatim in `raw`. `field` is a dotted path with array indexes as `*` (`recordings.*.type`): a
 * closed set, fit for a metric label; `detail` says what was expected (never the value).
 */
export interface UnreadChannelField {
  field: string;
  detail: string;
}

/** A channel event that cannot become a call record; the message names the event and the field. */
export class ChannelEventError extends Error {
  constructor(
    message: string,
    readonly eventId: string | null,
    /** Dotted paths of the offending fields, e.g. `call.direction`. */
    readonly fields: string[],
  ) {
    super(message);
    this.name = 'ChannelEventError';
  }
}

function issuesError(
  record: string,
  eventId: string | null,
  error: z.ZodError,
  prefix: string[] = [],
): ChannelEventError {
  const fields = error.issues.map((i) => [...prefix, ...i.path.map(String)].join('.') || '(event)');
  const parts = error.issues.slice(0, 5).map((i, n) => `${fields[n]}: ${describeIssue(i)}`);
  return new ChannelEventError(`${record}: ${parts.join('; ')}`, eventId, fields);
}

function describeIssue(issue: z.core.$ZodIssue): string {
  if (issue.code === 'invalid_type' && issue.message.includes('received undefined')) return 'required field missing';
  return issue.message;
}

function eventLabel(raw: unknown): { label: string; eventId: string | null } {
  const id = typeof raw === 'object' && raw !== null ? (raw as Record<string, unknown>).eventId : undefined;
  return typeof id === 'string' && id !== ''
    ? { label: `ChannelEvent ${id}`, eventId: id }
    : { label: 'ChannelEvent (no eventId)', eventId: null };
}

function jsonType(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'a list' : typeof v;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Reads the optional fields of one event, collecting what it could not read (once per field). */
class Reader {
  readonly unread: UnreadChannelField[] = [];

  add(field: string, detail: string): void {
    if (!this.unread.some((u) => u.field === field)) this.unread.push({ field, detail });
  }

  /** Text: a string, or a number as its decimal text; null/absent -> null; other shapes unread. */
  text(v: unknown, field: string): string | null {
    if (v === null || v === undefined) return null;
    if (typeof v === 'string') return v;
    if (typeof v === 'number' && Number.isFinite(v)) return String(v);
    this.add(field, `expected text, got ${jsonType(v)}`);
    return null;
  }

  /** An ISO-8601 timestamp (anything Date reads); empty, null or absent -> null; others unread. */
  timestamp(v: unknown, field: string): string | null {
    if (v === null || v === undefined || v === '') return null;
    if (typeof v === 'string' && !Number.isNaN(Date.parse(v))) return v;
    this.add(
      field,
      typeof v === 'string' ? 'expected an ISO-8601 timestamp' : `expected a timestamp, got ${jsonType(v)}`,
    );
    return null;
  }

  recordings(v: unknown): ParsedChannelRecording[] {
    if (v === null || v === undefined) return [];
    if (!Array.isArray(v)) {
      this.add('recordings', `expected a list, got ${jsonType(v)}`);
      return [];
    }
    const out: ParsedChannelRecording[] = [];
    for (const r of v) {
      if (!isObject(r)) {
        this.add('recordings.*', `expected an object, got ${jsonType(r)}`);
        continue;
      }
      const url = r.downloadUrl;
      const type = r.type;
      if (typeof url !== 'string' || url === '') {
        this.add('recordings.*.downloadUrl', 'expected a non-empty relative URL');
        continue;
      }
      if (typeof type !== 'string' || !(RECORDING_TYPES as readonly string[]).includes(type)) {
        this.add('recordings.*.type', `expected one of ${RECORDING_TYPES.join(', ')}`);
        continue;
      }
      out.push({ downloadUrl: url, type: type as RecordingType });
    }
    return out;
  }

  forwarding(v: unknown): ParsedChannelCall['forwarding'] {
    if (v === null || v === undefined) return null;
    if (!isObject(v)) {
      this.add('call.forwarding', `expected an object, got ${jsonType(v)}`);
      return null;
    }
    return { target: this.text(v.target, 'call.forwarding.target'), type: this.text(v.type, 'call.forwarding.type') };
  }
}

export type ChannelEventParse =
  | { kind: 'call'; event: ParsedChannelEvent; call: ParsedChannelCall; unread: UnreadChannelField[] }
  /** A well-formed event of a type callsync does not handle (only CALL is documented). */
  | { kind: 'ignored'; event: ParsedChannelEvent; reason: string };

/** Validates one raw inbox entry. Throws ChannelEventError when it cannot be read. */
export function parseChannelEvent(raw: unknown): ChannelEventParse {
  const { label, eventId } = eventLabel(raw);
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw new ChannelEventError(
      `${label}: expected an object, got ${raw === null ? 'null' : Array.isArray(raw) ? 'an array' : typeof raw}`,
      null,
      ['(event)'],
    );
  }
  const fields = raw as Record<string, unknown>;
  const head = channelEventSchema.safeParse(raw);
  if (!head.success) throw issuesError(label, eventId, head.error);
  const id = head.data.eventId;
  // No type but a call: the only documented type.
  const type = head.data.type ?? (isObject(fields.call) ? 'CALL' : null);
  if (type === null) throw new ChannelEventError(`${label}: type: required field missing`, id, ['type']);
  const read = new Reader();
  if (type.toUpperCase() !== 'CALL') {
    return {
      kind: 'ignored',
      event: { eventId: id, type, createdAt: null, recordings: [] },
      reason: `event type ${type} is not CALL`,
    };
  }
  const event: ParsedChannelEvent = {
    eventId: id,
    type,
    createdAt: read.timestamp(fields.createdAt, 'createdAt'),
    recordings: read.recordings(fields.recordings),
  };
  const rawCall = fields.call;
  if (rawCall === undefined || rawCall === null) {
    throw new ChannelEventError(`${label}: call: required field missing for a CALL event`, id, ['call']);
  }
  if (!isObject(rawCall))
    throw new ChannelEventError(`${label}: call: expected an object, got ${jsonType(rawCall)}`, id, ['call']);
  const required = channelCallSchema.safeParse(rawCall);
  if (!required.success) throw issuesError(label, id, required.error, ['call']);
  const call: ParsedChannelCall = {
    callSid: required.data.callSid,
    direction: required.data.direction,
    channelId: read.text(rawCall.channelId, 'call.channelId') || null,
    establishedAt: read.timestamp(rawCall.establishedAt, 'call.establishedAt'),
    forwarding: read.forwarding(rawCall.forwarding),
    from: read.text(rawCall.from, 'call.from'),
    owner: read.text(rawCall.owner, 'call.owner'),
    startedAt: read.timestamp(rawCall.startedAt, 'call.startedAt'),
    state: read.text(rawCall.state, 'call.state'),
    terminatedAt: read.timestamp(rawCall.terminatedAt, 'call.terminatedAt'),
    terminatedReason: read.text(rawCall.terminatedReason, 'call.terminatedReason'),
    to: read.text(rawCall.to, 'call.to'),
  };
  return { kind: 'call', event, call, unread: read.unread };
}

/**
 * The call id (`call.callSid`) of an event that may not parse, as parseChannelEvent would read it;
 * null when it cannot be read, or for an event of a type other than CALL. The poller keeps a
 * dead-lettered event's refusal under it (workers/poller.ts).
 */
export function sentCallSid(raw: unknown): string | null {
  if (!isObject(raw)) return null;
  if (typeof raw.type === 'string' && raw.type !== '' && raw.type.toUpperCase() !== 'CALL') return null;
  const callSid = isObject(raw.call) ? raw.call.callSid : undefined;
  return typeof callSid === 'string' && callSid !== '' ? callSid : null;
}

export interface NormalizeOptions {
  /** The channel whose inbox the event came from; used when `call.channelId` is absent, and in the key. */
  channelId?: string;
}

/**
 * The canonical record of one channel event. `key` is `channel:<channelId>:<eventId>`: every event
 * is its own delivery (a call's later state change is a new event, not a duplicate), and a
 * re-read of the same event (at-least-once polling) dedupes on it. `callId` is the call's
 * `callSid`, shared by all events of one call. Throws ChannelEventError for an unusable event,
 * including one of a type other than CALL.
 * @internal Exported for its tests only (test/channel-event.test.ts, test/crm-hubspot-recordings.redis.test.ts …).
 */
export function normalizeChannelEvent(
  raw: unknown,
  receivedAt: Date | string,
  options: NormalizeOptions = {},
): CanonicalCall {
  const parsed = parseChannelEvent(raw);
  if (parsed.kind === 'ignored')
    throw new ChannelEventError(`ChannelEvent ${parsed.event.eventId}: ${parsed.reason}`, parsed.event.eventId, [
      'type',
    ]);
  return toCanonical(parsed.event, parsed.call, raw, receivedAt, options);
}

/** Builds the canonical record from an already parsed CALL event. */
export function toCanonical(
  event: ParsedChannelEvent,
  call: ParsedChannelCall,
  raw: unknown,
  receivedAt: Date | string,
  options: NormalizeOptions = {},
): CanonicalCall {
  const label = `ChannelEvent ${event.eventId}`;
  const channelId = call.channelId ?? options.channelId ?? null;
  const scope = options.channelId ?? channelId;
  if (scope === null || scope === '') {
    throw new ChannelEventError(
      `${label}: call.channelId: required field missing (and no polled channel given)`,
      event.eventId,
      ['call.channelId'],
    );
  }
  const startedAtRaw = call.startedAt ?? call.establishedAt ?? event.createdAt;
  if (startedAtRaw === null || startedAtRaw === undefined) {
    throw new ChannelEventError(
      `${label}: call.startedAt: required field missing or not an ISO-8601 timestamp (and no readable establishedAt or createdAt either)`,
      event.eventId,
      ['call.startedAt'],
    );
  }
  const direction: Direction = call.direction === 'INCOMING' ? 'in' : 'out';
  const startedAt = iso(startedAtRaw);
  const endedAt = call.terminatedAt ? iso(call.terminatedAt) : null;
  const fromRaw = call.from ?? null;
  const toRaw = call.to ?? null;
  const recordings: Recording[] = event.recordings.map((r) => ({ downloadUrl: r.downloadUrl, type: r.type }));
  return {
    key: callKey('channel', scope, event.eventId),
    source: 'channel',
    callId: call.callSid,
    agentId: null,
    channelId,
    eventId: event.eventId,
    direction,
    // The spec's from/to are caller -> callee in both directions (incoming: remote -> channel
    // number, outgoing: channel number -> remote), the same sense as the webhook's from/to.
    from: toE164(fromRaw),
    to: toE164(toRaw),
    fromRaw,
    toRaw,
    startedAt,
    endedAt,
    durationSec: durationSec(call, endedAt),
    outcome: outcomeOf(call),
    users: [],
    owner: call.owner ?? null,
    forwarding: call.forwarding ? { target: call.forwarding.target ?? null, type: call.forwarding.type ?? null } : null,
    channel: null,
    summary: null,
    scenarios: [],
    transcript: null,
    recordings,
    payloadVersion: null,
    receivedAt: typeof receivedAt === 'string' ? iso(receivedAt) : receivedAt.toISOString(),
    raw,
  };
}

function iso(value: string): string {
  return new Date(parseUtc(value)).toISOString();
}

/** Talk time: from establishedAt to terminatedAt; 0 for an ended call nobody answered; null while it runs. */
function durationSec(call: ParsedChannelCall, endedAt: string | null): number | null {
  if (endedAt === null) return null;
  if (!call.establishedAt) return 0;
  return Math.max(0, Math.round((Date.parse(endedAt) - parseUtc(call.establishedAt)) / 1000));
}

/**
 * ChannelCall.state -> outcome. FINISHED means answered only when the call was established (or has
 * an accepting owner on an incoming call); otherwise nobody picked up. In-progress states map to
 * what is known so far (RINGING: unknown, ESTABLISHED: answered, TRANSFERRING: transferred).
 * @internal Exported for its tests only (test/channel-event.test.ts).
 */
export function outcomeOf(call: Pick<ParsedChannelCall, 'state' | 'establishedAt' | 'owner' | 'direction'>): Outcome {
  const answered = Boolean(call.establishedAt) || (call.direction === 'INCOMING' && Boolean(call.owner));
  switch ((call.state ?? '').toUpperCase()) {
    case 'FINISHED':
      return answered ? 'answered' : 'missed';
    case 'ESTABLISHED':
      return 'answered';
    case 'MISSED':
      return 'missed';
    case 'REJECTED':
      return 'rejected';
    case 'BUSY':
      return 'busy';
    case 'TRANSFERRING':
    case 'TRANSFERRED':
      return 'transferred';
    case 'TRANSFER_FAILED':
    case 'CLIENT_ERROR':
      return 'failed';
    case '':
      return answered ? 'answered' : 'unknown';
    default:
      // RINGING, UNKNOWN and states the spec may add later.
      return 'unknown';
  }
}
