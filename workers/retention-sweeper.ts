// The retention sweeper of the worker role (src/privacy/retention.ts): every
// RETENTION_SWEEP_INTERVAL_SECONDS one worker process — whichever takes the interval's marker first —
// removes what is older than the retention settings and measures the oldest item per store. The
// first sweep runs a minute after start.
import type { Logger } from 'pino';
import type { RedisClient } from '../queues/connection.js';
import { redisKeys } from '../queues/keys.js';
import type { Config } from '../src/config/index.js';
import { sweepRetention } from '../src/privacy/retention.js';

export interface RetentionSweeper {
  close(): Promise<void>;
}

/**
 * The marker one process takes per interval (`<area retention>:retention:sweep`).
 * @internal Exported for its tests only (test/config-durations.redis.test.ts).
 */
export function sweepMarkerKey(config: Config): string {
  return `${redisKeys(config.redis).area('retention')}:retention:sweep`;
}

export function startRetentionSweeper(
  config: Config,
  redis: RedisClient,
  log: Logger,
  firstDelayMs = 60_000,
): RetentionSweeper | null {
  const everyMs = config.retention.sweepIntervalMs;
  if (everyMs === 0) return null;
  let running: Promise<void> | null = null;
  let stopped = false;
  const tick = () => {
    if (running || stopped) return;
    running = (async () => {
      // One process per interval; the marker expires a little before the next tick.
      const mine = await redis.set(sweepMarkerKey(config), String(process.pid), 'PX', Math.max(1, everyMs - 500), 'NX');
      if (mine !== 'OK') return;
      await sweepRetention(config, redis, log);
    })()
      .catch((err: unknown) =>
        log.warn({ err: { message: (err as Error).message } }, 'retention sweep failed; tried again next interval'),
      )
      .finally(() => {
        running = null;
      });
  };
  const first = setTimeout(tick, Math.min(firstDelayMs, everyMs));
  first.unref();
  const timer = setInterval(tick, everyMs);
  timer.unref();
  return {
    async close() {
      stopped = true;
      clearTimeout(first);
      clearInterval(timer);
      await running;
    },
  };
}
