// Call history entries (spec 2.8 HistoryEntryResponse, `GET /history` with type CALL) normalized
// into the canonical call, for `callsync backfill`. Field names as in the spec and in the
// platform's library (sipgateio-node lib/history/history.types.ts, CallHistoryEntry).
import { z } from 'zod';
import { callKey, type CanonicalCall, type Direction, type Outcome, type Recording } from './call.js';
import { withinDepth } from './json-depth.js';
import { toE164 } from './phone.js';
import { parseUtc } from './utc-time.js';

export class HistoryEntryError extends Error {
  constructor(
    message: string,
    readonly entryId: string | null,
  ) {
    super(message);
    this.name = 'HistoryEntryError';
  }
}

const HISTORY_DIRECTIONS = ['INCOMING', 'OUTGOING', 'MISSED_INCOMING', 'MISSED_OUTGOING'] as const;

const entrySchema = z.looseObject({
  id: z.union([z.string().min(1), z.number()]).transform(String),
  type: z.string().nullish(),
  source: z.string().nullish(),
  target: z.string().nullish(),
  direction: z.enum(HISTORY_DIRECTIONS),
  status: z.string().nullish(),
  created: z.string().refine((v) => !Number.isNaN(Date.parse(v)), 'not a date'),
  duration: z.number().nonnegative().nullish(),
  callId: z.string().nullish(),
  recordings: z.array(z.looseObject({ url: z.string().nullish(), downloadUrl: z.string().nullish() })).nullish(),
});

/** INCOMING / MISSED_INCOMING are incoming calls; OUTGOING / MISSED_OUTGOING outgoing. */
function historyDirection(direction: (typeof HISTORY_DIRECTIONS)[number]): Direction {
  return direction === 'INCOMING' || direction === 'MISSED_INCOMING' ? 'in' : 'out';
}

/**
 * HistoryEntry.status -> outcome: PICKUP answered, NOPICKUP missed, BUSY busy, FORWARD
 * transferred. Without a status a MISSED_* direction is missed; anything else unknown.
 */
function historyOutcome(status: string | null | undefined, direction: string): Outcome {
  switch (status) {
    case 'PICKUP':
      return 'answered';
    case 'NOPICKUP':
      return 'missed';
    case 'BUSY':
      return 'busy';
    case 'FORWARD':
      return 'transferred';
    default:
      return direction.startsWith('MISSED_') ? 'missed' : 'unknown';
  }
}

export interface HistoryNormalizeOptions {
  /** Scope of the call key `history:<scope>:<id>` (null: `-`). */
  scope?: string | null;
  receivedAt: Date;
}

/** One raw history entry as a canonical call; throws HistoryEntryError for an entry that is not a usable CALL. */
export function normalizeHistoryEntry(raw: unknown, options: HistoryNormalizeOptions): CanonicalCall {
  const parsed = entrySchema.safeParse(raw);
  const rawId =
    raw !== null && typeof raw === 'object' && typeof (raw as { id?: unknown }).id === 'string'
      ? (raw as { id: string }).id
      : null;
  if (!parsed.success) {
    const what = parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.join('.') || '(entry)'}: ${i.message}`)
      .join('; ');
    throw new HistoryEntryError(`HistoryEntry ${rawId ?? '(no id)'}: ${what}`, rawId);
  }
  const e = parsed.data;
  if (e.type != null && e.type !== 'CALL')
    throw new HistoryEntryError(`HistoryEntry ${e.id}: type ${e.type} is not a call`, e.id);
  const startedAt = new Date(parseUtc(e.created)).toISOString();
  // A duration that would end the call past the last time a date can hold (`1e300`) is none: read
  // as absent, not a RangeError that stopped the backfill at this entry on every run.
  const durationSec =
    e.duration != null && Number.isFinite(new Date(Date.parse(startedAt) + e.duration * 1000).getTime())
      ? e.duration
      : null;
  const recordings: Recording[] = [];
  // Recordings the archive can fetch with the API's credentials: URLs relative to the API root
  // only (the client refuses other origins, which would fail the archive job for good).
  for (const r of e.recordings ?? []) {
    const url = r.downloadUrl ?? r.url;
    if (url && !/^[a-z][a-z0-9+.-]*:|^\/\//i.test(url)) recordings.push({ downloadUrl: url, type: 'call_recorder' });
  }
  return {
    key: callKey('history', options.scope ?? null, e.id),
    source: 'history',
    callId: e.callId ?? e.id,
    agentId: null,
    channelId: null,
    eventId: e.id,
    direction: historyDirection(e.direction),
    from: toE164(e.source),
    to: toE164(e.target),
    fromRaw: e.source ?? null,
    toRaw: e.target ?? null,
    startedAt,
    endedAt: durationSec === null ? null : new Date(Date.parse(startedAt) + durationSec * 1000).toISOString(),
    durationSec,
    outcome: historyOutcome(e.status, e.direction),
    users: [],
    owner: null,
    forwarding: null,
    channel: null,
    summary: null,
    scenarios: [],
    transcript: null,
    recordings,
    payloadVersion: null,
    receivedAt: options.receivedAt.toISOString(),
    // As read, but what is nested deeper than anything can store (./json-depth.ts).
    raw: withinDepth(raw).value,
  };
}
