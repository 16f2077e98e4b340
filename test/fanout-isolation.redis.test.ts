// The fan-out against poison: an entry that fails for a reason other than Redis goes to the inbound
// dead letters (whole, as its stored text when the record cannot be a job; moved to the parked
// stream when even the text cannot be) while later calls are delivered; Redis being unavailable
// (here: full) still holds entries back, and a fan-out that makes no progress fails /readyz and
// shows in the metrics. Real Redis (the shared one, and private servers for OOM and the bulk limit).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { runCli } from '../src/cli/index.js';
import { InboundAcceptor, serializeCall } from '../src/ingress/accept.js';
import { createLogger } from '../src/log.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { inboundParkedKey, InboundLog, InboundShard } from '../queues/inbound.js';
import { isRedisUnavailable } from '../queues/connection.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { startLogFanOut } from '../workers/fanout.js';
import { deepWebhookBody, sampleCall } from './support/calls.js';
import { startOpsCallsync } from './support/ops.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';
import { testEnv } from './support/callsync.js';
import { loadConfig } from '../src/config/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline, type CallSummary, type TimelineEntry } from '../queues/timeline.js';
import { callHash } from '../src/model/call.js';

const silent = createLogger({ level: 'silent' });
const ADMIN = 'poison-admin-token-5d1e';

/** The value of one sample of the Prometheus text, or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const have = Object.fromEntries([...(m[3] ?? '').matchAll(/([a-zA-Z_]+)="([^"]*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[4]);
  }
  return undefined;
}
const scrape = async (url: string) => (await fetch(`${url}/metrics`)).text();

/** The log text of a call whose original payload holds `depth` nested arrays (what the edge stores as received). */
function poisonText(callId: string, depth = 10_000): { text: string; callId: string } {
  const body = deepWebhookBody(callId, depth);
  const call = normalizeWebhook(JSON.parse(body), { agentId: 'agent-1', receivedAt: new Date('2026-04-08T10:03:00Z') });
  return { text: serializeCall(call, body), callId };
}

/** Archived call ids (`<callId>.json` files) under `dir`. */
async function archivedIds(dir: string): Promise<Set<string>> {
  const files = await readdir(dir, { recursive: true }).catch(() => [] as string[]);
  // Object names are `<callId>-<16 hex of the call key's hash>.json` (src/model/call.ts callKeySegment).
  return new Set(
    archivedRecords(files).map((f) =>
      f
        .split('/')
        .pop()!
        .slice(0, -'.json'.length)
        .replace(/-[0-9a-f]{16}$/, ''),
    ),
  );
}

describe('isRedisUnavailable', () => {
  const conns: Redis[] = [];
  after(() => conns.forEach((c) => c.disconnect()));

  test('sorts real errors: the connection or Redis itself (retry) from the data sent (isolate)', async () => {
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    conns.push(redis);
    const prefix = uniquePrefix('classify');
    const away = new Redis('redis://127.0.0.1:1', { maxRetriesPerRequest: 1, retryStrategy: () => 100 });
    const failFast = new Redis('redis://127.0.0.1:1', {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      lazyConnect: true,
    });
    conns.push(away, failFast);
    away.on('error', () => undefined);
    failFast.on('error', () => undefined);
    const reject = (p: Promise<unknown>) =>
      p.then(
        () => assert.fail('expected a failure'),
        (err: unknown) => err,
      );
    try {
      await redis.set(`${prefix}:string`, 'x');
      const unavailable = {
        'retries used up (Redis away)': await reject(away.get('k')),
        'offline queue off (Redis away)': await reject(failFast.get('k')),
        'a key of another type (WRONGTYPE)': await reject(redis.xadd(`${prefix}:string`, '*', 'a', 'b')),
        // What ioredis' Cluster client rejects with while a failover outlasts its redirections, or its nodes are gone.
        'a cluster failover outlasting the redirections': new Error(
          'Too many Cluster redirections. Last error: ReplyError: CLUSTERDOWN The cluster is down',
        ),
        'a cluster node disconnected': new Error('Node is disconnected'),
        'the cluster disconnected': new Error('Cluster is disconnected.'),
      };
      for (const [what, err] of Object.entries(unavailable))
        assert.equal(isRedisUnavailable(err), true, `${what}: ${String(err)}`);

      const deep = JSON.parse(`${'['.repeat(10_000)}${']'.repeat(10_000)}`) as unknown;
      const data = {
        'a value too deep to serialize': await reject(Promise.resolve().then(() => JSON.stringify(deep))),
        'a script error about its arguments': await reject(
          redis.eval('return redis.call("INCRBY", KEYS[1], ARGV[1])', 1, `${prefix}:n`, 'not-a-number'),
        ),
        'a type error': await reject(Promise.resolve().then(() => (null as unknown as { x: number }).x)),
      };
      for (const [what, err] of Object.entries(data))
        assert.equal(isRedisUnavailable(err), false, `${what}: ${String(err)}`);
    } finally {
      await cleanupPrefix(prefix);
    }
  });
});

describe('a running callsync (role worker) with a poison entry in its log', () => {
  let dir: string;
  let cs: Awaited<ReturnType<typeof startOpsCallsync>>;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-poison-'));
    cs = await startOpsCallsync({ CALLSYNC_ROLE: 'worker', OPS_PORT: '0', ARCHIVE_DIR: dir, ADMIN_TOKEN: ADMIN });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('later calls are archived; the poison is an inbound dead letter that `callsync dlq list` shows, retried it fails at once again; counted; /readyz stays 200', async () => {
    const counted = await scrape(cs.url);
    const producer = cs.callsync.redis.producer;
    const inbound = new InboundLog(producer, cs.prefix);
    const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 });
    const before = Array.from({ length: 3 }, (_, i) => sampleCall(`w-pre-${i}`));
    const afterIt = Array.from({ length: 3 }, (_, i) => sampleCall(`w-post-${i}`));
    await Promise.all(before.map((c) => acceptor.accept(c)));
    const poison = poisonText('w-poison');
    await producer.xadd(inbound.key, '*', 'id', 'w-poison-entry', 'call', poison.text);
    await Promise.all(afterIt.map((c) => acceptor.accept(c)));

    const expected = [...before, ...afterIt].map((c) => c.callId);
    await waitFor(
      async () => {
        const ids = await archivedIds(dir);
        return expected.every((id) => ids.has(id));
      },
      { timeoutMs: 30_000, what: 'every call around the poison archived' },
    );
    assert.equal((await archivedIds(dir)).has('w-poison'), false);

    const queue = new Queue<CallReceivedJob>(INBOUND_QUEUE, {
      connection: cs.callsync.redis.worker,
      prefix: cs.prefix,
    });
    try {
      // The inbound worker tried it once (the same failure, so permanent) and kept it as a dead letter.
      const letter = await waitFor(async () => (await queue.getFailed()).find((j) => j.id === 'w-poison-entry'), {
        timeoutMs: 15_000,
        what: 'the poison in the inbound dead letters',
      });
      assert.equal(letter.attemptsMade, 1);
      assert.equal(letter.data.call, null);
      assert.equal(letter.data.text, poison.text);
      assert.match(letter.failedReason, /Maximum call stack size exceeded/);

      const out: string[] = [];
      const io = {
        env: { REDIS_URL, QUEUE_PREFIX: cs.prefix },
        out: (l: string) => out.push(l),
        err: (l: string) => out.push(l),
      };
      assert.equal(await runCli(['dlq', 'list', '--queue', 'inbound', '--json'], io), 0);
      const rows = JSON.parse(out.join('\n')) as { id: string; reason: string }[];
      assert.deepEqual(
        rows.map((r) => r.id),
        ['w-poison-entry'],
      );
      assert.match(rows[0]!.reason, /w-poison.*Maximum call stack size exceeded/);

      // An operator's retry reads the stored text again, fails the same way, and is a dead letter at once again.
      out.length = 0;
      assert.equal(await runCli(['dlq', 'retry', '--queue', 'inbound', '--id', 'w-poison-entry'], io), 0);
      await waitFor(
        async () => {
          const job = await queue.getJob('w-poison-entry');
          // A new round (its count starts again), whose first attempt fails for good: failed at once
          // (a transient failure would wait, delayed, for the next of 12).
          return job &&
            job.attemptsMade === 1 &&
            job.finishedOn !== undefined &&
            job.finishedOn > letter.finishedOn! &&
            (await job.getState()) === 'failed'
            ? job
            : null;
        },
        { timeoutMs: 15_000, what: 'the retried dead letter failed again' },
      );
    } finally {
      await queue.close();
    }

    assert.equal(await inbound.length(), 0, 'nothing left in the log');
    const text = await scrape(cs.url);
    // Counters are the process' (other tests of this file add to them): compare with before.
    const delta = (name: string, labels: Record<string, string> = {}) =>
      (sample(text, name, labels) ?? 0) - (sample(counted, name, labels) ?? 0);
    assert.equal(delta('callsync_fanout_errors_total', { kind: 'entry' }), 1);
    assert.equal(delta('callsync_fanout_errors_total', { kind: 'unstorable' }), 0);
    assert.equal(delta('callsync_fanout_dead_lettered_total'), 1);
    assert.equal(sample(text, 'callsync_fanout_stalled'), 0);
    assert.equal((await fetch(`${cs.url}/readyz`)).status, 200);
  });

  test("the poison call's timeline says its fan-out failed, where `callsync call` and `calls --status failed` look; a retry says so too", async () => {
    const producer = cs.callsync.redis.producer;
    const inbound = new InboundLog(producer, cs.prefix);
    const env = { REDIS_URL, QUEUE_PREFIX: cs.prefix };
    const config = loadConfig(testEnv(cs.prefix));
    const timeline = new CallTimeline(producer, redisKeys(config.redis), config.timeline);
    // Acknowledged as the ingress does: an id that begins with the call hash, and a `received` entry.
    const body = deepWebhookBody('w-poison-2');
    const call = normalizeWebhook(JSON.parse(body), { agentId: 'agent-1', receivedAt: new Date() });
    const hash = callHash(call.key);
    const ackId = `${hash}-t1`;
    await timeline.received(call, { jobId: ackId, revision: 'new' });
    await producer.xadd(inbound.key, '*', 'id', ackId, 'call', serializeCall(call, body));

    const summary = async () => {
      const out: string[] = [];
      const io = { env, out: (l: string) => out.push(l), err: (l: string) => out.push(l) };
      assert.equal(await runCli(['call', hash, '--json'], io), 0, out.join('\n'));
      return (JSON.parse(out.join('\n')) as { calls: (CallSummary & { entries: TimelineEntry[] })[] }).calls[0]!;
    };
    const failed = await waitFor(async () => ((await summary()).fanOutFailed ? summary() : null), {
      timeoutMs: 15_000,
      what: "the call's fan-out failure in its timeline",
    });
    assert.equal(failed.fanOutFailed?.jobId, ackId);
    assert.match(failed.fanOutFailed!.reason, /Maximum call stack size exceeded/);
    assert.deepEqual(failed.sinks, {});

    const out: string[] = [];
    const io = { env, out: (l: string) => out.push(l), err: (l: string) => out.push(l) };
    assert.equal(await runCli(['call', hash], io), 0);
    assert.match(
      out.join('\n'),
      new RegExp(
        `^note: its fan-out failed, no sink got a job \\(.*\\): it is an inbound dead letter — callsync dlq retry --queue inbound --id ${ackId} fans it out again$`,
        'm',
      ),
    );
    assert.match(out.join('\n'), /^sinks: fan-out:failed$/m);
    out.length = 0;
    assert.equal(await runCli(['calls', '--since', '1h', '--status', 'failed', '--json'], io), 0);
    const listed = JSON.parse(out.join('\n')) as { calls: CallSummary[] };
    assert.ok(listed.calls.some((c) => c.id === hash && c.fanOutFailed));
    const page = await (
      await fetch(`${cs.url}/admin/queues/calls/${hash}`, { headers: { authorization: `Bearer ${ADMIN}` } })
    ).text();
    assert.match(page, />fan-out: failed</);
    assert.match(page, new RegExp(`callsync dlq retry --queue inbound --id ${ackId}</code> fans it out again`));

    // Retried, it fails the same way: the timeline says retried, then failed again.
    out.length = 0;
    assert.equal(await runCli(['dlq', 'retry', '--queue', 'inbound', '--id', ackId], io), 0, out.join('\n'));
    const again = await waitFor(
      async () => {
        const s = await summary();
        return s.entries.filter((e) => e.event === 'dead-lettered').length === 2 ? s : null;
      },
      { timeoutMs: 15_000, what: 'the retried dead letter failed again' },
    );
    assert.deepEqual(
      again.entries.map((e) => e.event),
      ['received', 'dead-lettered', 'retried', 'dead-lettered'],
    );
    assert.equal(again.fanOutFailed?.jobId, ackId);

    // The Calls page's Retry fan-out does the same (a same-origin JSON POST with the credentials).
    const retry = (id: string) =>
      fetch(`${cs.url}/admin/queues/calls/${id}/retry-fan-out`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' },
        body: '{}',
      });
    assert.match(
      await (
        await fetch(`${cs.url}/admin/queues/calls/${hash}`, { headers: { authorization: `Bearer ${ADMIN}` } })
      ).text(),
      /data-action="retry-fan-out"/,
    );
    const byPage = await retry(hash);
    assert.equal(byPage.status, 200, await byPage.clone().text());
    assert.deepEqual(await byPage.json(), { retried: { queue: 'inbound', jobId: ackId } });
    await waitFor(
      async () => ((await summary()).entries.filter((e) => e.event === 'dead-lettered').length === 3 ? true : null),
      { timeoutMs: 15_000, what: 'the page-retried dead letter failed again' },
    );
    assert.equal((await retry('0'.repeat(32))).status, 404);
  });
});

describe('Redis full (OOM) under the fan-out', () => {
  let redis: PrivateRedis;
  before(async () => {
    redis = await startPrivateRedis({ appendonly: false });
  });
  after(async () => {
    await redis.destroy();
  });

  for (const role of ['worker', 'all'] as const) {
    test(`role ${role}: entries stay in the log (not dead-lettered); no progress fails /readyz and sets callsync_fanout_stalled; memory back: delivered, ready`, async () => {
      const dir = await mkdtemp(join(tmpdir(), 'callsync-oom-'));
      const prefix = uniquePrefix(`oom-${role}`);
      const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
      const calls = Array.from({ length: 4 }, (_, i) => sampleCall(`oom-${role}-${i}`));
      let cs: Awaited<ReturnType<typeof startOpsCallsync>> | undefined;
      try {
        const inbound = new InboundShard(admin, prefix);
        await inbound.ensureGroup();
        const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 });
        await Promise.all(calls.map((c) => acceptor.accept(c)));
        // Every write refused from now on; reads and PING still answer.
        await admin.config('SET', 'maxmemory', '1');
        cs = await startOpsCallsync({
          REDIS_URL: redis.url,
          QUEUE_PREFIX: prefix,
          CALLSYNC_ROLE: role,
          ARCHIVE_DIR: dir,
          ...(role === 'worker' ? { OPS_PORT: '0' } : {}),
          // The fan-out counts as stalled after this long without progress.
          WORKER_LOCK_DURATION_MS: '1500',
        });
        const url = cs.url;
        const counted = await scrape(url);
        const notReady = await waitFor(
          async () => {
            const res = await fetch(`${url}/readyz`);
            return res.status === 503 ? ((await res.json()) as { errors: { detail: string }[] }) : null;
          },
          { timeoutMs: 20_000, what: '/readyz to fail while the fan-out cannot write' },
        );
        assert.match(notReady.errors[0]!.detail, /fan-out has made no progress for \d+ s/);
        // The gauge follows within a check interval.
        let text = await waitFor(
          async () => {
            const t = await scrape(url);
            return sample(t, 'callsync_fanout_stalled') === 1 ? t : null;
          },
          { timeoutMs: 5000, what: 'callsync_fanout_stalled 1' },
        );
        const delta = (name: string, labels: Record<string, string> = {}) =>
          (sample(text, name, labels) ?? 0) - (sample(counted, name, labels) ?? 0);
        assert.ok(delta('callsync_fanout_errors_total', { kind: 'redis' }) > 0);
        assert.equal(
          delta('callsync_fanout_errors_total', { kind: 'entry' }),
          0,
          "a full Redis is not the data's fault",
        );
        assert.equal(await inbound.length(), 4, 'the entries wait in the log');
        assert.equal(await admin.zcard(`${prefix}:${INBOUND_QUEUE}:failed`), 0);

        await admin.config('SET', 'maxmemory', '0');
        await waitFor(
          async () => {
            const ids = await archivedIds(dir);
            return calls.every((c) => ids.has(c.callId));
          },
          { timeoutMs: 30_000, what: 'every call archived once Redis takes writes again' },
        );
        await waitFor(async () => (await fetch(`${url}/readyz`)).status === 200, {
          timeoutMs: 10_000,
          what: '/readyz back to 200',
        });
        text = await waitFor(
          async () => {
            const t = await scrape(url);
            return sample(t, 'callsync_fanout_stalled') === 0 ? t : null;
          },
          { timeoutMs: 5000, what: 'callsync_fanout_stalled 0' },
        );
        assert.equal(await admin.zcard(`${prefix}:${INBOUND_QUEUE}:failed`), 0, 'nothing dead-lettered');
      } finally {
        await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
        await cs?.shutdown('test over');
        admin.disconnect();
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});

describe('a dead letter that cannot be stored even as text', () => {
  let redis: PrivateRedis;
  before(async () => {
    redis = await startPrivateRedis({ appendonly: false });
  });
  after(async () => {
    await redis.destroy();
  });

  test('the entry moves whole, inside Redis, to the parked stream; a dead letter with its head points there; the calls after it flow', async () => {
    const prefix = uniquePrefix('parked');
    const producer = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const worker = new Redis(redis.url, { maxRetriesPerRequest: null });
    const blocking = new Redis(redis.url, { maxRetriesPerRequest: null });
    worker.on('error', () => undefined);
    const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: worker, prefix });
    const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: worker, prefix });
    archive.on('error', () => undefined);
    deadLetters.on('error', () => undefined);
    const inbound = new InboundLog(producer, prefix);
    const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 });
    let fanOut: ReturnType<typeof startLogFanOut> | undefined;
    try {
      // Redis takes no value over 1 MiB. The poison is too deep to serialize as a record, and its
      // text (0.8 MiB of escaped quotes in an unknown field) doubles when written as a job's JSON.
      await producer.config('SET', 'proto-max-bulk-len', String(1024 * 1024));
      const quotes = '\\"'.repeat(400 * 1024);
      const body = deepWebhookBody('big-poison').replace(/}$/, `,"x-notes":"${quotes}"}`);
      const call = normalizeWebhook(JSON.parse(body), {
        agentId: 'agent-1',
        receivedAt: new Date('2026-04-08T10:03:00Z'),
      });
      const text = serializeCall(call, body);
      assert.ok(text.length < 1024 * 1024 && JSON.stringify(text).length > 1024 * 1024);
      await acceptor.accept(sampleCall('park-pre'));
      const entryId = await producer.xadd(inbound.key, '*', 'id', 'big-poison-entry', 'call', text);
      await acceptor.accept(sampleCall('park-post'));

      fanOut = startLogFanOut({
        inbound: new InboundLog(worker, prefix),
        blocking,
        deadLetters,
        routes: [{ when: [{}], to: ['archive'] }],
        sinkQueues: new Map([['archive', archive]]),
        log: silent,
        blockMs: 200,
      });
      await waitFor(async () => (await inbound.length()) === 0, { timeoutMs: 20_000, what: 'the log to drain' });
      const archived = (await archive.getJobs(['waiting'], 0, -1, true)).map((j) => j.data.call.callId);
      assert.deepEqual(archived, ['park-pre', 'park-post']);

      const parked = (await producer.xrange(inboundParkedKey(prefix), '-', '+')) as [string, string[]][];
      assert.equal(parked.length, 1);
      const fields = new Map<string, string>();
      for (let i = 0; i + 1 < parked[0]![1].length; i += 2) fields.set(parked[0]![1][i]!, parked[0]![1][i + 1]!);
      assert.equal(fields.get('entry'), entryId);
      assert.equal(fields.get('id'), 'big-poison-entry');
      assert.equal(fields.get('call'), text, 'the stored text, whole');
      assert.match(fields.get('reason') ?? '', /Maximum call stack size exceeded.*cannot be stored as a job either/);

      const letter = await deadLetters.getJob('big-poison-entry');
      assert.ok(letter, 'a dead letter points at the parked entry');
      assert.equal(letter.data.call, null);
      assert.equal(letter.data.text, text.slice(0, 64 * 1024));
      assert.match(
        letter.data.reason ?? '',
        new RegExp(`kept whole in ${inboundParkedKey(prefix).replace(/[{}]/g, '\\$&')} as ${parked[0]![0]}`),
      );
      assert.equal(await new InboundLog(worker, prefix).pending(), 0);
      assert.equal(((await worker.xinfo('GROUPS', inbound.key)) as unknown[][]).length, 1);
    } finally {
      await fanOut?.close();
      await Promise.all([archive.close(), deadLetters.close()]);
      for (const c of [producer, worker, blocking]) c.disconnect();
    }
  });

  test('an entry that can be kept nowhere stays in the log, unacknowledged, and is counted and tried again; the calls after it flow', async () => {
    const prefix = uniquePrefix('unstorable');
    const producer = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const worker = new Redis(redis.url, { maxRetriesPerRequest: null });
    const blocking = new Redis(redis.url, { maxRetriesPerRequest: null });
    worker.on('error', () => undefined);
    const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: worker, prefix });
    const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: worker, prefix });
    archive.on('error', () => undefined);
    deadLetters.on('error', () => undefined);
    const inbound = new InboundLog(producer, prefix);
    const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 });
    const kinds: string[] = [];
    let fanOut: ReturnType<typeof startLogFanOut> | undefined;
    try {
      // As above, plus 6,000 extra fields: more than the parking script can copy in one XADD.
      await producer.config('SET', 'proto-max-bulk-len', String(1024 * 1024));
      const body = deepWebhookBody('nowhere').replace(/}$/, `,"x-notes":"${'\\"'.repeat(400 * 1024)}"}`);
      const call = normalizeWebhook(JSON.parse(body), {
        agentId: 'agent-1',
        receivedAt: new Date('2026-04-08T10:03:00Z'),
      });
      const extra = Array.from({ length: 6000 }, (_, i) => [`f${i}`, 'x']).flat();
      await acceptor.accept(sampleCall('nowhere-pre'));
      const entryId = (await producer.xadd(
        inbound.key,
        '*',
        'id',
        'nowhere-entry',
        'call',
        serializeCall(call, body),
        ...extra,
      ))!;
      await acceptor.accept(sampleCall('nowhere-post'));

      fanOut = startLogFanOut({
        inbound: new InboundLog(worker, prefix),
        blocking,
        deadLetters,
        routes: [{ when: [{}], to: ['archive'] }],
        sinkQueues: new Map([['archive', archive]]),
        log: silent,
        blockMs: 200,
        claimIdleMs: 300,
        events: { failed: (kind) => kinds.push(kind) },
      });
      await waitFor(async () => (await archive.getJobs(['waiting'], 0, -1)).length === 2, {
        timeoutMs: 20_000,
        what: 'the calls around it fanned out',
      });
      // Taken over and tried again (and again kept nowhere), never acknowledged, never lost.
      await waitFor(() => kinds.filter((k) => k === 'unstorable').length >= 2, {
        timeoutMs: 20_000,
        what: 'the entry tried again',
      });
      await fanOut.close();
      fanOut = undefined;
      const left = await inbound.entries();
      assert.deepEqual(
        left.map((e) => e.entryId),
        [entryId],
      );
      assert.equal(await inbound.pending(), 1, 'still unacknowledged');
      assert.equal(await producer.xlen(inboundParkedKey(prefix)), 0);
      assert.equal(await deadLetters.count(), 0);
    } finally {
      await fanOut?.close();
      await Promise.all([archive.close(), deadLetters.close()]);
      for (const c of [producer, worker, blocking]) c.disconnect();
    }
  });
});
