// A sink taken out of the configuration leaves jobs in its queue that no process will run: the
// worker says so at start, once in its log and in /readyz (still ready), `callsync check-config`
// lists it, and `callsync call` says where such a call's job waits. Not stranded: an emptied queue,
// one another process works.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { strandedOf } from '../src/ops/stranded-queues.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { testEnv } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { cli } from './support/cli.js';

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
    env = { QUEUE_PREFIX: prefix, ARCHIVE_DIR: join(dir, 'archive'), SPOOL_DIR: join(dir, 'spool') };
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

  test('callsync call says of a call waiting for such a sink where its job waits', async () => {
    const config = loadConfig(testEnv(prefix, env));
    const timeline = new CallTimeline(redis, redisKeys(config.redis), config.timeline);
    const call = { key: callKey('ai-agent', 'agent-1', 'c-1') };
    const jobId = callHash(call.key);
    await timeline.fannedOut(call, { jobId, routes: ['all'], sinks: ['archive', 'gone'] });
    const shown = await cli(['call', jobId], env);
    assert.equal(shown.code, 0, shown.err);
    assert.match(
      shown.out,
      /^note: sink gone is not in this configuration: the job waits in queue sink-gone for a worker whose configuration has it/m,
    );
    assert.doesNotMatch(shown.out, /note: sink archive/);
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
