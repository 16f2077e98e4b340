// callsync's Prometheus metrics: one registry (prom-client's default, which the CRM sinks' counters
// in src/sinks/crm/metrics.ts share), served in text format at /metrics by the ingress and the ops
// server. Only definitions live here: the wiring (workers/metric-events.ts) turns the roles' events
// into updates of these metrics; queue counts are read from Redis at scrape.
import client from 'prom-client';
import type { Queue } from 'bullmq';
import { endpointFromQueue, sinkNameFromQueue } from '../queues/registry.js';
import { isDisabled } from '../queues/disabled.js';

/** @internal Exported for its tests only (bench/e2e.ts, bench/timeline.ts …). */
export const registry = client.register;

function metric<M extends client.Metric>(name: string, make: () => M): M {
  return (registry.getSingleMetric(name) as M | undefined) ?? make();
}

const counter = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
  metric(name, () => new client.Counter<L>({ name, help, labelNames }));
const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[] = []) =>
  metric(name, () => new client.Gauge<L>({ name, help, labelNames }));

const QUEUE_STATES = ['waiting', 'active', 'delayed', 'failed', 'prioritized', 'waiting-children'] as const;

/** Queues whose counts are read on every scrape; each process registers the handles it has. */
const watched = new Set<() => Iterable<Queue>>();
/** What the body budget gauges read (src/ingress/middleware/body-budget.ts). */
interface BodyBudgetState {
  heldBytes: number;
  waiting: number;
}
/** The ingress' body budget, read on every scrape when a process registered it (the last one registered). */
let watchedBodyBudget: (() => BodyBudgetState) | null = null;

/** Reads `read` on every scrape for the body budget gauges. */
export function watchBodyBudget(read: () => BodyBudgetState): void {
  watchedBodyBudget = read;
}

/** The inbound log, read on every scrape when a process registered it. */
let watchedLog: InboundLogCounts | null = null;

/** What the inbound log gauge reads (queues/inbound.ts' InboundLog has it). */
export interface InboundLogCounts {
  length(): Promise<number>;
  pending(): Promise<number>;
}
/** Scrapes must answer even when Redis is slow: a queue that does not answer in time is skipped. */
const SCRAPE_TIMEOUT_MS = 2000;

async function timed<T>(promise: Promise<T>): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => {
    timer = setTimeout(() => resolve(undefined), SCRAPE_TIMEOUT_MS);
  });
  return Promise.race([promise.catch(() => undefined), timeout]).finally(() => clearTimeout(timer));
}

function watchedQueues(): Map<string, Queue> {
  const byName = new Map<string, Queue>();
  for (const source of watched) for (const q of source()) if (!byName.has(q.name)) byName.set(q.name, q);
  return byName;
}

const sinkOf = (queue: string) => sinkNameFromQueue(queue) ?? '';

export const metrics = {
  webhooksReceived: counter('callsync_webhooks_received_total', 'Webhook requests received (before any check)'),
  webhooksAccepted: counter(
    'callsync_webhooks_accepted_total',
    'Webhooks stored in the inbound log and acknowledged with 202 (duplicates included)',
  ),
  webhooksDuplicate: counter(
    'callsync_webhooks_duplicate_total',
    'Acknowledged webhooks that repeated a call already accepted within the dedupe window',
  ),
  webhooksRejected: counter(
    'callsync_webhooks_rejected_total',
    'Webhooks answered with an error, by status and reason',
    ['status', 'reason'] as const,
  ),
  webhookBodiesWaiting: metric(
    'callsync_webhook_bodies_waiting',
    () =>
      new client.Gauge({
        name: 'callsync_webhook_bodies_waiting',
        help: 'Webhooks waiting in line for room in the body budget, their bodies not yet read (at most 256; each waits WEBHOOK_BODY_WAIT_MS at most, then 503 body-budget)',
        collect() {
          this.set(watchedBodyBudget?.().waiting ?? 0);
        },
      }),
  ),
  webhookBodyBytesHeld: metric(
    'callsync_webhook_body_bytes_held',
    () =>
      new client.Gauge({
        name: 'callsync_webhook_body_bytes_held',
        help: "Bytes of request bodies the ingress holds now (the body budget's count: 8 MiB at most, or one larger body alone)",
        collect() {
          this.set(watchedBodyBudget?.().heldBytes ?? 0);
        },
      }),
  ),
  webhookFieldsUnread: counter(
    'callsync_webhook_fields_unread_total',
    'Accepted webhooks with a value callsync could not read in an optional field (read as absent, kept in the archived original), by field: its JSON pointer with array indexes as *',
    ['field'] as const,
  ),

  jobsCompleted: counter('callsync_jobs_completed_total', 'Jobs processed successfully, by queue and sink', [
    'queue',
    'sink',
  ] as const),
  sinkJobs: counter(
    'callsync_sink_jobs_total',
    'Sink jobs by how they ended: done, skipped (a deliberate no-op, by reason: quiet-hours, opt-out, cooldown, landline, max-age, no-route, …) or failed (dead-lettered)',
    ['sink', 'outcome', 'reason'] as const,
  ),
  jobsFailed: counter(
    'callsync_jobs_failed_total',
    'Failed job attempts (retried or dead-lettered), by queue and sink',
    ['queue', 'sink'] as const,
  ),
  jobsRetried: counter('callsync_jobs_retried_total', 'Failed attempts that will be retried with backoff', [
    'queue',
    'sink',
  ] as const),
  jobsDeadLettered: counter(
    'callsync_jobs_dead_lettered_total',
    'Jobs moved to the dead letters (the failed set): permanent errors or attempts used up',
    ['queue', 'sink'] as const,
  ),
  jobsDeferred: counter(
    'callsync_jobs_deferred_total',
    'Times a remote asked to wait (429/503 Retry-After), by scope',
    ['queue', 'sink', 'scope'] as const,
  ),
  queuePauses: counter(
    'callsync_queue_pauses_total',
    'Times a queue was paused because a remote rejected the credentials',
    ['queue', 'sink'] as const,
  ),
  jobDuration: metric(
    'callsync_job_duration_seconds',
    () =>
      new client.Histogram({
        name: 'callsync_job_duration_seconds',
        help: 'Time to process one job successfully, by queue and sink',
        labelNames: ['queue', 'sink'] as const,
        buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120],
      }),
  ),

  queueJobs: metric(
    'callsync_queue_jobs',
    () =>
      new client.Gauge({
        name: 'callsync_queue_jobs',
        help: 'Jobs per queue and state, read from Redis at scrape time (failed = the dead letters)',
        labelNames: ['queue', 'sink', 'state'] as const,
        async collect() {
          this.reset();
          await Promise.all(
            [...watchedQueues().values()].map(async (queue) => {
              const counts = await timed(queue.getJobCounts(...QUEUE_STATES));
              if (!counts) return;
              for (const state of QUEUE_STATES)
                this.set({ queue: queue.name, sink: sinkOf(queue.name), state }, counts[state] ?? 0);
            }),
          );
        },
      }),
  ),
  queuePaused: metric(
    'callsync_queue_paused',
    () =>
      new client.Gauge({
        name: 'callsync_queue_paused',
        help: '1 while a queue is paused (e.g. a CRM rejected the credentials; resume it on the dashboard)',
        labelNames: ['queue', 'sink'] as const,
        async collect() {
          this.reset();
          await Promise.all(
            [...watchedQueues().values()].map(async (queue) => {
              const paused = await timed(queue.isPaused());
              if (paused !== undefined) this.set({ queue: queue.name, sink: sinkOf(queue.name) }, paused ? 1 : 0);
            }),
          );
        },
      }),
  ),

  endpointDisabled: metric(
    'callsync_webhook_endpoint_disabled',
    () =>
      new client.Gauge({
        name: 'callsync_webhook_endpoint_disabled',
        help: '1 while a signed-webhook endpoint is disabled (it answered 410 Gone or a redirect): its queue is paused until an operator re-enables it (resume on the dashboard or `callsync resume`)',
        labelNames: ['sink', 'endpoint'] as const,
        async collect() {
          this.reset();
          await Promise.all(
            [...watchedQueues().values()].map(async (queue) => {
              const endpoint = endpointFromQueue(queue.name);
              if (endpoint === null) return;
              const disabled = await timed(isDisabled(queue));
              if (disabled !== undefined) this.set({ sink: sinkOf(queue.name), endpoint }, disabled ? 1 : 0);
            }),
          );
        },
      }),
  ),

  inboundEntries: metric(
    'callsync_inbound_log_entries',
    () =>
      new client.Gauge({
        name: 'callsync_inbound_log_entries',
        help: 'Accepted calls not yet fanned out to their sinks (state=pending: read by a fan-out, not yet done), read from Redis at scrape time',
        labelNames: ['state'] as const,
        async collect() {
          this.reset();
          if (!watchedLog) return;
          const [length, pending] = await Promise.all([timed(watchedLog.length()), timed(watchedLog.pending())]);
          if (length !== undefined) this.set({ state: 'all' }, length);
          if (pending !== undefined) this.set({ state: 'pending' }, pending);
        },
      }),
  ),
  fanOutCalls: counter('callsync_fanout_calls_total', 'Calls fanned out from the inbound log to their sinks'),
  fanOutJobs: counter('callsync_fanout_sink_jobs_total', 'Sink jobs created by the fan-out'),
  fanOutDeadLettered: counter(
    'callsync_fanout_dead_lettered_total',
    'Inbound entries the fan-out could not handle, moved to the inbound dead letters',
  ),
  fanOutErrors: counter(
    'callsync_fanout_errors_total',
    'Fan-out failures by kind: redis (a round waits for Redis), unexpected (a round failed otherwise), entry (an entry failed on its own: dead-lettered), parked (too large for a dead letter: moved to the parked stream), unstorable (kept nowhere: left in the log, tried again)',
    ['kind'] as const,
  ),
  fanOutStalled: gauge(
    'callsync_fanout_stalled',
    '1 while the fan-out of this process has made no progress for longer than WORKER_LOCK_DURATION_MS: accepted calls are not reaching their sinks',
  ),

  pollerLag: gauge(
    'callsync_poller_lag_seconds',
    'Age of the newest channel event seen by the last successful poll, per channel',
    ['channel'] as const,
  ),
  pollerLastSuccess: gauge(
    'callsync_poller_last_success_timestamp_seconds',
    'Unix time of the last successful poll, per channel',
    ['channel'] as const,
  ),
  pollerPolls: counter('callsync_poller_polls_total', 'Polls of a channel inbox, by outcome', [
    'channel',
    'outcome',
  ] as const),
  pollerEvents: counter('callsync_poller_events_total', 'Channel events taken in by the poller, per channel', [
    'channel',
  ] as const),
  pollerStopped: gauge(
    'callsync_poller_stopped',
    '1 while polling of a channel is stopped because the API rejected the credentials (401/403)',
    ['channel'] as const,
  ),
  pollerDeadLetters: counter(
    'callsync_poller_dead_letters_total',
    'Channel events that could not be parsed and went to the poll dead letters',
    ['channel'] as const,
  ),
  pollerFieldsUnread: counter(
    'callsync_poller_fields_unread_total',
    'Channel events queued with a value callsync could not read in an optional field (read as absent, kept in the record raw), by field: its dotted path with array indexes as *',
    ['field'] as const,
  ),
  pollerLockHeld: gauge(
    'callsync_poller_lock_held',
    '1 while this process holds the channel lock (polls the channel)',
    ['channel'] as const,
  ),

  /** Reads the inbound log's counts at every scrape. Returns a function that stops watching it. */
  watchInboundLog(log: InboundLogCounts): () => void {
    watchedLog = log;
    return () => {
      if (watchedLog === log) watchedLog = null;
    };
  },

  /**
   * Reads the counts of these queues at every scrape (several sources may overlap: each queue is
   * read once). Returns a function that stops watching them.
   */
  watchQueues(source: () => Iterable<Queue>): () => void {
    watched.add(source);
    return () => {
      watched.delete(source);
    };
  },
};

let defaultsStarted = false;
/** Process metrics (CPU, memory, event loop lag, GC, handles), with prom-client's standard names. */
export function collectProcessMetrics(): void {
  if (defaultsStarted) return;
  defaultsStarted = true;
  client.collectDefaultMetrics({ register: registry });
}

/** The metrics endpoint's body and content type. */
export async function renderMetrics(): Promise<{ body: string; contentType: string }> {
  return { body: await registry.metrics(), contentType: registry.contentType };
}

/** Age of the oldest item per store, as the last retention sweep found it (src/privacy/retention.ts). */
export const retentionOldest = gauge(
  'callsync_retention_oldest_seconds',
  'Age in seconds of the oldest item per store at the last retention sweep (0: the store is empty)',
  ['store'] as const,
);
/** Items the retention sweeper removed, per store. */
export const retentionRemoved = counter(
  'callsync_retention_removed_total',
  'Items removed by the retention sweeper, per store',
  ['store'] as const,
);
