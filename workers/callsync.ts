// Composes callsync from the roles this process runs (ingress, worker, poller, or all): shared
// Redis connections first, then worker → poller → ingress, each `start…(deps) → { close }`.
// Closing runs in reverse — stop HTTP intake, stop polling, let workers finish, close Redis — also
// after a start that failed half-way, each step isolated so one failure does not skip the rest.
import { logRepeated } from '../src/log.js';
import type { Server } from 'node:http';
import type { Queue } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import type { Hono } from 'hono';
import type { Config } from '../src/config/index.js';
import type { SpoolingAcceptor } from '../src/ingress/spool.js';
import type { Sink } from '../src/sinks/types.js';
import type { TelephonyClient } from '../src/telephony/types.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { withRefreshTokenStore } from '../src/state/refresh-token.js';
import { FingerprintHeartbeat } from '../src/state/config-fingerprint.js';
import { StrandedQueuesWatch } from '../src/ops/stranded-queues.js';
import { queueNames } from '../src/ops/index.js';
import { routingFingerprint } from '../src/config/fingerprint.js';
import { InboundLog } from '../queues/inbound.js';
import { pausedQueues } from '../queues/disabled.js';
import { CallTimeline } from '../queues/timeline.js';
import {
  bullmqReady,
  createRedis,
  lastRedisError,
  readyOnce,
  redisKeys,
  STARTUP_REDIS_WAIT_MS,
  settledWithin,
} from '../queues/index.js';
import type { RunningLogFanOut } from './fanout.js';
import type { RunnerOptions, RunningWorker } from './runner.js';
import { startIngressRole } from './roles/ingress.js';
import { Closers, quitRedis, type CallsyncOptions, type RoleDeps } from './roles/lifecycle.js';
import { startPollerRole } from './roles/poller.js';
import { startWorkerRole, type WorkerRole } from './roles/worker.js';

export type { CallsyncOptions } from './roles/lifecycle.js';

export interface Callsync {
  config: Config;
  app: Hono | null;
  server: Server | null;
  /** `http://host:port` of the ingress, when this process runs it. */
  url: string | null;
  sinks: Map<string, Sink>;
  workers: RunningWorker[];
  /** Queue handles of the worker role by name: each sink's, and `inbound` (the fan-out's dead letters). */
  queues: Map<string, Queue>;
  /** The ingress spool (acknowledges into local disk while Redis is away), when on. */
  spool: SpoolingAcceptor | null;
  /** The inbound log's fan-out, when this process runs workers (`stalled()` feeds readiness). */
  fanOut: RunningLogFanOut | null;
  /** This worker process's routing-configuration fingerprint in Redis, compared with the other live ones' (`warnings()` feeds /readyz). */
  fingerprint: FingerprintHeartbeat | null;
  /** Queues of sinks this configuration lacks that still hold jobs no process works (`warnings()` feeds /readyz). */
  stranded: StrandedQueuesWatch | null;
  redis: { producer: RedisClient; worker: RedisClient };
  close(): Promise<void>;
  /** The shutdown steps running now, of the process and its roles, outermost first. */
  closingSteps(): string[];
}

const runsIngress = (role: Config['role']) => role === 'ingress' || role === 'all';
const runsWorkers = (role: Config['role']) => role === 'worker' || role === 'all';
const runsPoller = (role: Config['role']) => role === 'poller' || role === 'all';

/** The queue runner settings of every worker in this process (sink queues, dead letters). */
function runnerOptions(config: Config, connection: RedisClient, options: CallsyncOptions): RunnerOptions {
  return {
    connection,
    prefix: redisKeys(config.redis),
    retry: config.retry,
    concurrency: config.worker.concurrency,
    stalledIntervalMs: config.worker.stalledIntervalMs,
    lockDurationMs: config.worker.lockDurationMs,
    maxStalledCount: config.worker.maxStalledCount,
    log: options.log,
    events: options.runnerEvents,
  };
}

/**
 * Waits, at most STARTUP_REDIS_WAIT_MS, until the producer connection is ready (a TLS handshake, a
 * Sentinel asked for the master, a cluster's slots): it fails fast while still connecting, so the
 * ingress would answer its first webhooks 503 (or spool them). Redis away: start anyway, with a
 * warning; the ingress answers 503 or spools, workers and poller retry.
 */
async function waitForRedis(deps: RoleDeps): Promise<void> {
  const { producer } = deps.redis;
  const producerReady = new Promise<void>((resolve, reject) => {
    if (producer.status === 'ready') resolve();
    producer.once('ready', resolve);
    producer.once('end', reject);
  });
  if (!(await settledWithin([producerReady], STARTUP_REDIS_WAIT_MS))) {
    deps.log.warn(
      { waitedMs: STARTUP_REDIS_WAIT_MS },
      'Redis not ready at start: starting anyway (the ingress answers 503 or spools until it is)',
    );
  }
}

export async function startCallsync(config: Config, options: CallsyncOptions): Promise<Callsync> {
  const log = options.log;
  const closers = new Closers(log);
  return closers.opening(async () => {
    const redis = { producer: createRedis(config.redis, 'producer'), worker: createRedis(config.redis, 'worker') };
    for (const [name, conn] of Object.entries(redis)) {
      conn.on('error', (err) => logRepeated(log, 'warn', 'redis connection error', name, err));
    }
    closers.add('close redis', () => Promise.all([quitRedis(redis.producer), quitRedis(redis.worker)]));
    const telephony: TelephonyClient | null =
      options.telephony !== undefined
        ? options.telephony
        : config.telephony
          ? // A rotated OAuth refresh token is kept in Redis: a restart refreshes with it, not the environment's.
            createTelephonyClient({
              ...withRefreshTokenStore(config.telephony, redis.worker, redisKeys(config.redis).telephonyOAuthKey()),
              log: log.child({ component: 'telephony' }),
            })
          : null;
    const timeline = (conn: RedisClient) =>
      new CallTimeline(conn, redisKeys(config.redis), { ...config.timeline, log });
    // CALL_TIMELINE=off (or the bench's option): no timeline entries from this process.
    const timelines =
      options.timelines === false || !config.timeline.enabled
        ? {}
        : { producer: timeline(redis.producer), worker: timeline(redis.worker) };
    const deps: RoleDeps = {
      config,
      options,
      log,
      redis,
      redisReached: readyOnce(redis.producer),
      redisError: lastRedisError(redis.producer),
      inboundLog: new InboundLog(redis.producer, redisKeys(config.redis), config.ack),
      telephony,
      runner: { ...runnerOptions(config, redis.worker, options), timeline: timelines.worker },
      timelines,
      closers,
    };

    await waitForRedis(deps);
    // The ingress before the workers: its port taken fails the start before any worker takes a
    // job or the poller a channel (what they took would be abandoned half-done by the failed
    // start). Until the worker role runs, the ingress stores calls for it (the fan-out picks them up).
    let worker: WorkerRole | null = null;
    const ingress = runsIngress(config.role)
      ? await startIngressRole(deps, {
          fanOutStalled: () => worker?.fanOut.stalled() ?? null,
          readyDetail: async () => {
            const paused = worker ? await pausedQueues(worker.queues.values()) : [];
            return paused.length > 0 ? { paused } : {};
          },
        })
      : null;
    if (ingress) closers.add('stop ingress role', () => ingress.close());
    worker = runsWorkers(config.role) ? await startWorkerRole(deps) : null;
    const workerRole = worker;
    if (workerRole) closers.add('stop worker role', () => workerRole.close());
    // The workers' connection set-up, bounded like the wait above. Also when Redis was not ready:
    // a set-up that fails after a close (a wrong password, a quick stop) would be an unhandled
    // rejection in BullMQ (queues/connection.ts bullmqReady).
    if (workerRole) await bullmqReady(workerRole.handles(), STARTUP_REDIS_WAIT_MS);
    // The fan-out routes calls: processes that run it on one prefix should run one configuration.
    const fingerprint = workerRole
      ? new FingerprintHeartbeat(redis.worker, redisKeys(config.redis).configFingerprintsKey(), {
          fingerprint: routingFingerprint(config),
          role: config.role,
          log,
        })
      : null;
    if (fingerprint) {
      await fingerprint.start();
      closers.add('remove configuration fingerprint', () => fingerprint.close());
    }
    // Queues of sinks no longer configured, with jobs no process works (src/ops/stranded-queues.ts).
    const stranded = workerRole
      ? new StrandedQueuesWatch(redis.worker, redisKeys(config.redis), queueNames(config), { log })
      : null;
    if (stranded) {
      await stranded.start();
      closers.add('stop looking for stranded queues', () => stranded.close());
    }
    if (runsPoller(config.role)) {
      const poller = startPollerRole(deps);
      closers.add('stop poller role', () => poller.close());
    }

    return {
      config,
      app: ingress?.app ?? null,
      server: ingress?.server ?? null,
      url: ingress?.url ?? null,
      sinks: workerRole?.sinks ?? new Map(),
      workers: workerRole?.workers ?? [],
      queues: workerRole?.queues ?? new Map(),
      spool: ingress?.spool ?? null,
      fanOut: workerRole?.fanOut ?? null,
      fingerprint,
      stranded,
      redis,
      close: () => closers.close(),
      closingSteps: () => closers.runningSteps(),
    };
  });
}
