// Starts callsync in this process against real Redis, with a unique prefix and fast retries: the
// shared single Redis, or with TEST_REDIS_CLUSTER=1 the file's Redis Cluster with spread keys
// (test/support/redis.ts `testRedis()`), unless the test names its own Redis.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { redisKeys } from '../../queues/keys.js';
import { redisMode } from '../../queues/connection.js';
import { INBOUND_QUEUE, sinkQueueName } from '../../queues/registry.js';
import { loadConfig, type Config } from '../../src/config/index.js';
import { createLogger } from '../../src/log.js';
import { startCallsync, type Callsync, type CallsyncOptions } from '../../workers/callsync.js';
import { cleanupPrefix, REDIS_URL, testRedis, uniquePrefix } from './redis.js';

export interface TestCallsync extends Callsync {
  prefix: string;
  /** Every log line written, parsed. */
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

/** Collects log lines in memory (and proves what was, or was not, logged). */
export function memoryLog(level = 'info') {
  const lines: Record<string, unknown>[] = [];
  /** The lines as written, for checks JSON.parse cannot make (a key twice: test/support/strict-json.ts). */
  const raw: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) {
        if (!line.trim()) continue;
        raw.push(line);
        lines.push(JSON.parse(line) as Record<string, unknown>);
      }
      done();
    },
  });
  return { lines, raw, log: createLogger({ level, destination }) };
}

/** Environment for a test instance: real Redis, a free port on loopback, fast retries and takeovers. */
export function testEnv(prefix: string, env: Record<string, string> = {}): Record<string, string> {
  return {
    REDIS_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    HOST: '127.0.0.1',
    WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
    JOB_BACKOFF_MS: '50',
    JOB_MAX_BACKOFF_MS: '500',
    WORKER_STALLED_INTERVAL_MS: '1000',
    WORKER_LOCK_DURATION_MS: '2000',
    ...env,
  };
}

/** The queues a config's sinks get their jobs in: each sink's, or each of its endpoints'. */
export function deliveryQueues(config: Config): string[] {
  return Object.entries(config.sinks).flatMap(([name, sink]) =>
    sink.endpoints?.length ? sink.endpoints.map((e) => sinkQueueName(name, e)) : [sinkQueueName(name)],
  );
}

export async function startTestCallsync(
  env: Record<string, string> = {},
  options: Partial<CallsyncOptions> = {},
): Promise<TestCallsync> {
  const target = await testRedis();
  // A test that names its own Redis (a topology of its own) keeps it; the others get the file's.
  const own = ['REDIS_URL', 'REDIS_CLUSTER_NODES', 'REDIS_SENTINELS'].some((name) => name in env);
  const redisEnv = own ? {} : target.env();
  const onCluster = target.isCluster && !own;
  // On the cluster: a prefix whose sink queues (two or more) and inbound shards fall on more than one master.
  const prefix =
    env.QUEUE_PREFIX ??
    (onCluster
      ? await target.prefix('cs', deliveryQueues(loadConfig(testEnv('probe', { ...redisEnv, ...env }))))
      : uniquePrefix('cs'));
  const config = loadConfig(testEnv(prefix, { ...redisEnv, ...env }));
  if (onCluster)
    assert.equal(
      redisKeys(config.redis).layout,
      'spread',
      'TEST_REDIS_CLUSTER=1: callsync spreads its keys over the cluster',
    );
  if (target.sentinel && !own)
    assert.equal(
      redisMode(config.redis),
      'sentinel',
      'TEST_REDIS_SENTINEL=1: callsync finds its Redis through the sentinel',
    );
  const { lines, log } = memoryLog(process.env.TEST_LOG_LEVEL ?? 'info');
  const app = await startCallsync(config, { log, ...options });
  return {
    ...app,
    prefix,
    logs: lines,
    async stop() {
      await app.close();
      await cleanupPrefix(prefix);
    },
  };
}

/**
 * TEST_REDIS_CLUSTER=1 (a no-op on a single Redis): proves the callsync under test used the spread
 * layout for real — every key of its prefix is in a `{prefix:area}` slot of its own, the sink
 * queues holding keys (when two or more do) are on more than one master, and so are the inbound
 * shards holding keys (when two or more do). Returns the areas found on each master.
 */
export async function assertSpread(
  cs: Pick<TestCallsync, 'config' | 'prefix' | 'queues'>,
  options: { minSinkQueues?: number } = {},
): Promise<Map<string, string[]>> {
  const target = await testRedis();
  const areas = new Map<string, string[]>();
  if (!target.isCluster) return areas;
  assert.equal(redisKeys(cs.config.redis).layout, 'spread');
  const head = `{${cs.prefix}:`;
  const sinkMasters = new Map<string, string>();
  const shardMasters = new Map<string, string>();
  for (const [node, keys] of await target.keysByNode(cs.prefix)) {
    const here = new Set<string>();
    for (const key of keys) {
      assert.ok(key.startsWith(head) && key.indexOf('}') > head.length, `a key outside the spread layout: ${key}`);
      const area = key.slice(head.length, key.indexOf('}'));
      here.add(area);
      if (area !== INBOUND_QUEUE && cs.queues.has(area)) sinkMasters.set(area, node);
      if (/^inbound-\d+$/.test(area)) shardMasters.set(area, node);
    }
    areas.set(node, [...here].sort());
  }
  const detail = JSON.stringify(Object.fromEntries(areas));
  assert.ok(
    sinkMasters.size >= (options.minSinkQueues ?? 1),
    `sink queues holding keys: ${sinkMasters.size}; ${detail}`,
  );
  if (sinkMasters.size >= 2)
    assert.ok(new Set(sinkMasters.values()).size >= 2, `the sink queues' keys are on one master: ${detail}`);
  if (shardMasters.size >= 2)
    assert.ok(new Set(shardMasters.values()).size >= 2, `the inbound shards' keys are on one master: ${detail}`);
  assert.ok(
    [...areas.values()].filter((a) => a.length > 0).length >= 2,
    `callsync's keys are on one master: ${detail}`,
  );
  return areas;
}

export async function postJson(
  url: string,
  body: unknown,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON; keep the text
  }
  return { status: res.status, body: parsed, headers: res.headers };
}
