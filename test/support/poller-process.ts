// A poller in a process of its own (for crash and takeover tests): polls one channel of the fake
// API into the inbound log of a test prefix. Prints `lock <held>` lines; SIGTERM closes it cleanly,
// SIGKILL is a crash. Settings come from the environment (see below); with REDIS_CLUSTER_NODES it
// polls into a Redis Cluster with the spread key layout (queues/keys.ts), with REDIS_SENTINELS and
// REDIS_SENTINEL_NAME into the master the sentinels name, as callsync would.
import { createRedis, defaultRetryPolicy, redisKeys, singleRedis, type RedisSettings } from '../../queues/index.js';
import { InboundLog } from '../../queues/inbound.js';
import { InboundAcceptor } from '../../src/ingress/accept.js';
import { createLogger } from '../../src/log.js';
import { createTelephonyClient } from '../../src/telephony/client.js';
import { startPoller } from '../../workers/poller.js';

const env = process.env;
const prefix = env.POLL_TEST_PREFIX!;
const redisUrl = env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const clusterNodes = (env.REDIS_CLUSTER_NODES ?? '')
  .split(',')
  .filter(Boolean)
  .map((node) => ({ host: node.slice(0, node.lastIndexOf(':')), port: Number(node.slice(node.lastIndexOf(':') + 1)) }));
const sentinels = (env.REDIS_SENTINELS ?? '')
  .split(',')
  .filter(Boolean)
  .map((node) => ({ host: node.slice(0, node.lastIndexOf(':')), port: Number(node.slice(node.lastIndexOf(':') + 1)) }));
const settings: RedisSettings = {
  ...singleRedis(redisUrl, prefix),
  clusterNodes,
  sentinels,
  sentinelName: env.REDIS_SENTINEL_NAME,
};
const keys = redisKeys(settings);
const producer = createRedis(settings, 'producer');
const workerConn = createRedis(settings, 'worker');
const inbound = new InboundLog(producer, keys);
const log = createLogger({ level: env.LOG_LEVEL ?? 'warn', destination: process.stderr });
const running = startPoller({
  settings: {
    channelIds: [env.POLL_CHANNEL_IDS ?? 'ch1'],
    intervalMs: Number(env.POLL_INTERVAL_MS ?? 200),
    pageSize: Number(env.POLL_PAGE_SIZE ?? 50),
    maxBackoffMs: 1000,
    lockTtlMs: Number(env.POLL_LOCK_TTL_MS ?? 1000),
  },
  client: createTelephonyClient({
    baseUrl: env.TELEPHONY_API_URL!,
    auth: { kind: 'basic', tokenId: 'token-id', token: 'token-secret' },
    retryMinDelayMs: 20,
    retryMaxDelayMs: 100,
  }),
  acceptor: new InboundAcceptor(inbound, { dedupeWindowMs: 3_600_000, timeoutMs: 2000 }),
  redis: producer,
  workerConnection: workerConn,
  prefix: keys,
  log,
  runner: {
    retry: defaultRetryPolicy,
    concurrency: 1,
    stalledIntervalMs: 1000,
    lockDurationMs: 2000,
    maxStalledCount: 1,
  },
  events: { lock: (_channel, held) => process.stdout.write(`lock ${held}\n`) },
  instanceId: `child-${process.pid}`,
});

process.on('SIGTERM', () => {
  void running
    .close()
    .then(() => Promise.all([producer.quit(), workerConn.quit()]))
    .then(() => process.exit(0));
});
