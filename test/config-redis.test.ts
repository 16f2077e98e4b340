// The Redis settings of the configuration: one Redis by default (today's behaviour), a cluster or
// Sentinel, a password and TLS, and the combinations refused at start (and by check-config).
// (The Redis URL itself — rediss://, a password in it — is tested in test/redis-topologies.redis.test.ts.)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { describeConfig } from '../src/cli/check-config.js';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  assert.fail('expected a ConfigError');
}

test('default: one Redis at the default URL, no password, no TLS', () => {
  const { redis } = loadConfig({});
  assert.deepEqual(redis, { url: 'redis://127.0.0.1:6379', clusterNodes: [], sentinels: [], tls: false, prefix: 'callsync' });
});

test('a cluster: nodes parsed (IPv6 too), a {hash-tag} prefix required', () => {
  const { redis } = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, [::1]:7001', QUEUE_PREFIX: '{callsync}', REDIS_TLS: 'true', REDIS_PASSWORD: 's3cret' });
  assert.deepEqual(redis.clusterNodes, [{ host: '10.0.0.1', port: 7000 }, { host: '::1', port: 7001 }]);
  assert.equal(redis.tls, true);
  assert.equal(redis.password, 's3cret');
  assert.match(describeConfig(loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, [::1]:7001', QUEUE_PREFIX: '{callsync}', REDIS_TLS: 'true' })).join('\n'), /redis: +cluster 10\.0\.0\.1:7000,::1:7001 \(TLS\)/);
  const lines = describeConfig(loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', QUEUE_PREFIX: '{callsync}', REDIS_PASSWORD: 's3cret' })).join('\n');
  assert.match(lines, /cluster 10\.0\.0\.1:7000 \(password set\)/);
  assert.ok(!lines.includes('s3cret'), 'check-config never prints the password');

  const problems = problemsOf({ REDIS_CLUSTER_NODES: '10.0.0.1:7000', QUEUE_PREFIX: 'callsync' });
  assert.ok(problems.some((p) => p.startsWith('QUEUE_PREFIX:') && p.includes('{callsync}')), problems.join('\n'));
  assert.ok(problemsOf({ REDIS_CLUSTER_NODES: 'host-without-port', QUEUE_PREFIX: '{c}' }).some((p) => p.startsWith('REDIS_CLUSTER_NODES: "host-without-port"')));
  assert.ok(problemsOf({ REDIS_CLUSTER_NODES: 'h:70000', QUEUE_PREFIX: '{c}' }).some((p) => p.startsWith('REDIS_CLUSTER_NODES:')));
});

test('Sentinel: the sentinels and the master name, each needing the other; not with a cluster', () => {
  const { redis } = loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster' });
  assert.match(describeConfig(loadConfig({ REDIS_SENTINELS: 's1:26379,s2:26379', REDIS_SENTINEL_NAME: 'mymaster' })).join('\n'), /redis: +sentinel s1:26379,s2:26379 master "mymaster"/);
  assert.deepEqual(redis.sentinels, [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }]);
  assert.equal(redis.sentinelName, 'mymaster');
  assert.ok(problemsOf({ REDIS_SENTINELS: 's1:26379' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: required')));
  assert.ok(problemsOf({ REDIS_SENTINEL_NAME: 'mymaster' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: set without')));
  assert.ok(problemsOf({ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'm', REDIS_CLUSTER_NODES: 'n:7000', QUEUE_PREFIX: '{c}' }).some((p) => p.startsWith('REDIS_CLUSTER_NODES: set together')));
});

test('ACK_REPLICAS: 0 by default; its timeout must leave room inside ENQUEUE_TIMEOUT_MS', () => {
  assert.deepEqual(loadConfig({}).ack, { replicas: 0, timeoutMs: 500 });
  assert.deepEqual(loadConfig({ ACK_REPLICAS: '1', ACK_REPLICAS_TIMEOUT_MS: '250' }).ack, { replicas: 1, timeoutMs: 250 });
  assert.ok(problemsOf({ ACK_REPLICAS: '1', ACK_REPLICAS_TIMEOUT_MS: '1500' }).some((p) => p.startsWith('ACK_REPLICAS_TIMEOUT_MS: 1500 must be below ENQUEUE_TIMEOUT_MS (1500)')));
  assert.ok(problemsOf({ ACK_REPLICAS: '-1' }).some((p) => p.startsWith('ACK_REPLICAS')));
});
