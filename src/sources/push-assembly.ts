// Assembling the Push API events of one call in Redis: a hash per call (`<prefix>:push:<callId>`,
// see pushCallKey; one field per event type, the first delivery of each kept, so repeats change
// nothing) and a sorted set of the calls still open (`<prefix>:push:open`, scored by the time they
// are given up on). A hangup closes the call; `sweep` closes the calls whose hangup never came, as
// outcome `unknown`. Beside each hash, a marker that the call was seen
// (`<prefix>:push-seen:<callId>`, the call id alone, kept SEEN_MEMORY_MS longer than the hash): an
// event arriving once the call's events have expired is late — a replay, or a delivery days late —
// and is refused rather than assembled alone into a degraded record that would overwrite the call
// at the sinks.
import type { RedisClient } from '../../queues/connection.js';
import { assemblePushCall, type PushCallState, type PushEvent } from '../model/push.js';
import type { CanonicalCall } from '../model/call.js';

/** How much longer than the call's events the marker that it was seen is kept. */
const SEEN_MEMORY_MS = 30 * 24 * 3600_000;

// Records one event (first of its type wins), keeps the hash alive, and tracks whether the call is
// open: a hangup takes it off the open set; any other event puts it on (unless already closed).
// Returns false, recording nothing, for an event of a call whose events expired (seen, no hash).
const RECORD = `
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 1 then return false end
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[3]))
redis.call('SET', KEYS[3], '1', 'EX', tonumber(ARGV[6]))
if ARGV[1] == 'hangup' then
  redis.call('ZREM', KEYS[2], ARGV[5])
elseif redis.call('HEXISTS', KEYS[1], 'hangup') == 0 and redis.call('HEXISTS', KEYS[1], 'timedOutAt') == 0 then
  redis.call('ZADD', KEYS[2], 'NX', ARGV[4], ARGV[5])
end
return redis.call('HGETALL', KEYS[1])`;

// Claims one overdue call for closing: only the sweeper that finds it due gets its events, and it
// takes a lease (the call due again at ARGV[3]) instead of taking it off the open set: a sweeper that
// dies before the call is accepted (kill -9, a Redis failover) leaves it to the next sweep after the
// lease — before, the call had left the set and was never closed. Taken off once accepted (DONE).
const CLAIM = `
local due = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return false end
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], 'hangup') == 1 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return false
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('HSETNX', KEYS[1], 'timedOutAt', ARGV[2])
return redis.call('HGETALL', KEYS[1])`;

/** A claimed call accepted: off the open set, unless a later claim holds it (its lease is another). */
const DONE = `
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then redis.call('ZREM', KEYS[1], ARGV[1]) end
return 1`;

/**
 * How long a sweeper's claim on a call holds (ms): the call is due again after it, should its
 * sweeper stop before accepting it. Accepting takes milliseconds; a claim that outlives this is
 * closed twice at worst — the same content, a duplicate (docs/reliability.md, section 3).
 * @internal Exported for its tests (test/push.redis.test.ts).
 */
export const PUSH_CLAIM_LEASE_MS = 60_000;

/**
 * The hash of a call's events: `<prefix>:push:<callId>`, except for the call id `open`, which is
 * the set of open calls' name (`<prefix>:push:open`): its hash is `<prefix>:push:%open` (`%` is in
 * no call id, so no other call's). Before, a call named `open` wrote its events into that set:
 * refused with 503 for good, and, when no call was open, it made the set a hash and every Push
 * call after it 503 for a day. A key named after a call id: `forget --call` finds it by name
 * (src/privacy/forget.ts CALL_ID_KEYS).
 */
export function pushCallKey(prefix: string, callId: string): string {
  return `${prefix}:push:${callId === 'open' ? '%open' : callId}`;
}

/**
 * The marker that a call's events were seen: `<prefix>:push-seen:<callId>`. Like pushCallKey, a key
 * named after a call id: `forget --call` finds it by name (src/privacy/forget.ts CALL_ID_KEYS).
 */
export const pushSeenKey = (prefix: string, callId: string): string => `${prefix}:push-seen:${callId}`;

/** The set of the calls still open, scored by the time they are given up on: `<prefix>:push:open`. */
export const pushOpenKey = (prefix: string): string => `${prefix}:push:open`;

/** The call id of a hash `pushCallKey` named (`…:push:<callId>`, `…:push:%open`). */
export function pushCallIdOfKey(key: string): string {
  // The first `:push:`: a call id may hold `:` and even `push:` (the prefix holds neither).
  const id = key.slice(key.indexOf(':push:') + ':push:'.length);
  return id === '%open' ? 'open' : id;
}

/** A Push API call whose events callsync assembles (no hangup yet): it has no timeline until it closes. */
export interface OpenPushCall {
  callId: string;
  /** The events recorded so far (`newCall`, `answer`), by arrival (epoch ms). */
  events: { event: string; at: number }[];
  /** When it is closed with outcome `unknown` should no hangup come (epoch ms; PUSH_CALL_TIMEOUT_SECONDS after its first event). */
  closesAt: number;
}

/**
 * The Push API call `callId` while it is assembled (on the open set, no hangup, not closed by the
 * sweeper), else null. `prefix`: the keys' `push` area (`keys.area('push')`).
 */
export async function openPushCall(redis: RedisClient, prefix: string, callId: string): Promise<OpenPushCall | null> {
  const [flat, closesAt] = await Promise.all([
    redis.hgetall(pushCallKey(prefix, callId)),
    redis.zscore(pushOpenKey(prefix), callId),
  ]);
  if (closesAt === null) return null;
  const state = stateOf(Object.entries(flat).flat());
  if (state.hangup || state.timedOutAt !== undefined) return null;
  const events = (['newCall', 'answer'] as const)
    .flatMap((name) => (state[name] ? [{ event: name, at: state[name].at }] : []))
    .sort((a, b) => a.at - b.at);
  return { callId, events, closesAt: Number(closesAt) };
}

/** One line for an operator: what is known of an open Push API call, and when it will be stored. */
export function describeOpenPushCall(open: OpenPushCall): string {
  const events = open.events.map((e) => `${e.event} at ${new Date(e.at).toISOString()}`).join(', ');
  return `call "${open.callId}" is in progress (Push API${events ? `: ${events}` : ''}): it is stored at its hangup, or with outcome unknown at ${new Date(open.closesAt).toISOString()} (PUSH_CALL_TIMEOUT_SECONDS) — until then it has no timeline`;
}

export interface PushAssemblyOptions {
  prefix: string;
  /** A call without hangup is closed as `unknown` this long after its first event (PUSH_CALL_TIMEOUT_SECONDS). */
  timeoutMs: number;
  now?: () => Date;
}

function stateOf(flat: string[]): PushCallState {
  const state: PushCallState = {};
  for (let i = 0; i + 1 < flat.length; i += 2) {
    const [field, value] = [flat[i]!, flat[i + 1]!];
    if (field === 'timedOutAt') state.timedOutAt = Number(value);
    else if (field === 'newCall' || field === 'answer' || field === 'hangup')
      state[field] = JSON.parse(value) as { at: number; event: PushEvent };
  }
  return state;
}

export class PushAssembly {
  private readonly now: () => Date;
  constructor(
    private readonly redis: RedisClient,
    private readonly options: PushAssemblyOptions,
  ) {
    this.now = options.now ?? (() => new Date());
  }

  private hashKey(callId: string): string {
    return pushCallKey(this.options.prefix, callId);
  }

  private seenKey(callId: string): string {
    return pushSeenKey(this.options.prefix, callId);
  }

  private get openKey(): string {
    return pushOpenKey(this.options.prefix);
  }

  /** Seconds the events of a call are kept: past the timeout, so a late hangup still finds them. */
  private get ttlSeconds(): number {
    return Math.ceil(this.options.timeoutMs / 1000) + 24 * 3600;
  }

  /**
   * Records an event; returns the call when it is closed (this hangup, or any later event of a call
   * already closed: the same record again, which the acceptor takes as a duplicate or an update).
   * `late`: the call's events expired before this one came (see above); nothing was recorded.
   */
  async recordEvent(event: PushEvent): Promise<{ call: CanonicalCall | null; late: boolean }> {
    if (event.event === 'dtmf' || event.event === 'other') return { call: null, late: false };
    const now = this.now();
    const flat = (await this.redis.eval(
      RECORD,
      3,
      this.hashKey(event.callId),
      this.openKey,
      this.seenKey(event.callId),
      event.event,
      JSON.stringify({ at: now.getTime(), event }),
      String(this.ttlSeconds),
      String(now.getTime() + this.options.timeoutMs),
      event.callId,
      String(this.ttlSeconds + Math.ceil(SEEN_MEMORY_MS / 1000)),
    )) as string[] | null;
    if (flat === null) return { call: null, late: true };
    return { call: assemblePushCall(event.callId, stateOf(flat), now), late: false };
  }

  /** `recordEvent` without the difference between an open call and a late event (both: null). */
  async record(event: PushEvent): Promise<CanonicalCall | null> {
    return (await this.recordEvent(event)).call;
  }

  /**
   * Closes up to `limit` calls whose deadline passed, handing each to `accept`; a call whose
   * `accept` fails goes back on the open set (tried again next sweep). Returns how many closed.
   */
  /**
   * Sweeps batch after batch while batches come back full, for at most `budgetMs`: a backlog of
   * calls without hangup (a platform that lost its hangups for an hour on a busy account) is closed
   * at the pace Redis allows, not 100 a tick — at 100 a minute, 300,000 such calls took 50 hours,
   * and their events expire PUSH_CALL_TIMEOUT_SECONDS + 24 h after the last one. Returns how many closed.
   */
  async sweepDue(accept: (call: CanonicalCall) => Promise<unknown>, budgetMs: number, limit = 100): Promise<number> {
    const until = Date.now() + budgetMs;
    let total = 0;
    for (;;) {
      const closed = await this.sweep(accept, limit);
      total += closed;
      if (closed < limit || Date.now() >= until) return total;
    }
  }

  async sweep(accept: (call: CanonicalCall) => Promise<unknown>, limit = 100): Promise<number> {
    const now = this.now();
    const due = await this.redis.zrangebyscore(this.openKey, '-inf', now.getTime(), 'LIMIT', 0, limit);
    let closed = 0;
    for (const callId of due) {
      const lease = String(now.getTime() + PUSH_CLAIM_LEASE_MS);
      const flat = (await this.redis.eval(
        CLAIM,
        2,
        this.hashKey(callId),
        this.openKey,
        callId,
        String(now.getTime()),
        lease,
      )) as string[] | null;
      if (!flat) continue;
      const call = assemblePushCall(callId, stateOf(flat), now);
      if (!call) {
        await this.redis.eval(DONE, 1, this.openKey, callId, lease);
        continue;
      }
      try {
        await accept(call);
      } catch (err) {
        // Due again at once: the next sweep tries it (should this write fail too, the lease does).
        await this.redis.zadd(this.openKey, now.getTime(), callId);
        throw err;
      }
      await this.redis.eval(DONE, 1, this.openKey, callId, lease);
      closed++;
    }
    return closed;
  }
}
