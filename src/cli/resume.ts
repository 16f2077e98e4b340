// `callsync resume [--queue Q]`: paused queues — a CRM rejected the credentials, or a webhook
// endpoint was disabled (410 Gone, a redirect: queues/disabled.ts) — listed with the reason, or
// resumed (re-enabled) once the cause is fixed. The dashboard's resume button does the same.
import { Queue } from 'bullmq';
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import type { Config } from '../config/index.js';
import { describePause, enableQueue, pauseState } from '../../queues/disabled.js';
import { resolveQueues } from './dlq.js';
import type { CliIo } from './io.js';

export async function resume(
  config: Config,
  redis: RedisClient,
  queue: string | undefined,
  io: CliIo,
): Promise<number> {
  const queues = (await resolveQueues(config, redis, queue)).names.map(
    (name) => new Queue(name, { connection: redis, prefix: redisKeys(config.redis).queuePrefix(name) }),
  );
  for (const q of queues) q.on('error', () => undefined);
  try {
    let paused = 0;
    for (const q of queues) {
      const state = await pauseState(q);
      if (!state) continue;
      paused++;
      const why = describePause(state);
      if (queue === undefined) {
        io.out(`${q.name}  ${why}`);
        continue;
      }
      await enableQueue(q);
      io.out(`resumed ${q.name} (was ${why})`);
    }
    if (paused === 0) io.out(`no paused queue among ${queues.map((q) => q.name).join(', ')}`);
    else if (queue === undefined) io.out('resume one with: callsync resume --queue NAME');
    return 0;
  } finally {
    await Promise.all(queues.map((q) => q.close().catch(() => undefined)));
  }
}
