// The Redis settings of the configuration: one Redis by default (today's behaviour), a cluster or
// Sentinel, a password and TLS, and the combinations refused at start (and by check-config).
// (The Redis URL itself — rediss://, a password in it — is tested in test/redis-topologies.redis.test.ts.)
import { join } from 'node:path';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../src/config/index.js';
import { describeConfig } from '../src/cli/check-config.js';
import { redisKeys } from '../queues/keys.js';
import { configProblems } from './support/config.js';

test('default: one Redis at the default URL, no password, no TLS; being unconfigured, it may be the local one or a private one', () => {
  const { redis } = loadConfig({});
  assert.deepEqual(redis, {
    url: 'redis://127.0.0.1:6379',
    clusterNodes: [],
    sentinels: [],
    tls: false,
    prefix: 'callsync',
    local: { probe: { host: '127.0.0.1', port: 6379 }, dir: join('data', 'redis') },
  });
  // REDIS_LOCAL_PROBE moves the probe (and the URL used when it answers); off: never probe. DATA_DIR and REDIS_SERVER_BIN are where the private one lives and what starts it.
  assert.deepEqual(
    loadConfig({
      REDIS_LOCAL_PROBE: '127.0.0.1:7777',
      DATA_DIR: '/var/lib/callsync',
      REDIS_SERVER_BIN: '/opt/redis/bin/redis-server',
    }).redis.local,
    {
      probe: { host: '127.0.0.1', port: 7777 },
      dir: '/var/lib/callsync/redis',
      serverBin: '/opt/redis/bin/redis-server',
    },
  );
  assert.equal(loadConfig({ REDIS_LOCAL_PROBE: '127.0.0.1:7777' }).redis.url, 'redis://127.0.0.1:7777');
  assert.equal(loadConfig({ REDIS_LOCAL_PROBE: 'off' }).redis.local?.probe, null);
  assert.ok(
    configProblems({ REDIS_LOCAL_PROBE: 'nowhere' }).some((p) =>
      p.startsWith('REDIS_LOCAL_PROBE: "nowhere" is not host:port'),
    ),
  );
  // A cluster or Sentinel configured: no local part, used as it is (a configured URL: test/cli-commands.redis.test.ts, check-config).
  for (const env of [
    { REDIS_CLUSTER_NODES: '10.0.0.1:7000' },
    { REDIS_SENTINELS: '10.0.0.1:26379', REDIS_SENTINEL_NAME: 'm' },
  ]) {
    assert.equal(loadConfig(env).redis.local, undefined, JSON.stringify(env));
  }
});

test("check-config's redis line: with none configured it names the Redis in use, never the probe address as if configured", () => {
  const redisLine = (env: Record<string, string>, reach?: Parameters<typeof describeConfig>[2]) =>
    describeConfig(loadConfig(env), undefined, reach).find((l) => l.startsWith('redis:'));
  const dir = join('data', 'redis');
  assert.match(
    redisLine({})!,
    new RegExp(
      `^redis: +none configured: the one answering at 127\\.0\\.0\\.1:6379, else a private Redis in ${dir} +prefix`,
    ),
  );
  assert.match(redisLine({ REDIS_LOCAL_PROBE: 'off' })!, /^redis: +none configured: a private Redis in /);
  const privateOne = {
    origin: 'private' as const,
    where: 'private … : answers',
    url: 'redis://127.0.0.1:41234',
    problem: null,
  };
  assert.match(
    redisLine({}, privateOne)!,
    /^redis: +redis:\/\/127\.0\.0\.1:41234 \(none configured: the private Redis in data\/redis\) +prefix/,
  );
  const notRunning = { origin: 'private' as const, where: 'private, not running', url: null, problem: null };
  assert.match(
    redisLine({}, notRunning)!,
    /^redis: +none configured: the private Redis in data\/redis, not running +prefix/,
  );
  const local = {
    origin: 'local' as const,
    where: 'local 127.0.0.1:6379: answers',
    url: 'redis://127.0.0.1:6379',
    problem: null,
  };
  assert.match(
    redisLine({}, local)!,
    /^redis: +redis:\/\/127\.0\.0\.1:6379 \(none configured: the one answering at 127\.0\.0\.1:6379\) +prefix/,
  );
  // Configured: the configured one, as before (test/cli-commands.redis.test.ts, check-config).
  assert.match(redisLine({ REDIS_CLUSTER_NODES: '10.0.0.1:7000' })!, /^redis: +cluster 10\.0\.0\.1:7000 +prefix/);
});

test('REDIS_URL that ioredis cannot read (no URL, no host, a database that is no number): refused, naming it, never echoed', () => {
  for (const url of [
    'redis://:pass/word-s3cr3t@127.0.0.1:6379', // an unescaped "/" in the password
    'redis://:pass#word-s3cr3t@127.0.0.1:6379',
    'redis://:s3cr3t@127.0.0.1:99999',
    'redis://:s3cr3t@127.0.0.1:0',
    'redis://:s3cr3t@127.0.0.1:6379/cache',
    'redis://:s3cr3t@127.0.0.1:6379/0?x=s3cr3t',
    'redis://',
  ]) {
    const problems = configProblems({ REDIS_URL: url });
    assert.equal(problems.length, 1, `${url}: ${problems.join('; ')}`);
    assert.match(problems[0]!, /^REDIS_URL: /, url);
    assert.doesNotMatch(problems[0]!, /s3cr3t/, url);
  }
  for (const url of [
    'redis://127.0.0.1:6379',
    'redis://:p%2Fw@cache:6379/0',
    'rediss://u:p@cache.example:6380/',
    'redis://[::1]:6379',
  ])
    assert.equal(loadConfig({ REDIS_URL: url }).redis.url, url);
});

test('a cluster: nodes parsed (IPv6 too), TLS and a password never printed', () => {
  const { redis } = loadConfig({
    REDIS_CLUSTER_NODES: '10.0.0.1:7000, [::1]:7001',
    REDIS_TLS: 'true',
    REDIS_PASSWORD: 's3cret',
  });
  assert.deepEqual(redis.clusterNodes, [
    { host: '10.0.0.1', port: 7000 },
    { host: '::1', port: 7001 },
  ]);
  assert.equal(redis.tls, true);
  assert.equal(redis.password, 's3cret');
  assert.match(
    describeConfig(loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, [::1]:7001', REDIS_TLS: 'true' })).join('\n'),
    /redis: +cluster 10\.0\.0\.1:7000,::1:7001 \(TLS\)/,
  );
  const lines = describeConfig(loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', REDIS_PASSWORD: 's3cret' })).join(
    '\n',
  );
  assert.match(lines, /cluster 10\.0\.0\.1:7000 \(password set\)/);
  assert.ok(!lines.includes('s3cret'), 'check-config never prints the password');
  assert.ok(
    configProblems({ REDIS_CLUSTER_NODES: 'host-without-port' }).some((p) =>
      p.startsWith('REDIS_CLUSTER_NODES: "host-without-port"'),
    ),
  );
  assert.ok(configProblems({ REDIS_CLUSTER_NODES: 'h:70000' }).some((p) => p.startsWith('REDIS_CLUSTER_NODES:')));
});

test('key layout: spread on a cluster with a plain QUEUE_PREFIX, one slot otherwise; the combinations check-config refuses or warns about', () => {
  const spread = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', QUEUE_PREFIX: 'callsync' });
  const keys = redisKeys(spread.redis);
  assert.equal(keys.layout, 'spread');
  assert.equal(keys.inboundShards, 8, 'a spread cluster defaults to 8 inbound shards');
  assert.equal(keys.queuePrefix('sink-archive'), '{callsync:sink-archive}');
  assert.equal(keys.sinkState('archive'), '{callsync:sink-archive}:state:', "a sink's state is in its queue's slot");
  assert.equal(keys.inboundShard(3), '{callsync:inbound-3}');
  assert.deepEqual(
    spread.warnings.filter((w) => w.startsWith('QUEUE_PREFIX')),
    [],
  );
  assert.match(describeConfig(spread).join('\n'), /keys: +spread over the cluster's masters: 8 inbound streams/);

  // Single node: today's keys, whatever INBOUND_SHARDS says.
  const single = redisKeys(loadConfig({ INBOUND_SHARDS: '4' }).redis);
  assert.equal(single.layout, 'one-slot');
  assert.equal(single.queuePrefix('sink-archive'), 'callsync');
  assert.equal(single.sinkState('crm'), 'callsync:state:crm:');
  assert.equal(single.inboundShard(0), 'callsync', 'shard 0 is the log of before sharding');
  assert.equal(single.inboundShard(2), 'callsync:inbound-2');
  assert.equal(redisKeys(loadConfig({}).redis).inboundShards, 1);

  // The {hash-tag} layout of before still runs on a cluster, with a warning that names the way out.
  const tagged = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', QUEUE_PREFIX: '{callsync}', INBOUND_SHARDS: '4' });
  assert.equal(redisKeys(tagged.redis).layout, 'one-slot');
  assert.ok(
    tagged.warnings.some(
      (w) => w.startsWith('QUEUE_PREFIX: "{callsync}" is a {hash-tag}') && w.includes('"callsync" spreads them'),
    ),
    tagged.warnings.join('\n'),
  );
  assert.ok(
    tagged.warnings.some((w) => w.startsWith('INBOUND_SHARDS=4: with a {hash-tag} QUEUE_PREFIX')),
    tagged.warnings.join('\n'),
  );
  // Braces that make no hash tag would split a queue's keys over slots.
  for (const prefix of ['callsync{', 'call{}sync', '}callsync{']) {
    assert.ok(
      configProblems({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', QUEUE_PREFIX: prefix }).some((p) =>
        p.startsWith(`QUEUE_PREFIX: "${prefix}" has braces but no {hash-tag}`),
      ),
      prefix,
    );
  }
  assert.ok(configProblems({ INBOUND_SHARDS: '65' }).some((p) => p.startsWith('INBOUND_SHARDS: 65 is more than 64')));
  assert.ok(configProblems({ INBOUND_SHARDS: '0' }).some((p) => p.startsWith('INBOUND_SHARDS')));
});

test('Sentinel: the sentinels and the master name, each needing the other; not with a cluster', () => {
  const { redis } = loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster' });
  assert.match(
    describeConfig(loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster' })).join('\n'),
    /redis: +sentinel s1:26379,s2:26379 master "mymaster"/,
  );
  assert.deepEqual(redis.sentinels, [
    { host: 's1', port: 26379 },
    { host: 's2', port: 26379 },
  ]);
  assert.equal(redis.sentinelName, 'mymaster');
  assert.ok(configProblems({ REDIS_SENTINELS: 's1:26379' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: required')));
  assert.ok(
    configProblems({ REDIS_SENTINEL_NAME: 'mymaster' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: set without')),
  );
  assert.ok(
    configProblems({
      REDIS_SENTINELS: 's1:26379',
      REDIS_SENTINEL_NAME: 'm',
      REDIS_CLUSTER_NODES: 'n:7000',
      QUEUE_PREFIX: '{c}',
    }).some((p) => p.startsWith('REDIS_CLUSTER_NODES: set together')),
  );
});

test('ACK_REPLICAS: 0 by default; its timeout must leave room inside ENQUEUE_TIMEOUT_MS', () => {
  assert.deepEqual(loadConfig({}).ack, { replicas: 0, timeoutMs: 500 });
  assert.deepEqual(loadConfig({ ACK_REPLICAS: '1', ACK_REPLICAS_TIMEOUT_MS: '250' }).ack, {
    replicas: 1,
    timeoutMs: 250,
  });
  assert.ok(
    configProblems({ ACK_REPLICAS: '1', ACK_REPLICAS_TIMEOUT_MS: '1500' }).some((p) =>
      p.startsWith('ACK_REPLICAS_TIMEOUT_MS: 1500 must be below ENQUEUE_TIMEOUT_MS (1500)'),
    ),
  );
  assert.ok(configProblems({ ACK_REPLICAS: '-1' }).some((p) => p.startsWith('ACK_REPLICAS')));
});
