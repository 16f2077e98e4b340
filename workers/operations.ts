// Everything the person on call needs around the pipeline, wired into one process: metrics hooks,
// request ids, the shutdown gate, the dashboard and /metrics on the ingress, and a small ops HTTP
// server for processes without an ingress (workers, poller).
import { logRepeated } from '../src/log.js';
import { Queue } from 'bullmq';
import { Hono } from 'hono';
import type { Logger } from 'pino';
import type { Config } from '../src/config/index.js';
import { withTimeout } from '../src/ingress/accept.js';
import { errorBodyText } from '../src/ingress/errors.js';
import { listen, type Listening } from '../src/listen.js';
import { collectProcessMetrics, metrics } from '../src/metrics.js';
import { opsPort, queueNames } from '../src/ops/index.js';
import { createOpsApp, noRoute, opsError, opsRoutes, readyzWarnings, type OpsApp } from '../src/ops/app.js';
import { requestContext } from '../src/ops/request-context.js';
import { createShutdownGate, type ShutdownGate } from '../src/ops/shutdown-gate.js';
import {
  bullmqReady,
  createRedis,
  lastRedisError,
  neverReachedReason,
  readyOnce,
  redisKeys,
  SHUTDOWN_SETUP_WAIT_MS,
  STARTUP_REDIS_WAIT_MS,
} from '../queues/index.js';
import { InboundLog } from '../queues/inbound.js';
import { CallTimeline } from '../queues/timeline.js';
import { openPushCall } from '../src/sources/push-assembly.js';
import { archiveOptionsSchema, createObjectStore } from '../src/sinks/archive/index.js';
import type { ObjectStore } from '../src/sinks/archive/store.js';
import { combineEvents, fanOutMetrics, ingressMetrics, runnerMetrics } from './metric-events.js';
import { quitRedis, type CallsyncOptions } from './roles/lifecycle.js';

export interface OperationsOptions {
  config: Config;
  log: Logger;
  /** Extra hooks (tests, other modules), run after the metrics ones. */
  runnerEvents?: CallsyncOptions['runnerEvents'];
  ingressEvents?: CallsyncOptions['ingressEvents'];
}

export interface Operations {
  /** Spread into startCallsync's options. */
  hooks: Pick<CallsyncOptions, 'runnerEvents' | 'ingressEvents' | 'ingressBefore' | 'fanOutEvents'>;
  ops: OpsApp;
  gate: ShutdownGate;
  /** Queue handles of the dashboard and the queue gauges. */
  queues: Queue[];
  /** `http://host:port` of the ops server, when one runs. */
  url: string | null;
  /** Starts the ops server, when this process has one (before the roles: a taken port fails the start early). */
  listen(): Promise<void>;
  /**
   * The roles run: /readyz of the ops server answers 503 "starting" until this is called, and then
   * also while Redis answers but `stalled` names a reason (the fan-out of this process makes no
   * progress, workers/fanout.ts).
   */
  watchFanOut(stalled: () => string | null): void;
  /** What a ready /readyz adds as `warnings` (another live process routing with another configuration). */
  watchWarnings(warnings: () => string[]): void;
  /** New requests get 503 from now on, and /readyz fails. */
  beginShutdown(): void;
  /** Closes the ops server, the queue handles and their Redis connection. */
  close(): Promise<void>;
}

export function createOperations(options: OperationsOptions): Operations {
  const { config, log } = options;
  collectProcessMetrics();
  const connection = createRedis(config.redis, 'producer');
  const keys = redisKeys(config.redis);
  const reached = readyOnce(connection);
  const lastError = lastRedisError(connection);
  connection.on('error', (err) => logRepeated(log, 'warn', 'redis connection error', 'ops', err));
  const queues = queueNames(config).map((name) => {
    const queue = new Queue(name, { connection, prefix: keys.queuePrefix(name) });
    queue.on('error', (err) => logRepeated(log, 'error', 'queue error', name, err));
    return queue;
  });
  // Their connection set-up runs while callsync starts; listen() waits for it (bounded), close() too.
  const setUp = bullmqReady(queues, STARTUP_REDIS_WAIT_MS);
  const unwatchQueues = metrics.watchQueues(() => queues);
  const unwatchLog = metrics.watchInboundLog(new InboundLog(connection, keys));
  const unwatch = () => {
    unwatchQueues();
    unwatchLog();
  };

  const gate = createShutdownGate({
    onRejected(path) {
      if (path.startsWith('/webhooks/')) {
        metrics.webhooksReceived.inc();
        metrics.webhooksRejected.inc({ status: '503', reason: 'shutting-down' });
      }
    },
  });
  const { admin } = config.ops;
  let fanOutStalled: (() => string | null) | null = null;
  let warnings: () => string[] = () => [];
  const readyzDetail = readyzWarnings(() => warnings());
  // The archive sinks' stores, opened when the Calls page first serves one of their objects.
  const archives = new Map<string, () => Promise<ObjectStore>>();
  for (const sink of Object.values(config.sinks)) {
    if (sink.type !== 'archive') continue;
    let store: Promise<ObjectStore> | null = null;
    archives.set(
      sink.name,
      () =>
        (store ??= createObjectStore(archiveOptionsSchema.parse(sink.options)).catch((err: unknown) => {
          store = null;
          throw err;
        })),
    );
  }
  const ops = createOpsApp({
    log,
    queues,
    auth: { username: admin.username, password: admin.password, token: admin.token },
    origins: admin.origins,
    metricsToken: config.ops.metricsToken,
    calls: new CallTimeline(connection, keys, { ...config.timeline, log, configuredQueues: queueNames(config) }),
    inProgress: (callId) => openPushCall(connection, keys.area('push'), callId),
    region: config.privacy.defaultRegion,
    archives,
    crmLinks: config.ops.crmLinks,
    trustedProxies: config.webhook.trustedProxies,
    trustProxyHops: config.webhook.trustProxyHops,
    ready: async () => {
      if (!fanOutStalled) return 'starting';
      const stalled = fanOutStalled;
      const redisUp = await withTimeout(connection.ping(), 1000, 'redis ping').then(
        (r) => r === 'PONG',
        () => false,
      );
      if (!redisUp) return reached() ? false : neverReachedReason(config.redis, lastError());
      return stalled() ?? true;
    },
    stopping: () => gate.closed,
  });
  if (ops.dashboard) {
    if (admin.password && admin.password.length < 12) log.warn('ADMIN_PASSWORD is shorter than 12 characters');
    const auth = [
      admin.password ? 'login' : null,
      admin.password ? 'basic' : null,
      admin.token ? 'bearer' : null,
    ].filter(Boolean);
    log.info(
      { path: '/admin/queues', auth, origins: admin.origins.length > 0 ? admin.origins : 'same as requested' },
      'dashboard enabled',
    );
  } else {
    log.warn('dashboard off: set ADMIN_PASSWORD (basic auth) or ADMIN_TOKEN (bearer) to serve it at /admin/queues');
  }

  let http: Listening | null = null;
  const result: Operations = {
    hooks: {
      runnerEvents: combineEvents(runnerMetrics(), options.runnerEvents),
      ingressEvents: combineEvents(ingressMetrics(), options.ingressEvents),
      fanOutEvents: fanOutMetrics(),
      ingressBefore: [requestContext({ log }), gate.middleware, readyzDetail, opsRoutes(ops)],
    },
    ops,
    gate,
    queues,
    get url() {
      return http?.url ?? null;
    },
    async listen() {
      if (!(await setUp))
        log.warn(
          { waitedMs: STARTUP_REDIS_WAIT_MS },
          'Redis not ready at start for the dashboard and queue metrics: starting anyway',
        );
      const port = opsPort(config);
      if (port === null) return;
      const host = config.ops.host;
      const root = new Hono();
      root.use('*', requestContext({ log }), gate.middleware, readyzDetail);
      root.route('/', ops.app);
      // A sub-app's notFound is not the parent's: without these, Hono's plain-text 404 and 500.
      root.notFound(noRoute);
      root.onError(opsError(log));
      http = await listen(root.fetch, {
        port,
        host,
        errorBody: errorBodyText,
        // OPS_HOST defaults to HOST: the one the address came from, by its value.
        settings: { port: 'OPS_PORT', host: host === config.http.host ? 'HOST' : 'OPS_HOST' },
      });
      log.info({ url: http.url }, 'ops server listening (/healthz, /readyz, /metrics, /admin/queues)');
    },
    watchFanOut(stalled) {
      fanOutStalled = stalled;
    },
    watchWarnings(source) {
      warnings = source;
    },
    beginShutdown() {
      gate.close();
    },
    async close() {
      unwatch();
      await http?.close();
      // A queue closed during its connection set-up makes BullMQ reject without a handler: let it finish (bounded).
      await bullmqReady(queues, SHUTDOWN_SETUP_WAIT_MS);
      await Promise.all(
        queues.map((q) => q.close().catch((err: unknown) => log.error({ err }, 'closing queue failed'))),
      );
      await quitRedis(connection);
    },
  };
  return result;
}
