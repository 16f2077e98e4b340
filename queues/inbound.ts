// The inbound log: every accepted call, in the order it was acknowledged, as an entry of one Redis
// stream. The ingress and the poller append to it; the fan-out reads it through a consumer group
// and turns each entry into one BullMQ job per routed sink, then acknowledges and deletes it.
//
// Why a stream and not a BullMQ job per call: appending is one small Lua script per *batch* of
// calls (deduplication and XADD together, atomically per call), where a BullMQ job costs a Job
// object, msgpack'd options and a large script per call. The 202 still means "stored in Redis": an
// entry is as durable as a job (same Redis, same persistence settings), and an entry leaves the log
// only after its sink jobs exist. See docs/reliability.md.
import { Cluster } from 'ioredis';
import type { RedisClient } from './connection.js';
import { asKeys, keySlot, type RedisKeys } from './keys.js';
import { isTranscriptInRaw, type CanonicalCall } from '../src/model/call.js';
import { transcriptOfPayload } from '../src/model/webhook.js';
import { TRIM_KEEPING_RECEIPT, type ReceivedWrite } from './timeline.js';

// The keys sit outside every queue's own namespace (`<prefix>:<queue>:…`), so that cleaning or
// obliterating a queue — the dead-letter queue `inbound` included — never touches the log. With
// INBOUND_SHARDS > 1 the log is that many streams (`InboundShard`), each with its dedupe keys in its
// own slot (queues/keys.ts): a call goes to the shard of its dedupe hash, so a resend finds its
// dedupe key in the script that appends it.

/** Key of the stream. */
export function inboundStreamKey(prefix: string): string {
  return `${prefix}:inbound-log`;
}

/**
 * Key of the stream of parked entries: entries the fan-out could keep neither as sink jobs nor as a
 * dead letter (see workers/fanout.ts), moved here whole, inside Redis, with the reason.
 * @internal Exported for its tests only (test/fanout-isolation.redis.test.ts).
 */
export function inboundParkedKey(prefix: string): string {
  return `${prefix}:inbound-parked`;
}

/**
 * Prefix of the deduplication keys: `<prefix>:inbound-seen:<call hash>` -> `<first id> <content hash>…`,
 * the id the call was first acknowledged with and the content hash of every revision accepted
 * within the window (a key written before revisions existed holds the id alone).
 */
export function inboundSeenPrefix(prefix: string): string {
  return `${prefix}:inbound-seen:`;
}

/**
 * The consumer group of the fan-out.
 * @internal Exported for its tests only (test/inbound-log.redis.test.ts).
 */
export const FANOUT_GROUP = 'fanout';

/** One call to append: its dedupe hash, the id it is acknowledged with, the record as JSON. */
export interface AppendItem {
  dedupeId: string;
  id: string;
  /** `JSON.stringify` of the canonical call. */
  call: string;
  /**
   * Content hash of the call (`encodeCall`). With it, a repeat whose content differs from every
   * revision seen in the window is appended as an update; without it, any repeat is a duplicate.
   */
  content?: string;
  /**
   * The call's `received` timeline entry and lookups (queues/timeline.ts `receivedWrite`), written by
   * the append script beside the call with the revision and job id it found: one command for both.
   * Only where the timeline's keys share the log's slot (the one-slot layout).
   */
  received?: ReceivedWrite;
}

/** What append answers per item: stored (as the call's first revision or as an update), or a duplicate of the first delivery. */
export type AppendOutcome = { stored: true; update: boolean } | { stored: false; firstId: string };

export interface InboundEntry {
  /** Stream entry id (`<ms>-<seq>`). */
  entryId: string;
  /** The id the call was acknowledged with (the 202's `id`). */
  id: string;
  /** The call, with its `revision` (stamp = entry id) set. */
  call: CanonicalCall | null;
  /** The stored text, when it is not a readable call (kept for the dead letters). */
  text: string;
}

/**
 * Content hashes a dedupe key remembers at most (the oldest are forgotten first): a resend of a
 * revision older than the last 1,000 of its call within the window is taken as an update. At 32, a
 * burst of 40 revisions and then a late retry of the first stored the first as the newest (the sinks
 * overwrote revision 39 with it). 17 bytes each, beside the full record every revision stores anyway;
 * read only when the call comes again.
 * @internal Exported for its tests (test/inbound-log.redis.test.ts).
 */
export const MAX_REMEMBERED_REVISIONS = 1000;

// Per item, in order: no earlier delivery within the window -> the item is remembered for the
// window and appended. An earlier one whose remembered revisions include this content -> a
// duplicate, answered with the first delivery's id. An earlier one with other content -> appended
// as an update (entry field `update`), its content added to the key, the window left as it was.
// A key written before revisions existed (the id alone) cannot tell: the item is an update — at
// worst a harmless no-op update, never a dropped correction. Items of one batch are handled one
// after the other, so a repeat inside the batch behaves like one in a later batch.
//
// An item with timeline keys (its 5th value > 0: KEYS[k], KEYS[k + 1]… from the next unused key on)
// also gets its `received` timeline entry (queues/timeline.ts `receivedWrite`: the text around the
// revision and job id, filled in here), and, stored as new or as an update, its lookups (ZADD at
// its time, trimmed to the TTL): the same writes as CallTimeline.received, in the same command.
//
// ARGV[4] = '1' (ACK_REPLICAS > 0): a batch that wrote nothing (duplicates only) still writes once —
// it refreshes a duplicate's dedupe key with the time it has left — so that the WAIT after it
// covers the first delivery too, whichever connection stored it (WAIT counts the replicas that
// have this connection's last write, and the replication stream is in order).
const APPEND = `${TRIM_KEEPING_RECEIPT}
local seen, ttl, keep, touch = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4] == '1'
local maxEntries, timelineTtl = ARGV[5], ARGV[6]
local out = {}
local n = 0
local k = 2
local wrote = false
local dup = nil
for i = 7, #ARGV, 10 do
  n = n + 1
  local key, id, content, call = seen .. ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
  local first
  local cur = redis.call('GET', key)
  if not cur then
    if content == '' then
      redis.call('SET', key, id, 'PX', ttl)
      redis.call('XADD', KEYS[1], '*', 'id', id, 'call', call)
    else
      redis.call('SET', key, id .. ' ' .. content, 'PX', ttl)
      redis.call('XADD', KEYS[1], '*', 'id', id, 'call', call, 'content', content)
    end
    wrote = true
    out[n] = ''
  else
    local sp = string.find(cur, ' ', 1, true)
    first = sp and string.sub(cur, 1, sp - 1) or cur
    local known = sp and string.sub(cur, sp + 1) or ''
    if content == '' or string.find(' ' .. known .. ' ', ' ' .. content .. ' ', 1, true) then
      out[n] = 'd' .. first
      dup = key
    else
      local list = {}
      for h in string.gmatch(known, '%S+') do list[#list + 1] = h end
      list[#list + 1] = content
      while #list > keep do table.remove(list, 1) end
      local left = redis.call('PTTL', key)
      if left > 0 then
        redis.call('SET', key, first .. ' ' .. table.concat(list, ' '), 'PX', left)
      else
        redis.call('SET', key, first .. ' ' .. table.concat(list, ' '), 'PX', ttl)
      end
      redis.call('XADD', KEYS[1], '*', 'id', id, 'call', call, 'content', content, 'update', '1')
      wrote = true
      out[n] = 'u'
    end
  end
  local nk = tonumber(ARGV[i + 4])
  -- A duplicate under its own id is the same delivery again (the spool's drainer resending what a
  -- write that timed out stored after all): its receipt is in the timeline already.
  if nk > 0 and not (out[n] ~= '' and out[n] ~= 'u' and first == id) then
    local revision, job = 'new', id
    if out[n] == 'u' then revision = 'update' elseif out[n] ~= '' then revision, job = 'duplicate', first end
    local tl = KEYS[k]
    if redis.call('RPUSH', tl, '{' .. ARGV[i + 8] .. revision .. '","jobId":' .. cjson.encode(job) .. ARGV[i + 9]) > tonumber(maxEntries) then
      trimKeepingReceipt(tl, tonumber(maxEntries))
    end
    redis.call('PEXPIRE', tl, timelineTtl)
    if revision ~= 'duplicate' then
      for j = k + 1, k + nk - 1 do
        redis.call('ZADD', KEYS[j], ARGV[i + 5], ARGV[i + 7])
        redis.call('ZREMRANGEBYSCORE', KEYS[j], '-inf', '(' .. ARGV[i + 6])
        redis.call('PEXPIRE', KEYS[j], timelineTtl)
      end
    end
  end
  k = k + nk
end
if touch and not wrote and dup then
  local left = redis.call('PTTL', dup)
  if left > 0 then redis.call('PEXPIRE', dup, left) end
end
return out
`;

// Acknowledges entries and deletes them: the log holds only what is not yet fanned out.
const ACK_DELETE = `
redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, 2))
return redis.call('XDEL', KEYS[1], unpack(ARGV, 2))
`;

// Moves one entry, as stored, to the parked stream (the reason and its log id beside its fields),
// then acknowledges and deletes it: nothing leaves Redis, so nothing needs serializing here.
// Answers the parked entry's id, or '' when the entry is no longer in the log (acknowledged then).
const PARK = `
local found = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
local parked = ''
if #found > 0 then
  parked = redis.call('XADD', KEYS[2], '*', 'entry', ARGV[2], 'reason', ARGV[3], unpack(found[1][2]))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
return parked
`;

interface InboundCommands {
  /** The append script: the number of keys, the keys (the stream, then the timelines' keys), the arguments. */
  callsyncInboundAppend(numKeys: number, ...args: string[]): Promise<string[]>;
  callsyncInboundAckDelete(key: string, ...args: string[]): Promise<number>;
  callsyncInboundPark(key: string, parkedKey: string, group: string, entryId: string, reason: string): Promise<string>;
}

function commands(redis: RedisClient): RedisClient & InboundCommands {
  const r = redis as RedisClient & Partial<InboundCommands>;
  if (!r.callsyncInboundAppend) redis.defineCommand('callsyncInboundAppend', { lua: APPEND });
  if (!r.callsyncInboundAckDelete)
    redis.defineCommand('callsyncInboundAckDelete', { numberOfKeys: 1, lua: ACK_DELETE });
  if (!r.callsyncInboundPark) redis.defineCommand('callsyncInboundPark', { numberOfKeys: 2, lua: PARK });
  return r as RedisClient & InboundCommands;
}

/** Lua's `unpack` takes at most a few thousand values; batches stay well below. */
const MAX_ACK = 1000;

type RawEntry = [string, string[]];

/** The canonical call record stored as `text` (a log entry, a dead letter's text), or null when it is not one. */
export function parseStoredCall(text: string): CanonicalCall | null {
  try {
    const parsed = JSON.parse(text) as CanonicalCall;
    if (parsed && typeof parsed === 'object' && typeof parsed.key === 'string' && typeof parsed.callId === 'string') {
      // A transcript stored once, in the payload (src/model/call.ts, encodeCall): read from there again.
      if (isTranscriptInRaw(parsed.transcript)) parsed.transcript = transcriptOfPayload(parsed.raw, parsed);
      return parsed;
    }
  } catch {
    // not JSON (or too deep even for the parser): unreadable
  }
  return null;
}

function parseEntry([entryId, fields]: RawEntry): InboundEntry {
  let id = '';
  let text = '';
  let content = '';
  let update = false;
  for (let i = 0; i + 1 < fields.length; i += 2) {
    if (fields[i] === 'id') id = fields[i + 1]!;
    else if (fields[i] === 'call') text = fields[i + 1]!;
    else if (fields[i] === 'content') content = fields[i + 1]!;
    else if (fields[i] === 'update') update = fields[i + 1] === '1';
  }
  const call = parseStoredCall(text);
  // The revision travels with the call from here on: into the sink jobs, and into the inbound dead letters.
  if (call !== null) call.revision = { stamp: entryId, update, content };
  return { entryId, id, call, text };
}

/**
 * ACK_REPLICAS: after a batch is appended, `WAIT replicas timeoutMs` on the same connection to the
 * node that holds the log; fewer replicas in time and the batch is refused (`ReplicationError`).
 */
export interface AckReplicas {
  replicas: number;
  timeoutMs: number;
}

/**
 * Fewer replicas confirmed a batch than ACK_REPLICAS asks (within ACK_REPLICAS_TIMEOUT_MS). The
 * batch is in the master's memory and will reach its sinks, but it is not acknowledged: the caller
 * answers 503 (or spools it); a redelivery is answered only once the replicas have it.
 */
class ReplicationError extends Error {
  constructor(
    readonly wanted: number,
    readonly confirmed: number,
    timeoutMs: number,
  ) {
    super(`NOREPLICAS ${confirmed} of ${wanted} replicas confirmed the batch within ${timeoutMs} ms`);
    this.name = 'ReplicationError';
  }
}

/** What appends to the log: the whole log (`InboundLog`), or one of its shards. */
export interface InboundAppender {
  append(items: readonly AppendItem[], dedupeWindowMs: number): Promise<AppendOutcome[]>;
}

/**
 * Waits until the writes this client made are on `ack.replicas` replicas; throws `ReplicationError`
 * when fewer confirm within `ack.timeoutMs`. On a cluster one `WAIT` goes to each master holding
 * one of `slotKeys` (pipelined behind a read of one of its keys, so it travels on the connection to
 * the node that holds the slot now: the one the writes there went over); elsewhere one `WAIT`. The fan-out calls
 * it before it deletes log entries whose sink jobs are on other masters (spread keys): else a master
 * lost before it replicated a job would take the job with it, while the entry's own master had
 * already deleted the entry.
 */
export async function waitForReplicas(
  redis: RedisClient,
  ack: AckReplicas,
  slotKeys: Iterable<string> = [],
): Promise<void> {
  const wait = ['WAIT', String(ack.replicas), String(ack.timeoutMs)] as const;
  const targets: (string | null)[] =
    redis instanceof Cluster ? [...groupByNode(redis, slotKeys, (key) => key).values()].map(([key]) => key!) : [null];
  const confirmed = await Promise.all(
    targets.map(async (key) => {
      if (key === null) return Number(await redis.call(...wait));
      const [read, waited] =
        (await redis
          .pipeline()
          .exists(key)
          .call(...wait)
          .exec()) ?? [];
      if (read?.[0]) {
        refreshSlotsOnRedirect(redis, read[0]);
        throw read[0];
      }
      if (!waited) throw new Error('no reply to WAIT');
      if (waited[0]) throw waited[0];
      return Number(waited[1]);
    }),
  );
  const fewest = Math.min(ack.replicas, ...confirmed);
  if (fewest < ack.replicas) throw new ReplicationError(ack.replicas, fewest, ack.timeoutMs);
}

/**
 * `items` by the cluster node serving their key's slot, as the client's slot map has it now (a slot
 * it does not know yet: an item alone). A stale map is put right by the `MOVED` of the command
 * that uses it (`refreshSlotsOnRedirect`) and the caller's retry.
 */
function groupByNode<T>(cluster: Cluster, items: Iterable<T>, keyOf: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const key = keyOf(item);
    const node = cluster.slots[keySlot(key)]?.[0] ?? `unknown:${key}`;
    const group = groups.get(node);
    if (group) group.push(item);
    else groups.set(node, [item]);
  }
  return groups;
}

/**
 * A pipeline that carries a keyless `WAIT` is not redirected by ioredis' cluster client when its
 * slot moved (a failover): the keyed command's `MOVED` comes back as an error, the slot cache is
 * never refreshed, and every later pipeline goes to the old node again. So on `MOVED`/`ASK` the
 * cache is refreshed here; the caller's retry (the ingress answers 503 or spools; the fan-out tries
 * again) then reaches the new master.
 */
function refreshSlotsOnRedirect(redis: RedisClient, err: unknown): void {
  if (redis instanceof Cluster && err instanceof Error && /^(MOVED|ASK) /.test(err.message)) redis.refreshSlotsCache();
}

/** The append script's answer per item: '' stored, 'u' stored as an update, '=<first id>' a duplicate. */
function parseAppended(out: readonly string[]): AppendOutcome[] {
  return out.map((v): AppendOutcome =>
    v === ''
      ? { stored: true, update: false }
      : v === 'u'
        ? { stored: true, update: true }
        : { stored: false, firstId: v.slice(1) },
  );
}

/**
 * Appends the parts of a batch to their shards — which must all be on one Redis node (a single
 * Redis, or shards whose slots one cluster master serves) — and `WAIT`s once for all of them: one
 * pipeline, the append scripts and then one `WAIT` on the same connection, so the WAIT counts
 * every write before it. Answers per part, in order. Throws when an append fails (a `MOVED`
 * refreshes the slot cache first), or `ReplicationError` when fewer replicas confirm in time.
 */
async function appendAndWait(
  redis: RedisClient,
  ack: AckReplicas,
  parts: readonly { shard: InboundShard; items: readonly AppendItem[] }[],
  dedupeWindowMs: number,
): Promise<AppendOutcome[][]> {
  const pipeline = commands(redis).pipeline() as ReturnType<RedisClient['pipeline']> & {
    callsyncInboundAppend(numKeys: number, ...args: string[]): unknown;
  };
  for (const { shard, items } of parts) {
    const args = shard.appendArgs(items, dedupeWindowMs);
    pipeline.callsyncInboundAppend(args.numKeys, ...args.keysAndArgs);
  }
  pipeline.call('WAIT', String(ack.replicas), String(ack.timeoutMs));
  const results = (await pipeline.exec()) ?? [];
  const appended = parts.map((_, i) => {
    const [appendErr, out] = results[i] ?? [new Error('no reply to the append')];
    if (appendErr) {
      refreshSlotsOnRedirect(redis, appendErr);
      throw appendErr;
    }
    return parseAppended(out as string[]);
  });
  const [waitErr, confirmed] = results[parts.length] ?? [new Error('no reply to WAIT')];
  if (waitErr) throw waitErr;
  if (Number(confirmed) < ack.replicas) throw new ReplicationError(ack.replicas, Number(confirmed), ack.timeoutMs);
  return appended;
}

/** One stream of the inbound log with its dedupe keys and parked stream (`prefix`: `RedisKeys.inboundShard`). */
export class InboundShard {
  readonly key: string;
  private readonly seenPrefix: string;

  constructor(
    private readonly redis: RedisClient,
    readonly prefix: string,
    private readonly ack: AckReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    this.key = inboundStreamKey(prefix);
    this.seenPrefix = inboundSeenPrefix(prefix);
  }

  /** Where entries go that cannot be kept as dead letters (`inboundParkedKey`). */
  get parkedKey(): string {
    return inboundParkedKey(this.prefix);
  }

  /**
   * Appends a batch (deduplicated per item, in order); one round trip. With ACK_REPLICAS > 0 the
   * same round trip carries one `WAIT` for the whole batch, pipelined behind the script on the same
   * connection: on a cluster a pipeline goes to the node of its keys' slot, so the WAIT asks the
   * master that holds this log. Throws `ReplicationError` when fewer replicas confirm in time.
   */
  async append(items: readonly AppendItem[], dedupeWindowMs: number): Promise<AppendOutcome[]> {
    if (items.length === 0) return [];
    if (this.ack.replicas === 0) {
      const { numKeys, keysAndArgs } = this.appendArgs(items, dedupeWindowMs);
      return parseAppended(await commands(this.redis).callsyncInboundAppend(numKeys, ...keysAndArgs));
    }
    return (await appendAndWait(this.redis, this.ack, [{ shard: this, items }], dedupeWindowMs))[0]!;
  }

  /** The append script's keys and arguments (the script: APPEND), and how many of them are keys. */
  appendArgs(items: readonly AppendItem[], dedupeWindowMs: number): { numKeys: number; keysAndArgs: string[] } {
    const keys: string[] = [this.key];
    const timeline = items.find((item) => item.received)?.received;
    const args: string[] = [
      this.seenPrefix,
      String(Math.max(1, Math.round(dedupeWindowMs))),
      String(MAX_REMEMBERED_REVISIONS),
      this.ack.replicas > 0 ? '1' : '0',
      String(timeline?.maxEntries ?? 0),
      String(timeline?.ttlMs ?? 0),
    ];
    for (const { dedupeId, id, content, call, received: r } of items) {
      if (!r) {
        args.push(dedupeId, id, content ?? '', call, '0', '', '', '', '', '');
        continue;
      }
      for (const key of r.keys) keys.push(key);
      args.push(dedupeId, id, content ?? '', call, String(r.keys.length), String(r.at), String(r.cutoff), r.id);
      args.push(r.head, r.tail);
    }
    return { numKeys: keys.length, keysAndArgs: [...keys, ...args] };
  }

  /** Creates the fan-out's consumer group (and the stream) if missing; from the start of the log. */
  async ensureGroup(): Promise<void> {
    try {
      await this.redis.xgroup('CREATE', this.key, FANOUT_GROUP, '0', 'MKSTREAM');
    } catch (err) {
      if (!/BUSYGROUP/.test((err as Error).message)) throw err;
    }
  }

  /**
   * New entries for `consumer` (blocks up to `blockMs` when there are none). Pass a connection of
   * its own for blocking reads (`redis` here), so a block never delays other commands.
   */
  async read(
    consumer: string,
    count: number,
    blockMs: number,
    redis: RedisClient = this.redis,
  ): Promise<InboundEntry[]> {
    const res = (await redis.xreadgroup(
      'GROUP',
      FANOUT_GROUP,
      consumer,
      'COUNT',
      count,
      'BLOCK',
      blockMs,
      'STREAMS',
      this.key,
      '>',
    )) as [string, RawEntry[]][] | null;
    if (!res) return [];
    return res.flatMap(([, entries]) => entries.filter((e) => e[1] !== null).map(parseEntry));
  }

  /**
   * Entries another consumer took and left unacknowledged for `minIdleMs` (it died, or lost Redis
   * mid-batch), claimed for `consumer`, with how often each was delivered before.
   */
  async claimStale(
    consumer: string,
    minIdleMs: number,
    count: number,
  ): Promise<{ entry: InboundEntry; deliveries: number }[]> {
    const pending = (await this.redis.xpending(this.key, FANOUT_GROUP, 'IDLE', minIdleMs, '-', '+', count)) as [
      string,
      string,
      number,
      number,
    ][];
    if (pending.length === 0) return [];
    const deliveries = new Map(pending.map(([id, , , n]) => [id, Number(n)]));
    const claimed = (await this.redis.xclaim(
      this.key,
      FANOUT_GROUP,
      consumer,
      minIdleMs,
      ...pending.map(([id]) => id),
    )) as (RawEntry | null)[];
    const out: { entry: InboundEntry; deliveries: number }[] = [];
    const found = new Set<string>();
    for (const raw of claimed) {
      if (!raw || raw[1] === null) continue;
      found.add(raw[0]);
      out.push({ entry: parseEntry(raw), deliveries: deliveries.get(raw[0]) ?? 1 });
    }
    // An id XCLAIM did not return was either claimed by another fan-out in between (it is busy
    // there: leave it) or its entry was deleted outside the fan-out (XTRIM, an operator's XDEL; Redis
    // before 7 keeps such ids pending): acknowledge only those whose entry is really gone.
    for (const id of deliveries.keys()) {
      if (found.has(id)) continue;
      const still = await this.redis.xrange(this.key, id, id);
      if (still.length === 0) await this.redis.xack(this.key, FANOUT_GROUP, id);
    }
    return out;
  }

  /** Acknowledges and deletes fanned-out entries. */
  async done(entryIds: readonly string[]): Promise<void> {
    for (let i = 0; i < entryIds.length; i += MAX_ACK) {
      await commands(this.redis).callsyncInboundAckDelete(this.key, FANOUT_GROUP, ...entryIds.slice(i, i + MAX_ACK));
    }
  }

  /**
   * Moves an entry, exactly as stored, to the parked stream (`inboundParkedKey`) with `reason`, and
   * acknowledges and deletes it here, in one script: for an entry that cannot be kept as a dead
   * letter job. Answers the parked entry's id, or null when the entry was no longer in the log.
   */
  async park(entryId: string, reason: string): Promise<string | null> {
    const parked = await commands(this.redis).callsyncInboundPark(
      this.key,
      this.parkedKey,
      FANOUT_GROUP,
      entryId,
      reason,
    );
    return parked === '' ? null : parked;
  }

  /** Removes `consumer` from the group when it holds no unacknowledged entries. */
  async removeConsumerIfIdle(consumer: string): Promise<boolean> {
    const consumers = await this.consumers();
    const me = consumers.find((c) => c.name === consumer);
    if (!me || me.pending > 0) return false;
    await this.redis.xgroup('DELCONSUMER', this.key, FANOUT_GROUP, consumer);
    return true;
  }

  /** Removes consumers that hold nothing and were not seen for `idleMs` (fan-outs that died). */
  async forgetIdleConsumers(idleMs: number): Promise<number> {
    let removed = 0;
    for (const c of await this.consumers()) {
      if (c.pending === 0 && c.idleMs > idleMs) {
        await this.redis.xgroup('DELCONSUMER', this.key, FANOUT_GROUP, c.name);
        removed++;
      }
    }
    return removed;
  }

  private async consumers(): Promise<{ name: string; pending: number; idleMs: number }[]> {
    const rows = (await this.redis.xinfo('CONSUMERS', this.key, FANOUT_GROUP)) as (string | number)[][];
    return rows.map((row) => {
      const fields = new Map<string, string | number>();
      for (let i = 0; i + 1 < row.length; i += 2) fields.set(String(row[i]), row[i + 1]!);
      return {
        name: String(fields.get('name')),
        pending: Number(fields.get('pending') ?? 0),
        idleMs: Number(fields.get('idle') ?? 0),
      };
    });
  }

  /** Entries not yet fanned out (waiting or being worked on). */
  async length(): Promise<number> {
    return this.redis.xlen(this.key);
  }

  /** Entries delivered to a fan-out and not yet acknowledged. */
  async pending(): Promise<number> {
    try {
      const summary = (await this.redis.xpending(this.key, FANOUT_GROUP)) as [number, ...unknown[]];
      return Number(summary[0]);
    } catch (err) {
      if (/NOGROUP/.test((err as Error).message)) return 0;
      throw err;
    }
  }

  /** Every entry still in the log, oldest first (tests, operators; reads the whole log). */
  async entries(): Promise<InboundEntry[]> {
    const raw = (await this.redis.xrange(this.key, '-', '+')) as RawEntry[];
    return raw.map(parseEntry);
  }

  /** The entry acknowledged with `id`, while it is in the log. */
  async find(id: string): Promise<InboundEntry | null> {
    return (await this.entries()).find((e) => e.id === id) ?? null;
  }
}

/**
 * The whole inbound log: its shards (INBOUND_SHARDS streams; one unless configured). Appends go to
 * the shard of each call's dedupe hash — one script, and with ACK_REPLICAS one `WAIT`, per shard a
 * batch touches, the shards in parallel; the fan-out reads every shard (workers/fanout.ts).
 */
export class InboundLog {
  readonly keys: RedisKeys;
  readonly shards: readonly InboundShard[];

  /** `keys`: the deployment's keys (queues/keys.ts), or a QUEUE_PREFIX for a one-stream log under it. */
  constructor(
    private readonly redis: RedisClient,
    keys: RedisKeys | string,
    private readonly ack: AckReplicas = { replicas: 0, timeoutMs: 0 },
  ) {
    this.keys = asKeys(keys);
    this.shards = Array.from(
      { length: Math.max(1, this.keys.inboundShards) },
      (_, i) => new InboundShard(redis, this.keys.inboundShard(i), ack),
    );
  }

  /** QUEUE_PREFIX. */
  get prefix(): string {
    return this.keys.prefix;
  }

  /** The stream of shard 0: the whole log unless INBOUND_SHARDS > 1 (tests, tools). */
  get key(): string {
    return this.shards[0]!.key;
  }

  /** The shard a call with this dedupe hash is appended to. */
  shardFor(dedupeId: string): InboundShard {
    return this.shards[this.keys.shardOf(dedupeId)]!;
  }

  /**
   * Appends a batch: each call to its shard, the shards' parts in parallel. Answers per item, in
   * order. When any shard's part fails the whole batch throws (the caller answers 503 or spools it;
   * what other shards stored is found by the dedupe of the redelivery). With ACK_REPLICAS the parts
   * whose shards one cluster master serves go in one pipeline with one `WAIT` (WAIT is per node:
   * one per master the batch touches is the fewest there can be).
   */
  async append(items: readonly AppendItem[], dedupeWindowMs: number): Promise<AppendOutcome[]> {
    if (this.shards.length === 1) return this.shards[0]!.append(items, dedupeWindowMs);
    const parts = new Map<InboundShard, number[]>();
    items.forEach((item, i) => {
      const shard = this.shardFor(item.dedupeId);
      const part = parts.get(shard);
      if (part) part.push(i);
      else parts.set(shard, [i]);
    });
    const out = new Array<AppendOutcome>(items.length);
    const settled = await Promise.allSettled(
      this.byNode([...parts.keys()]).map(async (shards) => {
        const itemsOf = (shard: InboundShard) => parts.get(shard)!.map((i) => items[i]!);
        const answers =
          shards.length === 1
            ? [await shards[0]!.append(itemsOf(shards[0]!), dedupeWindowMs)]
            : await appendAndWait(
                this.redis,
                this.ack,
                shards.map((shard) => ({ shard, items: itemsOf(shard) })),
                dedupeWindowMs,
              );
        shards.forEach((shard, s) => parts.get(shard)!.forEach((i, k) => (out[i] = answers[s]![k]!)));
      }),
    );
    const failed = settled.find((s): s is PromiseRejectedResult => s.status === 'rejected');
    if (failed) throw failed.reason;
    return out;
  }

  /**
   * `shards` grouped by the node that serves them, for one `WAIT` per node: with ACK_REPLICAS on a
   * cluster by the master the client's slot map names (a stale map is put right by the `MOVED` of
   * the append and the caller's retry), on one Redis all together; without ACK_REPLICAS each
   * shard alone (no WAIT to share: the shards' scripts run in parallel).
   */
  private byNode(shards: InboundShard[]): InboundShard[][] {
    if (this.ack.replicas === 0) return shards.map((s) => [s]);
    if (!(this.redis instanceof Cluster)) return [shards];
    return [...groupByNode(this.redis, shards, (shard) => shard.key).values()];
  }

  /** Entries not yet fanned out, in every shard. */
  async length(): Promise<number> {
    return sum(await Promise.all(this.shards.map((s) => s.length())));
  }

  /** Entries delivered to a fan-out and not yet acknowledged, in every shard. */
  async pending(): Promise<number> {
    return sum(await Promise.all(this.shards.map((s) => s.pending())));
  }

  /** Every entry still in the log, shard after shard, oldest first in each (tests, operators). */
  async entries(): Promise<InboundEntry[]> {
    return (await Promise.all(this.shards.map((s) => s.entries()))).flat();
  }

  /** The entry acknowledged with `id`, while it is in the log. */
  async find(id: string): Promise<InboundEntry | null> {
    return (await this.entries()).find((e) => e.id === id) ?? null;
  }
}

/**
 * The log as the fan-out reads it: the INBOUND_SHARDS streams, and the shards a larger
 * INBOUND_SHARDS of before still holds entries in (the count is recorded at `keys.layoutKey()`),
 * so lowering INBOUND_SHARDS strands nothing. The record is lowered once those shards are empty.
 */
export async function logToFanOut(
  redis: RedisClient,
  keys: RedisKeys,
): Promise<{ log: InboundLog; leftoverShards: number }> {
  const recorded = Number((await redis.get(keys.layoutKey())) ?? 0);
  const count = keys.inboundShards;
  if (recorded > count) {
    const extra = new InboundLog(redis, keys.withShards(recorded)).shards.slice(count);
    const left = await Promise.all(extra.map(async (s) => (await s.length()) + (await s.pending())));
    if (left.some((n) => n > 0))
      return { log: new InboundLog(redis, keys.withShards(recorded)), leftoverShards: recorded - count };
  }
  if (recorded !== count) await redis.set(keys.layoutKey(), String(count));
  return { log: new InboundLog(redis, keys), leftoverShards: 0 };
}

const sum = (values: number[]) => values.reduce((a, b) => a + b, 0);
