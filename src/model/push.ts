// Push API events (the platform's call events, form-urlencoded) and the canonical call assembled
// from the events of one call. Field names and values as the platform sends them; the official
// Node library's webhook types are the reference (github.com/sipgate-io/sipgateio-node,
// lib/webhook/webhook.types.ts: NewCallEvent, AnswerEvent, HangUpEvent, DataEvent, HangUpCause).
import { callKey, type CallUser, type CanonicalCall, type Outcome } from './call.js';
import { toE164 } from './phone.js';
import { InvalidPayloadError } from './webhook.js';

const PUSH_EVENTS = ['newCall', 'answer', 'hangup', 'dtmf'] as const;
/** `other`: an event of a kind callsync does not know (its name as sent in `fields.event`). */
type PushEventName = (typeof PUSH_EVENTS)[number] | 'other';

/** One event as sent: single fields as strings, the `[]` fields (`user[]`, …) as lists. */
export interface PushEvent {
  event: PushEventName;
  callId: string;
  fields: Record<string, string>;
  lists: Record<string, string[]>;
}

const CALL_ID = /^[A-Za-z0-9._:@-]{1,200}$/;

/** The fields that identify an event: one given twice with two values is refused (which would it be?). */
const IDENTIFYING = ['event', 'callId'];

/**
 * Parses a form-urlencoded Push API body (its text, or its name/value pairs as decoded by the
 * source); a body that is not one event is refused (400). Any other
 * field is kept as sent, whatever its name: the maps have no prototype, so `__proto__[]`,
 * `constructor[]` or `toString=` are fields like any other (before, `toString[]=x` threw a
 * TypeError, refused as "not UTF-8", and `__proto__=x` was dropped).
 */
export function parsePushEvent(body: string | [string, string][]): PushEvent {
  const params = new URLSearchParams(body);
  const fields: Record<string, string> = Object.create(null) as Record<string, string>;
  const lists: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
  for (const [name, value] of params) {
    if (name.endsWith('[]')) (lists[name.slice(0, -2)] ??= []).push(value);
    else {
      const before = fields[name];
      if (before !== undefined && before !== value && IDENTIFYING.includes(name))
        throw new InvalidPayloadError(`/${name}`, `given twice with different values`);
      fields[name] = value;
    }
  }
  // Older senders name it origCallId (the library renames it too).
  if (fields.origCallId !== undefined && fields.originalCallId === undefined) fields.originalCallId = fields.origCallId;
  // An event of a kind callsync does not know is taken (and not stored): only a missing one refuses.
  const event = fields.event;
  if (event === undefined || event.trim() === '')
    throw new InvalidPayloadError('/event', `expected event ${PUSH_EVENTS.join(', ')}`);
  const callId = fields.callId;
  if (callId === undefined || !CALL_ID.test(callId))
    throw new InvalidPayloadError('/callId', 'expected a call id (1-200 of A-Z a-z 0-9 . _ : @ -)');
  const known = (PUSH_EVENTS as readonly string[]).includes(event);
  return { event: known ? (event as PushEventName) : 'other', callId, fields, lists };
}

/** `in` or `out` in any case (`IN`), also `incoming`/`outgoing`; null for anything else. */
function pushDirection(value: string | undefined): 'in' | 'out' | null {
  switch (value?.trim().toLowerCase()) {
    case 'in':
    case 'incoming':
      return 'in';
    case 'out':
    case 'outgoing':
      return 'out';
    default:
      return null;
  }
}

/** The outcome of a call by its hangup's `cause` (the library's HangUpCause), unless it was answered. */
const CAUSE_OUTCOMES = new Map<string, Outcome>([
  // A normal end of a call whose answer event was not (yet) seen: the platform only clears
  // normally what was answered, and the hangup names the answering number then.
  ['normalClearing', 'answered'],
  ['busy', 'busy'],
  ['cancel', 'missed'],
  ['noAnswer', 'missed'],
  ['congestion', 'failed'],
  ['notFound', 'failed'],
  ['forwarded', 'transferred'],
]);

/** The fields `assemblePushCall` reads (lists by their name without `[]`); any other is only kept. */
const READ_FIELDS = new Set([
  'direction',
  'from',
  'to',
  'user',
  'userId',
  'fullUserId',
  'answeringNumber',
  'diversion',
  'cause',
]);

/**
 * The fields of an event callsync cannot read: read as absent (the event is accepted; only the call
 * id and the event's name may refuse it), kept verbatim in the call's `raw`, counted and logged
 * once by the ingress. A direction it cannot read is taken as `in`, as a missing one; a hangup's
 * cause it does not know gives the outcome `unknown` (unless the call was answered), as a missing one.
 * `notText`: the fields whose bytes were not text in the body's charset (read as windows-1252 by
 * the source); those callsync reads are counted too.
 */
export function unreadPushFields(
  e: PushEvent,
  notText: ReadonlySet<string> = new Set(),
): { field: string; pointer: string; detail: string }[] {
  if (e.event === 'other')
    return [{ field: 'event', pointer: '/event', detail: 'expected newCall, answer, hangup or dtmf; not stored' }];
  if (e.event === 'dtmf') return [];
  const unread = [];
  const { direction, cause } = e.fields;
  if (direction !== undefined && pushDirection(direction) === null)
    unread.push({ field: 'direction', pointer: '/direction', detail: 'expected in or out' });
  if (e.event === 'hangup' && cause !== undefined && !CAUSE_OUTCOMES.has(cause))
    unread.push({ field: 'cause', pointer: '/cause', detail: `expected ${[...CAUSE_OUTCOMES.keys()].join(', ')}` });
  for (const field of notText) {
    if (READ_FIELDS.has(field) && !unread.some((u) => u.field === field))
      unread.push({
        field,
        pointer: `/${field}`,
        detail: "not text in the body's charset (UTF-8 unless declared): read as windows-1252",
      });
  }
  return unread;
}

/** What is known of one call: the first of each event seen, with the time it arrived (ms). */
export interface PushCallState {
  newCall?: { at: number; event: PushEvent };
  answer?: { at: number; event: PushEvent };
  hangup?: { at: number; event: PushEvent };
  /** Set when the call was closed without a hangup (the timeout). */
  timedOutAt?: number;
}

function causeOutcome(cause: string | undefined, answered: boolean): Outcome {
  if (cause === 'forwarded') return 'transferred';
  if (answered) return 'answered';
  return CAUSE_OUTCOMES.get(cause ?? '') ?? 'unknown';
}

const user = (userId: string | null, fullUserId: string | null, name: string | null): CallUser => ({
  userId,
  accountId: null,
  fullUserId,
  firstName: null,
  lastName: null,
  fullName: name,
});

const orNull = (v: string | undefined): string | null => (v === undefined || v === '' ? null : v);

/**
 * The canonical call (source `push`) of the events seen so far; null while the call is open (no
 * hangup, no timeout). Only what the events say goes in, so the same events give the same call
 * however often and in whichever order they arrived.
 */
export function assemblePushCall(callId: string, state: PushCallState, receivedAt: Date): CanonicalCall | null {
  const { newCall, answer, hangup } = state;
  if (!hangup && state.timedOutAt === undefined) return null;
  const first = [newCall, answer, hangup].filter((e) => e !== undefined).sort((a, b) => a.at - b.at);
  const base = (newCall ?? answer ?? hangup)!.event.fields;
  // Events carry no time of their own: the call started when its first event arrived, whichever
  // it was (a newCall delivered after the hangup must not put the start after the end), and ended
  // when the hangup arrived — never before the start, since the hangup is one of those events.
  const startedMs = first[0]?.at ?? receivedAt.getTime();
  const endedMs = hangup ? hangup.at : null;
  const answered =
    answer !== undefined ||
    (hangup?.event.fields.cause === 'normalClearing' && !!orNull(hangup.event.fields.answeringNumber));
  const outcome: Outcome = hangup ? causeOutcome(hangup.event.fields.cause, answered) : 'unknown';
  const durationSec =
    answer && endedMs !== null && endedMs >= answer.at ? Math.round((endedMs - answer.at) / 1000) : null;

  let users: CallUser[];
  let owner: string | null = null;
  const a = answer?.event.fields;
  // The answering user: single fields, as the platform sends them (a `[]` list's first entry also read).
  const al = answer?.event.lists ?? {};
  const answering = a
    ? {
        userId: orNull(a.userId ?? al.userId?.[0]),
        fullUserId: orNull(a.fullUserId ?? al.fullUserId?.[0]),
        name: orNull(a.user ?? al.user?.[0]),
      }
    : null;
  if (answering && (answering.userId || answering.fullUserId || answering.name)) {
    users = [user(answering.userId, answering.fullUserId, answering.name)];
    owner = answering.userId ?? answering.fullUserId;
  } else {
    const l = newCall?.event.lists ?? {};
    const n = Math.max(l.user?.length ?? 0, l.userId?.length ?? 0, l.fullUserId?.length ?? 0);
    users = Array.from({ length: n }, (_, i) =>
      user(orNull(l.userId?.[i]), orNull(l.fullUserId?.[i]), orNull(l.user?.[i])),
    );
  }
  const diversion = orNull(a?.diversion ?? base.diversion);
  const direction = pushDirection(base.direction) ?? 'in';
  return {
    key: callKey('push', null, callId),
    source: 'push',
    callId,
    agentId: null,
    channelId: null,
    eventId: null,
    direction,
    from: toE164(base.from),
    to: toE164(base.to),
    fromRaw: orNull(base.from),
    toRaw: orNull(base.to),
    startedAt: new Date(startedMs).toISOString(),
    endedAt: endedMs === null ? null : new Date(endedMs).toISOString(),
    durationSec,
    outcome,
    users,
    owner,
    forwarding: diversion ? { target: toE164(diversion) ?? diversion, type: 'diversion' } : null,
    channel: null,
    summary: null,
    scenarios: [],
    transcript: null,
    recordings: [],
    payloadVersion: null,
    receivedAt: receivedAt.toISOString(),
    raw: {
      newCall: newCall ? { ...newCall.event.fields, ...listsRaw(newCall.event) } : null,
      answer: answer ? answer.event.fields : null,
      hangup: hangup ? hangup.event.fields : null,
      ...(state.timedOutAt !== undefined && !hangup ? { closedBy: 'timeout' } : {}),
    },
  };
}

function listsRaw(e: PushEvent): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const [k, v] of Object.entries(e.lists)) out[`${k}[]`] = v;
  return out;
}
