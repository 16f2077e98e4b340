// A remote's "retry later" that lasts longer than the job's lock (WORKER_LOCK_DURATION_MS): a signed
// webhook endpoint answering `429 Retry-After: 3` to workers whose lock lasts 1 s. The job runs again
// no earlier than the Retry-After, spends no attempt, never stalls, logs no error, and its timeline
// says truly when it runs next; the endpoint's other jobs wait as long; closing the worker (or
// SIGTERM to a real `callsync start`) during the wait ends at once, and the job runs after it.
// Before: the job was taken again during the wait and left unlocked (BullMQ's worker.rateLimit
// path), ran again early, failed with "Missing lock … moveJobFromActiveToWait" or "Lock mismatch",
// showed an attempt cut short, and a close waited out the rest of the Retry-After.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, beforeEach, describe, it, test } from 'node:test';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { holdQueue } from '../queues/hold.js';
import { RedisKeys } from '../queues/keys.js';
import { BACKOFF_STRATEGY, JobName, sinkJobId, sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { CallTimeline, timelineId, type TimelineEntry } from '../queues/timeline.js';
import { RetryLaterError } from '../src/errors.js';
import { WebhookSink, webhookSinkType } from '../src/sinks/crm/webhook.js';
import { createDeliverProcessor } from '../workers/deliver.js';
import { runWorker, type RunningWorker } from '../workers/runner.js';
import { sampleCall, webhookPayload } from './support/calls.js';
import { memoryLog } from './support/callsync.js';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { crmTestDeps, type CrmTestDeps } from './support/crm-deps.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const LOCK_MS = 1000;
const RETRY_AFTER_S = 3;
const WAIT_MS = RETRY_AFTER_S * 1000;
const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

describe('a Retry-After longer than the job lock, behind the queue runner', () => {
  const secret = newSecret();
  const queueName = sinkQueueName('hook', 'e429');
  let receiver: FakeWebhookReceiver;
  /** When the receiver answered each request (epoch ms), and with which status. */
  let answers: { callId: string; at: number; status: number }[];
  /** Answers 429 to the first request of these calls. */
  let limited: Set<string>;
  let deps: CrmTestDeps;
  let prefix: string;
  let redis: Redis;
  let keys: RedisKeys;
  let timeline: CallTimeline;
  let queue: Queue<SinkDeliverJob>;
  let running: RunningWorker[];
  let logged: ReturnType<typeof memoryLog>;
  let runs: { jobId: string; at: number }[];
  let stalled: string[];
  let failed: string[];

  before(async () => {
    receiver = await new FakeWebhookReceiver(secret).start();
    receiver.answer = (callId) => {
      const status = limited.delete(callId) ? 429 : 204;
      answers.push({ callId, at: Date.now(), status });
      return status === 429
        ? { status, headers: { 'retry-after': String(RETRY_AFTER_S) }, body: { message: 'slow down' } }
        : undefined;
    };
  });
  after(async () => {
    await receiver.stop();
  });
  beforeEach(() => {
    answers = [];
    limited = new Set();
    runs = [];
    stalled = [];
    failed = [];
    running = [];
    receiver.records.clear();
    receiver.byCall.clear();
    deps = { ...crmTestDeps({ CRM_WEBHOOK_SECRET: secret }), now: () => new Date() }; // BullMQ runs on the real clock
    prefix = uniquePrefix('longwait');
    redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    keys = new RedisKeys(prefix, 'one-slot', 1);
    timeline = new CallTimeline(redis, keys, { ttlDays: 1 });
    queue = new Queue<SinkDeliverJob>(queueName, { connection: redis, prefix: keys.queuePrefix(queueName) });
    logged = memoryLog('info');
  });
  afterEach(async () => {
    for (const r of running) await r.close();
    await queue.close();
    redis.disconnect();
    await cleanupPrefix(prefix);
    await deps.close();
  });

  type Deliver = ReturnType<typeof createDeliverProcessor>;

  /**
   * A worker of the endpoint's queue as `callsync start` runs it, with a 1 s lock and
   * WORKER_CONCURRENCY's default; `around` may stand in for the sink's delivery.
   */
  function start(around?: (deliver: Deliver, ...args: Parameters<Deliver>) => ReturnType<Deliver>): RunningWorker {
    const options = webhookSinkType.options.parse({ endpoints: [{ name: 'e429', url: receiver.url }] });
    const sink = new WebhookSink('hook', options, deps);
    const deliver = createDeliverProcessor(sink, logged.log, 'e429');
    const worker = runWorker<SinkDeliverJob>(
      queueName,
      (job, signal, outcome) => {
        runs.push({ jobId: job.id ?? '', at: Date.now() });
        return around ? around(deliver, job, signal, outcome) : deliver(job, signal, outcome);
      },
      {
        connection: redis,
        prefix: keys,
        retry: { attempts: 1, backoffMs: 50, maxBackoffMs: 200 },
        concurrency: 8,
        stalledIntervalMs: 300,
        lockDurationMs: LOCK_MS,
        maxStalledCount: 1,
        log: logged.log,
        timeline,
        events: { failed: (_q, job, err) => failed.push(`${job?.id}: ${err.message}`) },
        queueWide: webhookSinkType.queueWide === true,
      },
    );
    worker.worker.on('stalled', (jobId) => stalled.push(jobId));
    running.push(worker);
    return worker;
  }

  /** A job of one attempt only: a wait that spent an attempt would dead-letter it. */
  async function add(callId: string): Promise<{ jobId: string; id: string }> {
    const call = sampleCall(callId);
    const jobId = sinkJobId(call);
    await queue.add(
      JobName.sinkDeliver,
      { kind: JobName.sinkDeliver, sink: 'hook', call },
      { jobId, attempts: 1, backoff: { type: BACKOFF_STRATEGY } },
    );
    return { jobId, id: timelineId(call) };
  }

  const errorLines = () => logged.lines.filter((l) => Number(l.level) >= 50);
  const completed = async (jobId: string) => (await queue.getJobState(jobId)) === 'completed';

  it('the job runs again no earlier than the Retry-After, spends no attempt, and the endpoint waits as long', async () => {
    limited.add('long-1');
    const first = await add('long-1');
    start();
    const asked = await waitFor(() => answers.find((a) => a.status === 429), { what: 'the 429' });
    // The worker has read the 429 and held the queue (it logs that after the hold): before, under
    // load, the second job could be added and started between the receiver's answer and the hold.
    await waitFor(() => logged.lines.some((l) => l.msg === 'remote asked to wait'), { what: 'the queue held' });
    // A job of the same endpoint arriving during the wait waits too: it is not even started.
    const second = await add('long-2');
    await waitFor(async () => (await completed(first.jobId)) && (await completed(second.jobId)), {
      timeoutMs: 20_000,
      what: 'both jobs completed',
    });

    const delivered = answers.filter((a) => a.status === 204);
    assert.deepEqual(delivered.map((a) => a.callId).sort(), ['long-1', 'long-2']);
    for (const a of delivered)
      assert.ok(
        a.at - asked.at >= WAIT_MS - 20,
        `${a.callId} sent ${a.at - asked.at} ms after the 429 (Retry-After: 3)`,
      );
    const firstRuns = runs.filter((r) => r.jobId === first.jobId);
    assert.equal(firstRuns.length, 2, `the limited job ran twice: ${JSON.stringify(runs)}`);
    assert.ok(firstRuns[1]!.at - asked.at >= WAIT_MS, `ran again ${firstRuns[1]!.at - asked.at} ms after the 429`);
    assert.equal(runs.filter((r) => r.jobId === second.jobId).length, 1, 'the other job started once, after the wait');
    assert.deepEqual(failed, [], 'no attempt failed');
    assert.deepEqual(stalled, [], 'no job stalled');
    assert.deepEqual(errorLines(), [], 'no error logged');
    assert.equal((await queue.getJob(first.jobId))?.attemptsMade, 1, 'the wait spent no attempt');
    assert.equal(logged.lines.filter((l) => l.msg === 'remote asked to wait').length, 1);

    // The timeline: the retry says when the job runs next, and it runs no earlier; no attempt cut short.
    const entries: TimelineEntry[] = (await timeline.read(first.id)).filter((e) => e.sink === 'hook');
    assert.deepEqual(
      entries.map((e) => e.event),
      ['attempt', 'retry', 'attempt', 'done'],
    );
    assert.ok(entries.every((e) => !e.cutOff));
    const retry = entries[1]!;
    assert.equal(retry.kind, 'retry-later');
    assert.ok(retry.nextAt !== undefined && retry.nextAt - asked.at >= WAIT_MS, 'next attempt: after the Retry-After');
    assert.ok(entries[2]!.at >= retry.nextAt, `ran at ${entries[2]!.at}, announced for ${retry.nextAt}`);
  });

  it('a shorter wait while the queue is held longer: the timeline names when the job really runs', async () => {
    // Another process held the endpoint's queue for 3 s while this job's request was under way; the
    // remote then asks this job to wait 1 s. The job cannot run before the hold ends, and its
    // timeline says so (before: "next attempt" in 1 s, and it ran 2 s later than announced).
    const { jobId, id } = await add('long-short');
    let asked = 0;
    start(async (deliver, job, signal, outcome) => {
      if (runs.length > 1) return deliver(job, signal, outcome);
      await holdQueue(queue, redis, WAIT_MS);
      asked = Date.now();
      throw new RetryLaterError('slow down', 1000, { status: 429, scope: 'queue' });
    });
    await waitFor(() => completed(jobId), { timeoutMs: 20_000, what: 'the job completed' });
    assert.equal(runs.length, 2);
    const entries: TimelineEntry[] = (await timeline.read(id)).filter((e) => e.sink === 'hook');
    assert.deepEqual(
      entries.map((e) => e.event),
      ['attempt', 'retry', 'attempt', 'done'],
    );
    const retry = entries[1]!;
    assert.ok(
      retry.nextAt !== undefined && retry.nextAt - asked >= WAIT_MS - 100,
      `next attempt announced ${retry.nextAt! - asked} ms after the 429; the queue was held ${WAIT_MS} ms`,
    );
    assert.ok(runs[1]!.at >= retry.nextAt, `ran ${retry.nextAt - runs[1]!.at} ms before it was announced`);
    assert.ok(runs[1]!.at - retry.nextAt < 2000, `ran ${runs[1]!.at - retry.nextAt} ms after it was announced`);
  });

  it("a remote's Retry-After of 0, in the past or of years: waited between 1 s and a day, never a request loop", async () => {
    const saved = receiver.answer;
    const retryAfter: Record<string, string> = {
      'ra-zero': '0',
      'ra-past': 'Wed, 21 Oct 2015 07:28:00 GMT',
      'ra-negative': '-5',
      'ra-years': '999999999',
    };
    receiver.answer = (callId) => {
      answers.push({ callId, at: Date.now(), status: 429 });
      return { status: 429, headers: { 'retry-after': retryAfter[callId] ?? '0' }, body: { message: 'slow down' } };
    };
    try {
      const short = ['ra-zero', 'ra-past', 'ra-negative'];
      for (const callId of short) await add(callId);
      start();
      const heard = (callId: string) => answers.filter((a) => a.callId === callId).length;
      // Asked again, and again: each wait at least a second (before: asked again at once, 200 times
      // — MAX_DEFERRALS — in well under a second). Gaps, not counts in a window: a loaded machine
      // runs the jobs later, never sooner.
      await waitFor(() => short.every((callId) => heard(callId) >= 3) || null, {
        timeoutMs: 30_000,
        what: 'each asked three times',
      });
      for (const callId of short) {
        const at = answers.filter((a) => a.callId === callId).map((a) => a.at);
        for (let i = 1; i < at.length; i++)
          assert.ok(at[i]! - at[i - 1]! >= 950, `${callId}: asked again after ${at[i]! - at[i - 1]!} ms`);
      }
      // The endpoint's queue (held by each) waits a day at most; before: 31 years.
      const years = await add('ra-years');
      await waitFor(() => heard('ra-years') === 1, { what: 'the request of ra-years' });
      await sleep(500);
      // The last retry: under load an earlier, short "held" wait may come first.
      const retry = (await timeline.read(years.id)).filter((e) => e.event === 'retry').at(-1);
      assert.ok(retry?.nextAt !== undefined, 'the wait is in the timeline');
      const ahead = retry.nextAt - Date.now();
      assert.ok(ahead > 23 * 3600_000 && ahead <= 24 * 3600_000, `next attempt in ${ahead} ms`);
      assert.equal(await queue.getJobState(years.jobId), 'delayed');
      const held = await redis.pttl(queue.toKey('limiter'));
      assert.ok(held > 23 * 3600_000 && held <= 24 * 3600_000, `the queue held for ${held} ms`);
      assert.deepEqual(failed, [], 'no attempt spent');
    } finally {
      receiver.answer = saved;
    }
  });

  it('closing the worker during the wait ends at once; a worker started later delivers after the wait', async () => {
    limited.add('long-close');
    const { jobId } = await add('long-close');
    const worker = start();
    const asked = await waitFor(() => answers.find((a) => a.status === 429), { what: 'the 429' });
    await sleep(LOCK_MS + 500); // past the lock: a job still active would be stalled now
    const closing = Date.now();
    await bounded(worker.close(), WAIT_MS, 'the close');
    const closeMs = Date.now() - closing;
    assert.ok(closeMs < 1000, `closed in ${closeMs} ms`);
    assert.ok(
      runs.every((r) => r.at < closing),
      `no run after the close: ${JSON.stringify(runs.map((r) => r.at - closing))}`,
    );
    assert.equal(await queue.getJobState(jobId), 'delayed', 'the job waits in the queue');

    start();
    await waitFor(() => completed(jobId), { timeoutMs: 20_000, what: 'the job completed' });
    const sent = answers.find((a) => a.status === 204)!;
    assert.ok(sent.at - asked.at >= WAIT_MS, `sent ${sent.at - asked.at} ms after the 429`);
    assert.deepEqual(failed, []);
    assert.deepEqual(stalled, []);
    assert.deepEqual(errorLines(), []);
    assert.equal((await queue.getJob(jobId))?.attemptsMade, 1);
  });

  for (const [scope, what] of [
    ['job', 'a job-scoped wait'],
    ['queue', 'a queue-wide wait of a sink whose queue is never held (queueWide unset: the job alone waits)'],
  ] as const)
    it(`${what} longer than the lock: the same (no early run, no stall, a close that does not wait)`, async () => {
      const jobQueue = `sink-waits-${scope}`;
      const jobs = new Queue(jobQueue, { connection: redis, prefix: keys.queuePrefix(jobQueue) });
      const ran: number[] = [];
      const options = {
        connection: redis,
        prefix: keys,
        retry: { attempts: 1, backoffMs: 50, maxBackoffMs: 200 },
        concurrency: 8,
        stalledIntervalMs: 300,
        lockDurationMs: LOCK_MS,
        maxStalledCount: 1,
        log: logged.log,
        events: {
          failed: (_q: string, job: { id?: string } | undefined, err: Error) =>
            failed.push(`${job?.id}: ${err.message}`),
        },
      };
      const processor = async () => {
        ran.push(Date.now());
        if (ran.length === 1) throw new RetryLaterError('quiet hours', WAIT_MS, { scope });
        return { status: 'done' };
      };
      try {
        await jobs.add('work', { kind: 'x' }, { jobId: 'w-1', attempts: 1 });
        const first = runWorker(jobQueue, processor, options);
        running.push(first);
        first.worker.on('stalled', (id) => stalled.push(id));
        await waitFor(() => ran.length === 1, { what: 'the first run' });
        await sleep(LOCK_MS + 500);
        const closing = Date.now();
        await bounded(first.close(), WAIT_MS, 'the close');
        assert.ok(Date.now() - closing < 1000, `closed in ${Date.now() - closing} ms`);
        const second = runWorker(jobQueue, processor, options);
        running.push(second);
        await waitFor(async () => (await jobs.getJobState('w-1')) === 'completed', { timeoutMs: 20_000, what: 'w-1' });
        assert.equal(ran.length, 2);
        assert.ok(ran[1]! - ran[0]! >= WAIT_MS, `ran again after ${ran[1]! - ran[0]!} ms`);
        assert.deepEqual(failed, []);
        assert.deepEqual(stalled, []);
        assert.deepEqual(errorLines(), []);
      } finally {
        await jobs.close();
      }
    });
});

test('SIGTERM to `callsync start` while an endpoint waits out a long Retry-After: exit 0 at once, the call sent after the wait', async () => {
  const secret = newSecret();
  const prefix = uniquePrefix('longwait-proc');
  const dir = await mkdtemp(join(tmpdir(), 'callsync-longwait-'));
  const receiver = await new FakeWebhookReceiver(secret).start();
  const answers: { at: number; status: number }[] = [];
  receiver.answer = () => {
    const status = answers.length === 0 ? 429 : 204;
    answers.push({ at: Date.now(), status });
    return status === 429 ? { status, headers: { 'retry-after': '4' }, body: { message: 'slow down' } } : undefined;
  };
  const children: CallsyncProcess[] = [];
  try {
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
  hook:
    type: webhook
    secrets: ["${secret}"]
    endpoints:
      - { name: e429, url: "${receiver.url}" }
routes:
  - to: [hook]
`,
    );
    const env = {
      CALLSYNC_FROM_SOURCE: '1',
      REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
      OPS_PORT: '0',
      LOG_LEVEL: 'info',
      CALLSYNC_CONFIG: configPath,
      WORKER_LOCK_DURATION_MS: '1500',
      WORKER_STALLED_INTERVAL_MS: '500',
      SHUTDOWN_GRACE_MS: '10000',
    };
    const first = startCallsyncProcess(env);
    children.push(first);
    const url = await bounded(first.url, 60_000, 'the first process to listen', first);
    const res = await fetch(`${url}/webhooks/ai-agent/agent-1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(webhookPayload('long-proc')),
    });
    assert.equal(res.status, 202);
    await bounded(
      waitFor(() => first.lines.some((l) => l.msg === 'remote asked to wait'), { timeoutMs: 30_000 }),
      35_000,
      'the 429',
      first,
    );
    await sleep(2000); // past the lock
    const waits = () => first.lines.filter((l) => l.msg === 'remote asked to wait').length;
    assert.equal(waits(), 1, 'the job was not taken again during the wait');
    const signalled = Date.now();
    first.proc.kill('SIGTERM');
    const code = await bounded(first.exit, 15_000, 'the first process to exit', first);
    const stopMs = Date.now() - signalled;
    assert.equal(code, 0, `exit code; stderr: ${first.stderr.join('\n').slice(-2000)}`);
    assert.ok(stopMs < 3000, `stopped in ${stopMs} ms`);
    const msgs = first.lines.map((l) => l.msg);
    const shutdownAt = msgs.indexOf('shutting down: refusing new requests, finishing work in progress');
    assert.ok(shutdownAt >= 0);
    assert.equal(msgs.slice(shutdownAt).filter((m) => m === 'remote asked to wait').length, 0, 'no run after SIGTERM');
    assert.deepEqual(
      first.lines.filter((l) => Number(l.level) >= 50),
      [],
      'no error logged',
    );
    assert.equal(answers.length, 1, 'the receiver heard only the first request');

    // Started again: the job is still there and is sent once the wait is over.
    const second = startCallsyncProcess(env);
    children.push(second);
    await bounded(second.url, 60_000, 'the second process to listen', second);
    await waitFor(() => receiver.byCall.has('long-proc'), { timeoutMs: 30_000, what: 'the call delivered' });
    assert.ok(answers[1]!.at - answers[0]!.at >= 4000, `sent ${answers[1]!.at - answers[0]!.at} ms after the 429`);
    assert.deepEqual(
      second.lines.filter((l) => Number(l.level) >= 50),
      [],
    );
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const queue = new Queue<SinkDeliverJob>(sinkQueueName('hook', 'e429'), { connection: redis, prefix });
    try {
      const [job] = await waitFor(async () => {
        const done = await queue.getJobs(['completed']);
        return done.length > 0 ? done : null;
      });
      assert.equal(job!.attemptsMade, 1, 'the wait spent no attempt');
      assert.equal(job!.stalledCounter, 0, 'no attempt cut short: the job never stalled');
    } finally {
      await queue.close();
      redis.disconnect();
    }
  } finally {
    for (const c of children) if (c.proc.exitCode === null) c.proc.kill('SIGKILL');
    await receiver.stop();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  }
});
