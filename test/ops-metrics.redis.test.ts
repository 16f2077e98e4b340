// /metrics in Prometheus text format: webhook counters, job counters per queue and sink, queue
// counts read from Redis at scrape, durations, poller gauges, process metrics, one registry with
// the CRM counters; and the ops server of a worker-only process.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Hono } from 'hono';
import '../src/sinks/crm/metrics.js';
import { createOpsApp } from '../src/ops/app.js';
import { pollerMetrics } from '../workers/metric-events.js';
import { memoryLog, postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

/** The value of one sample, e.g. sample(text, 'callsync_jobs_completed_total', { queue: 'inbound' }). */
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

async function scrape(url: string, headers: Record<string, string> = {}): Promise<string> {
  const res = await fetch(`${url}/metrics`, { headers });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return res.text();
}

describe('metrics on the ingress', () => {
  let cs: OpsCallsync;
  let dir: string;
  const sink = new FlakySink();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-metrics-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir, JOB_ATTEMPTS: '2' }, { sinks: new Map([['archive', sink]]) });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('webhooks, jobs and queue counts are counted by outcome, queue and sink', async () => {
    const hook = `${cs.url}/webhooks/ai-agent/agent-1`;
    const statuses = [];
    for (const id of ['ok-1', 'ok-1', 'perm-1', 'flaky-1', 'fail-1'])
      statuses.push((await postJson(hook, webhookPayload(id))).status);
    assert.deepEqual(statuses, [202, 202, 202, 202, 202]);
    assert.equal((await postJson(hook, { version: 'v2' })).status, 400);
    assert.equal((await postJson(hook, 'hello', { 'content-type': 'text/plain' })).status, 415);

    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(
      async () => {
        const c = await archive.getJobCounts('completed', 'failed');
        return c.completed === 2 && c.failed === 2;
      },
      { timeoutMs: 30_000, what: 'two archive jobs done and two dead-lettered' },
    );

    const text = await scrape(cs.url);
    assert.equal(sample(text, 'callsync_webhooks_received_total'), 7);
    assert.equal(sample(text, 'callsync_webhooks_accepted_total'), 5);
    assert.equal(sample(text, 'callsync_webhooks_duplicate_total'), 1);
    assert.equal(sample(text, 'callsync_webhooks_rejected_total', { status: '400', reason: 'invalid-payload' }), 1);
    assert.equal(
      sample(text, 'callsync_webhooks_rejected_total', { status: '415', reason: 'unsupported-media-type' }),
      1,
    );

    const sinkLabels = { queue: 'sink-archive', sink: 'archive' };
    // Four calls (the duplicate was not stored again) fanned out into four archive jobs, none dead-lettered.
    assert.equal(sample(text, 'callsync_fanout_calls_total'), 4);
    assert.equal(sample(text, 'callsync_fanout_sink_jobs_total'), 4);
    assert.equal(sample(text, 'callsync_fanout_dead_lettered_total'), 0);
    assert.equal(sample(text, 'callsync_inbound_log_entries', { state: 'all' }), 0);
    assert.equal(sample(text, 'callsync_inbound_log_entries', { state: 'pending' }), 0);
    assert.equal(sample(text, 'callsync_jobs_completed_total', sinkLabels), 2);
    // perm-1 once, flaky-1 once, fail-1 on both attempts.
    assert.equal(sample(text, 'callsync_jobs_failed_total', sinkLabels), 4);
    assert.equal(sample(text, 'callsync_jobs_retried_total', sinkLabels), 2);
    assert.equal(sample(text, 'callsync_jobs_dead_lettered_total', sinkLabels), 2);
    assert.equal(sample(text, 'callsync_job_duration_seconds_count', sinkLabels), 2);
    assert.ok(sample(text, 'callsync_job_duration_seconds_bucket', { ...sinkLabels, le: '+Inf' }) === 2);

    assert.equal(sample(text, 'callsync_queue_jobs', { ...sinkLabels, state: 'failed' }), 2);
    assert.equal(sample(text, 'callsync_queue_jobs', { ...sinkLabels, state: 'waiting' }), 0);
    assert.equal(sample(text, 'callsync_queue_jobs', { queue: 'inbound', state: 'active' }), 0);
    assert.equal(sample(text, 'callsync_queue_jobs', { queue: 'poll-dead-letters', state: 'delayed' }), 0);
    assert.equal(sample(text, 'callsync_queue_paused', sinkLabels), 0);

    // Process metrics and the CRM sinks' counters come from the same registry.
    assert.ok((sample(text, 'process_cpu_user_seconds_total') ?? -1) >= 0);
    assert.ok(sample(text, 'nodejs_eventloop_lag_seconds') !== undefined);
    assert.match(text, /# TYPE callsync_crm_requests_total counter/);
  });

  test('a credentials failure pauses the queue, and the gauge shows it', async () => {
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload('auth-1'))).status, 202);
    const text = await waitFor(
      async () => {
        const t = await scrape(cs.url);
        return sample(t, 'callsync_queue_paused', { queue: 'sink-archive' }) === 1 ? t : null;
      },
      { timeoutMs: 20_000, what: 'paused gauge' },
    );
    assert.equal(sample(text, 'callsync_queue_pauses_total', { queue: 'sink-archive', sink: 'archive' }), 1);
  });

  test('poller gauges per channel', async () => {
    const hooks = pollerMetrics();
    hooks.polled?.('ch-7', {
      events: 3,
      accepted: 3,
      duplicates: 0,
      deadLettered: 0,
      ignored: 0,
      position: 'p',
      lagSeconds: 12.5,
    });
    hooks.failed?.('ch-8', new Error('boom'), 100);
    const text = await scrape(cs.url);
    assert.equal(sample(text, 'callsync_poller_lag_seconds', { channel: 'ch-7' }), 12.5);
    const last = sample(text, 'callsync_poller_last_success_timestamp_seconds', { channel: 'ch-7' })!;
    assert.ok(Math.abs(last - Date.now() / 1000) < 60, 'last success is about now');
    assert.equal(sample(text, 'callsync_poller_events_total', { channel: 'ch-7' }), 3);
    assert.equal(sample(text, 'callsync_poller_polls_total', { channel: 'ch-7', outcome: 'success' }), 1);
    assert.equal(sample(text, 'callsync_poller_polls_total', { channel: 'ch-8', outcome: 'failure' }), 1);
  });
});

describe('metrics endpoint credentials', () => {
  test('METRICS_TOKEN makes /metrics require the bearer token', async () => {
    const { log } = memoryLog();
    const { app } = createOpsApp({
      log,
      queues: [],
      auth: {},
      metricsToken: 'scrape-secret-1',
      ready: async () => true,
    });
    const root = new Hono().route('/', app);
    assert.equal((await root.request('/metrics')).status, 401);
    assert.equal((await root.request('/metrics', { headers: { authorization: 'Bearer wrong' } })).status, 401);
    assert.equal(
      (await root.request('/metrics', { headers: { authorization: 'Bearer scrape-secret-1' } })).status,
      200,
    );
  });
});

describe('ops server of a worker-only process', () => {
  let cs: OpsCallsync;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-ops-'));
    cs = await startOpsCallsync({ CALLSYNC_ROLE: 'worker', OPS_PORT: '0', ARCHIVE_DIR: dir });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('serves /healthz, /readyz and /metrics, no webhook, and no dashboard without credentials', async () => {
    assert.equal(cs.callsync.url, null, 'no ingress');
    const url = cs.operations.url!;
    assert.ok(url);
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
    assert.deepEqual(await (await fetch(`${url}/readyz`)).json(), { status: 'ready' });
    const text = await scrape(url);
    assert.equal(sample(text, 'callsync_queue_jobs', { queue: 'sink-archive', state: 'waiting' }), 0);
    const webhook = await postJson(`${url}/webhooks/ai-agent`, webhookPayload('x'));
    assert.equal(webhook.status, 404);
    const dashboard = await fetch(`${url}/admin/queues`);
    assert.equal(dashboard.status, 404);
    assert.ok(
      cs.logs.some((l) => /dashboard off: set ADMIN_PASSWORD/.test(String(l.msg))),
      'says the dashboard is off',
    );
  });

  test('a path or method it does not serve is 404 with the error body, as README says of every server', async () => {
    const url = cs.operations.url!;
    for (const [method, path] of [
      ['POST', '/webhooks/ai-agent/x'],
      ['GET', '/nothing'],
      ['DELETE', '/healthz'],
      ['GET', '/admin/queues'],
    ] as const) {
      const res = await fetch(`${url}${path}`, { method });
      assert.equal(res.status, 404, `${method} ${path}`);
      assert.match(res.headers.get('content-type') ?? '', /application\/json/, `${method} ${path}`);
      assert.deepEqual(
        await res.json(),
        {
          errors: [
            { status: 404, title: 'Not Found', detail: `no route for ${method} ${path}`, source: { pointer: '/' } },
          ],
        },
        `${method} ${path}`,
      );
    }
  });

  test('once shutdown begins, /readyz fails while /healthz and /metrics still answer', async () => {
    cs.operations.beginShutdown();
    const url = cs.operations.url!;
    const ready = await fetch(`${url}/readyz`);
    assert.equal(ready.status, 503);
    assert.equal(((await ready.json()) as any).errors[0].status, 503);
    assert.equal((await fetch(`${url}/healthz`)).status, 200);
    assert.equal((await fetch(`${url}/metrics`)).status, 200);
  });
});
