// End to end over a real port: webhook -> Redis -> fan-out -> archive sink -> S3 (s3rver).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { INBOUND_QUEUE, sinkQueueName } from '../queues/registry.js';
import { minimalPayload, webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';

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
    const keys = await waitFor(async () => {
      const k = await s3.list('callsync/transcripts/2026/04/08/');
      return k.length === 2 ? k : null;
    }, { what: 'archived objects' });
    assert.deepEqual(keys, ['callsync/transcripts/2026/04/08/pipe-1.json', 'callsync/transcripts/2026/04/08/pipe-1.txt']);

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
    const results = await Promise.all([1, 2, 3].map(() => postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('dup-pipe'))));
    assert.deepEqual(results.map((r) => r.status), [202, 202, 202]);
    assert.equal(results.filter((r) => r.body.duplicate === false).length, 1);
    assert.equal(new Set(results.map((r) => r.body.id)).size, 1);
    const sinkQueue = new Queue(sinkQueueName('archive'), { connection: cs.redis.worker, prefix: cs.prefix });
    await waitFor(async () => ((await sinkQueue.getJobCounts('completed')).completed ?? 0) >= 2, { what: 'archive jobs' });
    const inbound = new Queue(INBOUND_QUEUE, { connection: cs.redis.worker, prefix: cs.prefix });
    const calls = (await inbound.getJobs(['completed', 'waiting', 'active'])).filter((j) => j.data.call.callId === 'dup-pipe');
    assert.equal(calls.length, 1, 'one inbound job');
    const sinkJobs = (await sinkQueue.getJobs(['completed', 'waiting', 'active', 'delayed'])).filter((j) => j.data.call.callId === 'dup-pipe');
    assert.equal(sinkJobs.length, 1, 'one archive job');
    await Promise.all([sinkQueue.close(), inbound.close()]);
  });

  test('a call without transcript or summary is not archived by the default route', async () => {
    const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('bare-1'));
    assert.equal(res.status, 202);
    const inbound = new Queue(INBOUND_QUEUE, { connection: cs.redis.worker, prefix: cs.prefix });
    // Read the job again once it is completed: a handle fetched earlier has no return value yet.
    const job = await waitFor(async () => {
      const j = await inbound.getJob(res.body.id);
      return j?.finishedOn ? j : null;
    }, { what: 'fan-out' });
    assert.deepEqual(job.returnvalue, { sinks: [] });
    await inbound.close();
  });

  test('S3 down for a while, then back: everything archived, nothing lost', async () => {
    await s3.stop();
    const ids = Array.from({ length: 10 }, (_, i) => `outage-${i}`);
    for (const id of ids) assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    const sinkQueue = new Queue(sinkQueueName('archive'), { connection: cs.redis.worker, prefix: cs.prefix });
    // Wait until the failures are real: jobs retried at least once while S3 was away.
    await waitFor(async () => {
      const jobs = await sinkQueue.getJobs(['delayed', 'waiting', 'active']);
      return jobs.filter((j) => j.data.call.callId.startsWith('outage-') && j.attemptsMade >= 1).length >= 5;
    }, { what: 'retries during the outage', timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 1500));
    await s3.start();
    const keys = await waitFor(async () => {
      const k = (await s3.list('callsync/transcripts/')).filter((key) => key.includes('/outage-'));
      return k.length === ids.length * 2 ? k : null;
    }, { what: 'archive after the outage', timeoutMs: 30_000 });
    assert.equal(keys.length, 20);
    assert.equal(((await sinkQueue.getJobCounts('failed')).failed ?? 0), 0, 'nothing dead-lettered');
    await sinkQueue.close();
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
      const text = await waitFor(() => readFile(join(dir, 'transcripts/2026/04/08/local-1.txt'), 'utf8').catch(() => null), { what: 'local archive' });
      assert.match(text, /\[00:03\] Caller: Hello/);
      const doc = JSON.parse(await readFile(join(dir, 'transcripts/2026/04/08/local-1.json'), 'utf8'));
      assert.equal(doc.call.agentId, 'agent-2');
    } finally {
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
