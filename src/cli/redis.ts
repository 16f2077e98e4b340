// A Redis connection for one CLI command: fails fast with a readable message when Redis is away.
// Made by the same factory as callsync's own (one Redis, a cluster or Sentinel; password, TLS).
import { createRedis, describeRedis, type RedisClient, type RedisSettings } from '../../queues/connection.js';
import type { Config } from '../config/index.js';

export class CliFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CliFailure';
  }
}

export async function connectRedis(config: Config): Promise<RedisClient> {
  return connectRedisTo(config.redis);
}

/** A connection to the Redis of `settings` (another deployment's, for migrate-keys); `what` names it in the error. */
export async function connectRedisTo(settings: RedisSettings, what = 'Redis'): Promise<RedisClient> {
  const redis = createRedis(settings, 'producer', {
    lazyConnect: true,
    enableOfflineQueue: true,
    connectTimeout: 3000,
    retryStrategy: (times) => (times > 3 ? null : 200 * times),
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
  } catch (err) {
    redis.disconnect();
    throw new CliFailure(`cannot reach ${what} at ${describeRedis(settings)}: ${(err as Error).message}`);
  }
  return redis;
}
