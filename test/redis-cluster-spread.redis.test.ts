// callsync on a Redis Cluster with a plain QUEUE_PREFIX: the keys spread over the masters
// (queues/keys.ts). A real cluster of 3 masters with a replica each (test/support/redis-cluster.ts);
// REDIS_URL points at a closed port, so only the cluster can make these pass.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config/index.js';
import { connectRedis } from '../src/cli/redis.js';
import { redisEvictionProblem } from '../queues/private-redis.js';
import { queuesInRedis } from '../queues/scan.js';
import { redisKeys } from '../queues/keys.js';
import { InboundLog, inboundStreamKey, waitForReplicas } from '../queues/inbound.js';
import { callHash } from '../src/model/call.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import {
  defaultJobOptions,
  defaultRetryPolicy,
  INBOUND_QUEUE,
  JobName,
  sinkQueueName,
  type CallReceivedJob,
} from '../queues/registry.js';
import { Queue } from 'bullmq';
import { sampleCall, webhookPayload } from './support/calls.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { nodeCommand, startRedisCluster, type TestCluster } from './support/redis-cluster.js';
import { waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

const NOWHERE = 'redis://127.0.0.1:1';

async function archived(dir: string): Promise<string[]> {
  const files = (await readdir(dir, { recursive: true }).catch(() => [])).map(String);
  return archivedRecords(files).sort();
}

describe('Redis Cluster, spread keys (plain QUEUE_PREFIX)', () => {
  let cluster: TestCluster;
  let cs: TestCallsync;
  let dir: string;
  // The default prefix on a fresh cluster: the slots of `{callsync:sink-archive}`, `{callsync:sink-crm}`
  // and `{callsync:sink-sms}` fall on the three masters of `redis-cli --cluster create`'s even split,
  // so the assertions below cannot pass by luck nor fail by it.
  const prefix = 'callsync';

  before(async () => {
    cluster = await startRedisCluster();
    dir = await mkdtemp(join(tmpdir(), 'spread-archive-'));
    const file = join(dir, 'callsync.yaml');
    // Three sinks (three queues); each writes its own folder.
    const sink = (name: string) => [`  ${name}:`, '    type: archive', `    dir: ${join(dir, name)}`];
    await writeFile(
      file,
      ['sinks:', ...sink('archive'), ...sink('crm'), ...sink('sms'), 'routes:', '  - to: [archive, crm, sms]'].join(
        '\n',
      ),
    );
    cs = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_PREFIX: prefix,
      CALLSYNC_CONFIG: file,
    });
  });
  after(async () => {
    await cs?.stop();
    await cluster?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** WAIT commands run so far, summed over the masters (INFO commandstats). */
  const waits = async () => {
    let total = 0;
    for (const port of await cluster.masters())
      total += Number(
        /cmdstat_wait:calls=(\d+)/.exec(String(await nodeCommand(port, ['INFO', 'commandstats'])))?.[1] ?? 0,
      );
    return total;
  };

  test('calls are acknowledged, deduplicated in their shard and archived; shards and queues sit on more than one master', async () => {
    const ids = Array.from({ length: 40 }, (_, i) => `spread-${i}`);
    for (const id of ids) {
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
      assert.equal(res.status, 202, `${id}: ${JSON.stringify(res.body)}`);
    }
    for (const id of ids.slice(0, 10)) {
      const again = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
      assert.equal(again.status, 202);
      assert.equal(again.body.duplicate, true, `${id}: the resend finds its dedupe key in its shard`);
    }
    for (const sink of ['archive', 'crm', 'sms']) {
      await waitFor(async () => (await archived(join(dir, sink))).length === ids.length, {
        what: `every call in ${sink}`,
        timeoutMs: 60_000,
      });
      assert.equal(
        (await archived(join(dir, sink))).length,
        ids.length,
        `${sink}: one object per call, no duplicate again`,
      );
    }

    const keys = redisKeys(cs.config.redis);
    assert.equal(keys.layout, 'spread');
    assert.equal(keys.inboundShards, 8);
    const mastersOf = async (list: string[]) =>
      new Set(await Promise.all(list.map(async (k) => (await cluster.nodesOfKey(k)).master.port)));
    const shardMasters = await mastersOf(
      Array.from({ length: keys.inboundShards }, (_, i) => inboundStreamKey(keys.inboundShard(i))),
    );
    assert.ok(shardMasters.size > 1, `the inbound shards are on ${shardMasters.size} master(s)`);
    // Each queue's keys (wait list, meta, …) are in one slot; the sink queues are spread.
    const queueNames = [...cs.queues.keys()];
    assert.ok(queueNames.includes(sinkQueueName('archive')));
    const queueMasters = await mastersOf(queueNames.map((name) => `${keys.queuePrefix(name)}:${name}:meta`));
    // A failure once (CI, under load; never alone) said only "2 master(s)": it now shows the cluster's view.
    if (queueMasters.size !== 3)
      assert.fail(
        `the queues are on ${queueMasters.size} master(s); CLUSTER NODES:\n${String(await nodeCommand(cluster.nodes.find((n) => n.running)!.port, ['CLUSTER', 'NODES']))}\n${(await Promise.all(cluster.nodes.map((n) => n.describe()))).join('\n')}`,
      );
    // A sink's state is in its queue's slot.
    assert.equal(
      (await cluster.nodesOfKey(`${keys.sinkState('crm')}x`)).master.port,
      (await cluster.nodesOfKey(`${keys.queuePrefix('sink-crm')}:sink-crm:meta`)).master.port,
    );
    // Every master holds some of callsync's keys.
    const masters = await cluster.masters();
    const perMaster = await Promise.all(masters.map(async (port) => Number(await nodeCommand(port, ['DBSIZE']))));
    assert.ok(perMaster.filter((n) => n > 0).length >= 2, `keys per master: ${perMaster.join(', ')}`);
  });

  test('a master that evicts keys is named, whichever node INFO would have asked', async () => {
    const config = loadConfig({ REDIS_URL: NOWHERE, REDIS_CLUSTER_NODES: cluster.seeds, QUEUE_PREFIX: prefix });
    const redis = await connectRedis(config);
    const [, second] = await cluster.masters();
    try {
      assert.equal(await redisEvictionProblem(redis, 'the cluster'), null);
      await nodeCommand(second!, ['CONFIG', 'SET', 'maxmemory-policy', 'volatile-lru']);
      // Before, one node was asked (INFO goes to one master): two times in three, all seemed well.
      for (let i = 0; i < 3; i++)
        assert.match(
          String(await redisEvictionProblem(redis, 'the cluster')),
          new RegExp(
            `^the Redis at the cluster evicts keys when its memory is full \\(maxmemory-policy volatile-lru on 127\\.0\\.0\\.1:${second}\\): `,
          ),
        );
    } finally {
      await nodeCommand(second!, ['CONFIG', 'SET', 'maxmemory-policy', 'noeviction']);
      redis.disconnect();
    }
  });

  test('the CLI finds the queues on every master', async () => {
    const config = loadConfig({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds.split(',')[0]!,
      QUEUE_PREFIX: prefix,
    });
    const redis = await connectRedis(config);
    try {
      const found = await queuesInRedis(redis, redisKeys(config.redis));
      assert.ok(found.includes(sinkQueueName('archive')), found.join(', '));
      assert.ok(found.includes('inbound'), found.join(', '));
    } finally {
      redis.disconnect();
    }
  });

  test('ACK_REPLICAS=1: a batch that touches every inbound shard sends one WAIT per master, not one per shard', async () => {
    const keys = redisKeys({ ...cs.config.redis, prefix: 'waitcount' });
    assert.equal(keys.inboundShards, 8);
    const acceptor = new InboundAcceptor(new InboundLog(cs.redis.producer, keys, { replicas: 1, timeoutMs: 2000 }), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
    });
    const calls = Array.from({ length: 64 }, (_, i) => sampleCall(`waitcount-${i}`));
    const shards = new Set(calls.map((c) => keys.shardOf(callHash(c.key))));
    const masters = new Set(
      await Promise.all(
        [...shards].map(async (s) => (await cluster.nodesOfKey(inboundStreamKey(keys.inboundShard(s)))).master.port),
      ),
    );
    assert.equal(shards.size, 8, 'the batch touches every shard');
    assert.ok(masters.size >= 2, 'on more than one master');
    const before = await waits();
    // Accepted in one event-loop turn: one batch.
    const answers = await Promise.all(calls.map((c) => acceptor.accept(c)));
    assert.ok(answers.every((a) => !a.duplicate));
    assert.equal(
      (await waits()) - before,
      masters.size,
      `one WAIT for each of the ${masters.size} masters the ${shards.size} shards are on`,
    );
    assert.equal(await new InboundLog(cs.redis.producer, keys).length(), 64, 'every call stored');
    const redis = cs.redis.producer;
    for (let s = 0; s < keys.inboundShards; s++) await redis.del(inboundStreamKey(keys.inboundShard(s)));
  });

  test("ACK_REPLICAS=1: the fan-out's wait for replicas sends one WAIT per master holding a queue it wrote, not one per queue", async () => {
    const keys = redisKeys(cs.config.redis);
    // Queue keys of twelve sink queues: more queues than masters, so some share one.
    const queueKeys = Array.from({ length: 12 }, (_, i) => `${keys.queuePrefix(`sink-q${i}`)}:sink-q${i}:meta`);
    const masters = new Set(await Promise.all(queueKeys.map(async (k) => (await cluster.nodesOfKey(k)).master.port)));
    assert.ok(masters.size < queueKeys.length);
    const before = await waits();
    await waitForReplicas(cs.redis.worker, { replicas: 1, timeoutMs: 2000 }, queueKeys);
    assert.equal(
      (await waits()) - before,
      masters.size,
      `one WAIT for each of the ${masters.size} masters the ${queueKeys.length} queues are on`,
    );
  });

  test('ACK_REPLICAS=1: the fan-out deletes a log entry only once the sink jobs made of it are on a replica of their own master', async () => {
    const prefix = 'ackfan';
    const cs2 = await startTestCallsync({
      REDIS_URL: NOWHERE,
      REDIS_CLUSTER_NODES: cluster.seeds,
      QUEUE_PREFIX: prefix,
      ARCHIVE_DIR: dir,
      ACK_REPLICAS: '1',
      // The appends' replicas are not paused: a second is too short for them on loaded shared cores
      // (a CI run got 503 once); the paused archive replica never confirms, whatever the timeout.
      ACK_REPLICAS_TIMEOUT_MS: '4000',
      ENQUEUE_TIMEOUT_MS: '6000',
      SPOOL_ENABLED: 'false',
    });
    const keys = redisKeys(cs2.config.redis);
    const archive = await cluster.nodesOfKey(
      `${keys.queuePrefix(sinkQueueName('archive'))}:${sinkQueueName('archive')}:meta`,
    );
    const log = new InboundLog(cs2.redis.worker, keys);
    try {
      // Calls whose log entries are on another master than the archive queue: their append is
      // confirmed by their own replica, their sink job waits on the archive master's.
      const ids: string[] = [];
      for (let i = 0; ids.length < 5 && i < 200; i++) {
        const id = `ackfan-${i}`;
        const shard = keys.inboundShard(
          keys.shardOf(
            callHash(normalizeWebhook(webhookPayload(id), { agentId: 'agent-1', receivedAt: new Date() }).key),
          ),
        );
        if ((await cluster.nodesOfKey(inboundStreamKey(shard))).master.port !== archive.master.port) ids.push(id);
      }
      assert.equal(ids.length, 5);
      archive.replica.pause();
      try {
        for (const id of ids)
          assert.equal((await postJson(`${cs2.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202, id);
        // Jobs are added (the archive even runs them), but no replica of their master has them: the
        // entries stay in the log (and the shard holds back what came after them meanwhile).
        const ran = () =>
          archived(join(dir, 'transcripts')).then((names) => names.filter((f) => f.includes('ackfan-')).length);
        await waitFor(async () => (await ran()) > 0, { what: 'a job ran on the master', timeoutMs: 30_000 });
        await new Promise((r) => setTimeout(r, 1500));
        const left = await log.length();
        if (left !== ids.length)
          assert.fail(
            `every entry is still in the log while its sink job is on one copy only: ${left} of ${ids.length}; paused ${archive.replica.port} (replica of ${archive.master.port}); CLUSTER NODES:\n${String(await nodeCommand(archive.master.port, ['CLUSTER', 'NODES']))}`,
          );
      } finally {
        archive.replica.resume();
      }
      await waitFor(async () => (await log.length()) === 0, {
        what: 'the entries deleted once the replica has the jobs',
        timeoutMs: 30_000,
      });

      // The same for an `inbound` dead letter retried: it completes only once its sink job is replicated.
      // With the retry policy the fan-out gives its dead letters.
      const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, {
        connection: cs2.redis.worker,
        prefix: keys.queuePrefix(INBOUND_QUEUE),
        defaultJobOptions: defaultJobOptions(defaultRetryPolicy),
      });
      try {
        archive.replica.pause();
        try {
          const call = normalizeWebhook(webhookPayload('ackfan-dead-letter'), {
            agentId: 'agent-1',
            receivedAt: new Date(),
          });
          const job = await deadLetters.add(
            JobName.callReceived,
            { kind: JobName.callReceived, call },
            { jobId: 'ackfan-dead-letter' },
          );
          await waitFor(async () => ((await deadLetters.getJob(job.id!))?.attemptsMade ?? 0) > 0, {
            what: 'a try of the dead letter',
            timeoutMs: 15_000,
          });
          const tried = await deadLetters.getJob(job.id!);
          assert.notEqual(await tried!.getState(), 'completed', 'not completed while its sink job is on one copy only');
          assert.match(tried!.failedReason ?? '', /NOREPLICAS/);
        } finally {
          archive.replica.resume();
        }
        await waitFor(
          async () => (await (await deadLetters.getJob('ackfan-dead-letter'))?.getState()) === 'completed',
          { what: 'the dead letter completed once replicated', timeoutMs: 30_000 },
        );
      } finally {
        await deadLetters.close();
      }
      await waitFor(
        async () =>
          (await archived(join(dir, 'transcripts'))).filter((f) => ids.some((id) => f.includes(`/${id}-`))).length ===
          ids.length,
        { what: 'every call archived', timeoutMs: 30_000 },
      );
    } finally {
      await cs2.stop();
    }
  });
});
