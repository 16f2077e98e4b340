// The timeline of one call ("Where is my call?", docs/operations.md): what happened to it, written
// where the work happens — received (and how), fanned out (routes, sinks), every sink attempt with
// its outcome, a dead letter an operator retried — as one Redis list per call under the call's own hash tag (queues/keys.ts
// `callTimeline`), capped per call and expiring CALL_TIMELINE_TTL_DAYS after its last event.
//
// Each event is one command (a small script: RPUSH, LTRIM only when over the cap — keeping the first entry, the call's
// receipt —, PEXPIRE); a sink attempt's start and
// outcome are one command together, or — for a sink whose last step is the release of its call's
// lock, on the one-slot layout — part of that release's script (workers/attempts.ts, entryTexts). Beside the timelines, lookups
// for the CLI and the API: the calls by time (`calls:recent`), by call id, and by phone number — the
// number only as an HMAC keyed with the privacy key (queues/privacy-key.ts: PRIVACY_HMAC_SECRET, else
// a key generated once and kept in Redis), the same key as the notification ledger's.
//
// No phone number or transcript text is written in clear: numbers are masked as in logs
// (maskPhone), reasons are the redacted error texts with the call's own numbers masked once more.
// A timeline write never fails the work it describes: an error is logged (at most once a minute);
// receipts, fan-outs (in the background) and sink attempts are sent again while Redis is unavailable
// (RESEND_FOR_MS).
import { createHmac } from 'node:crypto';
import type { Logger } from 'pino';
import { isRedisUnavailable, type RedisClient } from './connection.js';
import type { RedisKeys } from './keys.js';
import { PrivacyKey } from './privacy-key.js';
import { callHash, type CanonicalCall } from '../src/model/call.js';
import type { CountryCode } from 'libphonenumber-js';
import { numberSpellings } from '../src/model/phone.js';
import { NumberWordsError, oneNumber, targetOfWords } from '../src/model/number-words.js';
import { asciiDigits, maskDigitRuns, scrubEchoes } from '../src/redact.js';
import { maskPhone } from '../src/log.js';
import { backoffDelay } from '../src/backoff.js';
import { decimal } from '../src/env-values.js';
import { sinkQueueName } from './registry.js';
import { globEscape, queuesInRedis } from './scan.js';
import { describePause, pauseStateOf, type PauseState } from './disabled.js';
import { HELD } from './hold.js';
import { TRIM_KEEPING_RECEIPT } from '../src/list-trim.js';

type TimelineEvent =
  | 'received'
  | 'fanned-out'
  | 'attempt'
  | 'done'
  | 'skipped'
  | 'retry'
  | 'dead-lettered'
  /** An operator put the sink's dead letter back (queues/dead-letters.ts): a new round of attempts, numbered from 1. */
  | 'retried';

/** How a delivery of the call was taken: its first, the same content again, or changed content. */
export type Revision = 'new' | 'duplicate' | 'update';

/** A call's fan-out, as its `fanned-out` entry says it (workers/fanout.ts). */
export interface FannedOut {
  call: Pick<CanonicalCall, 'key'>;
  /** The sink jobs' id (it begins with the call hash). */
  jobId: string;
  routes: string[];
  sinks: string[];
  /** The endpoints given a job, per sink with endpoints. */
  endpoints?: Record<string, string[]>;
}

/** One event of a call's timeline. Which fields are set depends on `event`. */
export interface TimelineEntry {
  /** Epoch milliseconds. */
  at: number;
  event: TimelineEvent;
  /** received: the source (`ai-agent`, `push`, `channel`, `history`) and the platform's call id. */
  source?: string;
  callId?: string;
  /** received: new, duplicate or update. */
  revision?: Revision;
  /** received: the HTTP request's id (X-Request-Id), when it came over HTTP. */
  requestId?: string;
  /** received: it was acknowledged into the local spool while Redis was away, and drained since. */
  spooled?: true;
  /** received: direction, numbers masked (`+49151****678`), the call's start. */
  direction?: string;
  from?: string | null;
  to?: string | null;
  startedAt?: string;
  /** received: the acknowledgement id; fan-out and sink events: the sink job id. */
  jobId?: string;
  /** fanned-out: the routes that matched (their names, else `#<index>`) and the sinks they name. */
  routes?: string[];
  sinks?: string[];
  /** fanned-out: the endpoints each sink with endpoints was given a job for (entries before 2026-12 have none). */
  endpoints?: Record<string, string[]>;
  /** Sink events: the sink, and the endpoint of a sink with endpoints. */
  sink?: string;
  endpoint?: string;
  /**
   * Sink events: the attempt (1 on the first try; a run cut short by a crash repeats its number;
   * after a `retried` entry the new round counts from 1 again).
   */
  attempt?: number;
  /**
   * attempt: this attempt was cut short (its worker stopped or lost the job) — written by the
   * attempt that took the job over, at the time it did.
   */
  cutOff?: true;
  /** done/skipped/retry/dead-lettered: how long the attempt took. */
  durationMs?: number;
  /** done: what was written (object keys, CRM record ids, message ids). */
  refs?: Record<string, string>;
  /** skipped: why; done: a note; retry/dead-lettered: the redacted error. */
  reason?: string;
  /** skipped: the reason as one of SKIP_REASONS. */
  skip?: SkipReason;
  /**
   * retry/dead-lettered: the error kind (src/errors.ts: transient, retry-later, auth, disable,
   * permanent; `redis` on a retry: Redis failed under the job, which waits for it, no attempt spent).
   */
  kind?: string;
  /** retry: when the next attempt is due (epoch ms); absent while the queue is paused, and while the job waits for Redis. */
  nextAt?: number;
  /** retry: the sink's queue was paused (credentials rejected) or disabled: it waits for an operator. */
  paused?: true;
  /** retried: who retried the dead letter, when known (the door: `callsync dlq retry`, the Calls page, the dashboard). */
  by?: string;
}

/** The skip reasons, bounded (a metric label): what a sink's free-text reason is sorted into. */
export type SkipReason =
  | 'quiet-hours'
  | 'opt-out'
  | 'cooldown'
  | 'landline'
  | 'max-age'
  | 'no-route'
  | 'already-sent'
  | 'anonymous'
  | 'invalid-number'
  | 'newer-revision'
  | 'empty-message'
  | 'other';

const SKIP_PATTERNS: [RegExp, SkipReason][] = [
  [/quiet hours/i, 'quiet-hours'],
  [/opted out|opt-out/i, 'opt-out'],
  [/cooldown/i, 'cooldown'],
  [/landline|not a mobile/i, 'landline'],
  [/maxAge|older than/i, 'max-age'],
  [/no route|no recipient|no endpoint/i, 'no-route'],
  [/already (sent|had)|outcome is unknown/i, 'already-sent'],
  [/anonymous/i, 'anonymous'],
  [/unusable|not a valid/i, 'invalid-number'],
  [/newer revision/i, 'newer-revision'],
  [/empty/i, 'empty-message'],
];

/**
 * A skip's free-text reason as one of SKIP_REASONS: of several reasons in one text ("anonymous
 * caller; +49…: opted out"), the one that comes first in it; `other` when none fits.
 */
export function skipReason(reason: string | undefined): SkipReason {
  let found: SkipReason = 'other';
  let first = Infinity;
  if (reason)
    for (const [pattern, name] of SKIP_PATTERNS) {
      const at = reason.search(pattern);
      if (at !== -1 && at < first) [found, first] = [name, at];
    }
  return found;
}

/**
 * A call id as shown in a list (the CLI's tables, the Calls page): at most 60 characters, since a
 * 10 KB call id would pad every row to its width. `callsync call <id>`, `--json` and the call's
 * own page show it whole.
 */
export const listedCallId = (id: string): string => (id.length > 60 ? `${id.slice(0, 59)}…` : id);

/** Most events kept per call: the first (its receipt) and the newest. A call with a few sinks and retries needs ~30. */
const MAX_TIMELINE_ENTRIES = 200;
/** Characters kept of a reason. */
const MAX_REASON = 300;
/**
 * How long a sink attempt's entries are sent again while Redis cannot take them (connection lost,
 * a cluster master failing over: ioredis gives up after its redirections, ~3 s, before the replica
 * is promoted). The attempt waits for the first tries only (workers/attempts.ts); the rest go on
 * in the background.
 */
const RESEND_FOR_MS = 120_000;
/** Writes being sent again at once, per timeline, at most: beyond, a failed write is dropped (logged). */
const MAX_RESENDING = 5000;

/** Lua: trims a timeline over its cap, keeping its receipt (src/list-trim.ts). */
export { TRIM_KEEPING_RECEIPT };

const APPEND_AND_INDEX = `${TRIM_KEEPING_RECEIPT}
local lists = tonumber(ARGV[1])
local ttl = ARGV[4]
if lists == 1 then
  local max = tonumber(ARGV[3])
  if redis.call('RPUSH', KEYS[1], ARGV[2]) > max then trimKeepingReceipt(KEYS[1], max) end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
for i = lists + 1, #KEYS do
  redis.call('ZADD', KEYS[i], ARGV[5], ARGV[6])
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. ARGV[7])
  redis.call('PEXPIRE', KEYS[i], ttl)
end
return 1
`;

/** One entry appended to each of several timelines (KEYS[i] gets ARGV[i + 2]): a batch in one command. */
const APPEND_MANY = `${TRIM_KEEPING_RECEIPT}
local max = tonumber(ARGV[1])
for i = 1, #KEYS do
  if redis.call('RPUSH', KEYS[i], ARGV[i + 2]) > max then trimKeepingReceipt(KEYS[i], max) end
  redis.call('PEXPIRE', KEYS[i], ARGV[2])
end
return #KEYS
`;

/**
 * Several entries appended to one timeline in one command (a sink attempt's start and outcome);
 * with KEYS[2], only once: when KEYS[2] (a marker kept as long as the timeline) was not set yet.
 * ARGV: max entries, TTL ms, then the entries.
 */
const APPEND_ENTRIES = `${TRIM_KEEPING_RECEIPT}
if #KEYS > 1 and not redis.call('SET', KEYS[2], '1', 'PX', ARGV[2], 'NX') then return 0 end
local max = tonumber(ARGV[1])
local length = 0
for i = 3, #ARGV, 100 do length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 99, #ARGV))) end
if length > max then trimKeepingReceipt(KEYS[1], max) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`;

/** The time of the latest dead letter of entries as stored (their JSON texts); 0 when none can be read. */
function deadLetterTime(texts: readonly string[]): number {
  let at = 0;
  for (const text of texts) {
    try {
      const e = JSON.parse(text) as Partial<TimelineEntry>;
      if (e.event === 'dead-lettered' && typeof e.at === 'number' && e.at > at) at = e.at;
    } catch {
      // not an entry: passed over
    }
  }
  return at;
}

/**
 * A dead letter: its entries appended to the call's timeline (when ARGV[1] is 1: KEYS[1]) and the
 * call in the failed-calls lookup (the next key: score the dead letter's time, kept when later —
 * `GT`), trimmed to the TTL, and the time the lookup began (the key after) set once.
 * ARGV: 1 or 0, max entries, TTL ms, time, call hash, oldest score kept, the lookup's start, entries.
 */
const APPEND_FAILED = `${TRIM_KEEPING_RECEIPT}
local lists = tonumber(ARGV[1])
local ttl = ARGV[3]
if lists == 1 then
  local max = tonumber(ARGV[2])
  local length = 0
  for i = 8, #ARGV, 100 do length = redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 99, #ARGV))) end
  if length > max then trimKeepingReceipt(KEYS[1], max) end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local index = KEYS[lists + 1]
redis.call('ZADD', index, 'GT', ARGV[4], ARGV[5])
redis.call('ZREMRANGEBYSCORE', index, '-inf', '(' .. ARGV[6])
redis.call('PEXPIRE', index, ttl)
redis.call('SET', KEYS[lists + 2], ARGV[7], 'NX')
return 1
`;

interface TimelineScripts {
  callsyncTimeline(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncTimelineMany(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncTimelineEntries(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncTimelineFailed(numKeys: number, ...args: (string | number)[]): Promise<number>;
}

function scripted(redis: RedisClient): TimelineScripts {
  const r = redis as RedisClient & Partial<TimelineScripts>;
  if (!r.callsyncTimeline) redis.defineCommand('callsyncTimeline', { lua: APPEND_AND_INDEX });
  if (!r.callsyncTimelineMany) redis.defineCommand('callsyncTimelineMany', { lua: APPEND_MANY });
  if (!r.callsyncTimelineEntries) redis.defineCommand('callsyncTimelineEntries', { lua: APPEND_ENTRIES });
  if (!r.callsyncTimelineFailed) redis.defineCommand('callsyncTimelineFailed', { lua: APPEND_FAILED });
  return r as RedisClient & TimelineScripts;
}

/** Timelines appended to by one command at most (a fan-out batch). */
const MAX_BATCH = 200;

export interface CallTimelineOptions {
  /** CALL_TIMELINE_TTL_DAYS. */
  ttlDays: number;
  /** PRIVACY_HMAC_SECRET; absent: the key generated once and kept in Redis (queues/privacy-key.ts). */
  privacySecret?: string;
  /** Errors of timeline writes are logged here (at most once a minute). */
  log?: Logger;
  /** Events kept per call. Default MAX_TIMELINE_ENTRIES. */
  maxEntries?: number;
  now?: () => number;
  /**
   * The queues this configuration has (`queueNames`): a sink a call still waits for whose queue is
   * not among them is named in its summary's `unconfigured`, with the reason. Absent: none named.
   */
  configuredQueues?: readonly string[];
}

/**
 * The webhooks refused, and the channel events the poller dead-lettered, with their call id readable
 * (a sorted set by time: see CallTimeline.refused);
 * the retention sweeper trims it too (src/privacy/retention.ts).
 */
export const refusedCallsKey = (keys: RedisKeys): string => `${keys.area('calls')}:calls:refused`;
/**
 * Refusals kept at most, the newest, for all call ids together: a sender refused a million times
 * with a million call ids holds at most this many (~4 MB), never Redis' memory.
 * @internal Exported for its tests (test/refused-calls.redis.test.ts).
 */
export const MAX_REFUSALS = 10_000;

/**
 * A webhook refused (4xx), or a channel event the poller dead-lettered, whose call id could be
 * read: what `callsync call <callId>` shows for a call the platform sent and callsync did not take.
 * No phone number or text of the body: the detail and pointer as logged (quoted values left out,
 * digit runs masked).
 */
export interface Refusal {
  at: number;
  /** The call id as sent; null when it could not be read (a body refused for it, or not JSON). */
  callId: string | null;
  /** The webhook's source (`ai-agent`, `push`), or `channel`: an event the poller read. */
  source: string;
  /**
   * The HTTP status answered; a channel event had no answer: where its dead letter is,
   * `dead letter in poll-dead-letters, id <job id>` (`callsync dlq list --queue poll-dead-letters --id <job id>`).
   */
  status: number | `dead letter in ${string}`;
  pointer: string;
  detail: string;
  requestId?: string;
}

/** The index of the calls by the time they were received (a sorted set, trimmed to the TTL). */
export const recentCallsKey = (keys: RedisKeys): string => `${keys.area('calls')}:calls:recent`;
/**
 * The index of the dead-lettered calls (a sink's dead letter, or the fan-out's): member the call
 * hash, score the time of its latest dead letter; trimmed to the TTL as the other lookups.
 */
export const failedCallsKey = (keys: RedisKeys): string => `${keys.area('calls')}:calls:failed`;
/**
 * When the failed-calls index began (an ISO time, set once): calls dead-lettered before it (by a
 * version that did not index them) are found by reading the timelines (findCalls).
 * @internal Exported for its tests (test/calls-failed-index.redis.test.ts: a deployment before the index).
 */
export const failedSinceKey = (keys: RedisKeys): string => `${keys.area('calls')}:calls:failed-since`;
/**
 * How far apart two processes' clocks (a receipt's and a dead letter's) may be for the failed-calls
 * index: a dead letter is looked for from this long before a query's `since`, and the index answers
 * only ranges that start this long after it began.
 */
const CLOCK_MARGIN_MS = 60_000;
/** Members of the failed-calls index read per command. */
const FAILED_PAGE = 1000;
/** The lookup of a call id's calls (`*` in a SCAN pattern: every one; the area then glob-escaped by the caller). */
export const callIdKey = (area: string, callId: string): string => `${area}:calls:id:${callId}`;
/**
 * The characters of a call id its lookup is named after (`idKey`): ids that begin with the same ones
 * share a lookup. A key named after a call id: `forget --call` finds it by name (src/privacy/forget.ts
 * CALL_ID_KEYS).
 */
export const CALL_ID_LOOKUP_MAX = 200;
/** The lookup of a number's calls, by the number's keyed hash. */
export const numberKey = (area: string, hmac: string): string => `${area}:calls:number:${hmac}`;

/**
 * The call hash a timeline is kept under: from the call key.
 * @internal Exported for its tests (test/timeline*.redis.test.ts, the chaos run); callsync itself uses timelineIdOf.
 */
export const timelineId = (call: Pick<CanonicalCall, 'key'>): string => callHash(call.key);

const HASH_PREFIX = /^[0-9a-f]{32}/;

/**
 * The call hash of a sink job id (queues/registry.ts sinkJobId: it begins with it), else of the call
 * key: no hashing per event.
 */
export const timelineIdOf = (jobId: string, call: Pick<CanonicalCall, 'key'>): string =>
  HASH_PREFIX.exec(jobId)?.[0] ?? timelineId(call);

/** The timeline of an inbound dead letter's call: by its job id (the acknowledgement id), else its call's key; null without either. */
const fanOutTimelineId = (jobId: string, call: Pick<CanonicalCall, 'key'> | null | undefined): string | null =>
  HASH_PREFIX.exec(jobId)?.[0] ?? (call && typeof call.key === 'string' ? timelineId(call) : null);

/** Numbers of `call` masked in a text (a remote may echo them; redaction masked most already). */
function safeText(text: string, call?: Pick<CanonicalCall, 'from' | 'to' | 'fromRaw' | 'toRaw'>): string {
  const numbers = call && /\d/.test(text) ? ownNumbers(call) : [];
  const scrubbed = numbers.length > 0 ? scrubEchoes(text, { numbers }) : text;
  return maskDigitRuns(scrubbed.replace(/\s+/g, ' ').trim()).slice(0, MAX_REASON);
}

/**
 * A sink event made safe: its reason redacted and the call's numbers masked (in any spelling), in
 * refs too. An entry with neither (an attempt's start) is itself; a ref without a digit is kept as
 * it is.
 */
function safeEntry<T extends Omit<TimelineEntry, 'at'>>(entry: T, call: CanonicalCall): T {
  if (entry.reason === undefined && entry.refs === undefined) return entry;
  const safe: T = { ...entry };
  if (safe.reason !== undefined) safe.reason = safeText(safe.reason, call);
  if (safe.refs) {
    let numbers: string[] | undefined;
    const refs: Record<string, string> = {};
    for (const k in safe.refs) {
      const v = String(safe.refs[k]);
      refs[k] = /\d/.test(v) ? scrubEchoes(v, { numbers: (numbers ??= ownNumbers(call)) }) : v;
    }
    safe.refs = refs;
  }
  return safe;
}

/** The call's own numbers, each in the spellings a text may hold it in (numberSpellings). */
function ownNumbers(call: Pick<CanonicalCall, 'from' | 'to' | 'fromRaw' | 'toRaw'>): string[] {
  const out: string[] = [];
  for (const n of [call.from, call.to, call.fromRaw, call.toRaw])
    if (typeof n === 'string') out.push(...numberSpellings(n));
  return out;
}

/** HMACs of recent numbers (the own numbers of a deployment recur on most calls), by key. */
const hmacs = new WeakMap<Buffer, Map<string, string>>();
const MAX_CACHED_HMACS = 1000;

function hmac(key: Buffer, number: string): string {
  let cache = hmacs.get(key);
  if (!cache) hmacs.set(key, (cache = new Map()));
  let value = cache.get(number);
  if (value === undefined) {
    value = createHmac('sha256', key).update(number).digest('hex').slice(0, 40);
    if (cache.size >= MAX_CACHED_HMACS) cache.clear();
    cache.set(number, value);
  }
  return value;
}

/** A normalized phone number for the index: `+` and digits (of any script, as ASCII). */
function indexNumber(number: string): string {
  return asciiDigits(number).replace(/[^\d+]/g, '');
}

/** Digits a number read as sent has at least to be indexed: a phone number, not an extension. */
const RAW_NUMBER_DIGITS = 7;

/**
 * The number a call has for the index: its E.164 number, else the number as sent when that is a
 * phone number without a country code (`0170 1234567`: found as the national form `callsync forget`
 * looks up), else none.
 */
function numberToIndex(e164: string | null, raw: string | null | undefined): string | null {
  if (e164 !== null) return e164;
  if (typeof raw !== 'string') return null;
  const digits = indexNumber(raw.slice(0, 64));
  return digits.replace(/\D/g, '').length >= RAW_NUMBER_DIGITS ? digits : null;
}

/**
 * The forms a number is indexed under: itself, and for an E.164 number its national form, under
 * which the calls that gave it without a country code are listed (numberToIndex).
 */
function numberForms(number: string): string[] {
  const given = indexNumber(number);
  const national = given.startsWith('+') ? numberSpellings(given)[1] : undefined;
  return national === undefined || national.length < RAW_NUMBER_DIGITS ? [given] : [given, national];
}

/** What a `received` entry reads of a call (the ingress keeps only this while the append is under way). */
export type ReceivedCall = Pick<
  CanonicalCall,
  'key' | 'source' | 'callId' | 'direction' | 'from' | 'to' | 'startedAt'
> &
  Partial<Pick<CanonicalCall, 'fromRaw' | 'toRaw'>>;

/** What a platform sends for a caller it does not show (the spec's participant `<unknown>`, and the like). */
const NO_NUMBER = /^\s*(?:<?unknown>?|anonymous|private|restricted|withheld|suppressed|unavailable)?\s*$/i;

/**
 * A number as a timeline shows it: E.164 masked as logs mask numbers (maskPhone); else what the
 * platform sent — a short one (an internal extension, `23`: up to 6 digits) as its digits, a longer
 * one masked, one with no digit `unreadable` —; null only when none was given (anonymous).
 */
function shownNumber(e164: string | null | undefined, raw: string | null | undefined): string | null {
  if (typeof e164 === 'string' && e164 !== '') return maskPhone(e164);
  if (typeof raw !== 'string' || NO_NUMBER.test(raw)) return null;
  const digits = raw.slice(0, 64).replace(/[^\d+]/g, '');
  if (!/\d/.test(digits)) return 'unreadable';
  return digits.replace(/\D/g, '').length <= 6 ? digits : maskPhone(digits);
}

/**
 * A call's `received` entry and lookups, for the inbound log's append script to write in the same
 * command as the call (queues/inbound.ts; the one-slot layout, where all these keys share the log's
 * slot). The script knows the revision and the job id only once it has deduplicated the call: it
 * writes `'{' + head + revision + '","jobId":' + JSON job id + tail`, the text `received` writes.
 */
export interface ReceivedWrite {
  /** The call's timeline, then the lookups (by time, by call id, by number) a new call or an update adds to. */
  keys: string[];
  /** The entry's JSON after its `{` up to the revision's value (`"at":…,"revision":"`: not a whole entry). */
  head: string;
  /** The entry's JSON after the job id (`,"requestId":…}`). */
  tail: string;
  /** The entry's time (the lookups' score), and the lookups' oldest score kept (`at` − TTL). */
  at: number;
  cutoff: number;
  /** The call hash (the lookups' member). */
  id: string;
  /** Entries kept per timeline, and the TTL of the timeline and lookups (ms). */
  maxEntries: number;
  ttlMs: number;
}

/** A `received` entry's fields after its job id, in the order both writers of the entry put them. */
function receivedDetails(
  call: ReceivedCall,
  info: { requestId?: string; spooled?: boolean },
): Pick<TimelineEntry, 'requestId' | 'spooled' | 'direction' | 'from' | 'to' | 'startedAt'> {
  return {
    ...(info.requestId ? { requestId: info.requestId } : {}),
    ...(info.spooled ? { spooled: true as const } : {}),
    direction: call.direction,
    from: shownNumber(call.from, call.fromRaw),
    to: shownNumber(call.to, call.toRaw),
    startedAt: call.startedAt,
  };
}

export class CallTimeline {
  /** CALL_TIMELINE_TTL_DAYS in ms. */
  readonly ttlMs: number;
  /** Entries kept per call. */
  readonly maxEntries: number;
  private readonly now: () => number;
  /** The key of the number index: the privacy key (the notification ledger's too). */
  private readonly privacyKey: PrivacyKey;
  private quietUntil = 0;
  /** CallTimelineOptions.configuredQueues. */
  private readonly configured: ReadonlySet<string> | null;
  /** Writes waiting to be sent again (see RESEND_FOR_MS). */
  private resending = 0;

  constructor(
    private readonly redis: RedisClient,
    readonly keys: RedisKeys,
    private readonly options: CallTimelineOptions,
  ) {
    this.ttlMs = Math.round(options.ttlDays * 24 * 3600_000);
    this.maxEntries = options.maxEntries ?? MAX_TIMELINE_ENTRIES;
    this.now = options.now ?? Date.now;
    this.privacyKey = new PrivacyKey(redis, keys, options.privacySecret);
    this.configured = options.configuredQueues ? new Set(options.configuredQueues) : null;
  }

  key(id: string): string {
    return this.keys.callTimeline(id);
  }

  /**
   * The sinks a `sink` filter may name: those of this configuration (`configuredQueues`) and those
   * with a queue in Redis (a sink taken out, whose calls still show), an endpoint as `sink.endpoint`.
   */
  async knownSinks(): Promise<string[]> {
    const queues = new Set([...(this.configured ?? []), ...(await queuesInRedis(this.redis, this.keys))]);
    return [...queues].filter((q) => q.startsWith('sink-')).map((q) => q.slice('sink-'.length));
  }

  /** A call's summary from its entries; with `configuredQueues`, naming the sinks no worker here runs. */
  summarize(id: string, entries: readonly TimelineEntry[]): CallSummary {
    const summary = summarize(id, entries);
    return this.configured ? noteUnconfigured(summary, this.configured) : summary;
  }

  /**
   * Marks each sink the call waits for (pending, retrying) whose queue is paused or disabled as
   * `paused`, with why: its job runs only once an operator resumes the queue (`callsync resume`,
   * the dashboard). One whose queue is held back for a remote's "retry later" (queues/hold.ts: a 429
   * for the whole queue, another call's) keeps its state, and says why it waits and until when:
   * its `nextAt` is the hold's end when that is later. `states`: the queues' states read so far (a
   * query reads each queue once).
   */
  async notePausedQueues(
    summary: CallSummary,
    states: Map<string, Promise<QueueWait>> = new Map(),
  ): Promise<CallSummary> {
    for (const [label, status] of Object.entries(summary.sinks)) {
      if ((status !== 'pending' && status !== 'retrying') || summary.unconfigured?.[label]) continue;
      const queue = queueOfLabel(label);
      let state = states.get(queue);
      if (!state) {
        state = this.queueWait(`${this.keys.queuePrefix(queue)}:${queue}`);
        states.set(queue, state);
      }
      const { pause, heldUntil } = await state;
      const last = summary.reasons[label];
      if (pause) {
        summary.sinks[label] = 'paused';
        summary.reasons[label] =
          `its queue ${queue} is ${describePause(pause)}: the job waits for an operator to resume it (callsync resume)${last ? ` (last: ${last})` : ''}`;
        if (summary.nextAt) delete summary.nextAt[label];
        continue;
      }
      // The hold's end is read as now + its PTTL (to the millisecond, a little later at each read):
      // within a second of the sink's own next attempt, it is that attempt's wait (its own 429).
      if (heldUntil === null || heldUntil <= (summary.nextAt?.[label] ?? 0) + 1000) continue;
      summary.reasons[label] =
        `its queue ${queue} is held back until ${new Date(heldUntil).toISOString()} (a remote asked to wait: Retry-After): no job of it runs before${last ? ` (last: ${last})` : ''}`;
      (summary.nextAt ??= {})[label] = heldUntil;
    }
    return summary;
  }

  /** A queue's pause (pauseStateOf) and the end of its hold (queues/hold.ts), by its keys' base; unreadable: neither. */
  private async queueWait(base: string): Promise<QueueWait> {
    const [pause, heldUntil] = await Promise.all([
      pauseStateOf(this.redis, base).catch(() => null),
      Promise.all([this.redis.get(`${base}:limiter`), this.redis.pttl(`${base}:limiter`)]).then(
        ([count, ttl]) => (count !== null && Number(count) >= HELD && ttl > 0 ? this.now() + ttl : null),
        () => null,
      ),
    ]);
    return { pause, heldUntil };
  }

  /** The sorted set of every call by its last receipt (epoch ms), member the call hash. */
  recentKey(): string {
    return recentCallsKey(this.keys);
  }

  idKey(callId: string): string {
    return callIdKey(this.keys.area('calls'), callId.slice(0, CALL_ID_LOOKUP_MAX));
  }

  numberKey(hmac: string): string {
    return numberKey(this.keys.area('calls'), hmac);
  }

  /** The HMAC key: PRIVACY_HMAC_SECRET, else the one kept in Redis (generated by whoever needs it first). */
  private indexKey(): Promise<Buffer> {
    return this.privacyKey.get();
  }

  /** The index name of a phone number: HMAC-SHA256 with the index key, hex (never the number). */
  async numberHmac(number: string): Promise<string> {
    return hmac(await this.indexKey(), indexNumber(number));
  }

  private failed(err: unknown): void {
    const now = Date.now();
    if (now < this.quietUntil) return;
    this.quietUntil = now + 60_000;
    this.options.log?.warn(
      { err: { message: err instanceof Error ? err.message : String(err) } },
      'call timeline not written (the work itself went on)',
    );
  }

  /**
   * Sends a write, and again while Redis is unavailable (RESEND_FOR_MS, backing off up to 2 s
   * between tries); an error about the write itself, or the time or MAX_RESENDING used up: logged,
   * dropped. Never rejects. The waits do not keep the process alive.
   */
  private async sendUntilWritten(send: () => Promise<unknown>): Promise<void> {
    let giveUpAt: number | undefined;
    try {
      for (let tries = 1; ; tries++) {
        try {
          await send();
          return;
        } catch (err) {
          if (giveUpAt === undefined && isRedisUnavailable(err) && this.resending < MAX_RESENDING) {
            this.resending++;
            giveUpAt = Date.now() + RESEND_FOR_MS;
          }
          if (giveUpAt === undefined || !isRedisUnavailable(err) || Date.now() >= giveUpAt) return this.failed(err);
          await new Promise((resolve) => setTimeout(resolve, backoffDelay(tries, 100, 2000)).unref());
        }
      }
    } finally {
      if (giveUpAt !== undefined) this.resending--;
    }
  }

  /**
   * The call's fan-out failed for good: its inbound dead letter `jobId` (the id it was acknowledged
   * with, which begins with the call hash; else the hash of `call`), with the reason made safe (the
   * call's numbers and any digit run masked: a parse error quotes the text it read). Never rejects.
   */
  fanOutFailed(jobId: string, reason: string, call?: CanonicalCall | null): Promise<void> {
    const id = fanOutTimelineId(jobId, call);
    if (id === null) return Promise.resolve();
    return this.append(id, { event: 'dead-lettered', jobId, reason: safeText(reason, call ?? undefined) });
  }

  /** An operator retried the call's inbound dead letter `jobId` (`at`: before the retry): it is fanned out again. Never rejects. */
  fanOutRetried(jobId: string, call: CanonicalCall | null | undefined, at: number): Promise<void> {
    const id = fanOutTimelineId(jobId, call);
    return id === null ? Promise.resolve() : this.append(id, { at, event: 'retried', jobId });
  }

  /**
   * Keeps a refusal (one transaction: added, then the set trimmed to the TTL and to MAX_REFUSALS).
   * Never rejects, never waited for: a refusal is answered whatever Redis does.
   */
  refused(refusal: Refusal): void {
    const key = refusedCallsKey(this.keys);
    const at = refusal.at;
    const member = JSON.stringify({
      ...refusal,
      callId: refusal.callId === null ? null : refusal.callId.slice(0, 200),
    });
    try {
      this.redis
        .multi()
        .zadd(key, at, member)
        .zremrangebyscore(key, '-inf', `(${at - this.ttlMs}`)
        .zremrangebyrank(key, 0, -(MAX_REFUSALS + 1))
        .pexpire(key, this.ttlMs)
        .exec()
        .then(
          () => undefined,
          (err: unknown) => this.failed(err),
        );
    } catch (err) {
      this.failed(err);
    }
  }

  /**
   * The refusals kept from `since` to `until` (epoch ms), newest first, at most `limit`; `total`:
   * how many the range holds (more than listed: the list was cut at `limit`).
   */
  async refusalsBetween(since: number, until: number, limit: number): Promise<{ refused: Refusal[]; total: number }> {
    const from = Math.max(since, this.now() - this.ttlMs);
    const key = refusedCallsKey(this.keys);
    const [members, total] = await Promise.all([
      this.redis.zrevrangebyscore(key, until, from, 'LIMIT', 0, limit),
      this.redis.zcount(key, from, until),
    ]);
    const found: Refusal[] = [];
    for (const member of members) {
      try {
        found.push(JSON.parse(member) as Refusal);
      } catch {
        // not one of ours: passed over
      }
    }
    return { refused: found, total: Math.max(total, found.length) };
  }

  /** The refusals of a call id kept (newest first), at most `max`. */
  async refusals(callId: string, max = 20): Promise<Refusal[]> {
    const wanted = callId.slice(0, 200);
    const since = this.now() - this.ttlMs;
    // Redis picks out the call id's members (ZSCAN MATCH): not the whole set (up to MAX_REFUSALS) per lookup.
    const pattern = `*"callId":${globEscape(JSON.stringify(wanted))}*`;
    const found: Refusal[] = [];
    let cursor = '0';
    do {
      const [next, flat] = await this.redis.zscan(refusedCallsKey(this.keys), cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      for (let i = 0; i < flat.length; i += 2) {
        try {
          const r = JSON.parse(flat[i]!) as Refusal;
          if (r.callId === wanted && r.at >= since) found.push(r);
        } catch {
          // not one of ours: passed over
        }
      }
    } while (cursor !== '0');
    return found.sort((a, b) => b.at - a.at).slice(0, max);
  }

  /**
   * Appends one entry to a call's timeline: one command (a dead letter: also the failed-calls
   * index, in the same command on the one-slot layout, one more when spread). Never rejects.
   */
  append(id: string, entry: Omit<TimelineEntry, 'at'> & { at?: number }): Promise<void> {
    const full = { at: entry.at ?? this.now(), ...entry };
    try {
      const text = JSON.stringify(full);
      return (
        full.event === 'dead-lettered'
          ? this.writeFailed(id, [text], full.at)
          : scripted(this.redis).callsyncTimeline(1, this.key(id), 1, text, this.maxEntries, this.ttlMs)
      ).then(
        () => undefined,
        (err: unknown) => this.failed(err),
      );
    } catch (err) {
      this.failed(err);
      return Promise.resolve();
    }
  }

  /**
   * A delivery of the call was acknowledged (or drained from the spool): its `received` entry, and
   * for a new call or an update the lookups by time, call id and numbers. One command on the
   * one-slot layout; two on a spread cluster (the lookups are in their own slot). Never rejects.
   */
  received(
    call: ReceivedCall,
    info: { jobId: string; revision: Revision; requestId?: string; spooled?: boolean },
  ): Promise<void> {
    const id = timelineId(call);
    const entry: TimelineEntry = {
      at: this.now(),
      event: 'received',
      source: call.source,
      callId: call.callId,
      revision: info.revision,
      jobId: info.jobId,
      ...receivedDetails(call, info),
    };
    const text = JSON.stringify(entry);
    const script = scripted(this.redis);
    // Sent again while Redis is unavailable (as a sink attempt's entries): a Redis that stopped
    // between the call's append and this write would otherwise leave a delivered call without its
    // receipt (the chaos run's Redis restart found three). Each try is sent at once (the ingress
    // corks a batch's entries into one socket write).
    if (info.revision === 'duplicate')
      return this.sendUntilWritten(() =>
        script.callsyncTimeline(1, this.key(id), 1, text, this.maxEntries, this.ttlMs),
      );
    const lookups = (key: Buffer) => this.lookupKeys(call, key);
    const args = [text, this.maxEntries, this.ttlMs, entry.at, id, entry.at - this.ttlMs] as const;
    return this.sendUntilWritten(async () => {
      // The entry is sent at once (before the caller is answered); with the index key known and one
      // slot for all, the lookups go with it in the same command.
      const known = this.privacyKey.known;
      if (known && this.keys.layout === 'one-slot') {
        const index = lookups(known);
        await script.callsyncTimeline(1 + index.length, this.key(id), ...index, 1, ...args);
        return;
      }
      const appended = script.callsyncTimeline(1, this.key(id), 1, ...args);
      // Not left unhandled when the index key's read fails first.
      appended.catch(() => undefined);
      const index = lookups(await this.indexKey());
      await Promise.all([appended, script.callsyncTimeline(index.length, ...index, 0, ...args)]);
    });
  }

  /** The lookups a new call or an update is added to: by time, by call id, by each of its numbers (HMAC'd with `key`). */
  private lookupKeys(call: ReceivedCall, key: Buffer): string[] {
    const keys = [this.recentKey(), this.idKey(call.callId)];
    const seen = new Set<string>();
    for (const n of [numberToIndex(call.from, call.fromRaw), numberToIndex(call.to, call.toRaw)]) {
      if (typeof n !== 'string') continue;
      const number = indexNumber(n);
      if (number.length < 3 || seen.has(number)) continue;
      seen.add(number);
      keys.push(this.numberKey(hmac(key, number)));
    }
    return keys;
  }

  /**
   * The `received` entry of a delivery (its revision and job id left to the inbound log's append
   * script, which knows them once it has deduplicated the call), for that script to write in the
   * same command as the call: on the one-slot layout once the index key is known (null otherwise:
   * `received` writes the entry after the append, as before). The text is the one `received` writes.
   */
  receivedWrite(
    call: ReceivedCall,
    info: { requestId?: string; spooled?: boolean },
    /** The call hash, when the caller has it already (the acceptor's dedupe id): one SHA-256 less. */
    id = timelineId(call),
  ): ReceivedWrite | null {
    const known = this.privacyKey.known;
    if (this.keys.layout !== 'one-slot' || !known) return null;
    const at = this.now();
    const head = JSON.stringify({ at, event: 'received', source: call.source, callId: call.callId });
    const tail = JSON.stringify(receivedDetails(call, info));
    return {
      keys: [this.key(id), ...this.lookupKeys(call, known)],
      head: `${head.slice(1, -1)},"revision":"`,
      tail: tail === '{}' ? '}' : `,${tail.slice(1)}`,
      at,
      cutoff: at - this.ttlMs,
      id,
      maxEntries: this.maxEntries,
      ttlMs: this.ttlMs,
    };
  }

  /** The call was fanned out: the routes that matched and the sinks they name. Never rejects. */
  fannedOut(call: Pick<CanonicalCall, 'key'>, info: Omit<FannedOut, 'call'>): Promise<void> {
    return this.fannedOutMany([{ call, ...info }]);
  }

  /**
   * A batch fanned out (`jobId`: the sink jobs' id, which begins with the call hash): one command
   * per MAX_BATCH calls on the one-slot layout, one per call when spread. Never rejects.
   */
  async fannedOutMany(list: readonly FannedOut[]): Promise<void> {
    const at = this.now();
    const items = list.map(({ call, jobId, routes, sinks, endpoints }) => ({
      id: timelineIdOf(jobId, call),
      entry: endpoints
        ? { at, event: 'fanned-out' as const, jobId, routes, sinks, endpoints }
        : { at, event: 'fanned-out' as const, jobId, routes, sinks },
    }));
    const script = scripted(this.redis);
    if (this.keys.layout !== 'one-slot' || items.length === 1) {
      await Promise.all(
        items.map((i) => {
          const text = JSON.stringify(i.entry);
          return this.tryThenResend(() =>
            script.callsyncTimeline(1, this.key(i.id), 1, text, this.maxEntries, this.ttlMs),
          );
        }),
      );
      return;
    }
    const sends: Promise<void>[] = [];
    for (let i = 0; i < items.length; i += MAX_BATCH) {
      const part = items.slice(i, i + MAX_BATCH);
      const keys = part.map((p) => this.key(p.id));
      const texts = part.map((p) => JSON.stringify(p.entry));
      sends.push(
        this.tryThenResend(() =>
          script.callsyncTimelineMany(part.length, ...keys, this.maxEntries, this.ttlMs, ...texts),
        ),
      );
    }
    await Promise.all(sends);
  }

  /**
   * One try, awaited; while Redis cannot take it (a master failing over), sent again in the
   * background as the receipts and sink attempts are (sendUntilWritten) — not awaited: the fan-out
   * must not wait out a failover for its entries (it did, and a Sentinel chaos run stalled). Never
   * rejects.
   */
  private async tryThenResend(send: () => Promise<unknown>): Promise<void> {
    try {
      await send();
    } catch (err) {
      if (isRedisUnavailable(err)) void this.sendUntilWritten(send);
      else this.failed(err);
    }
  }

  /**
   * Sink events of one attempt in one command (its start and its outcome); reasons are made safe
   * here (redacted, the call's numbers masked, in refs too). `id`: the call hash when known (a sink
   * job id begins with it). `once`: a name under which they are written at most once per call (the entry of an
   * attempt cut short, noticed by each later attempt of its job). Never rejects.
   */
  sinkEvents(
    call: CanonicalCall,
    entries: (Omit<TimelineEntry, 'at'> & { at?: number })[],
    id?: string,
    once?: string,
  ): Promise<void> {
    const hash = id ?? timelineId(call);
    const key = this.key(hash);
    const texts = this.entryTexts(call, entries);
    const keys = once === undefined ? [key] : [key, `${key}:once:${once}`];
    // A dead letter (rare) goes to the failed-calls index too; no other attempt pays for it.
    const deadAt = entries.some((e) => e.event === 'dead-lettered') ? deadLetterTime(texts) : null;
    // Sent again while Redis is away: on a cluster the call's timeline may be on a master failing
    // over while the job's queue, on another, goes on (the attempt's outcome would never show).
    // In the command of its entries where the index shares their slot; when spread, apart, each
    // sent again on its own (a retried pair would append the entries twice).
    if (deadAt !== null && once === undefined && this.keys.layout === 'one-slot')
      return this.sendUntilWritten(() => this.writeFailed(hash, texts, deadAt));
    const written = this.sendUntilWritten(() =>
      scripted(this.redis).callsyncTimelineEntries(keys.length, ...keys, this.maxEntries, this.ttlMs, ...texts),
    );
    if (deadAt === null) return written;
    return Promise.all([written, this.sendUntilWritten(() => this.writeFailed(hash, [], deadAt))]).then(
      () => undefined,
    );
  }

  /**
   * Entries of a dead letter (`texts`; none: the index only) appended to the call's timeline and the
   * call put in the failed-calls index at `at`: one command on the one-slot layout, where the index
   * shares the timeline's slot; two when spread (the index is in the calls' area).
   */
  private async writeFailed(id: string, texts: readonly string[], at: number): Promise<void> {
    const script = scripted(this.redis);
    const index = [failedCallsKey(this.keys), failedSinceKey(this.keys)];
    const args = [this.maxEntries, this.ttlMs, at, id, at - this.ttlMs, new Date(at).toISOString()] as const;
    if (texts.length === 0) {
      await script.callsyncTimelineFailed(2, ...index, 0, ...args);
      return;
    }
    if (this.keys.layout === 'one-slot') {
      await script.callsyncTimelineFailed(3, this.key(id), ...index, 1, ...args, ...texts);
      return;
    }
    await Promise.all([
      script.callsyncTimelineEntries(1, this.key(id), this.maxEntries, this.ttlMs, ...texts),
      script.callsyncTimelineFailed(2, ...index, 0, ...args),
    ]);
  }

  /**
   * Records that the failed-calls index begins now, unless it began before (a worker's start: from
   * then on every dead letter of this version is indexed). Never rejects.
   */
  async beginFailedIndex(): Promise<void> {
    try {
      await this.redis.set(failedSinceKey(this.keys), new Date(this.now()).toISOString(), 'NX');
    } catch (err) {
      this.failed(err);
    }
  }

  /**
   * Whether the failed-calls index holds every call dead-lettered that was received from `since`:
   * it began (CLOCK_MARGIN_MS) before. Unreadable or never begun: no.
   */
  async failedIndexCovers(since: number): Promise<boolean> {
    const began = Date.parse((await this.redis.get(failedSinceKey(this.keys))) ?? '');
    return Number.isFinite(began) && since >= began + CLOCK_MARGIN_MS;
  }

  /**
   * The calls of the failed-calls index whose last receipt (their position in `calls:recent`, or
   * with `number` in that number's lookups) is between `from` and `to` (epoch ms), newest first, at
   * most `limit`. Reads the index from its latest dead letter back to CLOCK_MARGIN_MS before
   * `from` (a dead letter comes after the receipt it failed), a page at a time, and stops once no
   * member left can be received later than the `limit` found.
   */
  async failedBetween(from: number, to: number, limit: number, number?: string): Promise<{ id: string; at: number }[]> {
    const positions =
      number === undefined
        ? [this.recentKey()]
        : await Promise.all(numberForms(number).map(async (form) => this.numberKey(await this.numberHmac(form))));
    const found = new Map<string, number>();
    const byTime = () => [...found].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? 1 : a[0] > b[0] ? -1 : 0));
    for (let offset = 0; ; offset += FAILED_PAGE) {
      const flat = await this.redis.zrevrangebyscore(
        failedCallsKey(this.keys),
        '+inf',
        from - CLOCK_MARGIN_MS,
        'WITHSCORES',
        'LIMIT',
        offset,
        FAILED_PAGE,
      );
      const ids: string[] = [];
      for (let i = 0; i < flat.length; i += 2) ids.push(flat[i]!);
      if (ids.length === 0) break;
      const scores = await Promise.all(positions.map((key) => this.redis.zmscore(key, ...ids)));
      ids.forEach((id, i) => {
        let at: number | null = null;
        for (const s of scores) if (s[i] != null && (at === null || Number(s[i]) > at)) at = Number(s[i]);
        if (at !== null && at >= from && at <= to) found.set(id, at);
      });
      if (ids.length < FAILED_PAGE) break;
      const oldestRead = Number(flat.at(-1));
      if (found.size >= limit && oldestRead + CLOCK_MARGIN_MS < byTime()[limit - 1]![1]) break;
    }
    return byTime()
      .slice(0, limit)
      .map(([id, at]) => ({ id, at }));
  }

  /** Sink entries as stored: made safe (see safeEntry), `at` now where unset. */
  entryTexts(call: CanonicalCall, entries: readonly (Omit<TimelineEntry, 'at'> & { at?: number })[]): string[] {
    const now = this.now();
    return entries.map((e) => {
      const safe = safeEntry(e, call);
      return JSON.stringify(safe.at === undefined ? { at: now, ...safe } : safe);
    });
  }

  /**
   * The entries of a call's timeline, oldest first (an empty list: none, or expired). The ingress
   * and the workers write over different connections (on a cluster a first write to a node may
   * wait for its connection): by time, a receipt before what happened at the same millisecond.
   */
  async read(id: string): Promise<TimelineEntry[]> {
    const raw = await this.redis.lrange(this.key(id), 0, -1);
    // A write sent again after its answer was lost (a connection dropped after Redis ran it) lands
    // twice, the same text: shown once.
    const entries = [...new Set(raw)].flatMap((text) => {
      try {
        return [JSON.parse(text) as TimelineEntry];
      } catch {
        return [];
      }
    });
    const rank = (e: TimelineEntry) => (e.event === 'received' ? 0 : 1);
    return entries.sort((a, b) => a.at - b.at || rank(a) - rank(b));
  }

  /** Call hashes received between `from` and `to` (epoch ms), newest first, at most `limit`. */
  async recent(from: number, to: number, limit: number): Promise<{ id: string; at: number }[]> {
    const flat = await this.redis.zrevrangebyscore(this.recentKey(), to, from, 'WITHSCORES', 'LIMIT', 0, limit);
    const out: { id: string; at: number }[] = [];
    for (let i = 0; i + 1 < flat.length; i += 2) out.push({ id: flat[i]!, at: Number(flat[i + 1]) });
    return out;
  }

  /**
   * Call hashes with this phone number as caller or callee, newest first: for an E.164 number also
   * the calls that gave it without a country code (listed by their digits as sent: numberToIndex),
   * under its national form (`0170 1234567`).
   */
  async byNumber(number: string, limit = 1000): Promise<string[]> {
    return (await this.byNumberBetween(number, -Infinity, Infinity, limit)).map((r) => r.id);
  }

  /**
   * byNumber, of the calls received between `from` and `to` (epoch ms; each with the time it is
   * indexed under: its last receipt), newest first, at most `limit`.
   */
  async byNumberBetween(
    number: string,
    from: number,
    to: number,
    limit: number,
  ): Promise<{ id: string; at: number }[]> {
    const found = new Map<string, number>();
    for (const form of numberForms(number)) {
      const key = this.numberKey(await this.numberHmac(form));
      const flat = await this.redis.zrevrangebyscore(
        key,
        to === Infinity ? '+inf' : to,
        from === -Infinity ? '-inf' : from,
        'WITHSCORES',
        'LIMIT',
        0,
        limit,
      );
      for (let i = 0; i + 1 < flat.length; i += 2) {
        const [id, at] = [flat[i]!, Number(flat[i + 1])];
        if (!(at <= (found.get(id) ?? -Infinity))) found.set(id, at);
      }
    }
    return [...found]
      .sort((a, b) => b[1] - a[1])
      .slice(0, limit)
      .map(([id, at]) => ({ id, at }));
  }

  /** Call hashes of a platform call id (one per source that delivered it), newest first. */
  async byCallId(callId: string): Promise<string[]> {
    return this.redis.zrevrange(this.idKey(callId), 0, -1);
  }

  /**
   * The calls a reference names: a call hash, an acknowledgement or sink job id (they begin with
   * the call hash; a replay's too), a phone number (`+49…`), or a platform call id.
   */
  async resolve(ref: string): Promise<string[]> {
    const trimmed = ref.trim();
    // A job id: the hash, and an acknowledgement's or update's suffix, or a replay's (`-replay-<time>`).
    const hash = JOB_ID.exec(trimmed);
    if (hash) return [hash[1]!];
    if (NUMBER_REF.test(trimmed)) return this.byNumber(trimmed);
    return this.byCallId(trimmed);
  }
}

/** A reference that is a job id or call hash: the call hash, then an acknowledgement's, update's or replay's suffix. */
const JOB_ID = /^([0-9a-f]{32})(?:-[0-9a-z]+)*$/;
/** A reference read as a phone number. */
const NUMBER_REF = /^\+\d[\d\s\-()./]{4,}$/;

/**
 * What became of a call at one sink (or endpoint), from its timeline: `pending` (not attempted yet,
 * or an attempt under way), `retrying` (an attempt failed; the next is due), `paused` (an attempt
 * was refused so that the queue was paused or disabled — credentials rejected, 410 Gone, a
 * redirect —, or the job waits in a queue paused so (CallTimeline.notePausedQueues): nothing happens
 * until an operator resumes it), `done`, `skipped`, `failed` (dead-lettered).
 */
type SinkStatus = 'pending' | 'retrying' | 'paused' | 'done' | 'skipped' | 'failed';

export interface CallSummary {
  id: string;
  callId: string | null;
  source: string | null;
  /** When it was first received (epoch ms), and last. */
  receivedAt: number | null;
  lastAt: number | null;
  direction: string | null;
  from: string | null;
  to: string | null;
  /** Per sink (`sink` or `sink.endpoint`): the outcome of its latest attempt. */
  sinks: Record<string, SinkStatus>;
  /**
   * The reason of each sink's latest outcome (a skip, a failure, a retry; a done one's note only; a
   * job of the call still waiting for it); for a sink named in `unconfigured`, that
   * its job waits for a worker whose configuration has it.
   */
  reasons: Record<string, string>;
  /**
   * The sinks the call still waits for (pending, retrying, paused) that this configuration lacks,
   * each with the queue its job waits in: no worker here runs it (docs/operations.md, "A sink taken
   * out of the configuration"). Absent when there are none, or no configuration was given.
   */
  unconfigured?: Record<string, string>;
  /**
   * Its fan-out failed for good: the call is an inbound dead letter (`jobId` in the queue
   * `inbound`) and no sink got a job. Absent once it was fanned out or that dead letter retried.
   */
  fanOutFailed?: { reason: string; jobId: string };
  /**
   * Received and not fanned out yet (in the inbound log, waiting for a worker's fan-out: no worker
   * running, or a backlog): no sink has a job yet. `--status pending` lists it. Absent otherwise.
   */
  fanOutPending?: true;
  /**
   * Per sink retrying, or waiting in a queue held back for a remote's "retry later": when its next
   * attempt can run (epoch ms) — its last retry's next attempt, or the hold's end when that is later
   * (CallTimeline.notePausedQueues). Absent when there is none.
   */
  nextAt?: Record<string, number>;
}

/** What holds a queue's jobs back: an operator's pause (or a disabling), or a remote's hold until a time (epoch ms). */
interface QueueWait {
  pause: PauseState | null;
  heldUntil: number | null;
}

export const sinkLabel = (e: Pick<TimelineEntry, 'sink' | 'endpoint'>): string =>
  e.endpoint ? `${e.sink}.${e.endpoint}` : (e.sink ?? '');

/**
 * The state of a call from its timeline: where it came from, and each sink's latest outcome.
 * @internal Exported for its tests only (test/timeline.redis.test.ts).
 */
export function summarize(id: string, entries: readonly TimelineEntry[]): CallSummary {
  const summary: CallSummary = {
    id,
    callId: null,
    source: null,
    receivedAt: null,
    lastAt: null,
    direction: null,
    from: null,
    to: null,
    sinks: {},
    reasons: {},
  };
  /** Per sink: the job and attempt of its latest outcome that ends the job (done, skipped, dead-lettered). */
  const ended = new Map<string, { jobId: string | undefined; attempt: number }>();
  /**
   * Per sink (its label, or the sink's name for a fan-out entry that names no endpoints): the jobs
   * it was given that have not ended yet. A new revision's job (an update: another job id) waits
   * while the first revision's outcome is the latest: the sink is pending again, not "done".
   */
  const awaiting = new Map<string, Set<string>>();
  /**
   * Jobs that ended, as `label job` and `sink job`: a fan-out naming one again (run again after a
   * crash; a resend after DEDUPE_WINDOW_SECONDS, whose job BullMQ may still hold, so it is not run)
   * is not waited for — should it run again, its attempt says so.
   */
  const endedJobs = new Set<string>();
  /**
   * The call's jobs in the order they first appear (a revision's job is fanned out after the one
   * before it), and per sink the newest job that ended there: an older revision's job ending after
   * a newer one's (its retry done after the update was dead-lettered) does not stand for the sink —
   * the call's newest content is what the operator asks about.
   */
  const jobRank = new Map<string, number>();
  const rankOf = (jobId: string | undefined): number | undefined => {
    if (jobId === undefined) return undefined;
    let rank = jobRank.get(jobId);
    if (rank === undefined) jobRank.set(jobId, (rank = jobRank.size));
    return rank;
  };
  const newestEnded = new Map<string, number>();
  /** Per `label job`: its latest attempt or retry (what a job still awaited is doing). */
  const lastTry = new Map<string, TimelineEntry>();
  let fannedOut = false;
  const await_ = (label: string, jobId: string | undefined) => {
    if (jobId === undefined || endedJobs.has(`${label} ${jobId}`)) return;
    let jobs = awaiting.get(label);
    if (!jobs) awaiting.set(label, (jobs = new Set()));
    jobs.add(jobId);
  };
  for (const e of entries) {
    summary.lastAt = e.at;
    if (e.event === 'received') {
      summary.receivedAt ??= e.at;
      summary.callId = e.callId ?? summary.callId;
      summary.source = e.source ?? summary.source;
      summary.direction = e.direction ?? summary.direction;
      summary.from = e.from ?? summary.from;
      summary.to = e.to ?? summary.to;
      continue;
    }
    if (e.event === 'fanned-out') {
      fannedOut = true;
      rankOf(e.jobId);
      delete summary.fanOutFailed;
      for (const sink of e.sinks ?? []) {
        const endpoints = e.endpoints?.[sink];
        // Each endpoint given a job is pending until its queue reports: a paused, disabled or busy
        // endpoint shows as one the call still waits for, not as left out.
        if (endpoints?.length) {
          if (summary.sinks[sink] === 'pending') delete summary.sinks[sink];
          for (const endpoint of endpoints) {
            const label = sinkLabel({ sink, endpoint });
            summary.sinks[label] ??= 'pending';
            await_(label, e.jobId);
          }
        }
        // An entry without its endpoints (written before they were named): the sink stands for
        // them until they are attempted.
        else {
          if (!Object.keys(summary.sinks).some((s) => s === sink || s.startsWith(`${sink}.`)))
            summary.sinks[sink] = 'pending';
          await_(sink, e.jobId);
        }
      }
      continue;
    }
    if (!e.sink) {
      // The fan-out's own outcomes (an inbound dead letter, an operator's retry of it).
      if (e.event === 'dead-lettered') summary.fanOutFailed = { reason: e.reason ?? '', jobId: e.jobId ?? '' };
      else if (e.event === 'retried') delete summary.fanOutFailed;
      continue;
    }
    const label = sinkLabel(e);
    const rank = rankOf(e.jobId);
    const superseded = rank !== undefined && rank < (newestEnded.get(label) ?? -1);
    // An attempt that lost its job's lock (its worker stalled: the job was taken over and finished
    // by another) may end after the one that finished the job, with the same attempt number — a
    // failure the queue never took (its lock had passed). A new attempt of the job counts higher.
    const end = ended.get(label);
    if (
      end &&
      (e.event === 'attempt' || e.event === 'retry') &&
      e.jobId === end.jobId &&
      (e.attempt ?? 0) <= end.attempt
    )
      continue;
    // A dead letter retried by an operator: a new round, whose attempts count from 1 again.
    if (e.event === 'retried') ended.delete(label);
    if (e.event === 'done' || e.event === 'skipped' || e.event === 'dead-lettered') {
      if (e.jobId !== undefined)
        for (const key of [label, e.sink]) {
          awaiting.get(key)?.delete(e.jobId);
          endedJobs.add(`${key} ${e.jobId}`);
        }
      if (!superseded) {
        ended.set(label, { jobId: e.jobId, attempt: e.attempt ?? 0 });
        if (rank !== undefined) newestEnded.set(label, rank);
      }
    }
    // An older revision's job, after a newer one ended here: kept in the timeline, not the sink's state.
    if (superseded) continue;
    if ((e.event === 'attempt' || e.event === 'retry') && e.jobId !== undefined) lastTry.set(`${label} ${e.jobId}`, e);
    if (e.endpoint && summary.sinks[e.sink] === 'pending') delete summary.sinks[e.sink];
    const status: SinkStatus | undefined =
      e.event === 'attempt'
        ? summary.sinks[label] === 'retrying' || summary.sinks[label] === 'paused'
          ? 'retrying'
          : 'pending'
        : e.event === 'done'
          ? 'done'
          : e.event === 'skipped'
            ? 'skipped'
            : e.event === 'retry'
              ? e.paused
                ? 'paused'
                : 'retrying'
              : e.event === 'dead-lettered'
                ? 'failed'
                : e.event === 'retried'
                  ? 'pending'
                  : undefined;
    if (status) summary.sinks[label] = status;
    if (e.event === 'retry' && e.nextAt !== undefined && !e.paused) (summary.nextAt ??= {})[label] = e.nextAt;
    else if (status && summary.nextAt) delete summary.nextAt[label];
    if (e.reason && (e.event === 'skipped' || e.event === 'dead-lettered' || e.event === 'retry'))
      summary.reasons[label] = e.reason;
    // Retried: the dead letter's reason is no longer why it stands; until the new round's outcome, that it was retried.
    if (e.event === 'retried') summary.reasons[label] = retriedReason(e);
    // Done: the error of a retry before is no reason of it (a note it has is).
    if (e.event === 'done') {
      if (e.reason) summary.reasons[label] = e.reason;
      else delete summary.reasons[label];
    }
  }
  // A sink whose latest outcome ended a job while another job of the call (another revision's)
  // still waits for it: pending, and the reason says which.
  for (const [label, state] of Object.entries(summary.sinks)) {
    if (state !== 'done' && state !== 'skipped' && state !== 'failed') continue;
    const dot = label.indexOf('.');
    const waiting = [...(awaiting.get(label) ?? []), ...(dot === -1 ? [] : (awaiting.get(label.slice(0, dot)) ?? []))];
    if (waiting.length === 0) continue;
    const job = waiting.at(-1)!;
    // That job retrying (it failed before the older one ended): retrying, with its reason and next attempt.
    const last = lastTry.get(`${label} ${job}`);
    if (last?.event === 'retry') {
      summary.sinks[label] = last.paused ? 'paused' : 'retrying';
      summary.reasons[label] =
        `job ${job} of the call (an update): ${last.reason ?? 'retrying'}; the last one ${state}`;
      if (last.nextAt !== undefined && !last.paused) (summary.nextAt ??= {})[label] = last.nextAt;
      continue;
    }
    summary.sinks[label] = 'pending';
    summary.reasons[label] = `job ${job} of the call waits for it (an update); the last one ${state}`;
  }
  if (summary.nextAt && Object.keys(summary.nextAt).length === 0) delete summary.nextAt;
  if (!fannedOut && !summary.fanOutFailed && Object.keys(summary.sinks).length === 0 && summary.receivedAt !== null)
    summary.fanOutPending = true;
  return summary;
}

/** A sink's reason after its dead letter was retried, until the new round's first outcome. */
function retriedReason(e: TimelineEntry): string {
  return `dead letter retried ${new Date(e.at).toISOString()}${e.by ? ` by ${e.by}` : ''}: a new round of attempts`;
}

/** The queue of a sink label (`sink` or `sink.endpoint`). */
function queueOfLabel(label: string): string {
  const dot = label.indexOf('.');
  return dot === -1 ? sinkQueueName(label) : sinkQueueName(label.slice(0, dot), label.slice(dot + 1));
}

/** Why a sink the call waits for gets no attempt: its queue is not in this configuration. */
function unconfiguredReason(label: string, queue: string, last: string | undefined): string {
  const dot = label.indexOf('.');
  const what = dot === -1 ? `sink ${label}` : `endpoint ${label.slice(dot + 1)} of sink ${label.slice(0, dot)}`;
  return `${what} is not in this configuration: the job waits in queue ${queue} for a worker whose configuration has it${last ? ` (last: ${last})` : ''}`;
}

/**
 * Names in `summary.unconfigured` each sink the call still waits for whose queue is not among
 * `configured`, and gives it that reason (the last attempt's reason kept after it).
 */
function noteUnconfigured(summary: CallSummary, configured: ReadonlySet<string>): CallSummary {
  for (const [label, status] of Object.entries(summary.sinks)) {
    if (status === 'done' || status === 'skipped' || status === 'failed') continue;
    const queue = queueOfLabel(label);
    if (configured.has(queue)) continue;
    (summary.unconfigured ??= {})[label] = queue;
    summary.reasons[label] = unconfiguredReason(label, queue, summary.reasons[label]);
  }
  return summary;
}

/** What `findCalls` filters on. */
export interface CallQuery {
  /** Received from (epoch ms, inclusive) … until (default now). */
  since: number;
  until?: number;
  /** Only calls routed to this sink (its name; a sink with endpoints: any of them). */
  sink?: string;
  /** Only calls with a sink (the `sink` one, when given) in this state; `pending` includes retrying and paused. */
  status?: SinkStatus;
  /** Only calls with this number as caller or callee (looked up by its HMAC). */
  number?: string;
  /** At most this many calls (newest first). Default 50. */
  limit?: number;
}

/** Calls looked at per query at most (the newest of the range): bounds the work of one query. */
const MAX_SCANNED_CALLS = 5000;
/**
 * Timeline entries read per query at most (about the entries of 250 calls that retried to the
 * cap, or of 5000 calls of ten): past it the query stops at the next call received at another
 * time and says where (`next`). Before, a status that few calls had read every timeline of the
 * newest 5000 — up to a million entries for one page.
 */
const MAX_READ_ENTRIES = 50_000;
/** Timelines read per round trip at most. */
const READ_BATCH = 100;

function sinkStates(summary: CallSummary, sink: string | undefined): [string, SinkStatus][] {
  return Object.entries(summary.sinks).filter(
    ([label]) => sink === undefined || label === sink || label.startsWith(`${sink}.`),
  );
}

/** What `findCalls` answers. */
export interface FoundCalls {
  calls: CallSummary[];
  /** Calls of the range looked at. */
  scanned: number;
  /** Stopped before the end of the range by the bound of the work of a query (calls or entries read): narrow the query, or go on at `next`. */
  truncated: boolean;
  /** Stopped at `limit` with older calls of the range not looked at. */
  more: boolean;
  /**
   * When the list stopped before the end of the range: the `until` (ISO time, inclusive) that
   * lists the rest, none of these calls again and none left out (a page ends between two
   * milliseconds).
   */
  next?: string;
}

/** Whether a summed-up call is one the query asks for. */
function matches(summary: CallSummary, query: CallQuery, until: number): boolean {
  const at = summary.lastAt ?? 0;
  if (at < query.since || (summary.receivedAt ?? at) > until) return false;
  const states = sinkStates(summary, query.sink);
  if (query.sink !== undefined && states.length === 0) return false;
  if (query.status !== undefined) {
    const wanted = query.status === 'pending' ? ['pending', 'retrying', 'paused'] : [query.status];
    // A failed fan-out is the call's failure (no sink got a job).
    const fanOut =
      query.sink === undefined &&
      ((summary.fanOutFailed && query.status === 'failed') || (summary.fanOutPending && query.status === 'pending'));
    if (!fanOut && !states.some(([, state]) => wanted.includes(state))) return false;
  }
  return true;
}

/**
 * The calls of a query, newest first (by their last receipt), each summed up; reads the timelines
 * in batches, and stops at `limit`, or once MAX_SCANNED_CALLS calls or MAX_READ_ENTRIES entries
 * were read (`truncated`) — always between two calls received at different milliseconds, so that
 * `next` lists the rest exactly.
 */
export async function findCalls(timeline: CallTimeline, query: CallQuery): Promise<FoundCalls> {
  const until = query.until ?? Date.now();
  const limit = query.limit ?? 50;
  // One more than looked at: whether the range goes on past the bound, and at which time.
  // Failed calls are few: their candidates come from the failed-calls index, when it covers the
  // range (else, calls dead-lettered before it began are found only by reading every timeline).
  const fetched =
    query.status === 'failed' && (await timeline.failedIndexCovers(query.since))
      ? await timeline.failedBetween(query.since, until, MAX_SCANNED_CALLS + 1, query.number)
      : query.number !== undefined
        ? await timeline.byNumberBetween(query.number, query.since, until, MAX_SCANNED_CALLS + 1)
        : await timeline.recent(query.since, until, MAX_SCANNED_CALLS + 1);
  const candidates = fetched.slice(0, MAX_SCANNED_CALLS);
  const found: { summary: CallSummary; at: number }[] = [];
  const paused = new Map<string, Promise<QueueWait>>();
  let scanned = 0;
  let entriesRead = 0;
  let stop: 'limit' | 'bound' | null = null;
  // Past the limit or the bound, only the rest of the last call's millisecond is read: a page ends between two.
  const goOn = () =>
    scanned < candidates.length && (stop === null || candidates[scanned]!.at === candidates[scanned - 1]!.at);
  while (goOn()) {
    const batch = candidates.slice(scanned, scanned + Math.min(READ_BATCH, Math.max(10, limit - found.length)));
    const timelines = await Promise.all(batch.map((c) => timeline.read(c.id)));
    for (const [j, entries] of timelines.entries()) {
      if (!goOn()) break;
      const candidate = batch[j]!;
      scanned++;
      entriesRead += entries.length;
      if (entries.length > 0) {
        const summary = await timeline.notePausedQueues(timeline.summarize(candidate.id, entries), paused);
        if (matches(summary, query, until)) found.push({ summary, at: candidate.at });
      }
      if (stop === null && found.length >= limit) stop = 'limit';
      else if (stop === null && entriesRead >= MAX_READ_ENTRIES) stop = 'bound';
    }
  }
  let calls = found;
  /** The `until` of the rest of the range (epoch ms, inclusive), when there is a rest. */
  let next: number | undefined;
  if (scanned < candidates.length) next = candidates[scanned - 1]!.at - 1;
  else if (fetched.length > MAX_SCANNED_CALLS) {
    // At the cap the calls of the last millisecond past it are not read: that millisecond goes to
    // the next page, unless it is all this range has (thousands of calls in one millisecond).
    const last = candidates[scanned - 1]!.at;
    if (fetched[MAX_SCANNED_CALLS]!.at < last) next = last - 1;
    else if (candidates[0]!.at !== last) {
      next = last;
      calls = found.filter((f) => f.at !== last);
    } else next = last - 1;
  }
  // Over the limit by calls of the last one's millisecond: that millisecond goes to the next page,
  // unless it is all this page has.
  if (calls.length > limit) {
    const last = calls.at(-1)!.at;
    const kept = calls.filter((c) => c.at !== last);
    if (kept.length > 0) [calls, next] = [kept, last];
  }
  return {
    calls: calls.map((c) => c.summary),
    scanned,
    truncated: next !== undefined && stop !== 'limit',
    more: next !== undefined && stop === 'limit',
    ...(next === undefined ? {} : { next: new Date(next).toISOString() }),
  };
}

/** A duration like `2h`, `30m`, `90s`, `7d` in ms; null when it is none. */
function parseDuration(text: string): number | null {
  const m = /^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$/.exec(text.trim());
  if (!m) return null;
  const unit = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }[m[2] as 's' | 'm' | 'h' | 'd' | 'w'];
  return Math.round(Number(m[1]) * unit);
}

/** An ISO 8601 day or time (its zone optional, as the CLI has always taken it). */
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * `--since` / `since=`: a duration back from `now` (`2h`) or a time (ISO 8601); null when it is
 * neither. Date.parse alone also took `-1`, `0` or `12` as days of 2000/2001 (a range of decades).
 */
function parseSince(text: string, now: number = Date.now()): number | null {
  const duration = parseDuration(text);
  // Longer ago than 1970 is all there is (`99999999999d` was a time no Date can hold).
  if (duration !== null) return Math.max(0, now - duration);
  if (!ISO_TIME.test(text.trim())) return null;
  const at = Date.parse(text.trim());
  if (Number.isNaN(at)) return null;
  // A day the month does not have (`2026-02-30`) is refused, not read as another (March 2).
  const [year, month, day] = text.trim().slice(0, 10).split('-').map(Number) as [number, number, number];
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCMonth() === month - 1 && date.getUTCDate() === day ? at : null;
}

/** One line of detail for an entry (tables: the CLI, the dashboard). */
export function describeEntry(e: TimelineEntry): string {
  const iso = (ms: number) => new Date(ms).toISOString();
  switch (e.event) {
    case 'received':
      return [
        `${e.revision ?? 'new'} from ${e.source ?? '?'}`,
        e.requestId ? `request ${e.requestId}` : '',
        e.spooled ? 'spooled, drained' : '',
        `ack ${e.jobId ?? ''}`,
      ]
        .filter(Boolean)
        .join(', ');
    case 'fanned-out': {
      const sinks = (e.sinks ?? []).map((s) => (e.endpoints?.[s]?.length ? `${s} (${e.endpoints[s].join(', ')})` : s));
      return `routes ${(e.routes ?? []).join(', ') || '(none)'} → sinks ${sinks.join(', ') || '(none)'}`;
    }
    case 'attempt':
      return e.cutOff
        ? `attempt ${e.attempt ?? '?'} cut short (its worker stopped or lost the job)`
        : `attempt ${e.attempt ?? '?'} started`;
    case 'done':
      return (
        [
          Object.entries(e.refs ?? {})
            .map(([k, v]) => `${k}=${v}`)
            .join(' '),
          e.reason ?? '',
        ]
          .filter(Boolean)
          .join('; ') || 'done'
      );
    case 'skipped':
      return `${e.skip ?? 'other'}: ${e.reason ?? ''}`;
    case 'retry':
      return `${e.kind ?? 'error'}: ${e.reason ?? ''}${e.paused ? ' (queue paused: waits for an operator)' : e.nextAt ? ` (next attempt ${iso(e.nextAt)})` : e.kind === 'redis' ? ' (waits for Redis, no attempt spent)' : ''}`;
    case 'dead-lettered':
      return e.sink
        ? `${e.kind ?? 'error'}: ${e.reason ?? ''}`
        : `fan-out failed, no sink got a job; inbound dead letter ${e.jobId ?? ''}: ${e.reason ?? ''}`;
    case 'retried':
      return e.sink
        ? `dead letter retried${e.by ? ` by ${e.by}` : ''}: a new round of attempts, numbered from 1`
        : 'inbound dead letter retried: fanned out again';
    default:
      return '';
  }
}

/** The states a query may ask for (`pending` matches `retrying` and `paused` too). */
const STATUSES = ['failed', 'skipped', 'pending', 'retrying', 'paused', 'done'] as const;

/** A value echoed in an error: at most 100 characters of it (a query may carry kilobytes). */
export const quoted = (text: string | undefined): string =>
  text === undefined ? '' : text.length > 100 ? `${text.slice(0, 100)}…` : text;

/** A bad query parameter; the message starts with the parameter's name. */
export class CallQueryError extends Error {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(`${param} ${message}`);
    this.name = 'CallQueryError';
  }
}

/**
 * A call query from named values (`since`, `until`, `sink`, `status`, `number`, `limit`); throws
 * CallQueryError. `number` is read as every door reads one (src/model/number-words.ts): E.164, with
 * 00, or national in `region` (PHONE_DEFAULT_REGION), spaced or not; the query holds it in E.164.
 */
export function parseCallQuery(
  values: Record<string, string | boolean | undefined>,
  region: CountryCode,
  now: number = Date.now(),
): CallQuery {
  const text = (name: string) => (typeof values[name] === 'string' ? (values[name] as string) : undefined);
  const sinceText = text('since');
  if (sinceText === undefined) throw new CallQueryError('since', 'is required (e.g. 2h, 7d, or an ISO time)');
  const since = parseSince(sinceText, now);
  if (since === null)
    throw new CallQueryError('since', `must be a duration (30m, 2h, 7d) or an ISO time, got "${quoted(sinceText)}"`);
  const untilText = text('until');
  const until = untilText === undefined ? now : parseSince(untilText, now);
  if (until === null)
    throw new CallQueryError('until', `must be an ISO time or a duration ago, got "${quoted(untilText)}"`);
  if (until < since)
    throw new CallQueryError('until', `is before since ("${quoted(untilText)}" < "${quoted(sinceText)}")`);
  const status = text('status');
  if (status !== undefined && !(STATUSES as readonly string[]).includes(status))
    throw new CallQueryError('status', `must be one of ${STATUSES.join(', ')}, got "${quoted(status)}"`);
  const limitText = text('limit');
  const limit = limitText === undefined ? 50 : decimal(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw new CallQueryError('limit', `must be a whole number from 1 to 1000, got "${quoted(limitText)}"`);
  const numberText = text('number');
  const number = numberText === undefined ? undefined : oneNumber(numberText, region);
  if (number === null)
    throw new CallQueryError(
      'number',
      `must be one phone number (+4930901820, 004930901820, or 030 901820 read in PHONE_DEFAULT_REGION, ${region}), got "${quoted(numberText)}"`,
    );
  const sink = text('sink');
  return {
    since,
    until,
    limit,
    ...(sink ? { sink } : {}),
    ...(status ? { status: status as CallQuery['status'] } : {}),
    ...(number ? { number } : {}),
  };
}

/** The calls a reference names (see `CallTimeline.resolve`), newest first, at most `max`, each with its timeline. */
export async function callsNamed(
  timeline: CallTimeline,
  ref: string,
  max = 20,
): Promise<(CallSummary & { entries: TimelineEntry[] })[]> {
  const ids = (await timeline.resolve(ref)).slice(0, max);
  const found = await Promise.all(ids.map(async (id) => ({ id, entries: await timeline.read(id) })));
  // A platform call id is indexed by its first 200 characters: of the calls under them, only those
  // with this very id (one of 300 characters was shown another's timeline too, newest first).
  const callId = ref.trim();
  const named =
    JOB_ID.test(callId) || NUMBER_REF.test(callId)
      ? found
      : found.filter((c) =>
          c.entries.every((e) => e.event !== 'received' || e.callId === undefined || e.callId === callId),
        );
  const paused = new Map<string, Promise<QueueWait>>();
  return Promise.all(
    named
      .filter((c) => c.entries.length > 0)
      .map(async (c) => ({
        ...(await timeline.notePausedQueues(timeline.summarize(c.id, c.entries), paused)),
        entries: c.entries,
      })),
  );
}

/** What a reference to calls names: a call id (a job id, a call hash), a phone number (E.164), or both. */
export interface CallLookups {
  callId: string | null;
  number: string | null;
}

/**
 * What `callsync call <ref>`, `/api/calls/:ref` and the Calls page's search look up: a call id (a job
 * id, a call hash), or a phone number in a form `call` reads (E.164, 00, national in `region`, in one
 * word or several), or both — a word of digits only that reads as a number may be a call id too (a
 * platform call id may be all digits). Throws NumberWordsError for words that are neither (several
 * words that make no one number).
 */
export function lookupsOf(words: readonly string[], region: CountryCode): CallLookups {
  const target = targetOfWords([...words], region, 'call');
  if (target.kind === 'call') return { callId: target.callId, number: null };
  const digits = words.length === 1 && /^\d+$/.test(words[0]!.trim());
  return { callId: digits ? words[0]!.trim() : null, number: target.e164 };
}

/**
 * A reference given as one text (an API path, a search field): lookupsOf its words; text that reads
 * as neither (an E.164-looking number that is not valid, a call id with spaces) is taken as it is,
 * as a call id (`CallTimeline.resolve` reads a `+…` one as a number).
 */
export function lookupsOfText(ref: string, region: CountryCode): CallLookups {
  try {
    return lookupsOf(ref.trim().split(/\s+/), region);
  } catch (err) {
    if (err instanceof NumberWordsError) return { callId: ref.trim(), number: null };
    throw err;
  }
}

/** The calls of a call id and of a number, the call id's first, each once. */
export async function callsOf(timeline: CallTimeline, { callId, number }: CallLookups) {
  const found = [
    ...(callId === null ? [] : await callsNamed(timeline, callId)),
    ...(number === null ? [] : await callsNamed(timeline, number)),
  ];
  return found.filter((call, i) => found.findIndex((c) => c.id === call.id) === i);
}
