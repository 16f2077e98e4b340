// A polled channel's keys (lock, cursor, state) and the state record the poller writes for
// operators (`callsync poller`, docs/polling.md "Is the poller working?"). All three share the
// channel's slot (`{QUEUE_PREFIX:poller:<channel>}` on a spread cluster: queues/keys.ts).
import type { RedisClient } from './connection.js';
import { asKeys, type RedisKeys } from './keys.js';

/** Where a channel's stored position lives (delete it to re-read the inbox from the start). */
export function cursorKey(keys: RedisKeys | string, channelId: string): string {
  return `${asKeys(keys).state(`poller:${channelId}`)}poller:cursor:${channelId}`;
}

/** The channel's lock: the instance id of the poller holding it, with a TTL of POLL_LOCK_TTL_MS. */
export function lockKey(keys: RedisKeys | string, channelId: string): string {
  return `${asKeys(keys).state(`poller:${channelId}`)}poller:lock:${channelId}`;
}

/**
 * The channel's state record (JSON, with a TTL: a channel no longer polled leaves nothing behind).
 * @internal Exported for its tests only (test/poller-status.redis.test.ts).
 */
export function channelStateKey(keys: RedisKeys | string, channelId: string): string {
  return `${asKeys(keys).state(`poller:${channelId}`)}poller:status:${channelId}`;
}

/** What the holder of a channel's lock is doing. */
export type ChannelPollState = 'polling' | 'backing-off' | 'rate-limited' | 'stopped';

/** How the last request for a page ended. */
export type PollOutcome = 'ok' | 'failed' | 'rate-limited' | 'rejected';

/** The counts of the last page read and queued. */
export interface PageCounts {
  events: number;
  accepted: number;
  duplicates: number;
  deadLettered: number;
  ignored: number;
}

/** The record of one channel, as the poller holding its lock last wrote it. Times are ISO 8601. */
export interface ChannelStateRecord {
  state: ChannelPollState;
  /** Why it waits or stopped (the API's error, redacted: no credentials, numbers masked); null while polling. */
  reason: string | null;
  /** When the channel entered this state. */
  since: string;
  /** The poller that wrote it (host:pid:random). */
  instance: string;
  /** The last poll: when it ended and how (null before the first poll of this holder). */
  lastPollAt: string | null;
  lastOutcome: PollOutcome | null;
  /** When the next poll is due (null when stopped). */
  nextPollAt: string | null;
  /** Failed polls in a row (backing off). */
  failures: number;
  /** The last page read (null before the first page of this holder). */
  lastPage: (PageCounts & { at: string }) | null;
}

/** Writes the record with a TTL (ms). */
export async function writeChannelState(
  redis: RedisClient,
  keys: RedisKeys | string,
  channelId: string,
  record: ChannelStateRecord,
  ttlMs: number,
): Promise<void> {
  await redis.set(channelStateKey(keys, channelId), JSON.stringify(record), 'PX', Math.max(1000, Math.round(ttlMs)));
}

/** What Redis holds about one channel, for the CLI. */
export interface ChannelView {
  channelId: string;
  /** The instance id holding the lock, or null when it is free (no poller running for it). */
  holder: string | null;
  /** Milliseconds the lock has left (null when free). */
  lockTtlMs: number | null;
  cursor: string | null;
  /** Null: never polled, or the record expired. A record that cannot be read is reported as such. */
  record: ChannelStateRecord | null;
  /** Set when the stored record is not one this version reads. */
  unreadable?: string;
}

/** Reads lock, cursor and state record of each channel (three reads of one slot per channel). */
export async function readChannels(
  redis: RedisClient,
  keys: RedisKeys | string,
  channelIds: readonly string[],
): Promise<ChannelView[]> {
  const views: ChannelView[] = [];
  for (const channelId of channelIds) {
    const [holder, ttl, cursor, raw] = await Promise.all([
      redis.get(lockKey(keys, channelId)),
      redis.pttl(lockKey(keys, channelId)),
      redis.get(cursorKey(keys, channelId)),
      redis.get(channelStateKey(keys, channelId)),
    ]);
    const view: ChannelView = {
      channelId,
      holder,
      lockTtlMs: holder === null || ttl < 0 ? null : ttl,
      cursor,
      record: null,
    };
    if (raw !== null) {
      const record = parseRecord(raw);
      if (record) view.record = record;
      else view.unreadable = 'the stored state is not JSON of a known shape';
    }
    views.push(view);
  }
  return views;
}

const STATES: readonly string[] = ['polling', 'backing-off', 'rate-limited', 'stopped'];

function parseRecord(raw: string): ChannelStateRecord | null {
  try {
    const value = JSON.parse(raw) as Partial<ChannelStateRecord> | null;
    if (typeof value !== 'object' || value === null || !STATES.includes(String(value.state))) return null;
    return value as ChannelStateRecord;
  } catch {
    return null;
  }
}
