// The poller role: reads the configured channels' events from the platform's API and accepts them
// through the same dedupe + inbound log path as the webhook (no spool: the platform keeps the
// events, so the poller waits for Redis and reads the page again).
import { InboundAcceptor } from '../../src/ingress/accept.js';
import { bullmqReady, redisKeys, SHUTDOWN_SETUP_WAIT_MS } from '../../queues/index.js';
import { pollerMetrics } from '../metric-events.js';
import { startPoller, type RunningPoller } from '../poller.js';
import type { Role, RoleDeps } from './lifecycle.js';

export interface PollerRole extends Role {
  poller: RunningPoller | null;
}

export function startPollerRole({
  config,
  options,
  log,
  redis,
  inboundLog,
  telephony,
  runner,
  timelines,
}: RoleDeps): PollerRole {
  if (config.poll.channelIds.length === 0 || telephony === null) {
    if (config.role === 'poller') log.warn('poller role without POLL_CHANNEL_IDS: nothing to poll');
    return { poller: null, close: async () => undefined };
  }
  const poller = startPoller({
    settings: config.poll,
    client: telephony,
    acceptor: new InboundAcceptor(inboundLog, {
      dedupeWindowMs: config.webhook.dedupeWindowMs,
      timeoutMs: config.webhook.enqueueTimeoutMs,
      timeline: timelines.producer,
    }),
    redis: redis.producer,
    workerConnection: redis.worker,
    prefix: redisKeys(config.redis),
    log,
    runner: { ...runner, concurrency: 1 },
    events: pollerMetrics(),
    now: options.now,
    // A dead-lettered event whose call id can be read: kept as a refusal under it (`callsync call`).
    refusals: timelines.producer,
  });
  log.info({ channels: config.poll.channelIds.length }, 'poller started');
  return {
    poller,
    async close() {
      // A handle closed during its connection set-up makes BullMQ reject without a handler.
      await bullmqReady(
        [poller.deadLetterQueue, poller.deadLetterWorker.worker, poller.deadLetterWorker.queue],
        SHUTDOWN_SETUP_WAIT_MS,
      );
      await poller.close();
    },
  };
}
