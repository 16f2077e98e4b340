// A call's timeline is complete under crashes: a worker killed with SIGKILL while its sink attempts
// hang, and started again, leaves each call's timeline with both attempts (the one cut short and
// the one that delivered), ending in done.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { InboundShard } from '../queues/inbound.js';
import { RedisKeys } from '../queues/keys.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { webhookPayload } from './support/calls.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const OUTCOMES = new Set(['done', 'skipped', 'dead-lettered']);

function startWorker(env: Record<string, string>): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', 'workers/main.ts'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
}

test('SIGKILL mid-delivery, restart: each timeline shows the attempt cut short and the one that delivered', async () => {
  const prefix = uniquePrefix('tlcrash');
  const dir = await mkdtemp(join(tmpdir(), 'tlcrash-archive-'));
  // The endpoint holds every request (never answers) until `answering`: the attempts hang until the kill.
  let answering = false;
  const held: ServerResponse[] = [];
  let received = 0;
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      received++;
      if (answering) res.writeHead(200).end('{}');
      else held.push(res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
  const env = {
    CALLSYNC_ROLE: 'worker',
    OPS_PORT: 'off',
    REDIS_URL,
    QUEUE_PREFIX: prefix,
    ARCHIVE_DIR: dir,
    CRM_WEBHOOK_URL: url,
    CRM_WEBHOOK_SECRET: `whsec_${randomBytes(32).toString('base64')}`,
    WORKER_CONCURRENCY: '8',
    WORKER_STALLED_INTERVAL_MS: '1000',
    WORKER_LOCK_DURATION_MS: '2000',
    JOB_BACKOFF_MS: '50',
    LOG_LEVEL: 'fatal',
  };
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  const timeline = new CallTimeline(redis, new RedisKeys(prefix, 'one-slot', 1), { ttlDays: 30 });
  const acceptor = new InboundAcceptor(new InboundShard(redis, prefix), {
    dedupeWindowMs: 60_000,
    timeoutMs: 5000,
    timeline,
  });
  const total = 5;
  const ids: string[] = [];
  let worker: ChildProcess | undefined;
  try {
    for (let i = 0; i < total; i++) {
      const call = normalizeWebhook(webhookPayload(`tlcrash-${i}`), { agentId: 'a', receivedAt: new Date() });
      await acceptor.accept(call);
      ids.push(timelineId(call));
    }
    worker = startWorker(env);
    await waitFor(() => received >= total, { timeoutMs: 60_000, what: 'every call attempted (and held)' });
    worker.kill('SIGKILL');
    await new Promise((r) => worker!.once('exit', r));
    for (const res of held) res.destroy();
    answering = true;

    worker = startWorker(env);
    const timelines = await waitFor(
      async () => {
        const all = await Promise.all(ids.map((id) => timeline.read(id)));
        // Delivered, and no attempt after it still running: an archive written just before the
        // kill has its job run again by the next worker (its `attempt` then follows the `done`).
        const ended = (entries: { event: string; sink?: string }[], sink: string) =>
          entries.some((e) => e.event === 'done' && e.sink === sink) &&
          OUTCOMES.has(entries.filter((e) => e.sink === sink).at(-1)!.event);
        return all.every((entries) => ended(entries, 'webhook') && ended(entries, 'archive')) ? all : null;
      },
      { timeoutMs: 90_000, what: 'every call delivered to the webhook' },
    );
    for (const entries of timelines) {
      const events = entries.map((e) => e.event);
      assert.ok(
        !entries.some((e) => e.event === 'retry' || e.event === 'dead-lettered'),
        'the cut-short attempt is no failure',
      );
      assert.deepEqual(events.slice(0, 2), ['received', 'fanned-out']);
      const attempts = entries.filter((e) => e.event === 'attempt' && e.sink === 'webhook');
      assert.equal(attempts.length, 2, `both attempts shown: ${JSON.stringify(entries)}`);
      assert.equal(
        entries.filter((e) => e.sink === 'webhook').at(-1)?.event,
        'done',
        'the webhook attempts end in done',
      );
      // Complete: every sink the fan-out names ends in an outcome (done, skipped or dead-lettered).
      const routed = entries.find((e) => e.event === 'fanned-out')!.sinks!;
      assert.deepEqual([...routed].sort(), ['archive', 'webhook']);
      for (const sink of routed) {
        const last = entries.filter((e) => e.sink === sink).at(-1)?.event;
        assert.ok(OUTCOMES.has(last!), `${sink} ends in an outcome, not ${last}`);
      }
    }
  } finally {
    if (worker && worker.exitCode === null) {
      worker.kill('SIGTERM');
      await new Promise((r) => worker!.once('exit', r));
    }
    for (const res of held) res.destroy();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    redis.disconnect();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  }
});
