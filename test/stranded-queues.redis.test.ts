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
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { testEnv } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { cli } from './support/cli.js';

const TOKEN = 'stranded-admin-token-41c9';
const STRANDED =
  /^queue sink-gone holds jobs no process works \(2 waiting, 1 delayed; 0 dead letters\): its sink is not in this configuration/;

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
    assert.match(String(lines[0]?.msg), /add the sink back, or start a worker whose configuration has it/);
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
