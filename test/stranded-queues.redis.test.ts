// A sink taken out of the configuration leaves jobs in its queue that no process will run: the
// worker says so at start, once in its log and in /readyz (still ready), `callsync check-config`
// lists it, and `callsync call` says where such a call's job waits. Not stranded: an emptied queue,
// one another process works.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline, type CallSummary } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { strandedOf } from '../src/ops/stranded-queues.js';
import { pauseQueue, pauseState } from '../queues/disabled.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { testEnv } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { cli } from './support/cli.js';

const TOKEN = 'stranded-admin-token-41c9';
const STRANDED =
  /^queue sink-gone holds jobs no process works \(2 waiting, 1 delayed; 0 dead letters\): its sink is not in this configuration/;

/** The configuration of these tests: the archive, and a signed webhook with one endpoint ("a"). */
async function writeConfig(dir: string): Promise<string> {
  const config = join(dir, 'callsync.yaml');
  await writeFile(
    config,
    `sinks:
  archive: { type: archive, dir: ${join(dir, 'archive')} }
  hook:
    type: webhook
    secrets: ["whsec_${Buffer.from('a'.repeat(32)).toString('base64')}"]
    endpoints:
      - { name: a, url: "http://127.0.0.1:9/a" }
routes:
  - to: [archive, hook]
`,
  );
  return config;
}

describe('queues of sinks no longer configured', () => {
  const prefix = uniquePrefix('stranded');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  let dir: string;
  let env: Record<string, string>;
  let cs: OpsCallsync | undefined;

  /** A queue of this prefix, as the sink's worker had it. */
  const queue = (name: string) => {
    const keys = redisKeys(loadConfig(testEnv(prefix)).redis);
    return new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) });
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-stranded-'));
    // What a removed sink "gone" left: two calls waiting, one waiting for its next attempt.
    const gone = queue('sink-gone');
    await gone.add('sink.deliver', { call: { callId: 'c-1' } }, { jobId: 'j1' });
    await gone.add('sink.deliver', { call: { callId: 'c-2' } }, { jobId: 'j2' });
    await gone.add('sink.deliver', { call: { callId: 'c-3' } }, { jobId: 'j3', delay: 3_600_000 });
    // A removed sink whose queue was emptied: nothing stranded.
    const emptied = queue('sink-emptied');
    await (await emptied.add('sink.deliver', { call: { callId: 'c-4' } }, { jobId: 'j4' })).remove();
    await Promise.all([gone.close(), emptied.close()]);
    // Configured: the archive, and a signed webhook with one endpoint ("a"); its endpoint "b" is gone.
    const config = await writeConfig(dir);
    env = { QUEUE_PREFIX: prefix, CALLSYNC_CONFIG: config, SPOOL_DIR: join(dir, 'spool'), ADMIN_TOKEN: TOKEN };
  });
  after(async () => {
    await cs?.stop();
    redis.disconnect();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('the worker says so at start: one log line, a /readyz warning (still ready)', async () => {
    cs = await startOpsCallsync(env);
    const lines = cs.logs.filter((l) => typeof l.msg === 'string' && STRANDED.test(l.msg));
    assert.equal(lines.length, 1, JSON.stringify(cs.logs.map((l) => l.msg)));
    assert.equal(lines[0]?.level, 40);
    assert.match(
      String(lines[0]?.msg),
      /add the sink back, start a worker whose configuration has it, or give its jobs up as dead letters with callsync dlq abandon --queue sink-gone/,
    );
    // The command the line names runs as written.
    const named = /\((callsync dlq [^)]*) shows its dead letters\)/.exec(String(lines[0]?.msg))?.[1];
    assert.ok(named, String(lines[0]?.msg));
    const listed = await cli(named.split(' ').slice(1), env);
    assert.equal(listed.code, 0, listed.err);
    const res = await fetch(`${cs.url}/readyz`);
    const body = (await res.json()) as { status: string; warnings?: string[] };
    assert.equal(res.status, 200);
    assert.equal(body.status, 'ready');
    assert.equal(body.warnings?.length, 1, JSON.stringify(body));
    assert.match(body.warnings![0]!, STRANDED);

    const check = await cli(['check-config'], env);
    assert.equal(check.code, 0, check.err);
    assert.match(check.out, /- queue sink-gone holds jobs no process works \(2 waiting, 1 delayed; 0 dead letters\)/);
    assert.doesNotMatch(check.out, /sink-emptied/);
  });

  test('a call waiting for such a sink says where its job waits: callsync call and calls, the API, the page', async () => {
    const config = loadConfig(testEnv(prefix, env));
    const timeline = new CallTimeline(redis, redisKeys(config.redis), config.timeline);
    /** A call received and fanned out, its sinks not yet attempted. */
    const fannedOut = async (callId: string, sinks: string[], endpoints?: Record<string, string[]>) => {
      const call = {
        key: callKey('ai-agent', 'agent-1', callId),
        source: 'ai-agent' as const,
        callId,
        direction: 'in' as const,
        from: null,
        to: null,
        startedAt: new Date().toISOString(),
      };
      const jobId = callHash(call.key);
      await timeline.received(call, { jobId, revision: 'new' });
      await timeline.fannedOut(call, { jobId, routes: ['all'], sinks, ...(endpoints ? { endpoints } : {}) });
      return jobId;
    };
    const gone = await fannedOut('c-1', ['archive', 'gone']);
    const endpoint = await fannedOut('c-2', ['archive', 'hook'], { hook: ['a', 'b'] });
    const GONE =
      'sink gone is not in this configuration: the job waits in queue sink-gone for a worker whose configuration has it';
    const B =
      'endpoint b of sink hook is not in this configuration: the job waits in queue sink-hook.b for a worker whose configuration has it';

    const shown = await cli(['call', gone], env);
    assert.equal(shown.code, 0, shown.err);
    assert.match(shown.out, new RegExp(`^note: ${GONE} \\(docs/operations.md`, 'm'));
    assert.doesNotMatch(shown.out, /note: sink archive/);
    const json = await cli(['call', gone, '--json'], env);
    const [call] = (JSON.parse(json.out) as { calls: CallSummary[] }).calls;
    assert.deepEqual(call?.unconfigured, { gone: 'sink-gone' });
    assert.deepEqual(call?.sinks, { archive: 'pending', gone: 'pending' });
    assert.equal(call?.reasons.gone, GONE);

    // An endpoint taken out of a sink still configured.
    const byEndpoint = await cli(['call', endpoint], env);
    assert.match(byEndpoint.out, new RegExp(`^note: ${B.replace('.', '\\.')}`, 'm'));
    assert.doesNotMatch(byEndpoint.out, /note: endpoint a|note: sink archive/);

    const listed = await cli(['calls', '--since', '1h'], env);
    assert.equal(listed.code, 0, listed.err);
    assert.match(listed.out, /archive:pending gone:pending\*/);
    assert.match(listed.out, /archive:pending hook\.a:pending hook\.b:pending\*/);
    assert.match(listed.out, /^\* not in this configuration: the job waits for a worker whose configuration has it/m);

    // The calls' JSON API and the Calls page say the same.
    const api = (path: string) => fetch(`${cs!.url}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const one = (await (await api(`/api/calls/${endpoint}`)).json()) as { calls: CallSummary[] };
    assert.deepEqual(one.calls[0]?.unconfigured, { 'hook.b': 'sink-hook.b' });
    assert.equal(one.calls[0]?.reasons['hook.b'], B);
    const list = (await (await api('/api/calls?since=1h')).json()) as { calls: CallSummary[] };
    assert.deepEqual(
      list.calls.map((c) => c.unconfigured),
      [{ 'hook.b': 'sink-hook.b' }, { gone: 'sink-gone' }],
    );
    const page = await (await api(`/admin/queues/calls/${gone}`)).text();
    assert.match(page, new RegExp(`<p class="unconfigured" data-sink="gone">${GONE}</p>`));
    assert.match(page, />gone: pending \(not configured\)</);
  });

  test('a queue another process works is not stranded; once emptied, the warning goes', async () => {
    const keys = redisKeys(loadConfig(testEnv(prefix)).redis);
    // Another process runs sink "gone": its worker holds the jobs it takes.
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const worker = new Worker('sink-gone', () => held, {
      connection,
      prefix: keys.queuePrefix('sink-gone'),
    });
    try {
      await worker.waitUntilReady();
      await waitFor(async () => (await strandedOf(redis, keys, ['sink-gone'])).length === 0 || null, {
        what: 'the other process counted as a worker',
      });
    } finally {
      release();
      await worker.close();
      connection.disconnect();
    }
    // The other process is gone again; its queue is emptied (`drain`: the waiting and delayed jobs).
    const gone = queue('sink-gone');
    await gone.drain(true);
    await gone.close();
    await cs!.callsync.stranded!.lookOnce();
    const res = await fetch(`${cs!.url}/readyz`);
    assert.deepEqual(await res.json(), { status: 'ready' });
  });
});

describe('callsync dlq abandon: the jobs of a queue no worker runs become dead letters', () => {
  const prefix = uniquePrefix('abandon');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  let dir: string;
  let env: Record<string, string>;
  let keys: ReturnType<typeof redisKeys>;
  const queue = (name: string) => new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) });
  /** A sink job as the fan-out adds it: its id begins with the call hash. */
  const job = (callId: string) => {
    const key = callKey('ai-agent', 'agent-1', callId);
    return { data: { kind: 'sink.deliver', sink: 'gone', call: { key, callId } }, jobId: callHash(key) };
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-abandon-'));
    const config = await writeConfig(dir);
    env = { QUEUE_PREFIX: prefix, CALLSYNC_CONFIG: config, SPOOL_DIR: join(dir, 'spool') };
    keys = redisKeys(loadConfig(testEnv(prefix, env)).redis);
    const gone = queue('sink-gone');
    for (const id of ['a-1', 'a-2']) {
      const j = job(id);
      await gone.add('sink.deliver', j.data, { jobId: j.jobId, attempts: 8 });
    }
    const later = job('a-3');
    await gone.add('sink.deliver', later.data, { jobId: later.jobId, attempts: 8, delay: 3_600_000 });
    // Paused when its sink's credentials were rejected (the reason kept beside it).
    await pauseQueue(gone, redis, 'HubSpot answered 401: token expired');
    await gone.close();
    // An endpoint taken out of a sink still configured.
    const b = queue('sink-hook.b');
    const j = job('b-1');
    await b.add('sink.deliver', { ...j.data, sink: 'hook', endpoint: 'b' }, { jobId: j.jobId });
    await b.close();
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('refused for a queue this configuration has, and for one another process works', async () => {
    const configured = await cli(['dlq', 'abandon', '--queue', 'sink-archive'], env);
    assert.equal(configured.code, 1);
    assert.match(configured.err, /sink-archive: in this configuration, its worker runs its jobs: nothing abandoned/);
    const byId = await cli(['dlq', 'abandon', '--id', 'x'], env);
    assert.equal(byId.code, 2);
    assert.match(byId.err, /abandon takes --queue/);

    // Another process's worker of that queue (not taking jobs here, so they stay for the next test).
    const connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const worker = new Worker('sink-hook.b', async () => undefined, {
      connection,
      prefix: keys.queuePrefix('sink-hook.b'),
      autorun: false,
    });
    try {
      await worker.waitUntilReady();
      await waitFor(async () => (await strandedOf(redis, keys, ['sink-hook.b'])).length === 0 || null, {
        what: 'the other process counted as a worker',
      });
      const worked = await cli(['dlq', 'abandon', '--queue', 'sink-hook.b'], env);
      assert.equal(worked.code, 1);
      assert.match(worked.err, /sink-hook\.b: a live worker runs it .*: nothing abandoned/);
    } finally {
      await worker.close();
      connection.disconnect();
    }
  });

  test('--dry-run says what it would do and changes nothing', async () => {
    const dry = await cli(['dlq', 'abandon', '--queue', 'gone', '--dry-run'], env);
    assert.equal(dry.code, 0, dry.err);
    assert.equal(dry.out, 'would abandon 3 job(s) of sink-gone (2 waiting, 1 delayed)');
    const gone = queue('sink-gone');
    try {
      assert.deepEqual(await gone.getJobCounts('waiting', 'delayed', 'failed'), { waiting: 2, delayed: 1, failed: 0 });
      assert.equal(await gone.isPaused(), true);
    } finally {
      await gone.close();
    }
  });

  test('every waiting and delayed job becomes a dead letter with the reason; the timeline says so; retry puts them back', async () => {
    const done = await cli(['dlq', 'abandon', '--queue', 'sink-gone'], env);
    assert.equal(done.code, 0, done.err);
    assert.equal(done.out, 'abandoned 3 job(s) of sink-gone: dead letters now (callsync dlq list --queue sink-gone)');
    const gone = queue('sink-gone');
    try {
      assert.equal(await pauseState(gone), null, 'resumed');
      assert.equal(await redis.exists(gone.toKey('callsync-paused')), 0, 'its pause marker gone');
      const counts = await gone.getJobCounts('waiting', 'prioritized', 'delayed', 'active', 'failed');
      assert.deepEqual(counts, { waiting: 0, prioritized: 0, delayed: 0, active: 0, failed: 3 });
      const reason =
        'abandoned by callsync dlq abandon: sink gone is not in this configuration and no worker runs queue sink-gone';
      for (const j of await gone.getFailed()) assert.equal(j.failedReason, reason);
      const listed = await cli(['dlq', 'list', '--queue', 'sink-gone', '--json'], env);
      assert.deepEqual(
        (JSON.parse(listed.out) as { call: string; reason: string }[]).map((r) => [r.call, r.reason]).sort(),
        [
          ['a-1', reason],
          ['a-2', reason],
          ['a-3', reason],
        ],
      );
      // The call's timeline: the sink failed, with the reason; nothing waits for it any more.
      const shown = await cli(['call', job('a-3').jobId, '--json'], env);
      const [call] = (JSON.parse(shown.out) as { calls: CallSummary[] }).calls;
      assert.equal(call?.sinks.gone, 'failed');
      assert.equal(call?.reasons.gone, reason);
      assert.equal(call?.unconfigured, undefined);

      // Nothing left to abandon there; the endpoint queue is found without --queue.
      const all = await cli(['dlq', 'abandon'], env);
      assert.equal(all.code, 0, all.err);
      assert.equal(
        all.out,
        'abandoned 1 job(s) of sink-hook.b: dead letters now (callsync dlq list --queue sink-hook.b)',
      );
      const b = await cli(['call', job('b-1').jobId, '--json'], env);
      assert.equal(
        (JSON.parse(b.out) as { calls: CallSummary[] }).calls[0]?.reasons['hook.b'],
        'abandoned by callsync dlq abandon: endpoint b of sink hook is not in this configuration and no worker runs queue sink-hook.b',
      );
      const again = await cli(['dlq', 'abandon'], env);
      assert.equal(again.out, 'no jobs to abandon in sink-gone, sink-hook.b');

      // A worker runs the queue again: its dead letters go back for a new round.
      const retried = await cli(['dlq', 'retry', '--queue', 'sink-gone'], env);
      assert.equal(retried.code, 0, retried.err);
      assert.equal((await gone.getJobCounts('waiting')).waiting, 3);
    } finally {
      await gone.close();
    }
  });
});
