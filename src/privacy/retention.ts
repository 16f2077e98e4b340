// Retention per store (docs/privacy.md "Retention"): what the worker role's sweeper removes once it
// is older than configured, and the age of the oldest item per store (metrics).
//   - completed jobs: COMPLETED_JOB_RETENTION_SECONDS (BullMQ's own age limit runs only while a
//     queue is active; a queue that went quiet kept its jobs for ever);
//   - dead letters (failed jobs) and parked log entries: FAILED_JOB_RETENTION_SECONDS;
//   - the queues' event streams (BullMQ's, `failedReason` and `returnvalue` of recent jobs, capped
//     only by count): the shorter of the two, so a dead letter's reason does not outlive its retention
//     there in a queue that went quiet;
//   - archive sinks in a folder: ARCHIVE_RETENTION_DAYS by the object's write time (an S3 archive
//     gets a lifecycle rule instead, `callsync retention apply`, ./lifecycle.ts).
// Call timelines expire by Redis TTL (CALL_TIMELINE_TTL_DAYS, queues/timeline.ts): measured; a lowered
// TTL is brought to the timelines kept already, once (`applyTimelineTtl`); the entries of their
// lookups and of the refused calls older than the TTL go at every sweep (`trimLookups`).
// The age of the oldest item per store is measured on each sweep: `callsync_retention_oldest_seconds`
// (an S3 archive's with a few requests whatever the bucket holds: `oldestInS3` below).
import { Queue } from 'bullmq';
import type { Logger } from 'pino';
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys, type RedisKeys } from '../../queues/keys.js';
import { globEscape, queuesInRedis, scanKeys } from '../../queues/scan.js';
import { callIdKey, failedCallsKey, numberKey, recentCallsKey, refusedCallsKey } from '../../queues/timeline.js';
import type { Config } from '../config/index.js';
import { retentionOldest, retentionRemoved } from '../metrics.js';
import { archiveOptionsSchema, createObjectStore } from '../sinks/archive/index.js';
import { normalizePrefix } from '../sinks/archive/keys.js';
import { LocalFolderStore, type ObjectStore } from '../sinks/archive/store.js';
import { eraseStreamEntries } from './stream-erase.js';

const DAY_MS = 24 * 3600_000;

interface RetentionSettings {
  /** ARCHIVE_RETENTION_DAYS in ms, or null: archives are kept. */
  archiveMs: number | null;
  completedMs: number;
  failedMs: number;
}

function retentionSettings(config: Config): RetentionSettings {
  const { archiveDays: days, completedMs, failedMs } = config.retention;
  return {
    archiveMs: days === undefined ? null : days * DAY_MS,
    completedMs,
    failedMs,
  };
}

type RetentionStore =
  | 'completed_jobs'
  | 'dead_letters'
  | 'queue_events'
  | 'parked'
  | 'inbound_log'
  | 'timelines'
  | 'timeline_lookups'
  | 'archive'
  | 'archive_s3';

export interface SweepResult {
  /** Items removed per store. */
  removed: Partial<Record<RetentionStore, number>>;
  /** Age in seconds of the oldest item left per store (0: empty; archive: folders, archive_s3: S3 buckets). */
  oldestSeconds: Partial<Record<RetentionStore, number>>;
}

/** Keys of one page of the oldest day are read for their LastModified (S3's largest page). */
const S3_OLDEST_PAGE = 1000;
const DAY_PARTITION = /^\d{4}\/\d{2}\/\d{2}\//;

/**
 * When the oldest object of an S3 archive was written (null: none), with at most four
 * list requests whatever the bucket holds: keys are partitioned by the call's day
 * (`<prefix>transcripts/YYYY/MM/DD/…`, `<prefix>recordings/YYYY/MM/DD/…`, src/sinks/archive/keys.ts)
 * and S3 lists in key order, so per folder one key names the oldest day and one page of that day
 * (at most 1,000 keys) gives its oldest LastModified — what the lifecycle rule measures too. It
 * misses an older object only in a later day's folder, which takes a call written long after
 * its day (a backfill) to be the only object of the oldest day (docs/privacy.md, "Retention").
 * ListObjects (version 1): a page cut short comes with a plain marker, where s3rver's version-2
 * continuation token needs DES, which Node 20's OpenSSL lacks (the tests' S3 answered 500).
 */
async function oldestInS3(store: ObjectStore, bucket: string, prefix: string): Promise<number | null> {
  const { S3Store } = await import('../sinks/archive/s3-store.js');
  const { ListObjectsCommand } = await import('@aws-sdk/client-s3');
  if (!(store instanceof S3Store)) return null;
  let oldestAt: number | null = null;
  for (const top of [`${prefix}transcripts/`, `${prefix}recordings/`]) {
    const first = await store.client.send(new ListObjectsCommand({ Bucket: bucket, Prefix: top, MaxKeys: 1 }));
    const key = first.Contents?.[0]?.Key;
    if (key === undefined) continue;
    const day = DAY_PARTITION.exec(key.slice(top.length))?.[0] ?? '';
    const page = await store.client.send(
      new ListObjectsCommand({ Bucket: bucket, Prefix: `${top}${day}`, MaxKeys: S3_OLDEST_PAGE }),
    );
    for (const o of page.Contents ?? []) {
      const at = o.LastModified?.getTime();
      if (at !== undefined && (oldestAt === null || at < oldestAt)) oldestAt = at;
    }
  }
  return oldestAt;
}

/** The ms part of a stream entry id. */
const idMs = (id: string) => Number(id.slice(0, id.indexOf('-')));

/**
 * One sweep: removes what is older than the settings allow and measures the oldest item left per
 * store. `now` is the time the ages are measured against (tests pass one).
 */
/**
 * Brings CALL_TIMELINE_TTL_DAYS to the timelines kept already, when it is lower than the one last
 * applied (recorded in Redis; unknown at the first sweep after an upgrade): a timeline's expiry is
 * set as it is written, so one of a call that has no new event kept the expiry it was given under
 * the longer setting — 30 days of a call's events after a data-protection officer set 7. Each
 * timeline then expires CALL_TIMELINE_TTL_DAYS after its last entry (removed at once when that is
 * past). Answers how many timelines it removed.
 */
async function applyTimelineTtl(redis: RedisClient, keys: RedisKeys, ttlMs: number, now: number): Promise<number> {
  const calls = keys.area('calls');
  const applied = `${calls}:calls:ttl-applied`;
  const before = Number(await redis.get(applied));
  if (Number.isFinite(before) && before > 0 && ttlMs >= before) {
    if (ttlMs > before) await redis.set(applied, String(ttlMs));
    return 0;
  }
  let removed = 0;
  const timelines =
    keys.layout === 'spread'
      ? `{${globEscape(keys.prefix)}:call:*}:timeline`
      : `${globEscape(keys.prefix)}:call:*:timeline`;
  for (const key of (await scanKeys(redis, timelines)).filter((key) => ownKey(keys, key))) {
    const [last] = await redis.lrange(key, -1, -1);
    const at = lastAt(last);
    if (at === null) continue;
    const expireAt = at + ttlMs;
    if (expireAt <= now) removed += await redis.del(key);
    else {
      const left = await redis.pttl(key);
      if (left < 0 || now + left > expireAt) await redis.pexpireat(key, expireAt);
    }
  }
  await redis.set(applied, String(ttlMs));
  return removed;
}

/** A key of this deployment (another QUEUE_PREFIX may start with this one). */
const ownKey = (keys: RedisKeys, key: string) =>
  key.startsWith(`${keys.prefix}:`) || key.startsWith(`{${keys.prefix}:`);

// Trims sorted sets of the calls' area (one slot in either layout) by score, and brings a longer
// expiry down to the TTL; a key of another type is left alone. Answers how many entries went.
const TRIM_LOOKUPS = `
local cut, ttl = ARGV[1], tonumber(ARGV[2])
local removed = 0
for i = 1, #KEYS do
  if redis.call('TYPE', KEYS[i]).ok == 'zset' then
    removed = removed + redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', cut)
    if redis.call('PTTL', KEYS[i]) > ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
return removed
`;

/** Lookups trimmed per command. */
const TRIM_BATCH = 500;

/**
 * The entries of the timelines' lookups (by time, call id, number, dead letter) and of the refused calls older
 * than CALL_TIMELINE_TTL_DAYS, at every sweep. Each set is trimmed as it is written to and expires
 * that long after its last write; one written to again before it expires — a caller who calls
 * again on day 29, a refusal a day — kept its first entries until then: up to twice the setting.
 * A lowered setting brings each set's own expiry down too. One command per TRIM_BATCH sets (they
 * share the calls' slot). Answers how many entries it removed.
 */
async function trimLookups(redis: RedisClient, keys: RedisKeys, ttlMs: number, now: number): Promise<number> {
  const calls = keys.area('calls');
  const sets = [
    recentCallsKey(keys),
    failedCallsKey(keys),
    refusedCallsKey(keys),
    ...(await scanKeys(redis, callIdKey(globEscape(calls), '*'))),
    ...(await scanKeys(redis, numberKey(globEscape(calls), '*'))),
  ].filter((key) => ownKey(keys, key));
  let removed = 0;
  for (let i = 0; i < sets.length; i += TRIM_BATCH) {
    const batch = sets.slice(i, i + TRIM_BATCH);
    removed += Number(await redis.eval(TRIM_LOOKUPS, batch.length, ...batch, `(${now - ttlMs}`, String(ttlMs)));
  }
  return removed;
}

/** The time (epoch ms) of a timeline entry's text, or null. */
function lastAt(text: string | undefined): number | null {
  if (text === undefined) return null;
  try {
    const at = (JSON.parse(text) as { at?: unknown }).at;
    return typeof at === 'number' && Number.isFinite(at) ? at : null;
  } catch {
    return null;
  }
}

export async function sweepRetention(
  config: Config,
  redis: RedisClient,
  log: Logger,
  now = Date.now(),
): Promise<SweepResult> {
  const settings = retentionSettings(config);
  const keys = redisKeys(config.redis);
  const result: SweepResult = { removed: {}, oldestSeconds: {} };
  const add = (store: RetentionStore, n: number) => {
    if (n > 0) result.removed[store] = (result.removed[store] ?? 0) + n;
  };
  const oldest = (store: RetentionStore, atMs: number | null) => {
    const age = atMs === null ? 0 : Math.max(0, Math.round((now - atMs) / 1000));
    result.oldestSeconds[store] = Math.max(result.oldestSeconds[store] ?? 0, age);
  };
  oldest('completed_jobs', null);
  oldest('dead_letters', null);
  oldest('queue_events', null);
  const eventsCut = Math.max(0, now - Math.min(settings.completedMs, settings.failedMs));

  // Jobs: BullMQ's clean measures from its own clock; the grace is set so the cut is `now - retention`.
  for (const name of await queuesInRedis(redis, keys)) {
    const queue = new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) });
    try {
      for (const [state, store, ms] of [
        ['completed', 'completed_jobs', settings.completedMs],
        ['failed', 'dead_letters', settings.failedMs],
      ] as const) {
        const grace = Math.max(0, ms - (now - Date.now()));
        add(store, (await queue.clean(grace, 0, state)).length);
        const [first] = await queue.getJobs([state], 0, 0, true);
        oldest(store, first?.finishedOn ?? null);
      }
      // The queue's events (ids are their times): those before the cut go, the rest is BullMQ's.
      const events = `${keys.queuePrefix(name)}:${name}:events`;
      add('queue_events', Number(await redis.xtrim(events, 'MINID', String(eventsCut))));
      const [first] = (await redis.xrange(events, '-', '+', 'COUNT', 1)) as [string, string[]][];
      oldest('queue_events', first ? idMs(first[0]) : null);
    } finally {
      await queue.close();
    }
  }

  // Parked log entries (beside each inbound shard), rewritten without the old ones; the log's age.
  oldest('parked', null);
  oldest('inbound_log', null);
  const streams = (
    await scanKeys(
      redis,
      keys.layout === 'spread' ? `{${globEscape(keys.prefix)}:*}:inbound-*` : `${globEscape(keys.prefix)}:*inbound-*`,
    )
  ).filter(
    // Only this deployment's (another QUEUE_PREFIX may start with this one).
    (key) => key.startsWith(`${keys.prefix}:`) || key.startsWith(`{${keys.prefix}:`),
  );
  for (const key of streams) {
    if (key.endsWith(':inbound-parked')) {
      const cut = now - settings.failedMs;
      const old = ((await redis.xrange(key, '-', String(Math.max(0, cut - 1)))) as [string, string[]][]).map(
        ([id]) => id,
      );
      add('parked', await eraseStreamEntries(redis, key, old));
      const [first] = (await redis.xrange(key, '-', '+', 'COUNT', 1)) as [string, string[]][];
      oldest('parked', first ? idMs(first[0]) : null);
    } else if (key.endsWith(':inbound-log')) {
      const [first] = (await redis.xrange(key, '-', '+', 'COUNT', 1)) as [string, string[]][];
      oldest('inbound_log', first ? idMs(first[0]) : null);
    }
  }

  // Call timelines expire by their TTL, set as they are written; a lowered CALL_TIMELINE_TTL_DAYS is
  // brought to the ones kept already, once. Then the oldest call in the index by time.
  const timelineTtlMs = Math.round(config.timeline.ttlDays * DAY_MS);
  add('timelines', await applyTimelineTtl(redis, keys, timelineTtlMs, now));
  add('timeline_lookups', await trimLookups(redis, keys, timelineTtlMs, now));
  const [, firstAt] = await redis.zrange(recentCallsKey(keys), 0, 0, 'WITHSCORES');
  oldest('timelines', firstAt === undefined ? null : Number(firstAt));

  // Archives in a folder: by the time each object was written.
  for (const sink of Object.values(config.sinks)) {
    if (sink.type !== 'archive') continue;
    const options = archiveOptionsSchema.parse(sink.options);
    if (options.bucket) continue;
    const store = await createObjectStore(options);
    if (!(store instanceof LocalFolderStore)) continue;
    const prefix = normalizePrefix(options.prefix);
    const objects: string[] = [];
    for (const top of ['transcripts/', 'recordings/'])
      for await (const key of store.list(`${prefix}${top}`)) objects.push(key);
    objects.push(...(await store.temporaryFiles(prefix)));
    let oldestAt: number | null = null;
    for (const key of objects) {
      const at = await store.modifiedAt(key);
      if (at === null) continue;
      if (settings.archiveMs !== null && at < now - settings.archiveMs) {
        if (await store.delete(key)) add('archive', 1);
      } else if (oldestAt === null || at < oldestAt) {
        oldestAt = at;
      }
    }
    oldest('archive', oldestAt);
  }

  // Archives in S3: the lifecycle rule removes; the sweep only measures (a few requests per archive).
  for (const sink of Object.values(config.sinks)) {
    if (sink.type !== 'archive') continue;
    const options = archiveOptionsSchema.parse(sink.options);
    if (!options.bucket) continue;
    try {
      oldest(
        'archive_s3',
        await oldestInS3(await createObjectStore(options), options.bucket, normalizePrefix(options.prefix)),
      );
    } catch (err) {
      log.warn(
        { sink: sink.name, err: { message: (err as Error).message.split('\n')[0] } },
        "retention sweep: the age of the S3 archive's oldest object is unknown (listing failed)",
      );
    }
  }

  for (const [store, n] of Object.entries(result.removed)) retentionRemoved.inc({ store }, n);
  for (const [store, age] of Object.entries(result.oldestSeconds)) retentionOldest.set({ store }, age);
  if (Object.keys(result.removed).length > 0)
    log.info({ removed: result.removed }, 'retention sweep removed old items');
  return result;
}
