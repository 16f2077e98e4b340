// A small durable key/value memory in Redis, namespaced per sink (CRM record ids, "already sent" markers).
import type { Cluster, Redis } from 'ioredis';
import { keySlot } from '../redis-slot.js';
import { TRIM_KEEPING_RECEIPT } from '../list-trim.js';

export interface KeyValueStore {
  get(key: string): Promise<string | null>;
  /** Sets the value; `ttlMs` makes it expire. */
  set(key: string, value: string, ttlMs?: number): Promise<void>;
  /** Sets the value only when the key does not exist; true when it was set. */
  setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean>;
  delete(key: string): Promise<void>;
  /** Deletes the key only while it holds `value` (releasing a lock that may have passed to another holder); true when deleted. */
  deleteIfEquals(key: string, value: string): Promise<boolean>;
  /**
   * One round trip: takes the lock `lockKey` for `lock.token` (or takes it over while an earlier
   * attempt of the same job, `lock.jobId`, holds it) and reads `reads` — whether the lock was taken
   * or not. The holder is returned when another one keeps it.
   */
  acquire(lockKey: string, lock: LockRequest, reads: string[]): Promise<Acquired>;
  /**
   * One round trip: sets `writes` (each with its TTL), then deletes `lockKey` while it still holds
   * `token`; true when the lock was released.
   */
  release(lockKey: string, token: string, writes: TimedWrite[]): Promise<boolean>;
  /**
   * `release`, and in the same script entries appended to a list outside the store (a call's
   * timeline, src/sinks/revisions.ts) — only where one script may reach it (a single Redis, or the
   * same cluster slot): `appended` false, and nothing appended, else. An append that fails inside
   * the script (a key of another type) fails neither the writes nor the release. Absent: not offered.
   */
  releaseAppending?(lockKey: string, token: string, writes: TimedWrite[], append: ListAppend): Promise<Released>;
  /**
   * One round trip: sets `writes` (each with its TTL) and appends entries to a list outside the store,
   * as `releaseAppending` does without a lock; where one script cannot reach the list, the writes
   * alone. True when the entries were appended. Absent: not offered.
   */
  setAppending?(writes: TimedWrite[], append: ListAppend): Promise<boolean>;
  /**
   * One round trip (on one server or slot): reads `claim.reads`, tests `claim.sets` for
   * membership, and — when `claim.take` and none of the reads exists and no member is in its set —
   * sets `key` to `value` (NX: it is one of the reads, absent) with its TTL.
   */
  claim(key: string, value: string, ttlMs: number, claim: ClaimRequest): Promise<Claimed>;
  /** A store whose keys live under `namespace` inside this one. */
  scoped(namespace: string): KeyValueStore;
}

export interface ClaimRequest {
  /** Keys of this store read first (`key` itself among them when it must be absent). */
  reads: string[];
  /** A set outside the store (its full key) and the members that count as "in it". */
  set?: { key: string; members: string[] };
  /** False: only read and test, take nothing. */
  take: boolean;
}

export interface Claimed {
  /** The values of `reads`, in order (null: absent). */
  values: (string | null)[];
  /** Whether one of the members is in `set`. */
  inSet: boolean;
  /** Whether `key` was set now. */
  taken: boolean;
}

export interface LockRequest {
  /** `<job id> <random>`: the job id before the last space names the holder's job. */
  token: string;
  /** The job taking the lock; '' never takes over. */
  jobId: string;
  ttlMs: number;
}

export interface Acquired {
  /** True when the lock is now `token`'s (taken or taken over). */
  acquired: boolean;
  /** Whether an earlier attempt of the same job held it (and it was taken over). */
  tookOver: boolean;
  /** The values of `reads`, in order (null: absent). */
  values: (string | null)[];
}

/** Entries appended to a list (RPUSH), the list trimmed to its newest `max` and expiring in `ttlMs`. */
export interface ListAppend {
  /** The list's full key (not in the store's namespace). */
  key: string;
  values: string[];
  max: number;
  ttlMs: number;
}

export interface Released {
  /** True when the lock was released (it still held the token). */
  released: boolean;
  /** True when the entries were appended (by the same script). */
  appended: boolean;
}

export interface TimedWrite {
  key: string;
  value: string;
  ttlMs: number;
}

const DELETE_IF_EQUALS = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

// KEYS[1]: the lock, KEYS[2..]: keys to read (one MGET). ARGV: token, TTL ms, job id. Returns {taken, tookOver, values...}.
const ACQUIRE = `
local taken, over = 1, 0
if not redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  local holder = redis.call('GET', KEYS[1])
  local job = holder and string.match(holder, '^(.*) [^ ]*$')
  if ARGV[3] ~= '' and job == ARGV[3] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    over = 1
  else
    taken = 0
  end
end
local out = {taken, over}
if #KEYS > 1 then
  local values = redis.call('MGET', unpack(KEYS, 2))
  for i = 2, #KEYS do out[i + 1] = values[i - 1] end
end
return out`;

// KEYS[1]: the lock, KEYS[2..]: keys to set. ARGV: token, then value and TTL ms per key to set.
const RELEASE = `
for i = 2, #KEYS do redis.call('SET', KEYS[i], ARGV[2 * i - 2], 'PX', ARGV[2 * i - 1]) end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`;

// Entries appended to the list KEYS[#KEYS]: ARGV[first .. first + m - 1], in RPUSHes of 100, the list
// trimmed only when RPUSH says it is over `max`, keeping its first entry (a call timeline's receipt)
// and dropping superseded sink attempts first (src/list-trim.ts), and given its TTL (`listTtl`). The
// list's commands are pcall'ed: their failure (a key of another type) fails nothing else. A part of
// the scripts below, which set `m`, `max`, `listTtl` and `first` first, and define trimKeepingReceipt.
const APPEND_TO_LIST = `
local list = KEYS[#KEYS]
local length = 0
for i = first, first + m - 1, 100 do length = redis.pcall('RPUSH', list, unpack(ARGV, i, math.min(i + 99, first + m - 1))) end
if type(length) == 'number' and length > max then pcall(trimKeepingReceipt, list, max) end
redis.pcall('PEXPIRE', list, listTtl)`;

// RELEASE, then entries appended to a list. KEYS[1]: the lock, KEYS[2..#KEYS-1]: keys to set,
// KEYS[#KEYS]: the list. ARGV: token, max entries, list TTL ms, m (entries), the m entries, then value
// and TTL ms per key to set.
const RELEASE_APPENDING = `${TRIM_KEEPING_RECEIPT}
local m, max, listTtl, first = tonumber(ARGV[4]), tonumber(ARGV[2]), ARGV[3], 5
local w = 4 + m
for i = 2, #KEYS - 1 do redis.call('SET', KEYS[i], ARGV[w + 2 * i - 3], 'PX', ARGV[w + 2 * i - 2]) end
local released = 0
if redis.call('GET', KEYS[1]) == ARGV[1] then released = redis.call('DEL', KEYS[1]) end
${APPEND_TO_LIST}
return released`;

// Keys set, then entries appended to a list. KEYS[1..#KEYS-1]: keys to set, KEYS[#KEYS]: the list.
// ARGV: max entries, list TTL ms, m (entries), the m entries, then value and TTL ms per key to set.
const SET_APPENDING = `${TRIM_KEEPING_RECEIPT}
local m, max, listTtl, first = tonumber(ARGV[3]), tonumber(ARGV[1]), ARGV[2], 4
local w = 3 + m
for i = 1, #KEYS - 1 do redis.call('SET', KEYS[i], ARGV[w + 2 * i - 1], 'PX', ARGV[w + 2 * i]) end
${APPEND_TO_LIST}
return 1`;

// KEYS[1]: the key to take, KEYS[2..n+1]: keys to read (one MGET), KEYS[n+2] (optional): a set (one
// SMISMEMBER, Redis 6.2+). ARGV: value, TTL ms, take (1/0), n, then the members to test in the set.
// Returns {taken, inSet, values...}.
const CLAIM = `
local n = tonumber(ARGV[4])
local out = {0, 0}
local found = false
if n > 0 then
  local values = redis.call('MGET', unpack(KEYS, 2, n + 1))
  for i = 1, n do
    out[i + 2] = values[i]
    if values[i] then found = true end
  end
end
if #KEYS > n + 1 and #ARGV >= 5 then
  for _, member in ipairs(redis.call('SMISMEMBER', KEYS[n + 2], unpack(ARGV, 5))) do
    if member == 1 then out[2] = 1 break end
  end
end
if ARGV[3] == '1' and not found and out[2] == 0 and redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'NX') then
  out[1] = 1
end
return out`;

/** The scripts as commands of the client: EVALSHA, falling back to EVAL once on NOSCRIPT (ioredis defineCommand). */
interface StateCommands {
  callsyncStateAcquire(numKeys: number, ...args: (string | number)[]): Promise<(number | string | null)[]>;
  callsyncStateRelease(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncStateReleaseAppending(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncStateSetAppending(numKeys: number, ...args: (string | number)[]): Promise<number>;
  callsyncStateClaim(numKeys: number, ...args: (string | number)[]): Promise<(number | string | null)[]>;
}

const defined = new WeakSet<object>();
function commands(redis: Redis | Cluster): StateCommands {
  if (!defined.has(redis)) {
    redis.defineCommand('callsyncStateAcquire', { lua: ACQUIRE });
    redis.defineCommand('callsyncStateRelease', { lua: RELEASE });
    redis.defineCommand('callsyncStateReleaseAppending', { lua: RELEASE_APPENDING });
    redis.defineCommand('callsyncStateSetAppending', { lua: SET_APPENDING });
    redis.defineCommand('callsyncStateClaim', { lua: CLAIM });
    defined.add(redis);
  }
  return redis as unknown as StateCommands;
}

const ttl = (ms: number) => Math.max(1, Math.round(ms));

export class RedisKeyValueStore implements KeyValueStore {
  constructor(
    private readonly redis: Redis | Cluster,
    /** Full key prefix, e.g. `callsync:state:hubspot:` (keeps a `{hash-tag}` of the queue prefix). */
    private readonly prefix: string,
  ) {}

  async get(key: string): Promise<string | null> {
    return this.redis.get(this.prefix + key);
  }

  async set(key: string, value: string, ttlMs?: number): Promise<void> {
    if (ttlMs !== undefined) await this.redis.set(this.prefix + key, value, 'PX', Math.max(1, Math.round(ttlMs)));
    else await this.redis.set(this.prefix + key, value);
  }

  async setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean> {
    const result =
      ttlMs !== undefined
        ? await this.redis.set(this.prefix + key, value, 'PX', Math.max(1, Math.round(ttlMs)), 'NX')
        : await this.redis.set(this.prefix + key, value, 'NX');
    return result === 'OK';
  }

  async delete(key: string): Promise<void> {
    await this.redis.del(this.prefix + key);
  }

  async deleteIfEquals(key: string, value: string): Promise<boolean> {
    const deleted = await this.redis.eval(DELETE_IF_EQUALS, 1, this.prefix + key, value);
    return Number(deleted) === 1;
  }

  async acquire(lockKey: string, lock: LockRequest, reads: string[]): Promise<Acquired> {
    const keys = [this.prefix + lockKey, ...reads.map((k) => this.prefix + k)];
    const reply = await commands(this.redis).callsyncStateAcquire(
      keys.length,
      ...keys,
      lock.token,
      ttl(lock.ttlMs),
      lock.jobId,
    );
    // An absent key reads as false in Lua, a nil reply here.
    return {
      acquired: Number(reply[0]) === 1,
      tookOver: Number(reply[1]) === 1,
      values: reads.map((_, i) => (reply[i + 2] ?? null) as string | null),
    };
  }

  async release(lockKey: string, token: string, writes: TimedWrite[]): Promise<boolean> {
    const keys = [this.prefix + lockKey, ...writes.map((w) => this.prefix + w.key)];
    const args = writes.flatMap((w) => [w.value, ttl(w.ttlMs)]);
    return Number(await commands(this.redis).callsyncStateRelease(keys.length, ...keys, token, ...args)) === 1;
  }

  async releaseAppending(lockKey: string, token: string, writes: TimedWrite[], append: ListAppend): Promise<Released> {
    const lock = this.prefix + lockKey;
    // On a cluster the list must be in the lock's slot (the one-slot layout), else it is left to its owner.
    if ('isCluster' in this.redis && this.redis.isCluster && keySlot(append.key) !== keySlot(lock))
      return { released: await this.release(lockKey, token, writes), appended: false };
    const keys = [lock, ...writes.map((w) => this.prefix + w.key), append.key];
    const args = writes.flatMap((w) => [w.value, ttl(w.ttlMs)]);
    const reply = await commands(this.redis).callsyncStateReleaseAppending(
      keys.length,
      ...keys,
      token,
      append.max,
      ttl(append.ttlMs),
      append.values.length,
      ...append.values,
      ...args,
    );
    return { released: Number(reply) === 1, appended: true };
  }

  async setAppending(writes: TimedWrite[], append: ListAppend): Promise<boolean> {
    const own = writes.map((w) => this.prefix + w.key);
    // On a cluster the list must be in the keys' slot (the one-slot layout), else it is left to its owner.
    if (
      own.length === 0 ||
      ('isCluster' in this.redis && this.redis.isCluster && own.some((k) => keySlot(k) !== keySlot(append.key)))
    ) {
      for (const w of writes) await this.set(w.key, w.value, w.ttlMs);
      return false;
    }
    await commands(this.redis).callsyncStateSetAppending(
      own.length + 1,
      ...own,
      append.key,
      append.max,
      ttl(append.ttlMs),
      append.values.length,
      ...append.values,
      ...writes.flatMap((w) => [w.value, ttl(w.ttlMs)]),
    );
    return true;
  }

  async claim(key: string, value: string, ttlMs: number, c: ClaimRequest): Promise<Claimed> {
    const own = [this.prefix + key, ...c.reads.map((k) => this.prefix + k)];
    let set = c.set && c.set.members.length > 0 ? c.set : undefined;
    let inSet = false;
    // A set in another slot of a cluster cannot be read by the same script: tested first, apart.
    if (set && 'isCluster' in this.redis && this.redis.isCluster && keySlot(set.key) !== keySlot(own[0]!)) {
      for (const m of set.members) if ((inSet = (await this.redis.sismember(set.key, m)) === 1)) break;
      set = undefined;
    }
    const keys = set ? [...own, set.key] : own;
    const reply = await commands(this.redis).callsyncStateClaim(
      keys.length,
      ...keys,
      value,
      ttl(ttlMs),
      c.take && !inSet ? '1' : '0',
      c.reads.length,
      ...(set?.members ?? []),
    );
    return {
      values: c.reads.map((_, i) => (reply[i + 2] ?? null) as string | null),
      inSet: inSet || Number(reply[1]) === 1,
      taken: Number(reply[0]) === 1,
    };
  }

  scoped(namespace: string): KeyValueStore {
    return new RedisKeyValueStore(this.redis, `${this.prefix}${namespace}:`);
  }
}
