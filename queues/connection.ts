// Redis connections for BullMQ: workers block and must retry forever; producers must fail fast
// so the ingress can answer 503 instead of hanging while Redis is away.
import { Redis, type RedisOptions } from 'ioredis';

export type ConnectionRole = 'worker' | 'producer';

export interface RedisSettings {
  url: string;
  /** Key prefix of every queue and state key. A `{hash-tag}` keeps them in one Redis Cluster slot. */
  prefix: string;
}

export function createRedis(url: string, role: ConnectionRole, extra: RedisOptions = {}): Redis {
  const base: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 1000, enableReadyCheck: true };
  const redis = new Redis(url, {
    ...base,
    // Reconnect quickly at first, then at most every 2 s: a restarted Redis is picked up fast.
    retryStrategy: (times) => Math.min(times * 100, 2000),
    lazyConnect: false,
    ...extra,
  });
  return redis;
}

/** Prefix for callsync's own keys (state, cursors, locks) next to the queues, same hash slot. */
export function stateKeyPrefix(prefix: string): string {
  return `${prefix}:state:`;
}
