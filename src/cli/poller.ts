// `callsync poller [--json]`: is each configured channel being polled, by whom, in which state, and
// why it stopped — from the locks, cursors and state records the pollers keep in Redis
// (queues/poller-state.ts; docs/polling.md "Is the poller working?").
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import { readChannels, type ChannelView } from '../../queues/poller-state.js';
import type { Config } from '../config/index.js';
import type { CliIo } from './io.js';

export const pollerHelp = `Usage: callsync poller [--json]

Shows each channel of POLL_CHANNEL_IDS as the pollers keep it in Redis: the process holding its
lock (or nobody: no poller running), its cursor, and its state as that poller last wrote it:
  polling       reading pages (the last poll, its page's counts, the next poll)
  backing-off   the API failed (5xx, timeouts): the reason, failures in a row, the next try
  rate-limited  the API answered 429/503 with Retry-After: the next poll is after that wait
  stopped       the API rejected the credentials (401/403): fix them and restart the pollers
Reasons are the API's error, redacted (no credentials, numbers masked). A state is kept a few
POLL_LOCK_TTL_MS past the next poll; "never polled" means no poller wrote one since.
Exit 1 when a channel is stopped.

Options:
  --json        print the channels as JSON
  -h, --help    show this help`;

/** A time as ISO 8601 without milliseconds, and how far from now. */
function when(iso: string | null, now: number): string {
  if (iso === null) return '-';
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const seconds = Math.round((at - now) / 1000);
  const relative = seconds === 0 ? 'now' : seconds > 0 ? `in ${seconds} s` : `${-seconds} s ago`;
  return `${new Date(at).toISOString().replace(/\.\d{3}Z$/, 'Z')} (${relative})`;
}

function describe(view: ChannelView, now: number): string[] {
  const lines = [`channel ${view.channelId}`];
  lines.push(
    `  polled by   ${view.holder === null ? 'nobody: no poller running' : `${view.holder} (lock expires in ${Math.ceil((view.lockTtlMs ?? 0) / 1000)} s unless renewed)`}`,
  );
  lines.push(`  cursor      ${view.cursor ?? 'none (the first poll reads the inbox from its start)'}`);
  const r = view.record;
  if (r === null) {
    lines.push(`  state       ${view.unreadable ? `unreadable: ${view.unreadable}` : 'never polled'}`);
    return lines;
  }
  const stale = view.holder !== r.instance ? `, written by ${r.instance}, which does not hold the lock now` : '';
  lines.push(`  state       ${r.state} since ${when(r.since, now)}${stale}`);
  if (r.reason !== null) lines.push(`  reason      ${r.reason}`);
  if (r.state === 'backing-off') lines.push(`  failures    ${r.failures} in a row`);
  lines.push(`  last poll   ${r.lastPollAt === null ? '-' : `${when(r.lastPollAt, now)}: ${r.lastOutcome ?? '?'}`}`);
  if (r.lastPage !== null) {
    const p = r.lastPage;
    lines.push(
      `  last page   ${when(p.at, now)}: ${p.events} event(s), ${p.accepted} accepted, ${p.duplicates} duplicate(s), ${p.deadLettered} dead-lettered, ${p.ignored} not calls`,
    );
  }
  lines.push(`  next poll   ${r.state === 'stopped' ? 'none until the process restarts' : when(r.nextPollAt, now)}`);
  return lines;
}

/** Prints the channels; 1 when one of them is stopped, else 0. */
export async function pollerStatus(
  config: Config,
  connect: () => Promise<RedisClient>,
  json: boolean,
  io: CliIo,
  now: () => number = Date.now,
): Promise<number> {
  const channelIds = config.poll.channelIds;
  if (channelIds.length === 0) {
    if (json) io.out(JSON.stringify({ channels: [] }, null, 2));
    else io.out('no channels configured (POLL_CHANNEL_IDS is empty): nothing is polled');
    return 0;
  }
  const redis = await connect();
  let views: ChannelView[];
  try {
    views = await readChannels(redis, redisKeys(config.redis), channelIds);
  } finally {
    redis.disconnect();
  }
  const stopped = views.filter((v) => v.record?.state === 'stopped').map((v) => v.channelId);
  if (json) {
    io.out(
      JSON.stringify(
        {
          channels: views.map((v) => ({
            channel: v.channelId,
            lock: v.holder === null ? null : { holder: v.holder, expiresInMs: v.lockTtlMs },
            cursor: v.cursor,
            state: v.record,
            ...(v.unreadable ? { unreadable: v.unreadable } : {}),
          })),
          stopped,
        },
        null,
        2,
      ),
    );
  } else {
    const at = now();
    for (const [i, view] of views.entries()) {
      if (i > 0) io.out('');
      for (const line of describe(view, at)) io.out(line);
    }
    if (stopped.length > 0) {
      io.out('');
      io.out(
        `stopped: ${stopped.join(', ')} (credentials rejected: fix them, then restart the pollers; docs/polling.md "Is the poller working?")`,
      );
    }
  }
  return stopped.length > 0 ? 1 : 0;
}
