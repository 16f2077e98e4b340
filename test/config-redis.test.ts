// The Redis settings of the configuration: one Redis by default (today's behaviour), a cluster or
// Sentinel, a password and TLS, and the combinations refused at start (and by check-config).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { describeConfig } from '../src/cli/check-config.js';
import { describeRedis, redisMode } from '../queues/connection.js';

function problemsOf(env: Record<string, string>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.problems;
  }
  assert.fail('expected a ConfigError');
}

test('default: one Redis at REDIS_URL, no password, no TLS', () => {
  const { redis } = loadConfig({});
  assert.equal(redisMode(redis), 'single');
  assert.deepEqual(redis, { url: 'redis://127.0.0.1:6379', clusterNodes: [], sentinels: [], tls: false, prefix: 'callsync' });
  assert.equal(loadConfig({ REDIS_URL: 'rediss://cache.example:6380' }).redis.tls, true, 'rediss:// is TLS');
});

test('a cluster: nodes parsed (IPv6 too), a {hash-tag} prefix required', () => {
  const { redis } = loadConfig({ REDIS_CLUSTER_NODES: '10.0.0.1:7000, [::1]:7001', QUEUE_PREFIX: '{callsync}', REDIS_TLS: 'true', REDIS_PASSWORD: 's3cret' });
  assert.equal(redisMode(redis), 'cluster');
  assert.deepEqual(redis.clusterNodes, [{ host: '10.0.0.1', port: 7000 }, { host: '::1', port: 7001 }]);
  assert.equal(redis.tls, true);
  assert.equal(redis.password, 's3cret');
  assert.equal(describeRedis(redis), 'cluster 10.0.0.1:7000,::1:7001 (TLS)');
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
  assert.equal(redisMode(redis), 'sentinel');
  assert.deepEqual(redis.sentinels, [{ host: 's1', port: 26379 }, { host: 's2', port: 26379 }]);
  assert.equal(redis.sentinelName, 'mymaster');
  assert.ok(problemsOf({ REDIS_SENTINELS: 's1:26379' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: required')));
  assert.ok(problemsOf({ REDIS_SENTINEL_NAME: 'mymaster' }).some((p) => p.startsWith('REDIS_SENTINEL_NAME: set without')));
  assert.ok(problemsOf({ REDIS_SENTINELS: 's1:26379', REDIS_SENTINEL_NAME: 'm', REDIS_CLUSTER_NODES: 'n:7000', QUEUE_PREFIX: '{c}' }).some((p) => p.startsWith('REDIS_CLUSTER_NODES: set together')));
});

test('the password in REDIS_URL is never shown', () => {
  const { redis } = loadConfig({ REDIS_URL: 'redis://app:hunter2@cache:6379' });
  assert.equal(describeRedis(redis), 'redis://app:***@cache:6379');
  assert.ok(!describeConfig(loadConfig({ REDIS_URL: 'redis://app:hunter2@cache:6379' })).join('\n').includes('hunter2'));
});
