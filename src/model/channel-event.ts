// Channel events (spec 2.7: ChannelEvent / ChannelCall / Recording), read from a channel's inbox by
// the poller, validated and normalized into the canonical call record. Unknown fields are kept
// (in `raw`) and never break parsing; a missing or unusable required field is a ChannelEventError
// naming the event and the field.
import { z } from 'zod';
import { callKey, RECORDING_TYPES, type CanonicalCall, type Direction, type Outcome, type Recording } from './call.js';
import { toE164 } from './phone.js';

const nullableString = z.string().nullish();
/** ISO-8601 timestamp; anything Date cannot read is an error naming the field. */
const timestamp = z
  .string()
  .refine((v) => !Number.isNaN(Date.parse(v)), { message: 'expected an ISO-8601 timestamp' })
  .nullish();

const channelRecordingSchema = z.looseObject({
  downloadUrl: z.string().min(1, 'expected a non-empty relative URL'),
  type: z.enum(RECORDING_TYPES),
});

const channelCallSchema = z.looseObject({
  callSid: z.string().min(1, 'expected a non-empty call id'),
  channelId: nullableString,
  direction: z.enum(['INCOMING', 'OUTGOING']),
  establishedAt: timestamp,
  forwarding: z.looseObject({ target: nullableString, type: nullableString }).nullish(),
  from: nullableString,
  owner: nullableString,
  startedAt: timestamp,
  /** Kept as a string: a state added later maps to `unknown` instead of failing the event. */
  state: nullableString,
  terminatedAt: timestamp,
  terminatedReason: nullableString,
  to: nullableString,
});

const channelEventSchema = z.looseObject({
  eventId: z.string().min(1, 'expected a non-empty event id'),
  /** Only CALL is documented; other types are recognised and skipped (see parseChannelEvent). */
  type: z.string().min(1),
  createdAt: timestamp,
  call: z.unknown().optional(),
  recordings: z.array(channelRecordingSchema).nullish(),
});

export type ParsedChannelCall = z.infer<typeof channelCallSchema>;
export type ParsedChannelEvent = z.infer<typeof channelEventSchema>;

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

export type ChannelEventParse =
  | { kind: 'call'; event: ParsedChannelEvent; call: ParsedChannelCall }
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
  const event = channelEventSchema.safeParse(raw);
  if (!event.success) throw issuesError(label, eventId, event.error);
  if (event.data.type.toUpperCase() !== 'CALL') {
    return { kind: 'ignored', event: event.data, reason: `event type ${event.data.type} is not CALL` };
  }
  if (event.data.call === undefined || event.data.call === null) {
    throw new ChannelEventError(`${label}: call: required field missing for a CALL event`, eventId, ['call']);
  }
  const call = channelCallSchema.safeParse(event.data.call);
  if (!call.success) throw issuesError(label, eventId, call.error, ['call']);
  return { kind: 'call', event: event.data, call: call.data };
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
      `${label}: call.startedAt: required field missing (no establishedAt or createdAt either)`,
      event.eventId,
      ['call.startedAt'],
    );
  }
  const direction: Direction = call.direction === 'INCOMING' ? 'in' : 'out';
  const startedAt = iso(startedAtRaw);
  const endedAt = call.terminatedAt ? iso(call.terminatedAt) : null;
  const fromRaw = call.from ?? null;
  const toRaw = call.to ?? null;
  const recordings: Recording[] = (event.recordings ?? []).map((r) => ({ downloadUrl: r.downloadUrl, type: r.type }));
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
  return new Date(value).toISOString();
}

/** Talk time: from establishedAt to terminatedAt; 0 for an ended call nobody answered; null while it runs. */
function durationSec(call: ParsedChannelCall, endedAt: string | null): number | null {
  if (endedAt === null) return null;
  if (!call.establishedAt) return 0;
  return Math.max(0, Math.round((Date.parse(endedAt) - Date.parse(call.establishedAt)) / 1000));
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
