// What an operator sees of one call's outcomes through the three doors — `callsync call <id>`,
// GET /api/calls/<id> and the dashboard's Calls page — on a running callsync: nothing stale after
// the call moved on (a sink shown done while a new revision of the call waits for it; the error of
// a retry shown as the reason of a sink that has since succeeded; Redis failing under a job shown as
// its dead letter).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { FlakySink } from './support/flaky-sink.js';
import { apiCallOf, startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';
import { enableQueue, pauseQueue } from '../queues/disabled.js';
import { describeEntry, summarize, type TimelineEntry } from '../queues/timeline.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';

const TOKEN = 'timeline-outcomes-token-9a3c';
const auth = { authorization: `Bearer ${TOKEN}` };

type ApiCall = { id: string; callId: string; sinks: Record<string, string>; reasons: Record<string, string> };
type ApiEntries = ApiCall & { entries: { event: string; sink?: string; kind?: string; nextAt?: number }[] };

describe("a call's outcomes through the CLI, the API and the Calls page", () => {
  let cs: OpsCallsync;
  let dir: string;
  const sink = new FlakySink();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'timeline-outcomes-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, JOB_ATTEMPTS: '3' },
      { sinks: new Map([['archive', sink]]) },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const api = (ref: string) => apiCallOf<ApiCall>(cs.url, ref, auth);
  const page = async (ref: string) =>
    (await fetch(`${cs.url}/admin/queues/calls?q=${encodeURIComponent(ref)}`, { headers: auth })).text();
  async function cli(argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(argv, {
      env: { REDIS_URL, ...(await testRedis()).env(), QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir },
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  }
  const settled = (ref: string, state: string) =>
    waitFor(async () => (await api(ref))?.sinks.archive === state, { timeoutMs: 20_000, what: `${ref}: ${state}` });

  test('a call waiting in a paused queue shows paused with why; an update waiting there is not the first revision\'s "done"', async () => {
    const id = 'slow-update-1';
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await settled(id, 'done');
    // The sink's queue paused, as the runner pauses it when the remote rejects the credentials: the
    // jobs of every call wait in it, not only the one whose attempt was refused.
    const queue = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await pauseQueue(queue, cs.callsync.redis.worker, 'Archive answered 401: token rejected');
    try {
      const corrected = webhookPayload(id, (p) => (p.assist.summary.content = 'A corrected summary.'));
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, corrected)).status, 202);
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('ok-paused-1'))).status, 202);
      await waitFor(async () => (await queue.count()) >= 2, { what: 'the jobs waiting' });
      await waitFor(
        async () => {
          const res = await fetch(`${cs.url}/api/calls/${id}`, { headers: auth });
          const body = (await res.json()) as { calls: { entries: { event: string }[] }[] };
          return body.calls[0]!.entries.filter((e) => e.event === 'fanned-out').length === 2;
        },
        { what: 'the update fanned out' },
      );
      await waitFor(async () => (await api('ok-paused-1'))?.sinks.archive !== undefined, {
        what: 'the new call fanned out',
      });
      const why =
        /^its queue sink-archive is paused: Archive answered 401: token rejected \(since \S+\): the job waits for an operator to resume it \(callsync resume\)/;
      const fresh = (await api('ok-paused-1'))!;
      assert.equal(fresh.sinks.archive, 'paused', 'a new call: the API');
      assert.match(fresh.reasons.archive!, why);
      const update = (await api(id))!;
      assert.equal(update.sinks.archive, 'paused', 'the update: the API');
      assert.match(
        update.reasons.archive!,
        /\(last: job [0-9a-f]{32}-\S+ of the call waits for it \(an update\); the last one done\)$/,
      );
      for (const ref of [id, 'ok-paused-1']) {
        assert.match(await page(ref), /archive: paused/, `${ref}: the Calls page`);
        assert.match((await cli(['call', ref])).out, /^sinks: archive:paused$/m, `${ref}: callsync call`);
      }
      assert.match(
        (await cli(['call', 'ok-paused-1'])).out,
        /^note: archive: its queue sink-archive is paused: Archive answered 401: token rejected \(since /m,
      );
      const listed = JSON.parse((await cli(['calls', '--since', '1h', '--status', 'paused', '--json'])).out) as {
        calls: { callId: string }[];
      };
      assert.deepEqual(listed.calls.map((c) => c.callId).sort(), ['ok-paused-1', id].sort(), 'calls --status paused');
    } finally {
      await enableQueue(queue);
    }
    await settled(id, 'done');
    await settled('ok-paused-1', 'done');
    assert.equal((await api(id))!.reasons.archive, undefined, 'done: no reason left of the wait');
  });

  test('a sink done after a retry: its reason is not the error of the retry before', async () => {
    const id = 'flaky-reason-1';
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await settled(id, 'done');
    const call = (await api(id))!;
    assert.equal(call.reasons.archive, undefined, `reasons: ${JSON.stringify(call.reasons)}`);
    assert.doesNotMatch(await page(id), /title="remote hiccup/, 'the chip of a done sink');
    // A job id of the call names it, also a replay's (`<hash>-replay-<time>`, the Calls page's Replay).
    const hash = (await api(id))!.id;
    for (const jobId of [hash, `${hash}-60c2d8680eb31`, `${hash}-replay-${Date.now().toString(36)}`]) {
      assert.equal((await api(jobId))?.callId, id, `the API: ${jobId}`);
      assert.match((await cli(['call', jobId])).out, /^call flaky-reason-1 /m, `callsync call ${jobId}`);
    }
    // The retry stays in the timeline, with its error.
    const shown = await cli(['call', id]);
    assert.match(shown.out, /retry +archive +1 +transient: remote hiccup/);
    assert.match(shown.out, /^sinks: archive:done$/m);
  });
});

test('summarize: a sink is pending while a job it was given has not ended; a fan-out written twice is one job', () => {
  const first = 'c0ffee00c0ffee00c0ffee00c0ffee00';
  const update = `${first}-u2`;
  const sink = { sink: 'archive' };
  const round = (jobId: string, at: number): TimelineEntry[] => [
    { at, event: 'attempt', ...sink, jobId, attempt: 1 },
    { at: at + 1, event: 'done', ...sink, jobId, attempt: 1 },
  ];
  const fanned = (jobId: string, at: number): TimelineEntry => ({
    at,
    event: 'fanned-out',
    jobId,
    routes: ['#1'],
    sinks: ['archive'],
  });
  // The update fanned out while the first revision's attempt was under way: that attempt's "done"
  // (later) is not the update's.
  const overlap = [fanned(first, 1), { at: 2, event: 'attempt', ...sink, jobId: first, attempt: 1 }, fanned(update, 3)];
  const firstDone: TimelineEntry = { at: 4, event: 'done', ...sink, jobId: first, attempt: 1 };
  assert.equal(summarize('x', [...overlap, firstDone] as TimelineEntry[]).sinks.archive, 'pending');
  assert.equal(summarize('x', [...overlap, firstDone, ...round(update, 5)] as TimelineEntry[]).sinks.archive, 'done');
  // The same fan-out twice (a fan-out run again after a crash: the same job id): done once its job is.
  assert.equal(summarize('x', [fanned(first, 1), fanned(first, 2), ...round(first, 3)]).sinks.archive, 'done');
  // A fan-out of a job that ended before (a resend after the dedupe window: its job id is the
  // first's, which BullMQ may still hold and then does not run): not waited for.
  assert.equal(summarize('x', [fanned(first, 1), ...round(first, 2), fanned(first, 9)]).sinks.archive, 'done');
  // An endpoint of a signed webhook, the same way.
  const hook = { sink: 'hook', endpoint: 'a' };
  const hookFanned = (jobId: string, at: number): TimelineEntry => ({
    at,
    event: 'fanned-out',
    jobId,
    routes: ['#1'],
    sinks: ['hook'],
    endpoints: { hook: ['a'] },
  });
  const hookDone = (jobId: string, at: number): TimelineEntry => ({ at, event: 'done', ...hook, jobId, attempt: 1 });
  assert.equal(
    summarize('x', [hookFanned(first, 1), hookDone(first, 2), hookFanned(update, 3)]).sinks['hook.a'],
    'pending',
  );
  assert.equal(
    summarize('x', [hookFanned(first, 1), hookDone(first, 2), hookFanned(update, 3), hookDone(update, 4)]).sinks[
      'hook.a'
    ],
    'done',
  );
});

test("summarize: an older revision's job ending after the newer one's does not stand for the sink", () => {
  const first = 'c0ffee00c0ffee00c0ffee00c0ffee00';
  const update = `${first}-u2`;
  const sink = { sink: 'archive' };
  const fanned = (jobId: string, at: number): TimelineEntry => ({
    at,
    event: 'fanned-out',
    jobId,
    routes: ['#1'],
    sinks: ['archive'],
  });
  const retrying: TimelineEntry[] = [
    fanned(first, 1),
    { at: 2, event: 'attempt', ...sink, jobId: first, attempt: 1 },
    { at: 3, event: 'retry', ...sink, jobId: first, attempt: 1, kind: 'transient', reason: '503', nextAt: 100 },
    fanned(update, 4),
    { at: 5, event: 'attempt', ...sink, jobId: update, attempt: 1 },
  ];
  const updateFailed: TimelineEntry = {
    at: 6,
    event: 'dead-lettered',
    ...sink,
    jobId: update,
    attempt: 1,
    kind: 'permanent',
    reason: '400 field too long',
  };
  const firstRetryAgain: TimelineEntry[] = [
    { at: 7, event: 'attempt', ...sink, jobId: first, attempt: 2 },
    { at: 8, event: 'retry', ...sink, jobId: first, attempt: 2, kind: 'transient', reason: '503', nextAt: 200 },
  ];
  const firstDone: TimelineEntry[] = [
    { at: 9, event: 'attempt', ...sink, jobId: first, attempt: 3 },
    { at: 10, event: 'done', ...sink, jobId: first, attempt: 3 },
  ];
  // The update (the newest content) was dead-lettered: the first revision's later retries and its
  // success do not hide that (before: "done", no reason, not found by --status failed).
  const failed = summarize('x', [...retrying, updateFailed, ...firstRetryAgain, ...firstDone]);
  assert.equal(failed.sinks.archive, 'failed');
  assert.equal(failed.reasons.archive, '400 field too long');
  assert.equal(failed.nextAt, undefined);
  // Its dead letter retried by an operator: a new round of the update, the first's outcome still not its.
  const retried: TimelineEntry = { at: 11, event: 'retried', ...sink, jobId: update };
  assert.equal(summarize('x', [...retrying, updateFailed, retried, ...firstDone]).sinks.archive, 'pending');
  // The update done first, the first revision's job then done or skipped (superseded): done.
  const updateDone: TimelineEntry = { at: 6, event: 'done', ...sink, jobId: update, attempt: 1 };
  assert.equal(summarize('x', [...retrying, updateDone, ...firstDone]).sinks.archive, 'done');
  const firstSkipped: TimelineEntry = {
    at: 10,
    event: 'skipped',
    ...sink,
    jobId: first,
    attempt: 3,
    skip: 'newer-revision',
    reason: 'a newer revision is delivered',
  };
  const done = summarize('x', [...retrying, updateDone, firstSkipped]);
  assert.equal(done.sinks.archive, 'done');
  assert.equal(done.reasons.archive, undefined);
  // Without the update's outcome yet, the first revision's done leaves the sink waiting for the update (as before).
  assert.equal(summarize('x', [...retrying, ...firstDone]).sinks.archive, 'pending');
  // The update retrying when the first revision's job ends: retrying, with the update's next attempt and reason.
  const updateRetry: TimelineEntry = {
    at: 6,
    event: 'retry',
    ...sink,
    jobId: update,
    attempt: 1,
    kind: 'transient',
    reason: '502 bad gateway',
    nextAt: 300,
  };
  const waiting = summarize('x', [...retrying, updateRetry, ...firstDone]);
  assert.equal(waiting.sinks.archive, 'retrying');
  assert.deepEqual(waiting.nextAt, { archive: 300 });
  assert.match(
    waiting.reasons.archive ?? '',
    /^job c0ffee00c0ffee00c0ffee00c0ffee00-u2 of the call \(an update\): 502 bad gateway; the last one done$/,
  );
});

test('summarize: a call received and not fanned out yet waits for its fan-out', () => {
  const received: TimelineEntry = { at: 1, event: 'received', callId: 'c1', source: 'ai-agent', jobId: 'j1' };
  assert.equal(summarize('x', [received]).fanOutPending, true);
  const fanned: TimelineEntry = { at: 2, event: 'fanned-out', jobId: 'j1', routes: [], sinks: [] };
  // Fanned out to no sink (no route matched), or its fan-out dead-lettered: not waiting.
  assert.equal(summarize('x', [received, fanned]).fanOutPending, undefined);
  const failed: TimelineEntry = { at: 2, event: 'dead-lettered', jobId: 'j1', reason: 'unreadable' };
  assert.equal(summarize('x', [received, failed]).fanOutPending, undefined);
});

/** Fails as Redis failing under the job does (a write refused: OOM) while `redisFull`; then done. */
class RedisFullSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  redisFull = true;
  runs = 0;
  async deliver(): Promise<SinkResult> {
    this.runs++;
    if (this.redisFull)
      throw Object.assign(new Error('OOM command not allowed when used memory > maxmemory.'), { name: 'ReplyError' });
    return { status: 'done', refs: { id: 'ok' } };
  }
}

describe('Redis failing under a sink job: the timeline says it waits for Redis, not dead-lettered', () => {
  let cs: OpsCallsync;
  let dir: string;
  const sink = new RedisFullSink();
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'timeline-outcomes-redis-'));
    // One attempt only: the runner spends none on Redis' trouble, so the job runs again.
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, JOB_ATTEMPTS: '1' },
      { sinks: new Map([['archive', sink]]) },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('its last attempt is not shown dead-lettered while the job waits for Redis', async () => {
    const id = 'redis-full-1';
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    const get = async () =>
      ((await (await fetch(`${cs.url}/api/calls/${id}`, { headers: auth })).json()) as { calls?: ApiEntries[] })
        .calls?.[0];
    // Two runs refused by Redis, both in the timeline.
    const seen = await waitFor(
      async () => {
        const call = await get();
        return call && call.entries.filter((e) => e.event !== 'attempt' && e.sink === 'archive').length >= 2
          ? call
          : null;
      },
      { timeoutMs: 20_000, what: 'two runs refused by Redis in the timeline' },
    );
    const queue = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    assert.equal((await queue.getFailed()).length, 0, 'no dead letter');
    assert.notEqual(seen.sinks.archive, 'failed');
    assert.deepEqual(
      seen.entries.filter((e) => e.event === 'dead-lettered'),
      [],
      'no dead-lettered entry',
    );
    const outcome = seen.entries.find((e) => e.event === 'retry')!;
    assert.equal(outcome.kind, 'redis');
    assert.equal(outcome.nextAt, undefined, 'its next run is not a backoff the runner draws');
    assert.match(describeEntry(outcome as TimelineEntry), /^redis: OOM .*\(waits for Redis, no attempt spent\)$/);
    sink.redisFull = false;
    await waitFor(async () => (await get())?.sinks.archive === 'done', { timeoutMs: 20_000, what: 'done' });
  });
});
