// The registry of call sources mounted by the ingress: one line per source (src/sources/types.ts).
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import type { Config } from '../config/index.js';
import { aiAgentSource } from './ai-agent.js';
import { PushAssembly } from './push-assembly.js';
import { pushSource } from './push.js';
import type { Source } from './types.js';

export interface SourceDeps {
  config: Pick<Config, 'push' | 'redis'>;
  /** Connection for sources that keep state (the Push API's call assembly). */
  redis: RedisClient;
  now?: () => Date;
}

export function pushAssembly(deps: SourceDeps): PushAssembly {
  return new PushAssembly(deps.redis, { prefix: redisKeys(deps.config.redis).area('push'), timeoutMs: deps.config.push.timeoutMs, now: deps.now });
}

export function createSources(deps: SourceDeps): Source[] {
  const { push } = deps.config;
  return [
    aiAgentSource(),
    pushSource({ assembly: pushAssembly(deps), publicKeyPem: push.publicKeyPem, verify: push.verify, publicUrl: push.publicUrl }),
  ];
}
