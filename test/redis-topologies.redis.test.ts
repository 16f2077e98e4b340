// callsync on Redis other than one plain node: a Redis Cluster of 3 masters with a replica each,
// a master found through Sentinel (and found again after a failover), and a Redis that wants a
// password. Each topology is started once for its tests on loopback ports (test/support/redis-cluster.ts).
// REDIS_URL points at a closed port throughout: only the new settings can make these pass.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config/index.js';
import { describeConfig } from '../src/cli/check-config.js';
import { connectRedis } from '../src/cli/redis.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import {
  nodeCommand,
  startPasswordRedis,
  startRedisCluster,
  startRedisSentinel,
  type TestCluster,
  type TestSentinel,
} from './support/redis-cluster.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

const NOWHERE = 'redis://127.0.0.1:1';

async function archived(dir: string): Promise<string[]> {
  const files = (await readdir(join(dir, 'transcripts'), { recursive: true }).catch(() => [])).map(String);
  return archivedRecords(files).sort();
}

async function postCalls(cs: TestCallsync, ids: string[]): Promise<void> {
  for (const id of ids) {
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
    assert.equal(res.status, 202, `${id}: ${JSON.stringify(res.body)}`);
  }
}

describe('Redis Cluster (3 masters, 3 replicas)', () => {
  let cluster: TestCluster;
  let cs: TestCallsync;
  let dir: string;
  const prefix = `{${uniquePrefix('cl')}}`;

  before(async () => {
    cluster = await startRedisCluster();
    dir = await mkdtemp(join(tmpdir(), 'cluster-archive-'));
    cs = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_PREFIX: prefix,
      ARCHIVE_DIR: dir,
    });
  });
  after(async () => {
    await cs?.stop();
    await cluster?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('calls are acknowledged, stored on the cluster, deduplicated and archived', async () => {
    const ids = ['cl-1', 'cl-2', 'cl-3', 'cl-4'];
    await postCalls(cs, ids);
    const again = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('cl-1'));
    assert.equal(again.status, 202);
    assert.equal(again.body.duplicate, true, 'the second delivery is a duplicate');
    await waitFor(async () => (await archived(dir)).length === ids.length, {
      what: 'every call archived',
      timeoutMs: 30_000,
    });
    assert.equal((await archived(dir)).length, ids.length, 'one archive object per call, the duplicate not again');
    // The keys live on the cluster: the master holding the prefix's slot has the inbound log.
    const masters = await cluster.masters();
    assert.equal(masters.length, 3);
    // A master that does not hold the slot answers MOVED.
    const found = await Promise.all(
      masters.map((port) =>
        nodeCommand(port, ['EXISTS', `${prefix}:inbound-log`]).catch((err: Error) => err.message.split(' ')[0]),
      ),
    );
    assert.equal(
      found.filter((n) => n === 1).length,
      1,
      `the inbound log is on one master of the cluster: ${found.join(', ')}`,
    );
    assert.equal(found.filter((n) => n === 'MOVED').length, 2, 'the other two send the client on');
  });

  test('ACK_REPLICAS=1 on a cluster: the WAIT asks the master that holds the log, so its replica hanging means 503', async () => {
    const ackPrefix = `{${uniquePrefix('clack')}}`;
    const ingress = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_PREFIX: ackPrefix,
      CALLSYNC_ROLE: 'ingress',
      ACK_REPLICAS: '1',
      ACK_REPLICAS_TIMEOUT_MS: '300',
      SPOOL_ENABLED: 'false',
      ARCHIVE_DIR: dir,
    });
    const { replica } = await cluster.nodesOfKey(`${ackPrefix}:inbound-log`);
    try {
      const first = await postJson(`${ingress.url}/webhooks/ai-agent/agent-1`, webhookPayload('clack-1'));
      assert.equal(first.status, 202);
      replica.pause();
      assert.equal(
        (await postJson(`${ingress.url}/webhooks/ai-agent/agent-1`, webhookPayload('clack-2'))).status,
        503,
        'its replica does not confirm',
      );
      replica.resume();
      await waitFor(
        async () =>
          (await postJson(`${ingress.url}/webhooks/ai-agent/agent-1`, webhookPayload('clack-2'))).status === 202,
        { what: '202 again', timeoutMs: 15_000, intervalMs: 200 },
      );
    } finally {
      replica.resume();
      await ingress.stop();
    }
  });

  test('the CLI connects through the same factory', async () => {
    const config = loadConfig({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds.split(',')[0]!,
      QUEUE_PREFIX: prefix,
    });
    const redis = await connectRedis(config);
    try {
      assert.equal(
        await redis.exists(`${prefix}:inbound-log`),
        1,
        'a key on whichever master holds it (MOVED followed)',
      );
    } finally {
      redis.disconnect();
    }
  });
});

describe('Redis Cluster chaos: the master of the log killed under load, ACK_REPLICAS=1', () => {
  let cluster: TestCluster;
  let cs: TestCallsync;
  let dir: string;
  const prefix = `{${uniquePrefix('clchaos')}}`;

  before(async () => {
    cluster = await startRedisCluster();
    dir = await mkdtemp(join(tmpdir(), 'cluster-chaos-'));
    cs = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_PREFIX: prefix,
      ACK_REPLICAS: '1',
      ACK_REPLICAS_TIMEOUT_MS: '500',
      SPOOL_ENABLED: 'false',
      ARCHIVE_DIR: dir,
    });
  });
  after(async () => {
    await cs?.stop();
    await cluster?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('fails over to the replica and every acknowledged call is archived', async () => {
    const { master, replica } = await cluster.nodesOfKey(`${prefix}:inbound-log`);
    const acknowledged = new Set<string>();
    let refused = 0;
    let n = 0;
    const postOne = async () => {
      const id = `chaos-${++n}`;
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id)).catch(() => ({
        status: 0,
      }));
      if (res.status === 202) acknowledged.add(id);
      else refused++;
    };
    // Load: 4 callers at once, before, during and after the kill.
    const load = async (until: () => boolean) => {
      await Promise.all(
        [0, 1, 2, 3].map(async () => {
          while (!until()) await postOne();
        }),
      );
    };
    await load(() => acknowledged.size >= 40);
    let killed = false;
    const giveUp = Date.now() + 60_000;
    const loading = load(() => (killed && acknowledged.size >= 120) || Date.now() > giveUp);
    await master.kill();
    killed = true;
    await waitFor(async () => (await cluster.masters()).includes(replica.port), {
      what: 'the replica promoted',
      timeoutMs: 30_000,
    });
    // The promoted replica has no replica of its own: with ACK_REPLICAS=1 nothing is acknowledged
    // (503) until the old master is back, rejoins as its replica and has caught up.
    const before = acknowledged.size;
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal(acknowledged.size, before, 'no 202 while the new master has no replica');
    master.restart();
    await loading;
    assert.ok(
      acknowledged.size >= 120,
      `calls are acknowledged again after the failover (${acknowledged.size} were, ${refused} refused)`,
    );
    // Every call answered 202 reaches the archive, across the failover.
    const names = async () => (await archived(dir)).join('\n');
    await waitFor(
      async () => {
        const all = await names();
        return [...acknowledged].every((id) => all.includes(`/${id}-`));
      },
      {
        what: `every acknowledged call archived (${acknowledged.size}, ${refused} refused)`,
        timeoutMs: 60_000,
        intervalMs: 500,
      },
    );
  });
});

describe('Sentinel (master, replica, one sentinel)', () => {
  let set: TestSentinel;
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    set = await startRedisSentinel();
    dir = await mkdtemp(join(tmpdir(), 'sentinel-archive-'));
    cs = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_SENTINELS: set.sentinels,
      REDIS_SENTINEL_NAME: set.name,
      ARCHIVE_DIR: dir,
    });
  });
  after(async () => {
    await cs?.stop();
    await set?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('the master is found through the sentinel, and found again after a failover', async () => {
    await postCalls(cs, ['se-1', 'se-2']);
    await waitFor(async () => (await archived(dir)).length === 2, {
      what: 'archived before the failover',
      timeoutMs: 30_000,
    });
    // The replica has what was archived so far (the test then promotes it).
    await waitFor(
      async () => /master_link_status:up/.test(String(await nodeCommand(set.replica.port, ['INFO', 'replication']))),
      { what: 'replica in sync' },
    );
    await set.master.kill();
    await waitFor(async () => (await set.masterPort()) === set.replica.port, {
      what: 'the sentinel promotes the replica',
      // A sentinel in TILT (its timer stalled ≥ 2 s on a loaded machine) waits 30 s before acting.
      timeoutMs: 60_000,
      explain: () => set.describe(),
    });
    // Until callsync has reconnected to the new master the ingress may answer 503; then 202 again.
    await waitFor(
      async () => (await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('se-3'))).status === 202,
      { what: 'accepted on the new master', timeoutMs: 30_000, intervalMs: 300 },
    );
    await waitFor(async () => (await archived(dir)).length === 3, {
      what: 'archived after the failover',
      timeoutMs: 30_000,
    });
  });
});

describe('a Redis with a password (REDIS_PASSWORD)', () => {
  const password = 'pw-' + uniquePrefix('secret');
  let server: Awaited<ReturnType<typeof startPasswordRedis>>;
  let dir: string;

  before(async () => {
    server = await startPasswordRedis(password);
    dir = await mkdtemp(join(tmpdir(), 'auth-archive-'));
  });
  after(async () => {
    await server?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('with the password: accepted and archived; the password is in no log line', async () => {
    const cs = await startTestCallsync({
      REDIS_URL: `redis://127.0.0.1:${server.port}`,
      REDIS_PASSWORD: password,
      ARCHIVE_DIR: dir,
    });
    try {
      await postCalls(cs, ['pw-1']);
      await waitFor(async () => (await archived(dir)).length === 1, { what: 'archived', timeoutMs: 30_000 });
      assert.ok(!JSON.stringify(cs.logs).includes(password), 'no log line holds the password');
    } finally {
      await cs.stop();
    }
  });

  test('a wrong password: 503 (never 202), and the password is in no log line', async () => {
    const wrong = 'wrong-' + password;
    const cs = await startTestCallsync({
      REDIS_URL: `redis://127.0.0.1:${server.port}`,
      REDIS_PASSWORD: wrong,
      SPOOL_ENABLED: 'false',
      ARCHIVE_DIR: dir,
    });
    try {
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('pw-wrong'));
      assert.equal(res.status, 503);
      assert.ok(!JSON.stringify(cs.logs).includes(wrong), 'no log line holds the password');
    } finally {
      await cs.stop();
    }
  });
});

test('REDIS_URL: rediss:// is TLS; a password in it is never shown', () => {
  assert.equal(loadConfig({ REDIS_URL: 'rediss://cache.example:6380' }).redis.tls, true);
  assert.equal(loadConfig({ REDIS_URL: 'redis://cache.example:6380' }).redis.tls, false);
  const lines = describeConfig(loadConfig({ REDIS_URL: 'redis://app:hunter2@cache:6379' })).join('\n');
  assert.match(lines, /redis: +redis:\/\/app:\*\*\*@cache:6379/);
  assert.ok(!lines.includes('hunter2'));
});
