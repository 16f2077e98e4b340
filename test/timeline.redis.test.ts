// The timeline of one call (queues/timeline.ts), written as the call moves through a running
// callsync: received (new, duplicate), fanned out, each sink attempt with its outcome — done with
// its refs, skipped with the reason, retry with the kind and the next attempt's time, dead-lettered
// with the reason — with no phone number in clear, and found again by call id, job id and number.
import { after, before, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { requestContext } from '../src/ops/request-context.js';
import { PermanentError, TransientError } from '../src/errors.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkContext, SinkResult } from '../src/sinks/types.js';
import { CallTimeline, summarize, type TimelineEntry } from '../queues/timeline.js';
import { redisKeys } from '../queues/keys.js';
import { renderMetrics } from '../src/metrics.js';
import { runnerMetrics } from '../workers/metric-events.js';
import { sampleCall, webhookPayload } from './support/calls.js';
import { memoryLog, postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { callHash } from '../src/model/call.js';
import { InboundLog } from '../queues/inbound.js';
import { monitorOf } from './support/monitor.js';

const CALLER = '+492116355340';

/** Outcome by call id: ok-* done (its refs name the caller), skip-* skipped (opted out), flaky-* fails once, perm-* refused for good. */
class ScriptedSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  async deliver(call: Omit<CanonicalCall, 'revision'>, ctx: SinkContext): Promise<SinkResult> {
    const id = call.callId;
    if (id.startsWith('skip-')) return { status: 'skipped', reason: `${call.from}: opted out` };
    if (id.startsWith('flaky-') && ctx.attempt === 1)
      throw new TransientError(`remote hiccup for ${call.from}`, { status: 502 });
    if (id.startsWith('perm-')) throw new PermanentError(`remote refused the record of ${call.from}`, { status: 422 });
    return { status: 'done', refs: { objectKey: `calls/${id}.json`, label: `sms to ${call.from}` } };
  }
}

describe('the timeline of a call', () => {
  let cs: TestCallsync;
  let dir: string;
  let timeline: CallTimeline;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'timeline-'));
    cs = await startTestCallsync(
      { ARCHIVE_DIR: dir, JOB_ATTEMPTS: '3' },
      {
        sinks: new Map([['archive', new ScriptedSink()]]),
        ingressBefore: [requestContext({ log: memoryLog().log })],
        runnerEvents: runnerMetrics(),
      },
    );
    timeline = new CallTimeline(cs.redis.worker, redisKeys(cs.config.redis), { ttlDays: 30 });
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function post(callId: string): Promise<string> {
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(callId), {
      'x-request-id': `req-${callId}`,
    });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    return res.body.id as string;
  }

  /** The call's timeline once its archive attempt ended in `last`. */
  async function settled(ackId: string, last: TimelineEntry['event']): Promise<TimelineEntry[]> {
    const [id] = await timeline.resolve(ackId);
    assert.ok(id, `${ackId} names a call`);
    return waitFor(
      async () => {
        const entries = await timeline.read(id);
        // The receipt comes over the ingress' connection, the rest over the worker's: both written.
        return entries.at(-1)?.event === last && entries.some((e) => e.event === 'received') ? entries : null;
      },
      { timeoutMs: 20_000, what: `${ackId} ending in ${last}` },
    ).catch(async (err: unknown) => {
      throw new Error(`${(err as Error).message}; the timeline: ${JSON.stringify(await timeline.read(id))}`);
    });
  }

  test('a delivered call: received, fanned out, attempt, done with its refs; a resend is a duplicate', async () => {
    const ackId = await post('ok-1');
    const entries = await settled(ackId, 'done');
    assert.deepEqual(
      entries.map((e) => e.event),
      ['received', 'fanned-out', 'attempt', 'done'],
    );
    const [received, fanned, attempt, done] = entries as [TimelineEntry, TimelineEntry, TimelineEntry, TimelineEntry];
    assert.equal(received.revision, 'new');
    assert.equal(received.source, 'ai-agent');
    assert.equal(received.callId, 'ok-1');
    assert.equal(received.jobId, ackId);
    assert.equal(received.requestId, 'req-ok-1');
    assert.equal(received.from, '+49211****340', 'the number masked as in logs');
    assert.deepEqual(fanned.sinks, ['archive']);
    assert.equal(fanned.routes?.length, 1);
    assert.equal(attempt.sink, 'archive');
    assert.equal(attempt.attempt, 1);
    assert.equal(done.refs?.objectKey, 'calls/ok-1.json');
    assert.ok(!done.refs?.label?.includes(CALLER), `no number in a ref: ${done.refs?.label}`);

    const again = await post('ok-1');
    assert.equal(again, ackId, 'a duplicate is acknowledged with the first id');
    const withDuplicate = await waitFor(
      async () => {
        const all = await timeline.read(received.jobId!.slice(0, 32));
        return all.length === 5 ? all : null;
      },
      { what: 'the duplicate noted' },
    );
    assert.equal(withDuplicate.at(-1)?.event, 'received');
    assert.equal(withDuplicate.at(-1)?.revision, 'duplicate');
    assert.equal(summarize('x', withDuplicate).sinks.archive, 'done');
  });

  test("a sink attempt's start and outcome go to Redis in one command, when the attempt ends", async () => {
    const watcher = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const monitor = (await monitorOf(watcher)) as unknown as {
      on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
      disconnect(): void;
    };
    const sent: string[][] = [];
    monitor.on('monitor', (_time, args, source) => {
      if (source !== 'lua') sent.push(args.map(String));
    });
    try {
      const ackId = await post('ok-one-command');
      const entries = await settled(ackId, 'done');
      assert.deepEqual(
        entries.map((e) => e.event),
        ['received', 'fanned-out', 'attempt', 'done'],
      );
      const key = timeline.key(ackId.slice(0, 32));
      const events = (args: string[]) =>
        args.flatMap((a) => (/^\{"at":/.test(a) ? [(JSON.parse(a) as TimelineEntry).event] : []));
      const writes = await waitFor(
        () => {
          const w = sent.filter((args) => args.includes(key) && events(args).some((e) => e === 'done'));
          return w.length > 0 ? w : null;
        },
        { what: 'the outcome seen by MONITOR' },
      );
      assert.deepEqual(writes.map(events), [['attempt', 'done']]);
    } finally {
      monitor.disconnect();
      watcher.disconnect();
    }
  });

  test('a retry shows its error kind and next attempt time; a permanent failure is dead-lettered with the reason; a skip says why', async () => {
    const [flakyId, permId, skipId] = await Promise.all([post('flaky-1'), post('perm-1'), post('skip-1')]);
    const flaky = await settled(flakyId, 'done');
    assert.deepEqual(
      flaky.map((e) => e.event),
      ['received', 'fanned-out', 'attempt', 'retry', 'attempt', 'done'],
    );
    const retry = flaky[3]!;
    assert.equal(retry.kind, 'transient');
    assert.ok(retry.nextAt !== undefined && retry.nextAt >= retry.at, 'the next attempt is due after the failure');
    assert.match(retry.reason ?? '', /remote hiccup/);
    assert.deepEqual([flaky[2]!.attempt, flaky[4]!.attempt], [1, 2]);

    const perm = await settled(permId, 'dead-lettered');
    const dead = perm.at(-1)!;
    assert.equal(dead.kind, 'permanent');
    assert.match(dead.reason ?? '', /remote refused the record/);
    assert.equal(summarize('x', perm).sinks.archive, 'failed');

    const skip = await settled(skipId, 'skipped');
    assert.equal(skip.at(-1)!.skip, 'opt-out');
    assert.match(skip.at(-1)!.reason ?? '', /opted out/);
    assert.equal(summarize('x', skip).sinks.archive, 'skipped');

    // Skips counted apart from deliveries, by reason; the dead letter as failed.
    const text = (await renderMetrics()).body;
    const count = (labels: string) =>
      Number(new RegExp(`^callsync_sink_jobs_total\\{${labels}\\} (\\d+)`, 'm').exec(text)?.[1] ?? 0);
    assert.ok(count('sink="archive",outcome="done",reason=""') >= 1, text);
    assert.equal(count('sink="archive",outcome="skipped",reason="opt-out"'), 1);
    assert.equal(count('sink="archive",outcome="failed",reason=""'), 1);

    const stored = JSON.stringify([flaky, perm, skip]);
    for (const digits of [CALLER, CALLER.slice(1), '2116355340'])
      assert.ok(!stored.includes(digits), `the number (${digits}) is nowhere in clear`);
  });

  test('calls are found by call id, by job id, by number (an HMAC, never the number in Redis), and by time', async () => {
    const ackId = await post('ok-find');
    await settled(ackId, 'done');
    const [id] = await timeline.resolve(ackId);
    assert.deepEqual(await timeline.resolve('ok-find'), [id]);
    assert.ok((await timeline.resolve(CALLER)).includes(id!), 'found by the caller number');
    assert.deepEqual(await timeline.resolve('+4915199999999'), [], 'another number finds nothing');
    const recent = await timeline.recent(Date.now() - 60_000, Date.now(), 100);
    assert.ok(recent.some((r) => r.id === id));
    const keys = await cs.redis.worker.keys(`${cs.prefix}*`);
    assert.ok(!keys.some((k) => k.includes('6355340')), 'no key holds the number');
    const ttl = await cs.redis.worker.pttl(timeline.key(id!));
    assert.ok(
      ttl > 29 * 24 * 3600_000 && ttl <= 30 * 24 * 3600_000,
      `expires after CALL_TIMELINE_TTL_DAYS (pttl ${ttl})`,
    );
  });

  test('a call drained from the spool (acknowledged while Redis was away) says so', async () => {
    // The spool's drainer accepts with the id it acknowledged with (src/ingress/spool.ts).
    const acceptor = new InboundAcceptor(new InboundLog(cs.redis.producer, redisKeys(cs.config.redis)), {
      dedupeWindowMs: 60_000,
      timeoutMs: 5000,
      timeline,
    });
    const call = sampleCall('spooled-1');
    const ackId = `${callHash(call.key)}-spooled1`;
    const result = await acceptor.accept(call, { jobId: ackId });
    assert.equal(result.id, ackId);
    const entries = await settled(ackId, 'done');
    assert.equal(entries[0]!.event, 'received');
    assert.equal(entries[0]!.spooled, true);
    assert.equal(entries[0]!.jobId, ackId);
    // The same delivery again under its id (a drain batch sent twice, or a write that timed out and
    // stored after all): a duplicate, with no second receipt in the timeline.
    const again = await acceptor.accept(call, { jobId: ackId });
    assert.deepEqual([again.id, again.duplicate], [ackId, true]);
    const [id] = await timeline.resolve(ackId);
    assert.deepEqual(
      (await timeline.read(id!)).filter((e) => e.event === 'received').map((e) => [e.revision, e.jobId]),
      [['new', ackId]],
    );
    // Another delivery of the call (another id) is a receipt of its own.
    const other = await acceptor.accept(call, { jobId: `${callHash(call.key)}-spooled2` });
    assert.deepEqual([other.id, other.duplicate], [ackId, true]);
    assert.deepEqual(
      (await timeline.read(id!)).filter((e) => e.event === 'received').map((e) => [e.revision, e.jobId]),
      [
        ['new', ackId],
        ['duplicate', ackId],
      ],
    );
    const fresh = await post('not-spooled-1');
    assert.equal((await settled(fresh, 'done'))[0]!.spooled, undefined);
  });

  async function cli(argv: string[]): Promise<{ code: number | 'running'; out: string; err: string }> {
    const out: string[] = [];
    const err: string[] = [];
    const redisEnv = { REDIS_URL, ...(await testRedis()).env() };
    const code = await runCli(argv, {
      env: { ...redisEnv, QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir },
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  }

  test('callsync call prints a timeline (by call id, job id or number); callsync calls lists calls by time, sink state and number', async () => {
    const ackId = await post('cli-1');
    await settled(ackId, 'done');
    for (const ref of ['cli-1', ackId]) {
      const shown = await cli(['call', ref]);
      assert.equal(shown.code, 0, shown.err);
      assert.match(shown.out, /^call cli-1 \(ai-agent, in, \+49211\*\*\*\*340 → /m);
      assert.match(shown.out, /^sinks: archive:done$/m);
      for (const event of ['received', 'fanned-out', 'attempt', 'done'])
        assert.match(shown.out, new RegExp(`^\\S+Z +${event} `, 'm'));
      assert.match(shown.out, /objectKey=calls\/cli-1\.json/);
      assert.ok(!shown.out.includes('6355340'), 'no number in clear');
    }
    const byNumber = await cli(['call', CALLER, '--json']);
    assert.equal(byNumber.code, 0);
    const found = JSON.parse(byNumber.out) as { calls: { callId: string; entries: TimelineEntry[] }[] };
    assert.ok(found.calls.some((c) => c.callId === 'cli-1' && c.entries.length === 4));

    const failed = JSON.parse((await cli(['calls', '--since', '1h', '--status', 'failed', '--json'])).out) as {
      calls: { callId: string; sinks: Record<string, string> }[];
    };
    assert.deepEqual(
      failed.calls.map((c) => c.callId),
      ['perm-1'],
    );
    const skipped = await cli(['calls', '--since', '1h', '--status', 'skipped', '--sink', 'archive']);
    assert.match(skipped.out, /^\S+Z +skip-1 +ai-agent +\+49211\*\*\*\*340 → \S+ +archive:skipped$/m);
    assert.doesNotMatch(skipped.out, /ok-1|perm-1/);
    const all = JSON.parse((await cli(['calls', '--since', '1h', '--number', CALLER, '--json'])).out) as {
      calls: { callId: string }[];
    };
    assert.ok(['ok-1', 'flaky-1', 'perm-1', 'skip-1', 'cli-1'].every((id) => all.calls.some((c) => c.callId === id)));
    // A list cut at --limit says so (before: one call listed, nothing said of the others).
    const one = await cli(['calls', '--since', '1h', '--limit', '1']);
    assert.match(
      one.out,
      /^\(stopped at --limit 1: older calls of the range were not looked at; a larger --limit \(up to 1000\), or --until \d{4}-\d\d-\d\dT[\d:.]+Z for the rest\)$/m,
    );
    assert.equal(JSON.parse((await cli(['calls', '--since', '1h', '--limit', '1', '--json'])).out).more, true);
    const whole = await cli(['calls', '--since', '1h']);
    assert.doesNotMatch(whole.out, /stopped at --limit/);
    assert.equal(JSON.parse((await cli(['calls', '--since', '1h', '--json'])).out).more, false);
    assert.equal(
      JSON.parse((await cli(['calls', '--since', '1h', '--number', '+4915199999999', '--json'])).out).calls.length,
      0,
    );
    // A sink no configuration or queue knows is a usage error naming the known ones, not "no calls".
    const nowhere = await cli(['calls', '--since', '1h', '--sink', 'nowhere', '--json']);
    assert.equal(nowhere.code, 2);
    assert.match(nowhere.err, /unknown sink "nowhere" \(known: [^)]*archive/);

    const missing = await cli(['call', 'no-such-call']);
    assert.equal(missing.code, 1);
    assert.match(missing.err, /no call found for "no-such-call"/);
    const bad = await cli(['calls', '--since', 'yesterday-ish']);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--since must be a duration/);
    assert.equal((await cli(['calls', '--since', '2h', '--status', 'lost'])).code, 2);
  });
});

test("a dead letter an operator retried: the sink is pending again, and the new round's attempts (from 1) count", () => {
  const base = { sink: 'hooks', endpoint: 'a', jobId: 'c0ffee00c0ffee00c0ffee00c0ffee00' };
  const round: TimelineEntry[] = [
    { at: 1, event: 'attempt', ...base, attempt: 1 },
    { at: 2, event: 'retry', ...base, attempt: 1, kind: 'transient', reason: '500', nextAt: 3 },
    { at: 3, event: 'attempt', ...base, attempt: 2 },
    { at: 4, event: 'dead-lettered', ...base, attempt: 2, kind: 'transient', reason: '500' },
  ];
  assert.equal(summarize('x', round).sinks['hooks.a'], 'failed');
  const retried: TimelineEntry[] = [...round, { at: 5, event: 'retried', ...base }];
  assert.equal(summarize('x', retried).sinks['hooks.a'], 'pending');
  const failing: TimelineEntry[] = [
    ...retried,
    { at: 6, event: 'attempt', ...base, attempt: 1 },
    { at: 7, event: 'retry', ...base, attempt: 1, kind: 'transient', reason: '500', nextAt: 8 },
  ];
  assert.equal(summarize('x', failing).sinks['hooks.a'], 'retrying', 'not the old round\'s "failed"');
  // Without the retry, a late attempt numbered no higher than the dead letter's is one that lost its lock.
  assert.equal(summarize('x', [...round, ...failing.slice(5)]).sinks['hooks.a'], 'failed');
});
