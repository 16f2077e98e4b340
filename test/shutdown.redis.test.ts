// Graceful shutdown of a real `callsync start` process: SIGTERM in the middle of a burst of
// webhooks. New requests are refused (503 or connection refused, never a lost 202), requests and
// jobs in progress finish, the process exits 0; after a restart every acknowledged call is
// archived exactly once and no job was ever started twice.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { callHash } from '../src/model/call.js';
import { InboundLog } from '../queues/inbound.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { webhookPayload } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';
import {
  bounded,
  startCallsyncProcess as startChild,
  type CallsyncProcess as Child,
} from './support/callsync-process.js';

async function archivedCallIds(dir: string): Promise<string[]> {
  const files = (await readdir(dir, { recursive: true }).catch(() => [] as string[])) as string[];
  // `<call id>-<16 hex>.json` (the ids here need no making safe).
  return archivedRecords(files).map((f) =>
    f
      .split('/')
      .pop()!
      .replace(/-[0-9a-f]{16}\.json$/, ''),
  );
}

describe('graceful shutdown on SIGTERM', () => {
  const prefix = uniquePrefix('shutdown');
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const children: Child[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-shutdown-'));
    env = {
      CALLSYNC_FROM_SOURCE: '1',
      REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      ARCHIVE_DIR: dir,
      WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
      LOG_LEVEL: 'info',
      SHUTDOWN_GRACE_MS: '30000',
      WORKER_CONCURRENCY: '4',
      CALLSYNC_CONFIG: '',
    };
  });
  after(async () => {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill('SIGKILL');
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('every acknowledged webhook is processed exactly once, and the process exits 0', async (t) => {
    const first = startChild(env);
    children.push(first);
    const url = await bounded(first.url, 60_000, 'the first process to listen', first);
    const hook = `${url}/webhooks/ai-agent/agent-1`;

    const acked = new Set<string>();
    const refused: number[] = [];
    const unanswered = new Set<string>();
    let exited = false;
    void first.exit.then(() => (exited = true));
    let next = 0;
    let signalled = false;

    // Eight senders post distinct calls until the process is gone; SIGTERM after 30 acknowledgements.
    const sender = async () => {
      while (!exited && next < 2000) {
        const callId = `burst-${next++}`;
        try {
          const res = await fetch(hook, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(webhookPayload(callId)),
          });
          const body = (await res.json()) as { errors?: { status: number }[] };
          if (res.status === 202) acked.add(callId);
          else {
            assert.equal(res.status, 503, `only 503 during shutdown, got ${res.status}`);
            assert.equal(body.errors?.[0]?.status, 503);
            assert.ok(res.headers.get('retry-after'), '503 carries Retry-After');
            refused.push(res.status);
          }
        } catch {
          // Connection refused or closed: not acknowledged, the sender would retry.
          unanswered.add(callId);
          await new Promise((r) => setTimeout(r, 5));
        }
        if (!signalled && acked.size >= 30) {
          signalled = true;
          first.proc.kill('SIGTERM');
        }
      }
    };
    await bounded(Promise.all(Array.from({ length: 8 }, sender)), 120_000, 'the burst and the shutdown', first);
    const code = await bounded(first.exit, 60_000, 'the first process to exit', first);
    assert.equal(code, 0, `exit code; stderr: ${first.stderr.join('\n').slice(-2000)}`);
    t.diagnostic(`acknowledged ${acked.size}, refused with 503 ${refused.length}, unanswered ${unanswered.size}`);
    assert.ok(signalled, 'SIGTERM was sent mid-burst');
    assert.ok(acked.size >= 30);
    assert.ok(refused.length + unanswered.size > 0, 'requests after SIGTERM were turned away');
    const msgs = first.lines.map((l) => l.msg);
    assert.ok(msgs.includes('shutting down: refusing new requests, finishing work in progress'));
    assert.equal(msgs.at(-1), 'stopped');
    {
      // The fan-out finished the batch in hand: nothing it read is left unacknowledged (such entries
      // would be fanned out a second time by the takeover). Unread entries may wait in the log.
      const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
      try {
        assert.equal(
          await new InboundLog(redis, prefix).pending(),
          0,
          'no inbound log entry left in flight by the stopped process',
        );
      } finally {
        redis.disconnect();
      }
    }

    // Start again: whatever was acknowledged but not yet processed is picked up.
    const second = startChild(env);
    children.push(second);
    await bounded(second.url, 60_000, 'the second process to listen', second);
    const archived = await waitFor(
      async () => {
        const ids = await archivedCallIds(dir);
        return [...acked].every((id) => ids.includes(id)) ? ids : null;
      },
      { timeoutMs: 90_000, intervalMs: 250, what: 'every acknowledged call archived' },
    );

    // Exactly once: one archive object per call, each call fanned out once (one sink job, no log
    // entry taken over from a stopped fan-out) and no archive job started twice.
    assert.equal(new Set(archived).size, archived.length);
    for (const id of archived)
      assert.ok(acked.has(id) || unanswered.has(id), `${id} was archived but refused with 503`);
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const log = new InboundLog(redis, prefix);
    const inbound = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: redis, prefix });
    const sink = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: redis, prefix });
    try {
      await waitFor(
        async () => {
          const [a, b, entries] = await Promise.all([
            inbound.getJobCounts('waiting', 'active', 'delayed'),
            sink.getJobCounts('waiting', 'active', 'delayed'),
            log.length(),
          ]);
          return entries === 0 && [a, b].every((c) => (c.waiting ?? 0) + (c.active ?? 0) + (c.delayed ?? 0) === 0);
        },
        { timeoutMs: 30_000, what: 'inbound log and queues drained' },
      );
      assert.equal(await log.pending(), 0, 'no inbound log entry left unacknowledged');
      assert.equal(
        (await inbound.getJobs(['failed'])).length + (await sink.getJobs(['failed'])).length,
        0,
        'no dead letters',
      );
      const deadLetters = await inbound.getJobs(['completed', 'failed']);
      assert.deepEqual(
        deadLetters.map((j) => j.id),
        [],
        'no call went through the inbound dead letters',
      );
      const notes = [...first.lines, ...second.lines].map((l) => String(l.msg));
      assert.ok(
        !notes.some((m) => m.startsWith('taking over inbound entries')),
        'no inbound log entry was fanned out twice',
      );
      const sinkJobs = await sink.getJobs(['completed', 'failed', 'waiting', 'active', 'delayed']);
      for (const id of acked) {
        const jobs = sinkJobs.filter((j) => j.data.call.callId === id);
        assert.equal(jobs.length, 1, `one archive job for ${id}`);
        const sinkJob = jobs[0]!;
        assert.equal(sinkJob.id, callHash(sinkJob.data.call.key), `archive job of ${id} has the call's job id`);
        assert.equal(await sinkJob.getState(), 'completed');
        assert.equal(sinkJob.attemptsStarted, 1, `archive job of ${id} started once`);
      }
    } finally {
      await inbound.close();
      await sink.close();
      redis.disconnect();
    }

    second.proc.kill('SIGTERM');
    assert.equal(await bounded(second.exit, 60_000, 'the second process to exit', second), 0);
  });
});
