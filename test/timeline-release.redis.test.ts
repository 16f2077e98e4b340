// A sink attempt's timeline entries ride in the script that releases the call's lock (issue 24 and
// issue 26 item 3): the archive and the signed webhook, attempts recorded in the call's timeline,
// send two commands per attempt (the lock taken, the lock released with the entries) instead of
// three — and the entries say the same as when written apart: done with refs, skipped with the
// reason, and a failure written apart by the attempt. Watched with MONITOR on a private redis-server.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Queue, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { createLogger } from '../src/log.js';
import { ArchiveSink } from '../src/sinks/archive/index.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { WebhookSink, webhookSinkType } from '../src/sinks/crm/webhook.js';
import type { Sink } from '../src/sinks/types.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { RedisKeys } from '../queues/keys.js';
import { JobName, sinkJobId, sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { PlannedRetries, recordAttempts } from '../workers/attempts.js';
import { createDeliverProcessor } from '../workers/deliver.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps } from './support/crm-deps.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { monitorOf } from './support/monitor.js';

describe("a sink attempt's timeline entries in the lock's release", () => {
  let server: PrivateRedis;
  let redis: Redis;
  let watcher: Redis;
  let monitor: {
    on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
    disconnect(): void;
  };
  const seen: { name: string; lua: boolean }[] = [];
  const prefix = 'tr:{q}';
  const keys = new RedisKeys(prefix, 'one-slot', 1);
  const log = createLogger({ level: 'silent' });
  let timeline: CallTimeline;
  const queues: Queue[] = [];

  before(async () => {
    server = await startPrivateRedis({ appendonly: false });
    redis = new Redis(server.url, { maxRetriesPerRequest: null });
    await redis.ping();
    watcher = new Redis(server.url, { maxRetriesPerRequest: 1 });
    monitor = (await monitorOf(watcher)) as unknown as typeof monitor;
    monitor.on('monitor', (_time, args, source) =>
      seen.push({ name: String(args[0]).toLowerCase(), lua: source === 'lua' }),
    );
    timeline = new CallTimeline(redis, keys, { ttlDays: 1, privacySecret: 'test-privacy-key' });
  });

  after(async () => {
    for (const q of queues) await q.close();
    monitor.disconnect();
    watcher.disconnect();
    redis.disconnect();
    await server.destroy();
  });

  /** The commands sent while `fn` ran (MONITOR's lines arrive just after: waited for with a PING marker). */
  async function sentDuring(fn: () => Promise<unknown>): Promise<string[]> {
    await settle();
    seen.length = 0;
    await fn().catch((err: unknown) => err);
    await settle();
    return seen.filter((c) => !c.lua && c.name !== 'ping').map((c) => c.name);
  }
  async function settle(): Promise<void> {
    const count = () => seen.filter((c) => c.name === 'ping').length;
    const before = count();
    await redis.ping();
    for (let i = 0; i < 200 && count() === before; i++) await new Promise((r) => setTimeout(r, 10));
  }

  /** A real sink job in the sink's queue, and the attempt's processor as the runner wraps it. */
  async function attemptOf(sink: Sink, name: string, endpoint: string | undefined, id: string, stamp: string) {
    const queueName = sinkQueueName(name, endpoint);
    const queue = new Queue<SinkDeliverJob>(queueName, { connection: redis, prefix: keys.queuePrefix(queueName) });
    queues.push(queue);
    const call = { ...sampleCall(id), revision: { stamp, update: false, content: 'a' } };
    const job = await queue.add(
      JobName.sinkDeliver,
      { kind: JobName.sinkDeliver, sink: name, ...(endpoint ? { endpoint } : {}), call },
      { jobId: `${sinkJobId(call)}-${randomBytes(3).toString('hex')}`, attempts: 3 },
    );
    const recorded = recordAttempts(
      queueName,
      createDeliverProcessor(sink, log, endpoint),
      timeline,
      new PlannedRetries({ attempts: 3, backoffMs: 1000, maxBackoffMs: 60_000 }),
      3,
    );
    return {
      run: () => recorded(job as unknown as Job<SinkDeliverJob>, new AbortController().signal),
      entries: () => timeline.read(timelineId(call)),
    };
  }

  it('the archive: two commands per attempt; done with its refs, skipped with its reason', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-tr-'));
    try {
      const state = new RedisKeyValueStore(redis, `${prefix}:state:`).scoped('archive');
      const archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, null, state);
      // The scripts' first run may send their text (NOSCRIPT, then EVAL): not counted.
      await (await attemptOf(archive, 'archive', undefined, 'tr-warm', '1775642600000-0')).run();

      const newer = await attemptOf(archive, 'archive', undefined, 'tr-a', '1775642600000-1');
      assert.deepEqual(await sentDuring(newer.run), ['evalsha', 'evalsha']);
      const done = await newer.entries();
      assert.deepEqual(
        done.map((e) => e.event),
        ['attempt', 'done'],
      );
      assert.equal(done[1]!.attempt, 1);
      assert.match(done[1]!.refs?.json ?? '', /tr-a-[0-9a-f]+\.json$/);
      assert.equal(done[1]!.refs?.location, `file://${dir}`);
      assert.equal(typeof done[1]!.durationMs, 'number');

      // An older revision of the same call: skipped, with the reason, in the same two commands.
      const older = await attemptOf(archive, 'archive', undefined, 'tr-a', '1775642600000-0');
      assert.deepEqual(await sentDuring(older.run), ['evalsha', 'evalsha']);
      const all = await older.entries();
      const skipped = all.find((e) => e.event === 'skipped');
      assert.equal(skipped?.skip, 'newer-revision');
      assert.match(skipped?.reason ?? '', /newer revision/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('a timeline the script cannot append to fails neither the release nor the attempt', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-tr-'));
    try {
      const state = new RedisKeyValueStore(redis, `${prefix}:state:`).scoped('archive');
      const archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, null, state);
      const attempt = await attemptOf(archive, 'archive', undefined, 'tr-wrongtype', '1775642600000-0');
      const id = timelineId(sampleCall('tr-wrongtype'));
      await redis.set(timeline.key(id), 'not a list');
      const result = (await attempt.run()) as { status: string };
      assert.equal(result.status, 'done');
      assert.equal(await redis.get(`${prefix}:state:archive:lock:${id}`), null, 'the lock is released');
      assert.equal(await redis.get(`${prefix}:state:archive:rev:${id}`), '1775642600000-0', 'the stamp is written');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('the signed webhook: two commands per attempt; a failed attempt writes its entries apart', async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const deps = crmTestDeps({ CRM_WEBHOOK_SECRET: secret });
    deps.clock.now = Date.now(); // the receiver checks the signature's timestamp against the real clock
    const receiver = await new FakeWebhookReceiver(secret).start();
    try {
      const state = new RedisKeyValueStore(redis, `${prefix}:state:`).scoped('crm');
      const options = webhookSinkType.options.parse({
        endpoints: [
          { name: 'up', url: receiver.url },
          { name: 'down', url: 'http://127.0.0.1:1/hook' },
        ],
      });
      const webhook = new WebhookSink('crm', options, { ...deps, state });
      await (await attemptOf(webhook, 'crm', 'up', 'tr-warm', '1775642600000-0')).run();

      const sent = await attemptOf(webhook, 'crm', 'up', 'tr-w', '1775642600000-0');
      assert.deepEqual(await sentDuring(sent.run), ['evalsha', 'evalsha']);
      const entries = await sent.entries();
      assert.deepEqual(
        entries.map((e) => [e.event, e.endpoint]),
        [
          ['attempt', 'up'],
          ['done', 'up'],
        ],
      );
      assert.match(entries[1]!.refs?.webhookId ?? '', /^msg_/);

      // Nothing answers: the attempt fails, its entries (a retry) are written apart after the release.
      const failing = await attemptOf(webhook, 'crm', 'down', 'tr-f', '1775642600000-0');
      // (The plain release's and the timeline's scripts run for the first time here: EVAL or EVALSHA.)
      assert.equal((await sentDuring(failing.run)).length, 3);
      const failed = await failing.entries();
      assert.deepEqual(
        failed.map((e) => e.event),
        ['attempt', 'retry'],
      );
      assert.equal(failed[1]!.kind, 'transient');
    } finally {
      await receiver.stop();
      await deps.close();
    }
  });
});
