// End to end over a real port: webhook -> Redis -> fan-out -> archive sink -> S3 (s3rver). On the
// shared Redis, or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys (npm run test:cluster).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import { inboundSeenPrefix, InboundLog } from '../queues/inbound.js';
import { redisKeys } from '../queues/keys.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { callHash, callKeySegment } from '../src/model/call.js';
import { minimalPayload, webhookPayload } from './support/calls.js';
import { assertSpread, postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';

/** How many entries were ever appended to one stream of the inbound log (XINFO STREAM's entries-added). */
async function entriesAdded(redis: RedisClient, stream: string): Promise<number> {
  const info = (await redis.xinfo('STREAM', stream)) as unknown[];
  const at = info.indexOf('entries-added');
  assert.ok(at >= 0, 'XINFO STREAM reports entries-added (Redis >= 7)');
  return Number(info[at + 1]);
}

describe('pipeline to S3', () => {
  let s3: TestS3;
  let cs: TestCallsync;

  before(async () => {
    s3 = await startS3();
    cs = await startTestCallsync({ ...s3.env, ARCHIVE_S3_PREFIX: 'callsync/' });
  });
  after(async () => {
    await cs.stop();
    await s3.destroy();
  });

  test('a webhook ends as a JSON document and a readable transcript in the bucket', async () => {
    const payload = webhookPayload('pipe-1', (p) => (p.headline = 'kept verbatim'));
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload);
    assert.equal(res.status, 202);
    const keys = await waitFor(
      async () => {
        const k = await s3.list('callsync/transcripts/2026/04/08/');
        return k.length === 3 ? k : null;
      },
      { what: 'archived objects' },
    );
    // `<call id made safe>-<16 hex of sha256(call key)>`: the agent is part of the name (docs/reliability.md).
    const name = `pipe-1-${callHash('ai-agent:agent-1:pipe-1').slice(0, 16)}`;
    assert.equal(name, callKeySegment({ key: 'ai-agent:agent-1:pipe-1', callId: 'pipe-1' }));
    assert.deepEqual(keys, [
      `callsync/transcripts/2026/04/08/${name}.json`,
      `callsync/transcripts/2026/04/08/${name}.txt`,
      `callsync/transcripts/2026/04/08/${name}.vcon.json`,
    ]);

    const json = await s3.get(keys[0]!);
    assert.match(json.contentType ?? '', /application\/json/);
    const doc = JSON.parse(json.body);
    assert.equal(doc.schema, 'callsync.archive.v1');
    assert.equal(doc.call.callId, 'pipe-1');
    assert.equal(doc.call.agentId, 'agent-1');
    assert.equal(doc.call.from, '+492116355340');
    assert.deepEqual(doc.original, payload);

    const text = await s3.get(keys[1]!);
    assert.match(text.contentType ?? '', /text\/plain/);
    const lines = text.body.split('\n');
    assert.equal(lines[0], 'Call pipe-1');
    const summaryAt = lines.indexOf('Summary');
    const transcriptAt = lines.indexOf('Transcript');
    assert.ok(summaryAt > 0 && summaryAt < transcriptAt, 'summary comes before the transcript');
    assert.ok(lines.includes('[00:03] Caller: Hello, I need to move my appointment.'));
    assert.ok(lines.includes('[00:07] Callee: Of course, which day suits you?'));
    assert.ok(lines.includes('[01:10] Caller: Friday morning, please.'));
    assert.ok(lines.includes('  - Appointment moved to Friday 9:00'));
  });

  test('duplicates are acknowledged and processed once', async () => {
    const keys = redisKeys(cs.config.redis);
    const log = new InboundLog(cs.redis.worker, keys);
    const key = 'ai-agent:agent-1:dup-pipe';
    // The call's shard of the log (the only one on a single Redis).
    const shard = log.shardFor(callHash(key));
    const addedBefore = await entriesAdded(cs.redis.worker, shard.key);
    const results = await Promise.all(
      [1, 2, 3].map(() => postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('dup-pipe'))),
    );
    assert.deepEqual(
      results.map((r) => r.status),
      [202, 202, 202],
    );
    assert.equal(results.filter((r) => r.body.duplicate === false).length, 1);
    assert.equal(new Set(results.map((r) => r.body.id)).size, 1);
    const sinkQueue = new Queue<SinkDeliverJob>(sinkQueueName('archive'), {
      connection: cs.redis.worker,
      prefix: keys.queuePrefix(sinkQueueName('archive')),
    });
    await waitFor(async () => ((await sinkQueue.getJobCounts('completed')).completed ?? 0) >= 2, {
      what: 'archive jobs',
    });
    // One inbound log entry: the two duplicates were answered with the first delivery's id, not stored.
    assert.equal((await entriesAdded(cs.redis.worker, shard.key)) - addedBefore, 1, 'one inbound log entry');
    assert.equal(
      (await cs.redis.worker.get(`${inboundSeenPrefix(shard.prefix)}${callHash(key)}`))?.split(' ')[0],
      results[0]!.body.id,
      'the dedupe key names the stored delivery',
    );
    await waitFor(async () => (await log.find(results[0]!.body.id)) === null, { what: 'the entry fanned out' });
    const sinkJobs = (await sinkQueue.getJobs(['completed', 'waiting', 'active', 'delayed'])).filter(
      (j) => j.data.call.callId === 'dup-pipe',
    );
    assert.equal(sinkJobs.length, 1, 'one archive job');
    assert.equal(sinkJobs[0]!.id, callHash(key));
    const inbound = new Queue<CallReceivedJob>(INBOUND_QUEUE, {
      connection: cs.redis.worker,
      prefix: keys.queuePrefix(INBOUND_QUEUE),
    });
    assert.equal(await inbound.getJob(results[0]!.body.id), undefined, 'not dead-lettered');
    await Promise.all([sinkQueue.close(), inbound.close()]);
  });

  test('a call without transcript or summary is not archived by the default route', async () => {
    const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('bare-1'));
    assert.equal(res.status, 202);
    const id = String(res.body.id);
    const key = 'ai-agent:-:bare-1';
    assert.ok(id.startsWith(`${callHash(key)}-`), `acknowledged with a fresh id of the call: ${id}`);
    // Fanned out: the entry left the inbound log (acknowledged and deleted) ...
    const keys = redisKeys(cs.config.redis);
    const log = new InboundLog(cs.redis.worker, keys);
    await waitFor(async () => (await log.find(id)) === null, { what: 'fan-out' });
    // ... into no sink job at all, and not as a dead letter.
    const inbound = new Queue<CallReceivedJob>(INBOUND_QUEUE, {
      connection: cs.redis.worker,
      prefix: keys.queuePrefix(INBOUND_QUEUE),
    });
    const sinkQueues = [...cs.sinks.keys()].map(
      (name) =>
        new Queue<SinkDeliverJob>(sinkQueueName(name), {
          connection: cs.redis.worker,
          prefix: keys.queuePrefix(sinkQueueName(name)),
        }),
    );
    try {
      assert.ok(sinkQueues.length > 0);
      assert.equal(await inbound.getJob(id), undefined, 'not dead-lettered');
      for (const q of sinkQueues) assert.equal(await q.getJob(callHash(key)), undefined, `no ${q.name} job`);
    } finally {
      await Promise.all([inbound.close(), ...sinkQueues.map((q) => q.close())]);
    }
  });

  test('S3 down for a while, then back: everything archived, nothing lost', async () => {
    await s3.stop();
    const ids = Array.from({ length: 10 }, (_, i) => `outage-${i}`);
    for (const id of ids)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    const sinkQueue = new Queue(sinkQueueName('archive'), {
      connection: cs.redis.worker,
      prefix: redisKeys(cs.config.redis).queuePrefix(sinkQueueName('archive')),
    });
    // Wait until the failures are real: jobs retried at least once while S3 was away.
    await waitFor(
      async () => {
        const jobs = await sinkQueue.getJobs(['delayed', 'waiting', 'active']);
        return jobs.filter((j) => j.data.call.callId.startsWith('outage-') && j.attemptsMade >= 1).length >= 5;
      },
      { what: 'retries during the outage', timeoutMs: 20_000 },
    );
    await new Promise((r) => setTimeout(r, 1500));
    await s3.start();
    const keys = await waitFor(
      async () => {
        const k = (await s3.list('callsync/transcripts/')).filter((key) => key.includes('/outage-'));
        return k.length === ids.length * 3 ? k : null;
      },
      { what: 'archive after the outage', timeoutMs: 30_000 },
    );
    assert.equal(keys.length, 30);
    assert.equal((await sinkQueue.getJobCounts('failed')).failed ?? 0, 0, 'nothing dead-lettered');
    await sinkQueue.close();
    // On the cluster: every key in its area's slot, the inbound shards on more than one master.
    await assertSpread(cs);
  });
});

describe('pipeline to a local folder', () => {
  test('without a bucket, `npm start` archives under ARCHIVE_DIR', async () => {
    const { mkdtemp, readFile, rm } = await import('node:fs/promises');
    const { tmpdir } = await import('node:os');
    const { join } = await import('node:path');
    const dir = await mkdtemp(join(tmpdir(), 'archive-'));
    const cs = await startTestCallsync({ ARCHIVE_DIR: dir });
    try {
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-2`, webhookPayload('local-1'));
      assert.equal(res.status, 202);
      const name = callKeySegment({ key: 'ai-agent:agent-2:local-1', callId: 'local-1' });
      const text = await waitFor(
        () => readFile(join(dir, `transcripts/2026/04/08/${name}.txt`), 'utf8').catch(() => null),
        { what: 'local archive' },
      );
      assert.match(text, /\[00:03\] Caller: Hello/);
      const doc = JSON.parse(await readFile(join(dir, `transcripts/2026/04/08/${name}.json`), 'utf8'));
      assert.equal(doc.call.agentId, 'agent-2');
    } finally {
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
