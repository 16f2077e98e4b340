// Finding keys without blocking Redis: SCAN on one Redis, or on every master of a cluster, and the
// queues BullMQ keeps under a prefix. Used by the CLI (dlq, migrate-keys), `callsync forget` and
// the retention sweeper.
import { Cluster } from 'ioredis';
import type { RedisClient } from './connection.js';
import { asKeys, type RedisKeys } from './keys.js';

/** `*`, `?`, `[`, `]` and `\` match literally in a SCAN pattern only when escaped. */
export function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, '\\$&');
}

/** Every key matching `pattern`, once, with SCAN (never KEYS, which blocks Redis): on each master of a cluster. */
export async function scanKeys(redis: RedisClient, pattern: string): Promise<string[]> {
  const nodes = redis instanceof Cluster ? redis.nodes('master') : [redis];
  const found = new Set<string>();
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      for (const key of keys) found.add(key);
    } while (cursor !== '0');
  }
  return [...found];
}

/**
 * The queues BullMQ keeps under these keys in Redis, whatever this environment configures (a sink
 * since removed, or one only another process runs): each queue that ever held a job has a
 * `<queue prefix>:<queue>:meta` hash (queues/keys.ts: `<QUEUE_PREFIX>:<queue>:meta`, or
 * `{<QUEUE_PREFIX>:<queue>}:<queue>:meta` when a cluster spreads the keys). Sorted.
 */
export async function queuesInRedis(redis: RedisClient, keys: RedisKeys | string): Promise<string[]> {
  const k = asKeys(keys);
  const spread = k.layout === 'spread';
  const pattern = spread ? `{${globEscape(k.prefix)}:*}:*:meta` : `${globEscape(k.prefix)}:*:meta`;
  const candidates = new Set<string>();
  for (const key of await scanKeys(redis, pattern)) {
    // `{<prefix>:<queue>}:<queue>:meta`, or `<prefix>:<queue>:meta`.
    const name = spread
      ? key.slice(k.prefix.length + 2, Math.max(0, key.indexOf('}')))
      : key.slice(k.prefix.length + 1, -':meta'.length);
    // BullMQ refuses `:` in queue names: a longer key is something else's.
    if (name === '' || name.includes(':') || key !== `${k.queuePrefix(name)}:${name}:meta`) continue;
    candidates.add(name);
  }
  // Only BullMQ's meta hashes: they carry its settings.
  const names = [...candidates].sort();
  const metas = await Promise.all(
    names.map((name) =>
      redis.hmget(`${k.queuePrefix(name)}:${name}:meta`, 'opts.maxLenEvents', 'version').catch(() => [null, null]),
    ),
  );
  return names.filter((_, i) => metas[i]!.some((v) => v !== null));
}
