// A queue held back for a remote's "retry later" (a 429 or 503 with Retry-After for the whole sink):
// BullMQ's rate-limit key of the queue (`<prefix>:<queue>:limiter`) set to "used up" for the wait,
// so no worker of any process is handed a job of that queue before the wait is over. BullMQ's
// moveToActive script reads that key only for a worker with a limiter: the runner gives one to the
// workers of sinks whose remote can hold their queue (`SinkType.queueWide`, workers/runner.ts). A hold
// only ever grows: a shorter wait leaves a longer one be, and the job waits as long as the hold.
import type { Queue } from 'bullmq';
import type { RedisClient } from './connection.js';

/** The count BullMQ's `rateLimit` writes: above any limiter's `max`, so the queue counts as used up. */
export const HELD = Number.MAX_SAFE_INTEGER;

// KEYS[1] the queue's limiter key; ARGV[1] the wait (ms), ARGV[2] HELD. Answers the hold's ms left.
const HOLD = `
local held = tonumber(redis.call('GET', KEYS[1]) or '0') >= tonumber(ARGV[2])
local left = held and redis.call('PTTL', KEYS[1]) or 0
local wait = tonumber(ARGV[1])
if left >= wait then return left end
redis.call('SET', KEYS[1], ARGV[2], 'PX', wait)
return wait
`;

/**
 * Holds the queue's jobs back for `delayMs` (through `redis`, the connection of the queue's Redis),
 * or for longer when it is held longer already. Answers the ms it is held from now.
 */
export async function holdQueue(queue: Queue, redis: RedisClient, delayMs: number): Promise<number> {
  const wait = Math.max(1, Math.ceil(delayMs));
  return Number(await redis.eval(HOLD, 1, queue.toKey('limiter'), String(wait), String(HELD)));
}
