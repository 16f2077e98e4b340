// Real Redis for tests: a unique key prefix per test, removed afterwards; a single node or, with
// TEST_REDIS_CLUSTER=1, a Redis Cluster, or with TEST_REDIS_SENTINEL=1 a master with a replica
// found through Sentinel (`testRedis()` below).
import { randomBytes } from 'node:crypto';
import { after } from 'node:test';
import { Cluster, Redis } from 'ioredis';
import {
  createRedis,
  singleRedis,
  type ConnectionRole,
  type RedisClient,
  type RedisNode,
  type RedisSettings,
} from '../../queues/connection.js';
import { keySlot, redisKeys, type RedisKeys } from '../../queues/keys.js';

export { keySlot };
import { globEscape, scanKeys } from '../../queues/scan.js';
import {
  nodeCommand,
  startRedisCluster,
  startRedisSentinel,
  type TestCluster,
  type TestSentinel,
} from './redis-cluster.js';

export const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export function uniquePrefix(name = 't'): string {
  return `test-${name}-${randomBytes(4).toString('hex')}`;
}

/** Deletes every key under `prefix` (queues, state, cursors). */
export async function cleanupPrefix(prefix: string): Promise<void> {
  if (TEST_CLUSTER || TEST_SENTINEL) return (await testRedis()).cleanup(prefix);
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  try {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.del(...keys);
    } while (cursor !== '0');
  } finally {
    redis.disconnect();
  }
}

/** Polls `check` until it returns a truthy value or the time runs out (bounded waits, never sleeps blindly). */
export async function waitFor<T>(
  check: () => Promise<T> | T,
  options: { timeoutMs?: number; intervalMs?: number; what?: string; explain?: () => Promise<string> } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + (options.timeoutMs ?? 10_000);
  for (;;) {
    // The last attempt's error only: an early one (a node still starting) would mislead.
    let last: unknown;
    try {
      const value = await check();
      if (value) return value as NonNullable<T>;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      const detail = options.explain
        ? await options.explain().catch((err: unknown) => `(explaining failed: ${String(err)})`)
        : '';
      throw new Error(
        `timed out waiting for ${options.what ?? 'condition'}${last ? `: ${String(last)}` : ''}${detail ? `\n${detail}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, options.intervalMs ?? 50));
  }
}

// ---------------------------------------------------------------------------------------------
// The Redis the suites run against: the shared single Redis (REDIS_URL, the default), or — with
// TEST_REDIS_CLUSTER=1 — a Redis Cluster of 3 masters with a replica each, started once per test
// file (test/support/redis-cluster.ts) or given by TEST_REDIS_CLUSTER_NODES=host:port,…, with a
// plain QUEUE_PREFIX: the spread key layout (queues/keys.ts); or — with TEST_REDIS_SENTINEL=1 —
// a master, its replica and a sentinel started once per test file, callsync finding the master
// through the sentinel (REDIS_SENTINELS, REDIS_SENTINEL_NAME; the one-slot layout). Tests reach
// Redis only through it: settings, keys, connections and cleanup are right for each.

/** TEST_REDIS_CLUSTER=1: the suites that support it run on a Redis Cluster with spread keys. */
export const TEST_CLUSTER = process.env.TEST_REDIS_CLUSTER === '1';
/** TEST_REDIS_SENTINEL=1: the suites that support it run on a master with a replica, found through Sentinel. */
export const TEST_SENTINEL = process.env.TEST_REDIS_SENTINEL === '1' && !TEST_CLUSTER;
/** The topology the suites run on: 'single' unless one of the two above is set. */
export const TEST_TOPOLOGY: 'single' | 'cluster' | 'sentinel' = TEST_CLUSTER
  ? 'cluster'
  : TEST_SENTINEL
    ? 'sentinel'
    : 'single';
/** A REDIS_URL nothing listens on: on the cluster only REDIS_CLUSTER_NODES can make a test pass. */
export const NOWHERE = 'redis://127.0.0.1:1';

export interface TestRedis {
  /** True on the cluster (TEST_REDIS_CLUSTER=1). */
  readonly isCluster: boolean;
  /** The cluster started for this file (null on a single node or a cluster given by TEST_REDIS_CLUSTER_NODES). */
  readonly cluster: TestCluster | null;
  /** The Sentinel set-up started for this file (TEST_REDIS_SENTINEL=1; null otherwise). */
  readonly sentinel: TestSentinel | null;
  /**
   * Environment naming this Redis for a callsync (REDIS_URL; on the cluster REDIS_CLUSTER_NODES, with
   * Sentinel REDIS_SENTINELS and REDIS_SENTINEL_NAME — each with a REDIS_URL pointing nowhere).
   */
  env(): Record<string, string>;
  /** Redis settings of a callsync with QUEUE_PREFIX `prefix` here. */
  settings(prefix: string): RedisSettings;
  /** The keys a callsync with QUEUE_PREFIX `prefix` uses here (spread on the cluster). */
  keys(prefix: string): RedisKeys;
  /** A connection made the way callsync makes them (`createRedis`). */
  connect(role?: ConnectionRole): RedisClient;
  /** A plain QUEUE_PREFIX; on the cluster one whose `queues` (when two or more) and inbound shards fall on more than one master. */
  prefix(
    name: string,
    queues?: readonly string[],
    accept?: (masterOf: (key: string) => string, keys: RedisKeys) => boolean,
  ): Promise<string>;
  /** `host:port` of the master holding `key`'s slot now. */
  masterOf(key: string): Promise<string>;
  /** Every key of `prefix`, by the master (or the single node) holding it. */
  keysByNode(prefix: string): Promise<Map<string, string[]>>;
  /** Deletes every key of `prefix` (both layouts), on every master. */
  cleanup(prefix: string): Promise<void>;
}

/** The patterns a prefix's keys match in either layout (`<prefix>…`, `{<prefix>:area}…`). */
const prefixPatterns = (prefix: string) => [`${prefix}*`, `{${prefix}:*`];

async function scanNode(node: Redis, prefix: string): Promise<string[]> {
  const found: string[] = [];
  for (const pattern of prefixPatterns(prefix)) found.push(...(await scanKeys(node, pattern)));
  return [...new Set(found)];
}

function singleTarget(): TestRedis {
  return {
    isCluster: false,
    cluster: null,
    sentinel: null,
    env: () => ({ REDIS_URL }),
    settings: (prefix) => singleRedis(REDIS_URL, prefix),
    keys: (prefix) => redisKeys(singleRedis(REDIS_URL, prefix)),
    connect: (role = 'worker') => createRedis(singleRedis(REDIS_URL), role),
    prefix: async (name) => uniquePrefix(name),
    masterOf: async () => new URL(REDIS_URL).host,
    async keysByNode(prefix) {
      const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
      try {
        return new Map([[new URL(REDIS_URL).host, await scanNode(redis, prefix)]]);
      } finally {
        redis.disconnect();
      }
    },
    cleanup: cleanupPrefix,
  };
}

function clusterTarget(seeds: string, cluster: TestCluster | null): TestRedis {
  const clusterNodes: RedisNode[] = seeds.split(',').map((s) => {
    const at = s.lastIndexOf(':');
    return { host: s.slice(0, at), port: Number(s.slice(at + 1)) };
  });
  const settings = (prefix: string): RedisSettings => ({
    url: NOWHERE,
    clusterNodes,
    sentinels: [],
    tls: false,
    prefix,
  });
  /** slot -> `host:port` of its master now (CLUSTER SLOTS of any live node). */
  const slotMasters = async (): Promise<string[]> => {
    let last: unknown;
    for (const node of clusterNodes) {
      try {
        const ranges = (await nodeCommand(node.port, ['CLUSTER', 'SLOTS'])) as [number, number, [string, number]][];
        const bySlot = new Array<string>(16384);
        for (const [from, to, [host, port]] of ranges) for (let s = from; s <= to; s++) bySlot[s] = `${host}:${port}`;
        return bySlot;
      } catch (err) {
        last = err;
      }
    }
    throw new Error(`no cluster node answers CLUSTER SLOTS: ${String(last)}`);
  };
  const withMasters = async <T>(fn: (node: Redis, name: string) => Promise<T>): Promise<Map<string, T>> => {
    const client = new Cluster(clusterNodes, { redisOptions: { maxRetriesPerRequest: 1 }, lazyConnect: true });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const out = new Map<string, T>();
      for (const node of client.nodes('master'))
        out.set(
          `${node.options.host}:${node.options.port}`,
          await fn(node, `${node.options.host}:${node.options.port}`),
        );
      return out;
    } finally {
      client.disconnect();
    }
  };
  return {
    isCluster: true,
    cluster,
    sentinel: null,
    env: () => ({ REDIS_URL: NOWHERE, REDIS_CLUSTER_NODES: seeds }),
    settings,
    keys: (prefix) => redisKeys(settings(prefix)),
    connect: (role = 'worker') => createRedis(settings('unused'), role),
    async prefix(name, queues = [], accept) {
      const bySlot = await slotMasters();
      const masterOf = (key: string) => bySlot[keySlot(key)]!;
      for (let i = 0; i < 200; i++) {
        const prefix = uniquePrefix(name);
        const keys = redisKeys(settings(prefix));
        const queueMasters = new Set(queues.map((q) => masterOf(`${keys.queuePrefix(q)}:${q}:meta`)));
        const shardMasters = new Set(
          Array.from({ length: keys.inboundShards }, (_, s) => masterOf(keys.inboundShard(s))),
        );
        if (queues.length >= 2 && queueMasters.size < 2) continue;
        if (keys.inboundShards >= 2 && shardMasters.size < 2) continue;
        if (accept && !accept(masterOf, keys)) continue;
        return prefix;
      }
      throw new Error(`no prefix spreads ${queues.join(', ')} over the masters`);
    },
    async masterOf(key) {
      return (await slotMasters())[keySlot(key)]!;
    },
    keysByNode: (prefix) => withMasters((node) => scanNode(node, prefix)),
    async cleanup(prefix) {
      await withMasters(async (node) => {
        const keys = await scanNode(node, prefix);
        // One key per DEL: the keys of one node are in many slots.
        for (let i = 0; i < keys.length; i += 500) {
          const pipe = node.pipeline();
          for (const key of keys.slice(i, i + 500)) pipe.unlink(key);
          await pipe.exec();
        }
      });
    },
  };
}

/**
 * A master with a replica behind a sentinel: callsync and the tests connect through the sentinel
 * (`createRedis` in Sentinel mode), so after a failover they follow the promoted replica. Keys,
 * scans and cleanup go to whichever node the sentinel names master now.
 */
function sentinelTarget(sentinel: TestSentinel): TestRedis {
  const sentinels: RedisNode[] = sentinel.sentinels
    .split(',')
    .map((s) => ({ host: s.slice(0, s.lastIndexOf(':')), port: Number(s.slice(s.lastIndexOf(':') + 1)) }));
  const settings = (prefix: string): RedisSettings => ({
    url: NOWHERE,
    clusterNodes: [],
    sentinels,
    sentinelName: sentinel.name,
    tls: false,
    prefix,
  });
  const master = async () =>
    new Redis({ host: '127.0.0.1', port: await sentinel.masterPort(), maxRetriesPerRequest: 1 });
  return {
    isCluster: false,
    cluster: null,
    sentinel,
    env: () => ({ REDIS_URL: NOWHERE, REDIS_SENTINELS: sentinel.sentinels, REDIS_SENTINEL_NAME: sentinel.name }),
    settings,
    keys: (prefix) => redisKeys(settings(prefix)),
    connect: (role = 'worker') => createRedis(settings('unused'), role),
    prefix: async (name) => uniquePrefix(name),
    masterOf: async () => `127.0.0.1:${await sentinel.masterPort()}`,
    async keysByNode(prefix) {
      const redis = await master();
      try {
        return new Map([[`127.0.0.1:${redis.options.port}`, await scanNode(redis, prefix)]]);
      } finally {
        redis.disconnect();
      }
    },
    async cleanup(prefix) {
      const redis = await master();
      try {
        const keys = await scanNode(redis, prefix);
        for (let i = 0; i < keys.length; i += 500) await redis.unlink(...keys.slice(i, i + 500));
      } finally {
        redis.disconnect();
      }
    },
  };
}

let target: Promise<TestRedis> | null = null;
let started: TestCluster | TestSentinel | null = null;

/**
 * The Redis of this test file: the shared single Redis, or with TEST_REDIS_CLUSTER=1 one cluster
 * for the whole file (started on first use, destroyed after the file's last test), or the cluster
 * TEST_REDIS_CLUSTER_NODES names, or with TEST_REDIS_SENTINEL=1 one Sentinel set-up for the file.
 */
export function testRedis(): Promise<TestRedis> {
  if (!target) {
    if (TEST_SENTINEL)
      target = startRedisSentinel().then((sentinel) => {
        started = sentinel;
        return sentinelTarget(sentinel);
      });
    else if (!TEST_CLUSTER) target = Promise.resolve(singleTarget());
    else if (process.env.TEST_REDIS_CLUSTER_NODES)
      target = Promise.resolve(clusterTarget(process.env.TEST_REDIS_CLUSTER_NODES, null));
    else
      target = startRedisCluster().then((cluster) => {
        started = cluster;
        return clusterTarget(cluster.seeds, cluster);
      });
  }
  return target;
}

// The file's cluster or Sentinel set-up goes when its tests are done (a root hook: after every suite of the file).
if ((TEST_CLUSTER && !process.env.TEST_REDIS_CLUSTER_NODES) || TEST_SENTINEL) {
  after(async () => {
    await target?.catch(() => undefined);
    await started?.destroy();
  });
}

/**
 * Every value of the keys under `prefix` (both layouts: `prefix…` and `{prefix…`), read by its type,
 * as text with its key: what a test searches for a number or a text that must be gone.
 */
export async function valuesUnder(conn: RedisClient, prefix: string): Promise<{ where: string; text: string }[]> {
  const out: { where: string; text: string }[] = [];
  const keys = [
    ...(await scanKeys(conn, `${globEscape(prefix)}*`)),
    ...(await scanKeys(conn, `{${globEscape(prefix)}*`)),
  ];
  for (const key of keys) {
    const type = await conn.type(key);
    let value: unknown = null;
    if (type === 'string') value = await conn.get(key);
    else if (type === 'hash') value = await conn.hgetall(key);
    else if (type === 'list') value = await conn.lrange(key, 0, -1);
    else if (type === 'set') value = await conn.smembers(key);
    else if (type === 'zset') value = await conn.zrange(key, 0, -1);
    else if (type === 'stream') value = await conn.xrange(key, '-', '+');
    out.push({ where: key, text: `${key}\n${JSON.stringify(value)}` });
  }
  return out;
}
