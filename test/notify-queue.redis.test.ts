// The SMS sink behind its BullMQ queue and the real runner (workers/runner.ts): a redelivered call
// (a second job for the same call) sends nothing more, a timeout after the request was sent is
// dead-lettered after one attempt instead of being retried, and a 402 is dead-lettered with its reason.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Queue, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import {
  defaultJobOptions,
  JobName,
  sinkQueueName,
  type RetryPolicy,
  type SinkDeliverJob,
} from '../queues/registry.js';
import { createLogger } from '../src/log.js';
import type { CanonicalCall } from '../src/model/call.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import { smsSinkType } from '../src/sinks/notify/sms.js';

/** What the SMS sink type builds its sinks with (SinkDeps with its settings). */
type NotifySinkDeps = Parameters<typeof smsSinkType.create>[2];
import { RedisKeyValueStore } from '../src/state/kv.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { createDeliverProcessor } from '../workers/deliver.js';
import { runWorker, type RunningWorker } from '../workers/runner.js';
import { sampleCall } from './support/calls.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const log = createLogger({ level: 'silent' });
const retry: RetryPolicy = { attempts: 4, backoffMs: 50, maxBackoffMs: 200 };
const SINK = 'missed-sms';

let api: FakeTelephony;
let connection: Redis;
let prefix: string;
let queue: Queue<SinkDeliverJob>;
let running: RunningWorker;

before(async () => {
  api = await FakeTelephony.start();
  connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  prefix = uniquePrefix('notify-queue');
  const options = smsSinkType.options.parse({ smsId: 's0', message: 'Sorry we missed your call.', cooldown: '12h' });
  const deps: NotifySinkDeps = {
    log,
    state: new RedisKeyValueStore(connection, `${prefix}:state:`).scoped(SINK),
    telephony: createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, timeoutMs: 300 }),
    now: () => new Date(),
    settings: {},
    optOut: new OptOutList(connection, prefix),
  };
  const sink = smsSinkType.create(SINK, options, deps);
  queue = new Queue<SinkDeliverJob>(sinkQueueName(SINK), {
    connection,
    prefix,
    defaultJobOptions: defaultJobOptions(retry),
  });
  running = runWorker<SinkDeliverJob>(sinkQueueName(SINK), createDeliverProcessor(sink, log), {
    connection,
    prefix,
    retry,
    concurrency: 2,
    stalledIntervalMs: 1000,
    lockDurationMs: 2000,
    maxStalledCount: 1,
    log,
  });
});

after(async () => {
  await running.close();
  await queue.close();
  await api.close();
  await cleanupPrefix(prefix);
  connection.disconnect();
});

function call(id: string, from: string): CanonicalCall {
  return { ...sampleCall(id), from, fromRaw: from, outcome: 'missed' };
}

async function enqueue(jobId: string, c: CanonicalCall): Promise<void> {
  await queue.add(JobName.sinkDeliver, { kind: JobName.sinkDeliver, sink: SINK, call: c }, { jobId });
}

async function settled(jobId: string): Promise<Job<SinkDeliverJob>> {
  return waitFor(
    async () => {
      const state = await queue.getJobState(jobId);
      // Fetched after the state is final, so returnvalue / failedReason are filled in.
      return state === 'completed' || state === 'failed' ? queue.getJob(jobId) : undefined;
    },
    { timeoutMs: 10_000, what: `job ${jobId} to finish` },
  ) as Promise<Job<SinkDeliverJob>>;
}

const smsRequests = () => api.requests.filter((r) => r.method === 'POST' && r.path === '/v2/sessions/sms').length;

describe('sms sink through the queue runner', () => {
  test('a redelivered call (second job, same call) sends no second SMS', async () => {
    const c = call('q-again', '+4915112345678');
    await enqueue('first', c);
    const first = await settled('first');
    assert.equal(await first.getState(), 'completed');
    assert.equal(first.returnvalue.status, 'done');
    await enqueue('redelivered', c);
    const second = await settled('redelivered');
    assert.equal(await second.getState(), 'completed');
    assert.deepEqual(
      { status: second.returnvalue.status, reason: second.returnvalue.reason },
      { status: 'skipped', reason: '+49151****678: already sent' },
    );
    assert.deepEqual(api.sms, [{ smsId: 's0', recipient: '+4915112345678', message: 'Sorry we missed your call.' }]);
  });

  test('a timeout after the request was sent is dead-lettered after one attempt, not retried', async () => {
    api.inject({ on: 'sms', delayMs: 800 });
    const before = smsRequests();
    const sentBefore = api.sms.length;
    await enqueue('timeout', call('q-timeout', '+4917612345678'));
    const job = await settled('timeout');
    assert.equal(await job.getState(), 'failed');
    assert.equal(job.attemptsMade, 1);
    assert.match(job.failedReason, /outcome unknown/);
    // Wait past the backoff the runner would have used: no second request appears.
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(smsRequests() - before, 1);
    assert.equal(api.sms.length - sentBefore, 1, 'the platform sent it once');
  });

  test('402 insufficient funds is dead-lettered at once with the reason', async () => {
    api.inject({ on: 'sms', status: 402, detail: 'insufficient funds' });
    await enqueue('funds', call('q-402', '+4916012345678'));
    const job = await settled('funds');
    assert.equal(await job.getState(), 'failed');
    assert.equal(job.attemptsMade, 1);
    assert.match(job.failedReason, /402.*insufficient funds/);
  });
});
