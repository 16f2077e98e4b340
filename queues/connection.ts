// Redis connections for BullMQ: workers block and must retry forever; producers must fail fast
// so the ingress can answer 503 instead of hanging while Redis is away.
import { Redis, type RedisOptions } from 'ioredis';

export type ConnectionRole = 'worker' | 'producer';

export interface RedisSettings {
  url: string;
  /** Key prefix of every queue and state key. A `{hash-tag}` keeps them in one Redis Cluster slot. */
  prefix: string;
}

export function createRedis(url: string, role: ConnectionRole, extra: RedisOptions = {}): Redis {
  const base: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 1000, enableReadyCheck: true };
  const redis = new Redis(url, {
    ...base,
    // Reconnect quickly at first, then at most every 2 s: a restarted Redis is picked up fast.
    retryStrategy: (times) => Math.min(times * 100, 2000),
    lazyConnect: false,
    ...extra,
  });
  return redis;
}

/** Prefix for callsync's own keys (state, cursors, locks) next to the queues, same hash slot. */
export function stateKeyPrefix(prefix: string): string {
  return `${prefix}:state:`;
}

/** How long start-up waits for Redis before serving anyway (the ingress then answers 503 or spools). */
export const STARTUP_REDIS_WAIT_MS = 2000;
/** How long shutdown waits for queue handles still setting up their connection before closing them. */
export const SHUTDOWN_SETUP_WAIT_MS = 1000;

/**
 * Waits until every promise has settled, at most `ms`. Never rejects; true when all settled in
 * time. For BullMQ handles: `queue.waitUntilReady()` is the handle's connection set-up (INFO,
 * scripts), which must not be left running when the handle is closed (see `bullmqReady`).
 */
export async function settledWithin(promises: Iterable<Promise<unknown>>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([Promise.allSettled(promises).then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a BullMQ Queue or Worker offers to wait for its connection set-up. */
export interface BullmqHandle {
  waitUntilReady(): Promise<unknown>;
}

/**
 * Waits (at most `ms`) for the connection set-up of these BullMQ handles. Call it after opening
 * them and before closing them: BullMQ reports a set-up that fails after `close()` as an 'error'
 * event on an emitter whose listeners `close()` removed, which throws inside a promise callback:
 * an unhandled rejection ("Connection is closed.", "Stream isn't writeable...") that crashes Node.
 * True when every handle finished its set-up (or failed it) in time.
 */
export function bullmqReady(handles: Iterable<BullmqHandle>, ms: number): Promise<boolean> {
  const setups: Promise<unknown>[] = [];
  for (const handle of handles) {
    try {
      setups.push(handle.waitUntilReady());
    } catch (err) {
      setups.push(Promise.reject(err));
    }
  }
  return settledWithin(setups, ms);
}
