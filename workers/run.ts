// Runs callsync as a process: start the roles, serve the ops endpoints, and on SIGTERM / SIGINT
// shut down gracefully: refuse new requests (503), finish the ones inside, stop polling, let
// workers finish their active jobs within SHUTDOWN_GRACE_MS, close queues and Redis, exit 0.
import { startTracing, stopTracing } from '../src/telemetry.js';
import type { Logger } from 'pino';
import type { Config } from '../src/config/index.js';
import { startCallsync, type Callsync, type CallsyncOptions } from './callsync.js';
import { createOperations, type Operations } from './operations.js';
import {
  NoRedisError,
  RedisWaitStopped,
  redisEvictionProblem,
  redisVersionProblem,
  resolveRedis,
  type ResolvedRedis,
} from '../queues/private-redis.js';
import {
  createRedis,
  describeRedis,
  lastRedisError,
  redisFailure,
  redisMode,
  STARTUP_REDIS_WAIT_MS,
  type RedisSettings,
} from '../queues/connection.js';
import { limitHeapGrowth } from './heap.js';

/** @internal Exported for its tests only (test/support/ops.ts). */
export interface RunningCallsync {
  callsync: Callsync;
  operations: Operations;
  /** Graceful shutdown; resolves with the exit code (0 clean, 1 grace period exceeded). */
  shutdown(reason: string): Promise<number>;
}

/** @internal Exported for its tests only (test/support/ops.ts). */
export interface StartOptions extends Partial<CallsyncOptions> {
  config: Config;
  log: Logger;
  /** Warnings /readyz carries as long as the process runs (a Redis that evicts keys). */
  warnings?: string[];
}

/** How often a shutdown still under way logs what it waits for. */
const SHUTDOWN_PROGRESS_MS = 5000;

/**
 * Starts the configured roles with metrics, request ids, the dashboard and the shutdown gate.
 * @internal Exported for its tests only (bench/server.ts, test/support/ops.ts).
 */
export async function startWithOperations(options: StartOptions): Promise<RunningCallsync> {
  const { config, log, runnerEvents, ingressEvents, ingressBefore, warnings = [], ...rest } = options;
  const operations = createOperations({ config, log, runnerEvents, ingressEvents });
  let started: Callsync | undefined;
  try {
    // The ops port first: a port that is taken fails the start before any worker takes a job (a
    // job taken and then abandoned by the failed start would wait for its lock to expire, and an
    // SMS in flight would be dead-lettered as "outcome unknown"). /readyz says "starting" until
    // the roles run.
    await operations.listen();
    started = await startCallsync(config, {
      ...rest,
      log,
      ...operations.hooks,
      ingressBefore: [...(operations.hooks.ingressBefore ?? []), ...(ingressBefore ?? [])],
    });
    const running = started;
    operations.watchFanOut(() => running.fanOut?.stalled() ?? null);
    operations.watchWarnings(() => [
      ...warnings,
      ...(running.fingerprint?.warnings() ?? []),
      ...(running.stranded?.warnings() ?? []),
    ]);
  } catch (err) {
    // A failed start closes everything it opened (a failing startCallsync closes its own part), so
    // the process ends instead of running workers without the ops server it was asked for.
    await started
      ?.close()
      .catch((closeErr: unknown) => log.error({ err: closeErr }, 'closing after a failed start failed'));
    await operations.close().catch(() => undefined);
    throw err;
  }
  const callsync = started;

  let stopping: Promise<number> | undefined;
  const shutdown = (reason: string) => {
    stopping ??= (async () => {
      const graceMs = config.worker.shutdownGraceMs;
      log.info({ reason, graceMs }, 'shutting down: refusing new requests, finishing work in progress');
      operations.beginShutdown();
      let timer: NodeJS.Timeout | undefined;
      const overdue = new Promise<'overdue'>((resolve) => {
        timer = setTimeout(() => resolve('overdue'), graceMs);
        timer.unref();
      });
      // A stop that takes a while says what it waits for, so an operator watching it knows.
      const started = Date.now();
      const progress = setInterval(() => {
        const waitingFor = callsync.closingSteps();
        if (waitingFor.length > 0)
          log.info({ waitingFor, elapsedMs: Date.now() - started }, 'shutting down: still waiting');
      }, SHUTDOWN_PROGRESS_MS);
      progress.unref();
      const outcome = await Promise.race([callsync.close().then(() => 'closed' as const), overdue]);
      clearTimeout(timer);
      clearInterval(progress);
      await operations.close().catch((err: unknown) => log.error({ err }, 'closing the ops endpoints failed'));
      if (outcome === 'overdue') {
        // Jobs still active keep their lock until it expires; then a worker takes them up again.
        log.error(
          { graceMs, waitingFor: callsync.closingSteps() },
          'shutdown grace period over: jobs still active will be retried once their lock expires',
        );
        return 1;
      }
      await stopTracing();
      log.info('stopped');
      return 0;
    })();
    return stopping;
  };

  return { callsync, operations, shutdown };
}

/**
 * What is wrong with the Redis of `settings`, asked on a connection of its own before any queue
 * connects (BullMQ warns on each) or a job is taken: `tooOld`, why it cannot be callsync's (older
 * than it needs); `evicts`, why it may lose accepted calls (an eviction policy). Nulls when all is
 * well; `refused`, why not, when it answered and refused the password; `unreached`, why not, when
 * it did not answer (refused at once, or no answer within STARTUP_REDIS_WAIT_MS): the start goes
 * on (an outage at start is the spool's), saying so first.
 */
async function redisProblems(
  settings: RedisSettings,
): Promise<{ tooOld: string | null; evicts: string | null; refused?: string; unreached?: string }> {
  const none = { tooOld: null, evicts: null };
  const client = createRedis(settings, 'producer', {
    lazyConnect: true,
    connectTimeout: STARTUP_REDIS_WAIT_MS,
    retryStrategy: () => null,
  });
  const cause = lastRedisError(client);
  // Bounded as a whole: a Sentinel client keeps trying unreachable sentinels, its connect unsettled.
  const where = describeRedis(settings);
  const asked = client.connect().then(async () => ({
    tooOld: await redisVersionProblem(client, where),
    evicts: await redisEvictionProblem(client, where),
  }));
  try {
    const answer = await Promise.race([
      asked,
      new Promise<null>((resolve) => setTimeout(resolve, STARTUP_REDIS_WAIT_MS, null).unref()),
    ]);
    if (answer) return answer;
    const last = cause();
    const why = last ? redisFailure(last, undefined, STARTUP_REDIS_WAIT_MS).reason : null;
    return { ...none, unreached: why ?? `no answer within ${STARTUP_REDIS_WAIT_MS / 1000} s` };
  } catch (err) {
    // A Redis that answers and refuses the password will not take it later: said at once, not
    // after a start that then fails every command for ever (its /readyz said only "not reached").
    const failure = redisFailure(cause() ?? (err as Error), undefined, STARTUP_REDIS_WAIT_MS);
    return failure.answered
      ? { ...none, refused: `Redis at ${where} ${failure.reason}` }
      : { ...none, unreached: failure.reason };
  } finally {
    client.disconnect();
    asked.catch(() => undefined);
  }
}

/** The setting that names the Redis of `settings` when it is configured: what to check when it does not answer. */
function redisSetting(settings: RedisSettings): string {
  const mode = redisMode(settings);
  return mode === 'cluster' ? 'REDIS_CLUSTER_NODES' : mode === 'sentinel' ? 'REDIS_SENTINELS' : 'REDIS_URL';
}

/** How often a callsync run by npm checks that npm's shell, its parent, is still there. */
const PARENT_CHECK_MS = 1000;

/**
 * Run by `npm start`, callsync is the child of npm's shell, and a SIGTERM to npm (`kill $!` after
 * `npm start &`) ended npm and the shell but not callsync: it ran on, re-parented, holding its
 * port and its private Redis, and the next `npm start` found the port taken. When its parent is
 * gone, it stops as on SIGTERM. Only under npm (npm_lifecycle_event): a callsync started by a shell
 * that then exits (nohup, a script) is meant to run on.
 */
function stopWhenNpmIsGone(stop: () => void): void {
  if (process.env.npm_lifecycle_event === undefined) return;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    stop();
  }, PARENT_CHECK_MS);
  timer.unref();
}

/**
 * `callsync start`: finds its Redis (the configured one; else the one answering at
 * REDIS_LOCAL_PROBE; else a private one it starts or shares, queues/private-redis.ts), runs until
 * SIGTERM / SIGINT, then exits with the shutdown's code. No Redis and no redis-server to start:
 * NoRedisError (exit 2, one line).
 */
export async function runUntilSignalled(configured: Config, log: Logger): Promise<void> {
  // Signals are taken from the first moment: a SIGTERM while the roles start is kept and acted on
  // once that step is over (a signal's default action would end the process at once and leave the
  // private redis-server it had just started running). The wait for a private Redis loading its
  // data (minutes for a large AOF) is stopped at once instead: before, Ctrl-C did nothing until
  // the load was over.
  let signalled: NodeJS.Signals | undefined;
  const waiting = new AbortController();
  let running: RunningCallsync | undefined;
  /** This process stops using its Redis (the last user of a private Redis stops it); nothing to do until one is found. */
  let release = async (): Promise<void> => undefined;
  let forced = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (forced) process.exit(1);
    if (signalled) {
      // A second Ctrl-C: work in progress is not waited for, but the private Redis is not left
      // running behind either (it was, with no callsync process to stop it). A third exits at once.
      forced = true;
      log.warn({ signal }, 'second signal: exiting without waiting');
      void release().finally(() => process.exit(1));
      return;
    }
    signalled = signal;
    if (running) stopRunning(running, signal);
    else {
      log.info({ signal }, 'signal while starting: stopping once the start step under way is over');
      waiting.abort();
    }
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  // A hang-up (the terminal closed, the SSH session dropped) stops it like SIGTERM. Its default
  // action ended the process at once, leaving a private Redis running; Node resets a SIGHUP
  // ignored by its parent (nohup) to that default anyway, so nothing that ran on after a hang-up stops.
  process.on('SIGHUP', onSignal);
  stopWhenNpmIsGone(() => {
    // npm's shell ending while a shutdown is under way (a SIGTERM reached both) is no second signal.
    if (signalled) return;
    log.warn('npm ended without stopping callsync (its shell exited): stopping as on SIGTERM');
    onSignal('SIGTERM');
  });

  for (const warning of configured.warnings) log.warn(warning);
  // WORKER_HEAP_GROWTH_PERCENT > 0: a worker's old generation grows only that far past what is live (workers/heap.ts).
  if (configured.role === 'worker' || configured.role === 'all') limitHeapGrowth(configured.worker.heapGrowthPercent);
  let redis: ResolvedRedis;
  try {
    redis = await resolveRedis(configured.redis, { log, signal: waiting.signal });
  } catch (err) {
    // Stopped by the signal: what the wait took is given back (the start lock, this process' user
    // file, a loading server it started and nobody else waits for); exit as a signalled start does.
    if (!(err instanceof RedisWaitStopped)) throw err;
    log.info({ signal: signalled }, 'stopped while waiting for the private Redis');
    process.exit(0);
  }
  // The last process using a private Redis stops it (after its own connections closed).
  release = () =>
    redis
      .release()
      .catch((err: unknown) =>
        log.error({ err: { message: (err as Error).message } }, 'stopping the private Redis failed'),
      );
  if (signalled) {
    await release();
    process.exit(0);
  }
  if (redis.origin === 'local')
    log.info({ redis: redis.where }, 'no Redis configured (REDIS_URL unset): using the one answering locally');
  if (redis.origin === 'private' && !redis.started)
    log.info(
      { redis: redis.where },
      'no Redis configured (REDIS_URL unset): sharing the private Redis another callsync process started',
    );
  const config: Config = { ...configured, redis: redis.settings };
  const { tooOld, evicts, refused, unreached } = await redisProblems(config.redis);
  if (tooOld || refused) {
    await release();
    throw new NoRedisError((tooOld ?? refused)!);
  }
  // Said first, with the setting to check (a typo, Redis not up yet), before the waits for it give up one by one.
  if (unreached) {
    const named = redis.origin === 'configured' ? ` (${redisSetting(config.redis)})` : ` (${redis.where})`;
    log.error(
      `Redis not reached at start: ${describeRedis(config.redis)}${named}: ${unreached}; starting anyway: the ingress spools webhooks (or answers 503) and the workers wait until it answers`,
    );
  }
  // Not refused (it loses nothing until its memory is full), but said at once and on /readyz.
  if (evicts) log.error(evicts);
  // OTEL_EXPORTER_OTLP_ENDPOINT set: one trace per call (src/telemetry.ts); else nothing is loaded.
  if (await startTracing(process.env)) log.info('OpenTelemetry traces on (OTEL_EXPORTER_OTLP_ENDPOINT)');
  try {
    running = await startWithOperations({ config, log, ...(evicts ? { warnings: [evicts] } : {}) });
  } catch (err) {
    await release();
    throw err;
  }
  log.info(
    { role: config.role, url: running.callsync.url, opsUrl: running.operations.url, redis: redis.origin },
    'callsync started',
  );
  if (signalled) stopRunning(running, signalled);

  function stopRunning(started: RunningCallsync, signal: NodeJS.Signals): void {
    void started
      .shutdown(signal)
      .then(async (code) => {
        await release();
        return code;
      })
      .then((code) => process.exit(code));
  }
}
