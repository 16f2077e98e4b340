// A sink taken out of the configuration leaves its queue in Redis. Its waiting and delayed jobs wait
// for a worker that no longer starts, and their calls' timelines stop at "queued" or "next attempt
// at …", with nothing anywhere saying why. So each worker process looks at start for such queues: in
// Redis under this prefix, not in this configuration, holding jobs still to run, and worked by no
// live worker of any process (a sink another process runs is not stranded). Each is logged once
// (again if it goes and comes back) and listed in /readyz's warnings, with what to do, until it is
// emptied or worked (counted again every minute). Dead letters alone strand nothing: `callsync dlq`
// lists and purges them as ever.
import { Queue } from 'bullmq';
import type { RedisClient } from '../../queues/connection.js';
import type { RedisKeys } from '../../queues/keys.js';
import { queuesInRedis } from '../../queues/scan.js';
import type { Logger } from '../log.js';

export interface StrandedQueue {
  queue: string;
  /** Jobs still to run: waiting (prioritized included), delayed, active. */
  waiting: number;
  delayed: number;
  active: number;
  /** Its dead letters (not counted as stranded on their own). */
  failed: number;
}

/** The queues under `keys` that are not in `configured` (a SCAN of the keyspace). */
export async function unconfiguredQueues(
  redis: RedisClient,
  keys: RedisKeys,
  configured: readonly string[],
): Promise<string[]> {
  return (await queuesInRedis(redis, keys)).filter((name) => !configured.includes(name));
}

/** Of the queues `names`, those that hold jobs to run and have no live worker. */
export async function strandedOf(
  redis: RedisClient,
  keys: RedisKeys,
  names: readonly string[],
): Promise<StrandedQueue[]> {
  const stranded: StrandedQueue[] = [];
  for (const name of names) {
    const queue = new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) });
    queue.on('error', () => undefined);
    try {
      const c = await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active', 'failed');
      const waiting = (c.waiting ?? 0) + (c.prioritized ?? 0);
      const delayed = c.delayed ?? 0;
      const active = c.active ?? 0;
      if (waiting + delayed + active === 0) continue;
      // Another process may run the sink. Where CLIENT LIST is refused (some managed Redis), the
      // count is unknown and the queue is named anyway: a warning too many beats a silent queue.
      const workers = await queue.getWorkersCount().catch(() => 0);
      if (workers > 0) continue;
      stranded.push({ queue: name, waiting, delayed, active, failed: c.failed ?? 0 });
    } finally {
      await queue.close().catch(() => undefined);
    }
  }
  return stranded;
}

/** One line for a log, /readyz or check-config: the queue, its jobs, and what to do. */
export function strandedLine(q: StrandedQueue): string {
  const jobs = [`${q.waiting} waiting`, `${q.delayed} delayed`, ...(q.active > 0 ? [`${q.active} active`] : [])];
  return `queue ${q.queue} holds jobs no process works (${jobs.join(', ')}; ${q.failed} dead letters): its sink is not in this configuration and no live worker runs it — add the sink back, start a worker whose configuration has it, or give its jobs up as dead letters with callsync dlq abandon --queue ${q.queue} (callsync dlq list --queue ${q.queue} shows its dead letters)`;
}

export interface StrandedQueuesWatchOptions {
  log: Logger;
  /** How often to look again. Default 60 s. */
  intervalMs?: number;
}

/**
 * Looks at start (waiting at most a second): the queues in Redis this configuration lacks — a SCAN,
 * so only then: a sink leaves the configuration only with a restart. Every `intervalMs` it counts
 * those queues' jobs and workers again (a few commands each), so the warning goes once they are
 * emptied or worked. `warnings()` feeds /readyz.
 */
export class StrandedQueuesWatch {
  private timer: NodeJS.Timeout | null = null;
  private looking = false;
  /** The unconfigured queues found at start; null until the SCAN has answered. */
  private candidates: string[] | null = null;
  private found: StrandedQueue[] = [];
  /** Queues already logged (logged again once they went away and came back). */
  private readonly logged = new Set<string>();

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys,
    private readonly configured: readonly string[],
    private readonly options: StrandedQueuesWatchOptions,
  ) {}

  async start(): Promise<void> {
    const first = this.lookOnce();
    this.timer = setInterval(() => void this.lookOnce(), this.options.intervalMs ?? 60_000);
    this.timer.unref();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([first, new Promise<void>((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
  }

  /** A look, unless one is still running; a failure (Redis away) leaves the last answer until the next. */
  async lookOnce(): Promise<void> {
    if (this.looking) return;
    this.looking = true;
    try {
      this.candidates ??= await unconfiguredQueues(this.redis, this.keys, this.configured);
      this.found = await strandedOf(this.redis, this.keys, this.candidates);
      const now = new Set(this.found.map((q) => q.queue));
      for (const q of this.found) {
        if (this.logged.has(q.queue)) continue;
        this.logged.add(q.queue);
        this.options.log.warn({ queue: q.queue, waiting: q.waiting, delayed: q.delayed }, strandedLine(q));
      }
      for (const name of this.logged) if (!now.has(name)) this.logged.delete(name);
    } catch {
      // Redis away: the next look tries again.
    } finally {
      this.looking = false;
    }
  }

  /** For /readyz: one line per stranded queue. */
  warnings(): string[] {
    return this.found.map(strandedLine);
  }

  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }
}
