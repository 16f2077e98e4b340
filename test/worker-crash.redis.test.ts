// A worker process killed with SIGKILL mid-run and started again: every job still completes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { callHash } from '../src/model/call.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { InboundShard } from '../queues/inbound.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { webhookPayload } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

function startWorker(env: Record<string, string>): ChildProcess {
  const child = spawn(process.execPath, ['--import', 'tsx', 'workers/main.ts'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  return child;
}

test('SIGKILL a worker mid-run, restart it: every job completes, none dead-lettered', async () => {
  const prefix = uniquePrefix('crash');
  const dir = await mkdtemp(join(tmpdir(), 'crash-archive-'));
  const env = {
    CALLSYNC_ROLE: 'worker',
    // No ops server: its default port (9464) may be taken by another test run on this machine.
    OPS_PORT: 'off',
    REDIS_URL,
    QUEUE_PREFIX: prefix,
    ARCHIVE_DIR: dir,
    WORKER_CONCURRENCY: '4',
    WORKER_STALLED_INTERVAL_MS: '1000',
    WORKER_LOCK_DURATION_MS: '2000',
    JOB_BACKOFF_MS: '50',
    LOG_LEVEL: 'warn',
  };
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  // The dead letters of the inbound log: nothing should ever land there in this test.
  const inbound = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: redis, prefix });
  const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: redis, prefix });
  const log = new InboundShard(redis, prefix);
  const acceptor = new InboundAcceptor(log, { dedupeWindowMs: 60_000, timeoutMs: 5000 });
  const total = 400;
  const keys: string[] = [];
  let worker: ChildProcess | undefined;
  try {
    for (let i = 0; i < total; i++) {
      const call = normalizeWebhook(webhookPayload(`crash-${i}`), { agentId: 'a', receivedAt: new Date() });
      const result = await acceptor.accept(call);
      assert.equal(result.duplicate, false);
      keys.push(call.key);
    }
    assert.equal(await log.length(), total, 'every call is in the inbound log');
    // A fan-out killed mid-batch: it read entries and never acknowledged them. The worker must take
    // them over (after WORKER_LOCK_DURATION_MS), as it takes over the sink jobs the kill below stalls.
    await log.ensureGroup();
    const inFlight = await log.read('killed-fanout', 50, 1);
    assert.equal(inFlight.length, 50);
    assert.equal(await log.pending(), 50);
    worker = startWorker(env);
    // Kill it once it is well into the work, but not done.
    await waitFor(async () => ((await archive.getJobCounts('completed')).completed ?? 0) >= 40, {
      timeoutMs: 60_000,
      what: 'first completions',
    });
    worker.kill('SIGKILL');
    await new Promise((r) => worker!.once('exit', r));
    const midway = await archive.getJobCounts('completed');
    assert.ok((midway.completed ?? 0) < total, 'the kill happened mid-run');

    worker = startWorker(env);
    // Every call fanned out (the log is empty: each entry acknowledged and deleted) and archived.
    await waitFor(
      async () => {
        const [a, length] = await Promise.all([archive.getJobCounts('completed'), log.length()]);
        return a.completed === total && length === 0;
      },
      { timeoutMs: 120_000, what: 'all jobs completed after restart' },
    );
    assert.equal(await log.pending(), 0, 'no log entry left unacknowledged');
    const failed =
      ((await archive.getJobCounts('failed')).failed ?? 0) + ((await inbound.getJobCounts('failed')).failed ?? 0);
    assert.equal(failed, 0);
    const deadLetters = await inbound.getJobCounts();
    assert.equal(
      Object.values(deadLetters).reduce((a, b) => a + b, 0),
      0,
      `no call went to the inbound dead letters: ${JSON.stringify(deadLetters)}`,
    );
    // One archive job per call, with the call's deterministic job id.
    const sinkJobs = await archive.getJobs([
      'waiting',
      'active',
      'completed',
      'failed',
      'delayed',
      'prioritized',
      'waiting-children',
    ]);
    assert.equal(sinkJobs.length, total);
    assert.deepEqual(new Set(sinkJobs.map((j) => j.id)), new Set(keys.map(callHash)));
    assert.deepEqual(sinkJobs.map((j) => j.data.call.key).sort(), [...keys].sort());
    const files = await readdir(join(dir, 'transcripts/2026/04/08'));
    assert.equal(archivedRecords(files).length, total);
    assert.equal(files.filter((f) => f.endsWith('.txt')).length, total);
  } finally {
    if (worker && worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker!.once('exit', r));
    }
    await Promise.all([inbound.close(), archive.close()]);
    redis.disconnect();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  }
});
