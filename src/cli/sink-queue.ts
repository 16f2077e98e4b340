// Queuing calls straight to one sink's queue (backfill --sink, replay): the same job shape the
// fan-out adds (workers/fanout.ts), so the sink's worker, retries and rate limits apply as for
// every other job, and it carries what the fan-out would give the sink (no transcript text or raw
// payload where the sink reads neither: src/privacy/job-data.ts). The job id is deterministic:
// queuing the same call again adds nothing while BullMQ keeps the first job, and a marker in Redis
// remembers it for longer than that.
import { Queue } from 'bullmq';
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import type { Config } from '../config/index.js';
import { DIRECTIONS, OUTCOMES, type CanonicalCall } from '../model/call.js';
import { normalizeHistoryEntry } from '../model/history.js';
import { sinksFor } from '../routing/router.js';
import { defaultJobOptions, JobName, sinkJobId, sinkQueueName, type SinkDeliverJob } from '../../queues/registry.js';
import { callForSink } from '../privacy/job-data.js';
import { UsageError } from './io.js';

/** How long a queued-by-command marker is kept: a second replay within this time adds nothing. */
const MARKER_TTL_S = 180 * 24 * 3600;

/** The marker of a call queued to `sink` by a command (`origin`: backfill, replay), kept MARKER_TTL_S. */
export function queuedMarkerKey(prefix: string, origin: string, sink: string, jobId: string): string {
  return `${prefix}:${origin}:${sink}:${jobId}`;
}

export class SinkQueuer {
  private readonly queue: Queue;

  constructor(
    private readonly redis: RedisClient,
    private readonly config: Config,
    readonly sink: string,
    /** `backfill` or `replay`: the job id's prefix (BullMQ job ids cannot hold `:`). */
    private readonly origin: string,
  ) {
    this.queue = new Queue(sinkQueueName(sink), {
      connection: redis,
      prefix: redisKeys(config.redis).queuePrefix(sinkQueueName(sink)),
      defaultJobOptions: defaultJobOptions(config.retry),
    });
  }

  jobId(call: CanonicalCall): string {
    return `${this.origin}-${sinkJobId(call)}`;
  }

  private markerKey(jobId: string): string {
    return queuedMarkerKey(this.config.redis.prefix, this.origin, this.sink, jobId);
  }

  /** True when a job was added; false when this call was queued to this sink before. */
  async add(call: CanonicalCall): Promise<boolean> {
    const jobId = this.jobId(call);
    const key = this.markerKey(jobId);
    if ((await this.redis.exists(key)) === 1) return false;
    const data: SinkDeliverJob = {
      kind: JobName.sinkDeliver,
      sink: this.sink,
      call: callForSink(this.config, this.sink, call),
    };
    const existing = await this.queue.getJob(jobId);
    if (!existing) await this.queue.add(JobName.sinkDeliver, data, { jobId });
    await this.redis.set(key, '1', 'EX', MARKER_TTL_S);
    return !existing;
  }

  async close(): Promise<void> {
    await this.queue.close();
  }
}

/** Sink types that message the caller or the team: a call of last month must not reach them unasked. */
const NOTIFICATION_TYPES = new Set(['sms', 'email']);

/** A notification sink that would message old calls: one without `maxAge` (with it, it skips them). */
function messagesOldCalls(sink: Config['sinks'][string]): boolean {
  return NOTIFICATION_TYPES.has(sink.type) && (sink.options as { maxAge?: unknown }).maxAge === undefined;
}

/**
 * The sink named by `--sink`, checked against the configuration. A notification sink without
 * `maxAge` is refused: backfill and replay feed it old calls, and each would be an SMS or e-mail
 * now ("sorry we missed your call" for a call of March). With `maxAge` it skips old calls itself.
 */
export function checkSink(config: Config, name: string, command: 'backfill' | 'replay'): string {
  const sink = config.sinks[name];
  if (!sink)
    throw new UsageError(
      `--sink: no sink "${name}" in this configuration (sinks: ${Object.keys(config.sinks).join(', ') || 'none'})`,
    );
  if (messagesOldCalls(sink))
    throw new UsageError(
      `--sink: sink "${name}" (${sink.type}) has no maxAge: ${command} would send a message for every old call of the range. Give it a maxAge (e.g. 6h: older calls are skipped) or pick another sink`,
    );
  return name;
}

/**
 * Without `--sink`, backfill's calls go through the routes like every other call: refused when a
 * route can send one to a notification sink without `maxAge` (a "missed calls get an SMS" route
 * would text the callers of every missed call of the range, weeks later). Which routes can take a
 * history call is asked of the router itself, with a call of every direction, outcome and with and
 * without a recording (what a history entry can vary in; it never has a summary or an agent).
 */
export function checkBackfillRoutes(config: Config): void {
  const base = normalizeHistoryEntry(
    { id: 'probe', type: 'CALL', created: '2026-01-01T00:00:00Z', direction: 'INCOMING' },
    { receivedAt: new Date(0) },
  );
  const reached = new Map<string, string>();
  for (const direction of DIRECTIONS)
    for (const outcome of OUTCOMES)
      for (const recordings of [[], [{ downloadUrl: '/probe', type: 'call_recorder' as const }]]) {
        const probe: CanonicalCall = { ...base, direction, outcome, recordings };
        for (const [i, route] of config.routes.entries()) {
          for (const name of sinksFor([route], probe)) {
            const sink = config.sinks[name];
            if (!sink || !messagesOldCalls(sink) || reached.has(name)) continue;
            reached.set(
              name,
              `route ${route.name ? `"${route.name}"` : i + 1} sends the history's calls to sink "${name}" (${sink.type}), which has no maxAge`,
            );
          }
        }
      }
  if (reached.size > 0)
    throw new UsageError(
      `${[...reached.values()].join('; ')}: each old call would be a message now. Give the sink a maxAge (e.g. 6h: older calls are skipped), keep history out of the route (when: { source: [ai-agent, channel, push] }), or backfill with --sink NAME for each sink you want`,
    );
}
