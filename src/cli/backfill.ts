// `callsync backfill`: pages through the platform's call history (spec 2.8, `GET /history`,
// type CALL) and accepts each entry as a canonical call (source `history`) through the same
// acceptor as the ingress and the poller, so it is deduplicated like every other source. A cursor
// in Redis per range makes an interrupted run continue where it stopped.
import type { RedisClient } from '../../queues/connection.js';
import type { Config } from '../config/index.js';
import { InboundAcceptor } from '../ingress/accept.js';
import { HistoryEntryError, normalizeHistoryEntry } from '../model/history.js';
import { createTelephonyClient } from '../telephony/client.js';
import { withRefreshTokenStore } from '../state/refresh-token.js';
import type { HistoryPage, HistoryQuery } from '../telephony/types.js';
import { InboundLog } from '../../queues/inbound.js';
import { asKeys, redisKeys, type RedisKeys } from '../../queues/keys.js';
import { UsageError, type CliIo } from './io.js';
import { Progress, type ProgressOut } from './progress.js';
import { CliFailure } from './redis.js';
import { SinkQueuer } from './sink-queue.js';

export interface BackfillOptions {
  from: string;
  to: string;
  /** Queue to this sink only (skipping the routes) instead of accepting into the inbound log. */
  sink?: string;
  dryRun: boolean;
  pageSize: number;
}

/** The history reader the command needs (the telephony client; a test may pass another). */
export interface HistoryReader {
  readHistory(query: HistoryQuery, signal?: AbortSignal): Promise<HistoryPage>;
}

/**
 * Where the cursor of one range (and target) is kept.
 * @internal Exported for its tests only (test/backfill-replay.redis.test.ts).
 */
export function backfillCursorKey(
  keys: RedisKeys | string,
  options: Pick<BackfillOptions, 'from' | 'to' | 'sink'>,
): string {
  return `${asKeys(keys).area('backfill')}:backfill:${options.from}|${options.to}|${options.sink ?? '*'}`;
}

/**
 * How long the cursor of a run that stopped is kept after its last page: as long as the markers of
 * the calls it queued (src/cli/sink-queue.ts), after which running the range again from its start
 * adds nothing the markers would not have caught. Not for ever (docs/privacy.md).
 * @internal Exported for its tests only (test/backfill-replay.redis.test.ts).
 */
export const BACKFILL_CURSOR_TTL_S = 180 * 24 * 3600;

/** A day (UTC) or a time with its zone: what Date.parse would otherwise guess at. */
const ISO_DAY_OR_TIME = /^(\d{4}-\d{2}-\d{2})(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2}))?$/i;

/**
 * A date option as ISO-8601 UTC, or a usage error. Only a day (read as UTC) or a time with its zone:
 * Date.parse also takes `1` or `0` (2001-01-01, 2000-01-01 in local time: a backfill of decades),
 * a time without a zone in the machine's time zone, and 2026-02-30 as 2 March.
 */
export function isoOption(name: string, value: string | undefined): string {
  if (value === undefined) throw new UsageError(`--${name} is required`);
  const day = ISO_DAY_OR_TIME.exec(value.trim())?.[1];
  const ms = Date.parse(value.trim());
  if (day === undefined || Number.isNaN(ms) || new Date(`${day}T00:00:00Z`).toISOString().slice(0, 10) !== day)
    throw new UsageError(
      `--${name} must be an ISO-8601 date: a day or a time with its zone (e.g. 2026-10-01 or 2026-10-01T00:00:00Z), got "${value}"`,
    );
  return new Date(ms).toISOString();
}

/** Where a failed run stopped, and what running it again does. */
function stoppedAt(offset: number, kept: boolean): string {
  if (!kept) return `${offset} entries of the range were read; nothing was written`;
  return offset === 0
    ? 'no entry of the range was read'
    : `${offset} entries of the range were read and kept: run the same command again to continue at entry ${offset}`;
}

export async function backfill(
  config: Config,
  redis: RedisClient | null,
  options: BackfillOptions,
  io: CliIo,
  progressOut: ProgressOut,
  reader?: HistoryReader,
): Promise<number> {
  if (Date.parse(options.from) >= Date.parse(options.to)) throw new UsageError('--from must be before --to');
  // With Redis, an OAuth refresh token rotated here is stored for the service (and one it rotated is used here).
  const telephony =
    config.telephony && redis !== null
      ? withRefreshTokenStore(config.telephony, redis, redisKeys(config.redis).telephonyOAuthKey())
      : config.telephony;
  const history = reader ?? (telephony ? createTelephonyClient(telephony) : null);
  if (history === null)
    throw new CliFailure(
      'the telephony API is not configured (TELEPHONY_API_URL and its credentials): backfill reads the call history from it',
    );
  const cursorKey = redis === null ? null : backfillCursorKey(redisKeys(config.redis), options);
  let offset = 0;
  if (!options.dryRun && redis !== null && cursorKey !== null) {
    const saved = await redis.hget(cursorKey, 'offset');
    if (saved !== null && /^\d+$/.test(saved)) {
      offset = Number(saved);
      io.out(`resuming the backfill of ${options.from} .. ${options.to} at entry ${offset}`);
    }
  }
  const acceptor =
    !options.dryRun && redis !== null && options.sink === undefined
      ? new InboundAcceptor(new InboundLog(redis, redisKeys(config.redis)), {
          dedupeWindowMs: config.webhook.dedupeWindowMs,
          timeoutMs: config.webhook.enqueueTimeoutMs,
        })
      : null;
  const queuer =
    !options.dryRun && redis !== null && options.sink !== undefined
      ? new SinkQueuer(redis, config, options.sink, 'backfill')
      : null;
  const counts = { read: 0, accepted: 0, duplicates: 0, updates: 0, skipped: 0 };
  const progress = new Progress(progressOut, options.dryRun ? 'backfill (dry run)' : 'backfill');
  const receivedAt = new Date();
  try {
    for (;;) {
      let page: HistoryPage;
      try {
        page = await history.readHistory({
          types: ['CALL'],
          from: options.from,
          to: options.to,
          offset,
          limit: options.pageSize,
        });
      } catch (err) {
        throw new CliFailure(`${(err as Error).message}; ${stoppedAt(offset, cursorKey !== null && !options.dryRun)}`);
      }
      for (const item of page.items) {
        counts.read++;
        let call;
        try {
          call = normalizeHistoryEntry(item, { receivedAt });
        } catch (err) {
          if (!(err instanceof HistoryEntryError)) throw err;
          counts.skipped++;
          io.err(`skipped: ${err.message}`);
          continue;
        }
        if (acceptor) {
          const result = await acceptor.accept(call);
          if (result.duplicate) counts.duplicates++;
          else if (result.update) counts.updates++;
          else counts.accepted++;
        } else if (queuer) {
          if (await queuer.add(call)) counts.accepted++;
          else counts.duplicates++;
        } else counts.accepted++;
      }
      offset += page.items.length;
      if (redis !== null && cursorKey !== null && !options.dryRun)
        await redis.multi().hset(cursorKey, 'offset', String(offset)).expire(cursorKey, BACKFILL_CURSOR_TTL_S).exec();
      progress.update(offset, page.totalCount, `(${counts.accepted} new, ${counts.duplicates} duplicate)`);
      if (page.items.length === 0 || offset >= page.totalCount) break;
    }
  } finally {
    progress.finish();
    await queuer?.close();
  }
  // The range is done: its cursor goes, so a later run reads it again (and finds duplicates).
  if (redis !== null && cursorKey !== null && !options.dryRun) await redis.del(cursorKey);
  const target = options.sink ? `queued to sink ${options.sink}` : 'accepted';
  io.out(
    options.dryRun
      ? `dry run: ${counts.accepted} calls in ${options.from} .. ${options.to} would be ${target}${counts.skipped ? `, ${counts.skipped} entries skipped` : ''}; nothing written`
      : `backfill done: ${counts.read} entries read, ${counts.accepted} ${target}, ${counts.updates} updates, ${counts.duplicates} duplicates, ${counts.skipped} skipped`,
  );
  return 0;
}
