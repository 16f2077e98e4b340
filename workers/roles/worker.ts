// The worker role: the sinks, one queue and worker per sink (per endpoint of a sink with endpoints,
// each with the sink's retry policy), and the fan-out that turns inbound log entries into sink jobs
// (with the `inbound` queue and its worker for what it cannot handle).
import { logRepeated } from '../../src/log.js';
import { Queue } from 'bullmq';
import type { RedisClient } from '../../queues/connection.js';
import { sinkTypes } from '../../src/sinks/registry.js';
import type { Sink } from '../../src/sinks/types.js';
import { lazyArchiveAccess } from '../../src/sinks/archive/access.js';
import { RedisKeyValueStore } from '../../src/state/kv.js';
import { OptOutList } from '../../src/sinks/notify/opt-out.js';
import { PrivacyKey } from '../../queues/privacy-key.js';
import { InboundLog, logToFanOut, waitForReplicas } from '../../queues/inbound.js';
import { InboundAcceptor, withTimeout } from '../../src/ingress/accept.js';
import { startSourceTasks } from '../../src/sources/index.js';
import { startRetentionSweeper } from '../retention-sweeper.js';
import {
  bullmqReady,
  createRedis,
  defaultJobOptions,
  INBOUND_QUEUE,
  SHUTDOWN_SETUP_WAIT_MS,
  sinkQueueName,
  redisKeys,
  STARTUP_REDIS_WAIT_MS,
  type RedisKeys,
  type BullmqHandle,
  type CallReceivedJob,
  type SinkDeliverJob,
} from '../../queues/index.js';
import { createDeliverProcessor } from '../deliver.js';
import {
  createFanOutProcessor,
  createHandOverProcessor,
  startLogFanOut,
  type EndpointQueue,
  type FanOutDeps,
  type RunningLogFanOut,
} from '../fanout.js';
import { runWorker, type RunningWorker } from '../runner.js';
import { Closers, quitRedis, type Role, type RoleDeps } from './lifecycle.js';

export interface WorkerRole extends Role {
  sinks: Map<string, Sink>;
  workers: RunningWorker[];
  /** Queue handles by name: each sink's (and each endpoint's), and `inbound` (the fan-out's dead letters). */
  queues: Map<string, Queue>;
  /** The inbound log's fan-out (`stalled()` feeds readiness). */
  fanOut: RunningLogFanOut;
  /** Every BullMQ handle of the role (each sets up its connection on its own). */
  handles(): BullmqHandle[];
}

/** The sinks of the configuration (or the test's overrides), built with their dependencies. */
async function createSinks({ config, options, log, redis, telephony }: RoleDeps): Promise<Map<string, Sink>> {
  const now = options.now ?? (() => new Date());
  const keys = redisKeys(config.redis);
  // One privacy key for every sink: PRIVACY_HMAC_SECRET, else the one kept in Redis (read once).
  const privacyKey = new PrivacyKey(redis.worker, keys, config.privacy.hmacSecret);
  const optOut = new OptOutList(redis.worker, keys.area('optout'), privacyKey);
  const sinks = new Map<string, Sink>();
  // The first sink that archives calls (Sink.archiveAccess), for the CRMs' links to archived recordings.
  const archive = lazyArchiveAccess(() =>
    [...sinks.values()].find((s) => s.archiveAccess !== undefined)?.archiveAccess?.(),
  );
  for (const sink of Object.values(config.sinks)) {
    const override = options.sinks?.get(sink.name);
    const state = new RedisKeyValueStore(redis.worker, keys.sinkState(sink.name));
    const deps = {
      log: log.child({ sink: sink.name }),
      state,
      telephony,
      now,
      settings: config.sinkSettings[sink.type] ?? {},
      optOut,
      archive,
      privacyKey,
    };
    sinks.set(sink.name, override ?? (await sinkTypes.get(sink.type)!.create(sink.name, sink.options, deps)));
  }
  return sinks;
}

/** The log the fan-out reads: the configured shards, and those a larger INBOUND_SHARDS left entries in. */
async function inboundToRead({ redis, log }: RoleDeps, keys: RedisKeys): Promise<InboundLog> {
  try {
    const { log: inbound, leftoverShards } = await withTimeout(
      logToFanOut(redis.worker, keys),
      STARTUP_REDIS_WAIT_MS,
      'reading the recorded shard count',
    );
    if (leftoverShards > 0)
      log.warn(
        { inboundShards: keys.inboundShards, leftoverShards },
        'INBOUND_SHARDS was larger before: the fan-out also reads the shards that still hold entries',
      );
    return inbound;
  } catch (err) {
    log.warn(
      { err: { message: (err as Error).message } },
      'could not read the recorded inbound shard count: reading the configured shards',
    );
    return new InboundLog(redis.worker, keys);
  }
}

export async function startWorkerRole(deps: RoleDeps): Promise<WorkerRole> {
  const { config, options, log, redis, runner } = deps;
  const keys = redisKeys(config.redis);
  const closers = new Closers(log, deps.closers);
  const queues = new Map<string, Queue>();
  const workers: RunningWorker[] = [];
  const sinks = new Map<string, Sink>();
  /** The fan-out's own handles of the same queues (ACK_REPLICAS with spread keys, below). */
  const fanOutQueues: Queue[] = [];
  const handles = () => [...queues.values(), ...fanOutQueues, ...workers.flatMap((w) => [w.worker, w.queue])];

  return closers.opening(async () => {
    // Closed last: handles still setting up their connection finish that first (bullmqReady).
    closers.add('close queues', () => Promise.all([...queues.values(), ...fanOutQueues].map((q) => q.close())));
    closers.add('close sinks', () => Promise.all([...sinks.values()].map((s) => s.close?.())));
    closers.add('close workers', () => Promise.all(workers.map((w) => w.close())));
    for (const [name, sink] of await createSinks(deps)) sinks.set(name, sink);
    // From now on this process indexes every dead letter it writes: call queries for failed calls
    // of a range that starts later read their candidates from that index (queues/timeline.ts).
    void deps.timelines.worker?.beginFailedIndex();

    // The attempts travel with each job from the handle that adds it: a sink's own retry policy is its queues' default.
    const openQueue = <T>(name: string, retry = config.retry): Queue<T> => {
      const queue = new Queue<T>(name, {
        connection: redis.worker,
        prefix: keys.queuePrefix(name),
        defaultJobOptions: defaultJobOptions(retry),
      });
      queue.on('error', (err) => logRepeated(log, 'error', 'queue error', name, err));
      queues.set(name, queue as Queue);
      return queue;
    };
    const sinkQueues = new Map<string, Queue<SinkDeliverJob>>();
    const endpointQueues = new Map<string, EndpointQueue[]>();
    for (const name of sinks.keys()) {
      sinkQueues.set(name, openQueue<SinkDeliverJob>(sinkQueueName(name)));
      const configured = config.sinks[name];
      if (configured?.endpoints) {
        const retry = configured.retry ?? config.retry;
        endpointQueues.set(
          name,
          configured.endpoints.map((endpoint) => ({
            endpoint,
            queue: openQueue<SinkDeliverJob>(sinkQueueName(name, endpoint), retry),
          })),
        );
      }
    }
    const withoutRaw = new Set(
      Object.values(config.sinks)
        .filter((s) => sinkTypes.get(s.type)?.needsRaw?.(s.options) === false)
        .map((s) => s.name),
    );
    const withoutTranscript = new Set(
      Object.values(config.sinks)
        .filter((s) => sinkTypes.get(s.type)?.needsTranscript?.(s.options) === false)
        .map((s) => s.name),
    );
    const partsRead = new Map(
      Object.values(config.sinks).flatMap((s) => {
        const parts = sinkTypes.get(s.type)?.needsParts?.(s.options);
        return parts ? [[s.name, parts] as const] : [];
      }),
    );

    // ACK_REPLICAS with spread keys: a call's sink jobs are on other masters than what they are made
    // of (a log entry, an `inbound` dead letter, a job handed over to endpoint queues), so that is
    // deleted only once the jobs are on the replicas (docs/reliability.md). They are written over a
    // connection of their own, on which the WAIT for them blocks nobody else.
    const replicated = keys.layout === 'spread' && config.ack.replicas > 0;
    const fanOutWrites: RedisClient = replicated ? createRedis(config.redis, 'worker') : redis.worker;
    if (replicated) {
      fanOutWrites.on('error', (err) => logRepeated(log, 'warn', 'redis connection error', 'fanout-writes', err));
      closers.add('close fan-out write connection', () => quitRedis(fanOutWrites));
    }
    /** The queue as the fan-out writes it: on the fan-out's own write connection when replicated. */
    const onFanOutWrites = <T>(queue: Queue<T>): Queue<T> => {
      if (!replicated) return queue;
      const copy = new Queue<T>(queue.name, {
        connection: fanOutWrites,
        prefix: keys.queuePrefix(queue.name),
        defaultJobOptions: queue.defaultJobOptions,
      });
      copy.on('error', (err) => logRepeated(log, 'error', 'queue error', queue.name, err));
      fanOutQueues.push(copy as Queue);
      return copy;
    };
    const fanOutDeps: FanOutDeps = {
      routes: config.routes,
      sinkQueues: new Map([...sinkQueues].map(([name, queue]) => [name, onFanOutWrites(queue)])),
      endpointQueues: new Map(
        [...endpointQueues].map(([name, list]) => [
          name,
          list.map((e) => ({ endpoint: e.endpoint, queue: onFanOutWrites(e.queue) })),
        ]),
      ),
      withoutRaw,
      withoutTranscript,
      partsRead,
      timeline: deps.timelines.worker,
      ...(replicated
        ? {
            replicated: (queues: readonly Queue[]) =>
              waitForReplicas(
                fanOutWrites,
                config.ack,
                queues.map((q) => q.toKey('meta')),
              ),
          }
        : {}),
    };

    // The inbound log's fan-out; what it cannot handle goes to the `inbound` queue and its worker.
    const deadLetters = openQueue<CallReceivedJob>(INBOUND_QUEUE);
    workers.push(runWorker<CallReceivedJob>(INBOUND_QUEUE, createFanOutProcessor(fanOutDeps), runner));
    const blocking: RedisClient = createRedis(config.redis, 'worker');
    blocking.on('error', (err) => logRepeated(log, 'warn', 'redis connection error', 'fanout', err));
    closers.add('close fan-out connection', () => quitRedis(blocking));
    const fanOut = startLogFanOut({
      ...fanOutDeps,
      inbound: await inboundToRead(deps, keys),
      blocking,
      deadLetters: onFanOutWrites(deadLetters),
      log,
      claimIdleMs: config.worker.lockDurationMs,
      events: options.fanOutEvents,
    });
    closers.add('stop fan-out', () => fanOut.close());

    // The sources' background tasks (the Push API's sweeper closes calls whose hangup never came).
    const acceptor = new InboundAcceptor(deps.inboundLog, {
      dedupeWindowMs: config.webhook.dedupeWindowMs,
      timeoutMs: config.webhook.enqueueTimeoutMs,
      timeline: deps.timelines.worker,
    });
    for (const task of startSourceTasks(config.sources, {
      redis: redis.worker,
      keys,
      now: options.now,
      accept: (call) => acceptor.accept(call),
      log,
    })) {
      closers.add(`stop ${task.what}`, () => task.close());
    }
    const retention = startRetentionSweeper(config, redis.worker, log);
    if (retention) closers.add('stop retention sweeper', () => retention.close());

    for (const [name, sink] of sinks) {
      const configured = config.sinks[name];
      const type = configured ? sinkTypes.get(configured.type) : undefined;
      const limit = configured && type?.limit ? type.limit(configured.options) : undefined;
      const queueWide = type?.queueWide === true;
      const endpoints = endpointQueues.get(name);
      if (!endpoints) {
        workers.push(
          runWorker<SinkDeliverJob>(sinkQueueName(name), createDeliverProcessor(sink, log), {
            ...runner,
            limit,
            queueWide,
          }),
        );
        continue;
      }
      // One worker per endpoint queue: its own retries, rate limit, pause; its own queue hands older jobs on.
      const retry = configured?.retry ?? runner.retry;
      for (const { endpoint } of endpoints) {
        workers.push(
          runWorker<SinkDeliverJob>(sinkQueueName(name, endpoint), createDeliverProcessor(sink, log, endpoint), {
            ...runner,
            retry,
            limit,
            queueWide,
          }),
        );
      }
      // The hand-over is no delivery: the call's timeline has its endpoints' attempts only (with its
      // own recorded, the sink showed "done" beside its endpoints while they still waited).
      const { timeline: _notRecorded, ...handOverRunner } = runner;
      workers.push(
        runWorker<SinkDeliverJob>(
          sinkQueueName(name),
          createHandOverProcessor(name, fanOutDeps.endpointQueues?.get(name) ?? endpoints, fanOutDeps.replicated),
          handOverRunner,
        ),
      );
    }
    // Closed first: a handle closed during its connection set-up makes BullMQ reject without a handler.
    closers.add('wait for connection set-up', () => bullmqReady(handles(), SHUTDOWN_SETUP_WAIT_MS));
    log.info({ sinks: [...sinks.keys()], routes: config.routes.length }, 'workers started');
    return { sinks, workers, queues, fanOut, handles, close: () => closers.close() };
  });
}
