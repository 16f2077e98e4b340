// The HubSpot sink behind the real queue runner (BullMQ on real Redis) and the fake HubSpot:
// a 429 storm pauses the queue without spending attempts (jobs allow only one), and a 401 pauses
// the queue instead of dead-lettering, resuming cleanly once the token is fixed.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { BACKOFF_STRATEGY, JobName, type SinkDeliverJob } from '../queues/registry.js';
import { HubSpotSink, hubspotSinkType } from '../src/sinks/crm/hubspot.js';
import { createDeliverProcessor } from '../workers/deliver.js';
import { runWorker, type RunningWorker } from '../workers/runner.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, type CrmTestDeps } from './support/crm-deps.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

describe('hubspot sink behind the queue runner', () => {
  let fake: FakeHubSpot;
  let deps: CrmTestDeps;
  let connection: Redis;
  let prefix: string;
  let queue: Queue<SinkDeliverJob>;
  let running: RunningWorker | undefined;
  const events = { failed: [] as string[], deferred: [] as string[], paused: [] as string[] };

  before(async () => {
    fake = await new FakeHubSpot().start();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(() => {
    fake.requests.length = 0;
    fake.calls.clear();
    fake.contacts.clear();
    fake.token = 'pat-test-token';
    events.failed.length = events.deferred.length = events.paused.length = 0;
    const base = crmTestDeps({ HUBSPOT_ACCESS_TOKEN: 'pat-test-token', HUBSPOT_API_URL: fake.url });
    deps = { ...base, now: () => new Date() }; // BullMQ runs on the real clock
    prefix = uniquePrefix('crmq');
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    queue = new Queue<SinkDeliverJob>('sink-hubspot', { connection, prefix });
  });
  afterEach(async () => {
    await running?.close();
    running = undefined;
    await queue.close();
    connection.disconnect();
    await cleanupPrefix(prefix);
    await deps.close();
  });

  function start(): void {
    const options = hubspotSinkType.options.parse({});
    const sink = new HubSpotSink('hubspot', options, deps);
    running = runWorker<SinkDeliverJob>('sink-hubspot', createDeliverProcessor(sink, deps.log), {
      connection,
      prefix,
      retry: { attempts: 1, backoffMs: 50, maxBackoffMs: 200 },
      concurrency: 2,
      stalledIntervalMs: 1000,
      lockDurationMs: 5000,
      maxStalledCount: 1,
      log: deps.log,
      limit: hubspotSinkType.limit?.(options),
      events: {
        failed: (_q, job, err) => events.failed.push(`${job?.id}: ${err.message}`),
        deferred: (_q, job, delayMs, scope) => events.deferred.push(`${job.id}:${scope}:${delayMs}`),
        paused: (_q, reason) => events.paused.push(reason),
      },
    });
  }

  async function add(callId: string, startOffsetMin = 0) {
    const call = sampleCall(callId, {
      patch: (p) => ((p.call.startTime += startOffsetMin * 60_000), (p.call.endTime += startOffsetMin * 60_000)),
    });
    // One attempt only: a rate-limit pause that spent an attempt would dead-letter the job.
    return queue.add(
      JobName.sinkDeliver,
      { kind: JobName.sinkDeliver, sink: 'hubspot', call },
      { jobId: `hubspot-${callId}`, attempts: 1, backoff: { type: BACKOFF_STRATEGY } },
    );
  }

  it('a 429 storm: every job completes with its single attempt, one record per call, none lost', async () => {
    fake.enqueue({
      times: 4,
      status: 429,
      headers: { 'retry-after': '1' },
      body: {
        status: 'error',
        message: 'You have reached your ten_secondly_rolling limit.',
        errorType: 'RATE_LIMIT',
        policyName: 'TEN_SECONDLY_ROLLING',
      },
    });
    await Promise.all(['q-1', 'q-2', 'q-3'].map((id, i) => add(id, i)));
    start();
    await waitFor(async () => (await queue.getJobCounts('completed')).completed === 3, {
      timeoutMs: 20_000,
      what: '3 completed jobs',
    });
    assert.deepEqual(events.failed, [], 'no job failed or was dead-lettered');
    assert.ok(
      events.deferred.length >= 1 && events.deferred.every((d) => d.includes(':queue:')),
      `queue-wide pauses: ${events.deferred.join(', ')}`,
    );
    assert.equal(fake.calls.size, 3, 'one call record per call');
    assert.equal((await queue.getJobCounts('failed')).failed, 0);
  });

  it('a 401 pauses the queue (no dead letters, no hammering); resuming after the fix delivers the call once', async () => {
    fake.token = 'rotated-elsewhere';
    await add('q-auth');
    start();
    await waitFor(() => queue.isPaused(), { timeoutMs: 10_000, what: 'queue paused' });
    assert.equal(events.paused.length, 1);
    assert.match(events.paused[0] ?? '', /HubSpot rejected the credentials.*HUBSPOT_ACCESS_TOKEN/);
    assert.deepEqual(events.failed, []);
    const requestsWhilePaused = fake.requests.length;
    await new Promise((r) => setTimeout(r, 1500)); // the job's 1 s delay passes; a paused queue hands out nothing
    assert.equal(fake.requests.length, requestsWhilePaused, 'no requests while paused');
    assert.equal((await queue.getJobCounts('failed')).failed, 0);

    fake.token = 'pat-test-token';
    await queue.resume();
    await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, {
      timeoutMs: 10_000,
      what: 'job completed after resume',
    });
    assert.equal(fake.calls.size, 1);
  });

  it('a redelivered job for the same call updates the record instead of duplicating it', async () => {
    start();
    await add('q-dup');
    await waitFor(async () => (await queue.getJobCounts('completed')).completed === 1, {
      timeoutMs: 10_000,
      what: 'first delivery',
    });
    const call = sampleCall('q-dup');
    await queue.add(
      JobName.sinkDeliver,
      { kind: JobName.sinkDeliver, sink: 'hubspot', call },
      { jobId: 'hubspot-q-dup-redelivery', attempts: 1 },
    );
    await waitFor(async () => (await queue.getJobCounts('completed')).completed === 2, {
      timeoutMs: 10_000,
      what: 'redelivery',
    });
    assert.equal(fake.calls.size, 1);
    assert.equal(fake.requests.filter((r) => r.method === 'PATCH').length, 1);
  });
});
