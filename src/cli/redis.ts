// A Redis connection for one CLI command: fails fast with a readable message when Redis is away.
import { Redis } from 'ioredis';
import type { Config } from '../config/index.js';
import { redactUrl } from './check-config.js';

export class CliFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CliFailure';
  }
}

export async function connectRedis(config: Config): Promise<Redis> {
  const redis = new Redis(config.redis.url, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    connectTimeout: 3000,
    retryStrategy: (times) => (times > 3 ? null : 200 * times),
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
  } catch (err) {
    redis.disconnect();
    throw new CliFailure(`cannot reach Redis at ${redactUrl(config.redis.url)}: ${(err as Error).message}`);
  }
  return redis;
}
