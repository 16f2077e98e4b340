// Wires callsync together for the roles this process runs: ingress, worker, poller, or all.
// Start-up and shutdown belong to the role; shutdown is ordered and each step isolated.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { join } from 'node:path';
import { serve } from '@hono/node-server';
import { Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Hono } from 'hono';
import type { Logger } from 'pino';
import type { Config } from '../src/config/index.js';
import { createIngressApp, type IngressDeps } from '../src/ingress/app.js';
import { InboundAcceptor, withTimeout, type CallAcceptor } from '../src/ingress/accept.js';
import { InboundLog } from '../queues/inbound.js';
import { SpoolingAcceptor, spoolDirWritable } from '../src/ingress/spool.js';
import { sinkTypes } from '../src/sinks/registry.js';
import type { Sink } from '../src/sinks/types.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import type { TelephonyClient } from '../src/telephony/types.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import {
  bullmqReady,
  createRedis,
  defaultJobOptions,
  INBOUND_QUEUE,
  SHUTDOWN_SETUP_WAIT_MS,
  sinkQueueName,
  stateKeyPrefix,
  STARTUP_REDIS_WAIT_MS,
  settledWithin,
  type CallReceivedJob,
  type SinkDeliverJob,
} from '../queues/index.js';
import { createDeliverProcessor } from './deliver.js';
import { createFanOutProcessor, startLogFanOut, type LogFanOutEvents, type RunningLogFanOut } from './fanout.js';
import { runWorker, type RunnerEvents, type RunningWorker } from './runner.js';
import { pollerMetrics, startPoller, type RunningPoller } from './poller.js';

export interface CallsyncOptions {
  log: Logger;
  /** Clock for sinks (tests pass a controllable one). */
  now?: () => Date;
  telephony?: TelephonyClient | null;
  /** Replaces sinks built from config (tests only). */
  sinks?: Map<string, Sink>;
  runnerEvents?: RunnerEvents;
  ingressEvents?: IngressDeps['events'];
  /** Extra middleware for the ingress (request ids, metrics, shutdown gate). */
  ingressBefore?: IngressDeps['before'];
  fanOutEvents?: LogFanOutEvents;
  /** Wraps the acceptor (e.g. with a local spool). */
  wrapAcceptor?: (acceptor: CallAcceptor) => CallAcceptor;
}

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
  redis: { producer: Redis; worker: Redis };
  close(): Promise<void>;
}

export const runsIngress = (role: Config['role']) => role === 'ingress' || role === 'all';
export const runsWorkers = (role: Config['role']) => role === 'worker' || role === 'all';
export const runsPoller = (role: Config['role']) => role === 'poller' || role === 'all';

export async function startCallsync(config: Config, options: CallsyncOptions): Promise<Callsync> {
  const log = options.log;
  const prefix = config.redis.prefix;
  const producer = createRedis(config.redis.url, 'producer');
  const workerConn = createRedis(config.redis.url, 'worker');
  for (const [name, conn] of [['producer', producer], ['worker', workerConn]] as const) {
    conn.on('error', (err) => log.warn({ connection: name, err: { message: err.message } }, 'redis connection error'));
  }
  const jobOptions = defaultJobOptions(config.retry);
  const queues = new Map<string, Queue>();
  const openQueue = <T>(name: string, connection: Redis): Queue<T> => {
    const queue = new Queue<T>(name, { connection, prefix, defaultJobOptions: jobOptions });
    queue.on('error', (err) => log.error({ queue: name, err: { message: err.message } }, 'queue error'));
    queues.set(name, queue as Queue);
    return queue;
  };

  const workers: RunningWorker[] = [];
  const inboundLog = new InboundLog(producer, prefix);
  let fanOut: RunningLogFanOut | null = null;
  let blocking: Redis | null = null;
  const sinks = new Map<string, Sink>();
  let server: Server | null = null;
  let app: Hono | null = null;
  let url: string | null = null;
  let spool: SpoolingAcceptor | null = null;

  // The platform's API client: for SMS and recordings (workers) and channel events (poller).
  const telephony: TelephonyClient | null =
    options.telephony !== undefined ? options.telephony : config.telephony ? createTelephonyClient(config.telephony) : null;

  if (runsWorkers(config.role)) {
    const now = options.now ?? (() => new Date());
    const state = new RedisKeyValueStore(workerConn, stateKeyPrefix(prefix));
    const optOut = new OptOutList(workerConn, prefix);
    for (const sink of Object.values(config.sinks)) {
      const override = options.sinks?.get(sink.name);
      if (override) {
        sinks.set(sink.name, override);
        continue;
      }
      const type = sinkTypes.get(sink.type)!;
      sinks.set(
        sink.name,
        await type.create(sink.name, sink.options, {
          log: log.child({ sink: sink.name }),
          state: state.scoped(sink.name),
          telephony,
          now,
          env: config.processEnv,
          optOut,
        }),
      );
    }
    const runner = {
      connection: workerConn,
      prefix,
      retry: config.retry,
      concurrency: config.worker.concurrency,
      stalledIntervalMs: config.worker.stalledIntervalMs,
      lockDurationMs: config.worker.lockDurationMs,
      maxStalledCount: config.worker.maxStalledCount,
      log,
      events: options.runnerEvents,
    };
    const sinkQueues = new Map<string, Queue<SinkDeliverJob>>();
    for (const name of sinks.keys()) sinkQueues.set(name, openQueue<SinkDeliverJob>(sinkQueueName(name), workerConn));
    const withoutRaw = new Set(
      Object.values(config.sinks)
        .filter((s) => sinkTypes.get(s.type)?.needsRaw?.(s.options) === false)
        .map((s) => s.name),
    );
    // The inbound log's fan-out; what it cannot handle goes to the `inbound` queue and its worker.
    const deadLetters = openQueue<CallReceivedJob>(INBOUND_QUEUE, workerConn);
    workers.push(runWorker<CallReceivedJob>(INBOUND_QUEUE, createFanOutProcessor({ routes: config.routes, sinkQueues, withoutRaw }), runner));
    blocking = createRedis(config.redis.url, 'worker');
    blocking.on('error', (err) => log.warn({ connection: 'fanout', err: { message: err.message } }, 'redis connection error'));
    fanOut = startLogFanOut({
      inbound: new InboundLog(workerConn, prefix),
      blocking,
      deadLetters,
      routes: config.routes,
      sinkQueues,
      withoutRaw,
      log,
      claimIdleMs: config.worker.lockDurationMs,
      events: options.fanOutEvents,
    });
    for (const [name, sink] of sinks) {
      const configured = config.sinks[name];
      const type = configured ? sinkTypes.get(configured.type) : undefined;
      const limit = configured && type?.limit ? type.limit(configured.options) : undefined;
      workers.push(runWorker<SinkDeliverJob>(sinkQueueName(name), createDeliverProcessor(sink, log), { ...runner, limit }));
    }
    log.info({ sinks: [...sinks.keys()], routes: config.routes.length }, 'workers started');
  }

  let poller: RunningPoller | null = null;
  const polling = runsPoller(config.role) && config.poll.channelIds.length > 0 && telephony !== null;
  /** Every BullMQ handle of this process (queues, workers, the poller's): each sets up its connection on its own. */
  const handles = () => [
    ...queues.values(),
    ...workers.flatMap((w) => [w.worker, w.queue]),
    ...(poller ? [poller.deadLetterQueue, poller.deadLetterWorker.worker, poller.deadLetterWorker.queue] : []),
  ];

  // Before taking work, wait (bounded) until Redis answers and every handle has set up its connection:
  // the producer fails fast while it is still connecting (a webhook right after start would get 503),
  // and a handle closed during its set-up makes BullMQ reject without a handler. Redis away: start
  // anyway; the ingress answers 503 or spools, workers and poller retry.
  const producerReady = new Promise<void>((resolve, reject) => {
    if (producer.status === 'ready') resolve();
    producer.once('ready', resolve);
    producer.once('end', reject);
  });
  if (!(await settledWithin([producerReady, bullmqReady(handles(), STARTUP_REDIS_WAIT_MS)], STARTUP_REDIS_WAIT_MS))) {
    log.warn({ waitedMs: STARTUP_REDIS_WAIT_MS }, 'Redis not ready at start: starting anyway (the ingress answers 503 or spools until it is)');
  }

  if (polling && telephony) {
    // The poller accepts through the same dedupe + enqueue path as the webhook (no spool: the
    // platform keeps the events, so the poller just waits for Redis and reads the page again).
    poller = startPoller({
      settings: config.poll,
      client: telephony,
      acceptor: new InboundAcceptor(inboundLog, { dedupeWindowMs: config.webhook.dedupeWindowMs, timeoutMs: config.webhook.enqueueTimeoutMs }),
      redis: producer,
      workerConnection: workerConn,
      prefix,
      log,
      runner: {
        retry: config.retry,
        concurrency: 1,
        stalledIntervalMs: config.worker.stalledIntervalMs,
        lockDurationMs: config.worker.lockDurationMs,
        maxStalledCount: config.worker.maxStalledCount,
        events: options.runnerEvents,
      },
      events: pollerMetrics(),
      now: options.now,
    });
    log.info({ channels: config.poll.channelIds.length }, 'poller started');
  } else if (config.role === 'poller') {
    log.warn('poller role without POLL_CHANNEL_IDS: nothing to poll');
  }

  if (runsIngress(config.role)) {
    let acceptor: CallAcceptor = new InboundAcceptor(inboundLog, {
      dedupeWindowMs: config.webhook.dedupeWindowMs,
      timeoutMs: config.webhook.enqueueTimeoutMs,
    });
    // One spool folder per queue prefix: what is spooled belongs to that prefix's queues.
    const spoolDir = join(config.env.SPOOL_DIR, prefix.replace(/[^A-Za-z0-9._{}-]/g, '_'));
    if (config.env.SPOOL_ENABLED ?? (await spoolDirWritable(spoolDir))) {
      const candidate = new SpoolingAcceptor(acceptor, { dir: spoolDir, log, maxBytes: config.env.SPOOL_MAX_BYTES });
      try {
        await candidate.open();
        spool = candidate;
        acceptor = candidate;
      } catch (err) {
        if (config.env.SPOOL_ENABLED) throw err;
        log.warn({ err: { message: (err as Error).message } }, 'spool unavailable: without Redis the ingress answers 503');
      }
    } else {
      log.warn({ dir: spoolDir }, 'spool off: without Redis the ingress answers 503');
    }
    if (options.wrapAcceptor) acceptor = options.wrapAcceptor(acceptor);
    app = createIngressApp({
      webhook: config.webhook,
      acceptor,
      // Ready when events can be acknowledged durably: Redis answers, or the spool takes them.
      // (A load balancer routing on /readyz keeps sending to an ingress that spools.)
      ready: async () => {
        const redisUp = await withTimeout(producer.ping(), 1000, 'redis ping').then((r) => r === 'PONG', () => false);
        // Redis answers and still the fan-out makes no progress: not ready (an outage is the spool's case).
        const stalled = redisUp ? (fanOut?.stalled() ?? null) : null;
        if (stalled) return stalled;
        return redisUp || (spool?.accepting ?? false);
      },
      log,
      events: options.ingressEvents,
      before: options.ingressBefore,
    });
    const ingressApp = app;
    server = await new Promise<Server>((resolve, reject) => {
      const s = serve({ fetch: ingressApp.fetch, port: config.http.port, hostname: config.http.host }, () => resolve(s as Server)) as Server;
      s.once('error', reject);
    });
    // Keep-alive longer than typical load balancers' idle timeout, so they close first.
    server.keepAliveTimeout = 65_000;
    const address = server.address() as AddressInfo;
    const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${address.port}`;
    if (config.webhook.allowedIps === '*') log.warn('WEBHOOK_ALLOWED_IPS=*: the webhook accepts requests from any address');
    log.info({ url, allowedIps: config.webhook.allowedIps, auth: config.webhook.authHeader ? 'shared-secret' : 'none' }, 'ingress listening');
  }

  let closing: Promise<void> | undefined;
  const step = async (what: string, fn: () => Promise<unknown>) => {
    try {
      await fn();
    } catch (err) {
      log.error({ err, step: what }, 'shutdown step failed');
    }
  };
  const close = () => {
    closing ??= (async () => {
      if (server) {
        const s = server;
        await step('stop http intake', () => new Promise<void>((resolve) => {
          s.close(() => resolve());
          s.closeIdleConnections();
        }));
      }
      if (spool) {
        const s = spool;
        await step('close spool', () => s.close());
      }
      // Handles still setting up their connection (Redis slow or just back) finish that before being closed.
      await step('wait for connection set-up', () => bullmqReady(handles(), SHUTDOWN_SETUP_WAIT_MS));
      if (poller) {
        const p = poller;
        await step('stop poller', () => p.close());
      }
      if (fanOut) {
        const f = fanOut;
        await step('stop fan-out', () => f.close());
      }
      await step('close workers', () => Promise.all(workers.map((w) => w.close())));
      await step('close sinks', () => Promise.all([...sinks.values()].map((s) => s.close?.())));
      await step('close queues', () => Promise.all([...queues.values()].map((q) => q.close())));
      // QUIT needs a live connection; while Redis is away, drop the connection (and its reconnect timer).
      const quit = (conn: Redis) => (conn.status === 'ready' ? conn.quit().catch(() => conn.disconnect()) : conn.disconnect());
      await step('close redis', () => Promise.all([quit(producer), quit(workerConn), ...(blocking ? [quit(blocking)] : [])]));
    })();
    return closing;
  };

  return { config, app, server, url, sinks, workers, queues, spool, fanOut, redis: { producer, worker: workerConn }, close };
}
