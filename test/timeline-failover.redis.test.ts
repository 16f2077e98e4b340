// A sink attempt's outcome reaches its call's timeline when the master holding the timeline fails
// over while the attempt ends (issue 24): on a spread Redis Cluster the call's timeline and the
// sink's queue are on different masters, so the queue goes on (the job completes) while the
// timeline's master is away; ioredis gives up on the write after its redirections (~3 s), before
// the replica is promoted. The chaos run on a cluster found SMS jobs completed whose timelines
// showed them pending for ever. A private cluster (test/support/redis-cluster.ts), one real
// worker (workers/runner.ts) on the SMS queue; the attempt itself kills the timeline's master.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { pino } from 'pino';
import { Queue } from 'bullmq';
import { createRedis } from '../queues/connection.js';
import { redisKeys } from '../queues/keys.js';
import { JobName, sinkJobId, sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { CallTimeline, summarize, timelineId } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { runWorker } from '../workers/runner.js';
import { sampleCall } from './support/calls.js';
import { startRedisCluster } from './support/redis-cluster.js';
import { waitFor } from './support/redis.js';

/** A private cluster (spread layout) and a worker's connection and timeline on it. */
async function clusterTimeline(prefix: string) {
  const cluster = await startRedisCluster();
  const settings = loadConfig({
    REDIS_CLUSTER_NODES: cluster.seeds,
    REDIS_URL: 'redis://127.0.0.1:1',
    QUEUE_PREFIX: prefix,
  }).redis;
  const keys = redisKeys(settings);
  assert.equal(keys.layout, 'spread');
  const conn = createRedis(settings, 'worker');
  return { cluster, keys, conn, timeline: new CallTimeline(conn, keys, { ttlDays: 1 }) };
}

test('the timeline master fails over as an attempt ends: the outcome is in the timeline once the replica took over', async () => {
  const { cluster, keys, conn, timeline } = await clusterTimeline('tlfailover');
  const queueName = sinkQueueName('sms');
  const queue = new Queue(queueName, { connection: conn, prefix: keys.queuePrefix(queueName) });
  let worker: ReturnType<typeof runWorker> | undefined;
  try {
    // A call whose timeline is on another master than the SMS queue (as for two calls in three).
    const queueMaster = (await cluster.nodesOfKey(`${keys.queuePrefix(queueName)}:${queueName}:meta`)).master;
    let call = sampleCall('failover-0');
    for (let i = 1; (await cluster.nodesOfKey(timeline.key(timelineId(call)))).master === queueMaster; i++)
      call = sampleCall(`failover-${i}`);
    const id = timelineId(call);
    const { master, replica } = await cluster.nodesOfKey(timeline.key(id));
    await timeline.fannedOut(call, { jobId: sinkJobId(call), routes: ['#0'], sinks: ['sms'] });

    let runs = 0;
    worker = runWorker(
      queueName,
      async () => {
        runs++;
        // The message went out; the timeline's master dies before the attempt's outcome is written.
        await master.kill();
        return { status: 'done', refs: { messageId: 'sms-1' } };
      },
      {
        connection: conn,
        prefix: keys,
        retry: { attempts: 3, backoffMs: 100, maxBackoffMs: 1000 },
        concurrency: 1,
        stalledIntervalMs: 30_000,
        lockDurationMs: 30_000,
        maxStalledCount: 1,
        log: pino({ level: 'silent' }),
        timeline,
      },
    );
    const job: SinkDeliverJob = { kind: JobName.sinkDeliver, sink: 'sms', call };
    await queue.add(JobName.sinkDeliver, job, { jobId: sinkJobId(call), attempts: 3 });
    // The queue's master is alive: the job completes while the timeline's master is away.
    await waitFor(async () => (await queue.getJobState(sinkJobId(call))) === 'completed', {
      timeoutMs: 30_000,
      what: 'the SMS job completed',
    });
    assert.equal(runs, 1);
    await waitFor(async () => (await cluster.masters()).includes(replica.port), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'the replica promoted',
    });
    master.restart();
    await cluster.waitHealthy();
    const entries = await waitFor(
      async () => {
        const all = await timeline.read(id);
        return summarize(id, all).sinks.sms === 'done' ? all : null;
      },
      { timeoutMs: 30_000, intervalMs: 250, what: 'the SMS attempt done in the timeline (not pending for ever)' },
    ).catch(async (err: Error) => {
      throw new Error(`${err.message}: ${JSON.stringify(await timeline.read(id))}`);
    });
    const sms = entries.filter((e) => e.sink === 'sms');
    assert.deepEqual(
      sms.map((e) => e.event),
      ['attempt', 'done'],
    );
    assert.deepEqual(sms[1]!.refs, { messageId: 'sms-1' });
  } finally {
    await worker?.close();
    await queue.close();
    conn.disconnect();
    await cluster.destroy();
  }
});

test('the timeline master is down as a call is fanned out: the fan-out goes on, its entry lands once the replica took over', async () => {
  const { cluster, conn, timeline } = await clusterTimeline('tlfanout');
  try {
    const call = sampleCall('fanout-failover');
    const id = timelineId(call);
    const { master, replica } = await cluster.nodesOfKey(timeline.key(id));
    await timeline.read(id); // the connection to that master is up before it dies
    await master.kill();
    // A batch of two (on a spread cluster one command per call; its other call may be elsewhere).
    const other = sampleCall('fanout-failover-2');
    await timeline.fannedOutMany([
      { call, jobId: sinkJobId(call), routes: ['#0'], sinks: ['archive'] },
      { call: other, jobId: sinkJobId(other), routes: ['#0'], sinks: ['archive'] },
    ]);
    await waitFor(async () => (await cluster.masters()).includes(replica.port), {
      timeoutMs: 30_000,
      intervalMs: 200,
      what: 'the replica promoted',
    });
    const entries = await waitFor(
      async () => {
        const all = await timeline.read(id);
        return all.some((e) => e.event === 'fanned-out') ? all : null;
      },
      { timeoutMs: 30_000, intervalMs: 250, what: 'the fanned-out entry in the timeline (not dropped)' },
    );
    assert.deepEqual(
      entries.map((e) => [e.event, e.sinks]),
      [['fanned-out', ['archive']]],
    );
    master.restart();
    await cluster.waitHealthy();
  } finally {
    conn.disconnect();
    await cluster.destroy();
  }
});
