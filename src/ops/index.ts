// Where the ops endpoints of a configuration live and which queues it has: read by the process
// wiring (workers/operations.ts) and by the command line (check-config, dlq).
import type { Config, SinkConfig } from '../config/index.js';
import { INBOUND_QUEUE, POLL_DEAD_LETTER_QUEUE, sinkQueueName } from '../../queues/index.js';

/**
 * The queues of one sink: its own, and one per endpoint when it has endpoints (its own queue then
 * only hands jobs queued before the endpoints had queues on to them, see workers/fanout.ts).
 */
export function sinkQueueNames(sink: Pick<SinkConfig, 'name' | 'endpoints'>): string[] {
  return [sinkQueueName(sink.name), ...(sink.endpoints ?? []).map((e) => sinkQueueName(sink.name, e))];
}

/** Every queue of this configuration: the inbound dead letters, those of each configured sink, the poller's dead letters. */
export function queueNames(config: Config): string[] {
  return [INBOUND_QUEUE, ...Object.values(config.sinks).flatMap(sinkQueueNames), POLL_DEAD_LETTER_QUEUE];
}

/** Where the ops server listens, or null when this process has none. */
export function opsPort(config: Config): number | null {
  return config.ops.port;
}
