// Real Redis for tests: a unique key prefix per test, removed afterwards.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';

export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export function uniquePrefix(name = 't'): string {
  return `test-${name}-${randomBytes(4).toString('hex')}`;
}

/** Deletes every key under `prefix` (queues, state, cursors). */
export async function cleanupPrefix(prefix: string): Promise<void> {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/** Polls `check` until it returns a truthy value or the time runs out (bounded waits, never sleeps blindly). */
export async function waitFor<T>(check: () => Promise<T> | T, options: { timeoutMs?: number; intervalMs?: number; what?: string } = {}): Promise<NonNullable<T>> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${options.what ?? 'condition'}${last ? `: ${String(last)}` : ''}`);
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 50));
  }
}
