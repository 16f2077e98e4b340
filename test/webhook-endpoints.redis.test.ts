// The signed webhook behind the real queues: one queue per endpoint (`sink-hooks.a`, `sink-hooks.b`),
// so what one receiver answers — 400, 401, 410 Gone, a redirect, a 5xx — touches that endpoint only;
// its own secret; the sink's retry schedule; a disabled endpoint shown on the dashboard and in the
// metrics, re-enabled by `callsync resume` or the dashboard's resume button; and the jobs queued
// in the sink's own queue (before endpoints had queues) handed on to each endpoint.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { Queue } from 'bullmq';
import { JobName, sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { sinkJobId } from '../queues/registry.js';
import { postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { jobIn } from './support/jobs.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, waitFor } from './support/redis.js';

const TOKEN = 'endpoints-admin-token-5d1f';
const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
const A = sinkQueueName('hooks', 'a');
const B = sinkQueueName('hooks', 'b');

describe('signed webhook: one queue per endpoint', () => {
  let dir: string;
  let cs: OpsCallsync;
  let a: FakeWebhookReceiver;
  let b: FakeWebhookReceiver;
  let queues: Map<string, Queue>;
  const sinkSecret = newSecret();
  const secretA = newSecret();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-endpoints-'));
    // A verifies with its own secret, B with the sink's.
    [a, b] = await Promise.all([new FakeWebhookReceiver(secretA).start(), new FakeWebhookReceiver(sinkSecret).start()]);
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
  hooks:
    type: webhook
    secrets: ["${sinkSecret}"]
    endpoints:
      - { name: a, url: "${a.url}", secrets: ["${secretA}"] }
      - { name: b, url: "${b.url}" }
    # One retry, an hour later: a failed job stays delayed for the test to read (the global backoff is 50 ms).
    retry: { schedule: [1h] }
routes:
  - to: [hooks]
`,
    );
    cs = await startOpsCallsync({ CALLSYNC_CONFIG: configPath, ADMIN_TOKEN: TOKEN });
    queues = new Map(cs.operations.queues.map((q) => [q.name, q]));
  });

  after(async () => {
    await cs?.stop();
    await Promise.all([a?.stop(), b?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  const post = async (callId: string) => {
    const r = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(callId));
    assert.equal(r.status, 202, JSON.stringify(r.body));
  };
  const received = (r: FakeWebhookReceiver, callId: string) => r.byCall.has(callId);
  const jobOf = async (queue: string, callId: string) => {
    const jobs = await queues.get(queue)!.getJobs(['completed', 'failed', 'waiting', 'delayed', 'active']);
    return jobs.find((j) => (j.data as SinkDeliverJob).call.callId === callId);
  };
  const cli = async (argv: string[]) => {
    const out: string[] = [];
    const io: CliIo = {
      env: { REDIS_URL, QUEUE_PREFIX: cs.prefix, CALLSYNC_CONFIG: join(dir, 'callsync.yaml') },
      out: (l) => out.push(l),
      err: (l) => out.push(l),
    };
    const code = await runCli(argv, io);
    return { code, out: out.join('\n') };
  };
  const metricsText = async () => (await fetch(`${cs.url}/metrics`)).text();
  const dashboardQueue = async (name: string) => {
    const res = await fetch(`${cs.url}/admin/queues/api/queues`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const body = (await res.json()) as { queues: { name: string; isPaused: boolean; description?: string }[] };
    return body.queues.find((q) => q.name === name)!;
  };

  test('the endpoints have queues of their own, on the dashboard and for the dead letters', async () => {
    assert.deepEqual(
      [...queues.keys()].filter((n) => n.startsWith('sink-')),
      ['sink-hooks', A, B],
    );
    const names = (
      (await await fetch(`${cs.url}/admin/queues/api/queues`, { headers: { authorization: `Bearer ${TOKEN}` } }).then(
        (r) => r.json(),
      )) as { queues: { name: string }[] }
    ).queues.map((q) => q.name);
    for (const q of [A, B]) assert.ok(names.includes(q), `${q} on the dashboard`);
  });

  test("a call one endpoint refuses (400) still reaches the other; the dead letter is that endpoint's alone", async () => {
    a.answer = (callId) =>
      callId === 'ep-400' ? { status: 400, body: { message: 'unknown field callId' } } : undefined;
    try {
      await post('ep-400');
      await waitFor(() => received(b, 'ep-400'), { what: 'B got the call A refused' });
      const refused = await waitFor(
        async () => {
          const job = await jobOf(A, 'ep-400');
          return job ? jobIn(queues.get(A)!, job.id!, 'failed') : null;
        },
        { what: 'the call dead-lettered at A' },
      );
      assert.match(refused.failedReason, /answered 400: unknown field callId/);
      assert.equal(refused.attemptsMade, 1, 'permanent: no retries');
      assert.equal(await (await jobOf(B, 'ep-400'))!.getState(), 'completed');
      assert.equal(a.rejectedSignatures + b.rejectedSignatures, 0, 'each endpoint signed with its own secret');

      const listed = await cli(['dlq', 'list', '--queue', 'hooks']);
      assert.equal(listed.code, 0);
      assert.match(listed.out, new RegExp(`^${A.replace('.', '\\.')} .*ep-400 .*answered 400`, 'm'));
      assert.doesNotMatch(listed.out, new RegExp(`^${B.replace('.', '\\.')} `, 'm'));
    } finally {
      a.answer = null;
    }
  });

  test('a 401 from one endpoint pauses its queue only; after the fix and a resume it gets what waited', async () => {
    a.answer = () => ({ status: 401, body: { message: 'bad api key' } });
    try {
      await post('ep-401-1');
      await waitFor(() => queues.get(A)!.isPaused(), { what: 'A paused' });
      await post('ep-401-2');
      await waitFor(() => received(b, 'ep-401-1') && received(b, 'ep-401-2'), { what: 'B got both calls' });
      assert.equal(await queues.get(B)!.isPaused(), false);
      // The call waiting in A's paused queue, never attempted there, shows as waiting at A for an
      // operator (`paused`, its queue's reason given) — not as done because B, the only endpoint that
      // reported, is; nor as `pending` as if it were only behind.
      const sinksLine = await waitFor(
        async () => {
          const line = /^sinks: .*$/m.exec((await cli(['call', 'ep-401-2'])).out)?.[0];
          return line?.includes('hooks.b:done') ? line : null;
        },
        { what: 'ep-401-2 done at B in its timeline' },
      );
      assert.deepEqual(sinksLine.slice('sinks: '.length).split(' ').sort(), ['hooks.a:paused', 'hooks.b:done']);
      assert.match((await cli(['call', 'ep-401-2'])).out, /fanned-out .*→ sinks hooks \(a, b\)/);
      const waitingAtA = await cli(['calls', '--since', '1h', '--sink', 'hooks.a', '--status', 'pending']);
      assert.match(waitingAtA.out, /ep-401-2/, 'found among the calls waiting at A');
      // The call A refused waits for an operator: `paused`, not `retrying` (nothing retries it until
      // a resume); `--status paused` finds it and the call waiting behind it, `pending` includes them.
      assert.match((await cli(['call', 'ep-401-1'])).out, /^sinks: .*hooks\.a:paused/m);
      const paused = await cli(['calls', '--since', '1h', '--sink', 'hooks.a', '--status', 'paused']);
      assert.equal(paused.code, 0, paused.out);
      assert.match(paused.out, /ep-401-1/);
      assert.match(paused.out, /ep-401-2/);
      const retrying = await cli(['calls', '--since', '1h', '--sink', 'hooks.a', '--status', 'retrying']);
      assert.doesNotMatch(retrying.out, /ep-401-1/);
      assert.match(waitingAtA.out, /ep-401-1/);
      const api = (await (
        await fetch(`${cs.url}/api/calls/ep-401-2`, { headers: { authorization: `Bearer ${TOKEN}` } })
      ).json()) as { calls: { sinks: Record<string, string>; reasons: Record<string, string> }[] };
      assert.deepEqual(api.calls[0]!.sinks, { 'hooks.a': 'paused', 'hooks.b': 'done' });
      assert.match(
        api.calls[0]!.reasons['hooks.a']!,
        /^its queue sink-hooks\.a is paused: .*answered 401.*: the job waits for an operator to resume it/,
      );
      const metrics = await metricsText();
      assert.match(metrics, new RegExp(`callsync_queue_paused\\{queue="${A}",sink="hooks"\\} 1`));
      assert.match(metrics, new RegExp(`callsync_queue_paused\\{queue="${B}",sink="hooks"\\} 0`));
      assert.match(
        metrics,
        /callsync_webhook_endpoint_disabled\{sink="hooks",endpoint="a"\} 0/,
        'paused for credentials, not disabled',
      );
      // The pause says why, wherever an operator looks: `callsync resume`, the dashboard, /readyz.
      const listed = await cli(['resume']);
      assert.match(
        listed.out,
        new RegExp(`^${A.replace('.', '\\.')}  paused: .*answered 401: bad api key.* \\(since \\d{4}-`, 'm'),
      );
      assert.match(
        (await dashboardQueue(A)).description ?? '',
        /^Paused since \d{4}-.*answered 401: bad api key.*Resume the queue once the cause is fixed/,
      );
      const ready = (await (await fetch(`${cs.url}/readyz`)).json()) as {
        status: string;
        paused?: { queue: string; state: string; reason: string }[];
      };
      assert.equal(ready.status, 'ready');
      assert.deepEqual(
        ready.paused?.map((p) => [p.queue, p.state]),
        [[A, 'paused']],
      );
      assert.match(ready.paused![0]!.reason, /answered 401: bad api key/);
    } finally {
      a.answer = null;
    }
    const resumed = await cli(['resume', '--queue', A]);
    assert.equal(resumed.code, 0);
    assert.match(
      resumed.out,
      new RegExp(`resumed ${A.replace('.', '\\.')} \\(was paused: .*answered 401: bad api key`),
    );
    assert.equal(
      ((await (await fetch(`${cs.url}/readyz`)).json()) as { paused?: unknown }).paused,
      undefined,
      'resumed: no pause left to tell',
    );
    await waitFor(() => received(a, 'ep-401-1') && received(a, 'ep-401-2'), {
      what: 'A got both calls after the resume',
    });
    for (const id of ['ep-401-1', 'ep-401-2'])
      assert.equal(b.records.get([...b.byCall.get(id)!][0]!)!.deliveries, 1, `B got ${id} once`);
  });

  test('410 Gone disables the endpoint: logged once, in the gauge and on the dashboard; the other goes on; resume re-enables', async () => {
    const gone = ['ep-410-1', 'ep-410-2', 'ep-410-3'];
    a.answer = (callId) =>
      callId.startsWith('ep-410') ? { status: 410, body: { message: 'this hook was deleted' } } : undefined;
    try {
      await Promise.all(gone.map(post));
      await waitFor(() => gone.every((id) => received(b, id)), { what: 'B got every call' });
      await waitFor(
        async () => (await metricsText()).includes('callsync_webhook_endpoint_disabled{sink="hooks",endpoint="a"} 1'),
        { what: 'the gauge shows A disabled' },
      );
      const metrics = await metricsText();
      assert.match(metrics, /callsync_webhook_endpoint_disabled\{sink="hooks",endpoint="b"\} 0/);
      // Every job of A waits (none dead-lettered): they were all answered 410 or found the queue paused.
      await waitFor(async () => (await Promise.all(gone.map((id) => jobOf(A, id)))).every((j) => j !== undefined), {
        what: "A's jobs",
      });
      for (const id of gone) assert.notEqual(await (await jobOf(A, id))!.getState(), 'failed', `${id} kept`);
      const warnings = cs.logs.filter(
        (l) =>
          l.queue === A &&
          l.msg ===
            'endpoint disabled: its queue is paused until an operator re-enables it (resume it on the dashboard or with `callsync resume`)',
      );
      assert.equal(warnings.length, 1, 'logged once, however many jobs got the answer');
      assert.match(String(warnings[0]!.reason), /answered 410 Gone: this hook was deleted/);

      const shown = await dashboardQueue(A);
      assert.equal(shown.isPaused, true);
      assert.match(
        shown.description ?? '',
        /^Disabled since \d{4}-.*answered 410 Gone: this hook was deleted.*Resume the queue to re-enable/,
      );
      assert.equal((await dashboardQueue(B)).description, undefined);
      const listed = await cli(['resume']);
      assert.match(listed.out, new RegExp(`^${A.replace('.', '\\.')}  disabled: .*410 Gone`, 'm'));
      assert.equal(await queues.get(A)!.isPaused(), true, 'listing resumes nothing');
    } finally {
      a.answer = null;
    }
    // The operator re-enables it on the dashboard.
    const res = await fetch(`${cs.url}/admin/queues/api/queues/${A}/resume`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(res.status, 200, await res.text());
    await waitFor(() => gone.every((id) => received(a, id)), { what: 'A got the waiting calls' });
    assert.match(await metricsText(), /callsync_webhook_endpoint_disabled\{sink="hooks",endpoint="a"\} 0/);
    assert.equal((await dashboardQueue(A)).description, undefined);
  });

  test('a redirect is reported with where it points (never "fetch failed") and disables the endpoint', async () => {
    a.answer = (callId) =>
      callId === 'ep-301'
        ? { status: 301, headers: { location: 'https://new.example/hooks/calls?token=secret-in-query' } }
        : undefined;
    try {
      await post('ep-301');
      await waitFor(() => received(b, 'ep-301'), { what: 'B got the call' });
      const shown = await waitFor(
        async () => {
          const q = await dashboardQueue(A);
          return q.isPaused && q.description ? q : null;
        },
        { what: 'A disabled' },
      );
      assert.match(
        shown.description!,
        /answered 301 redirect to https:\/\/new\.example\/hooks\/calls \(redirects are not followed\)\. The endpoint is disabled: update its URL/,
      );
      assert.doesNotMatch(shown.description!, /fetch failed|secret-in-query/);
      assert.notEqual(await (await jobOf(A, 'ep-301'))!.getState(), 'failed');
    } finally {
      a.answer = null;
    }
    const resumed = await cli(['resume', '--queue', 'hooks']);
    assert.match(resumed.out, new RegExp(`resumed ${A.replace('.', '\\.')} \\(was disabled: .*301 redirect`));
    await waitFor(() => received(a, 'ep-301'), { what: 'A got it after the fix' });
  });

  test("a failure is retried on the sink's schedule (an hour here), not the global backoff (50 ms)", async () => {
    a.answer = (callId) => (callId === 'ep-503' ? { status: 503, body: { message: 'maintenance' } } : undefined);
    try {
      await post('ep-503');
      const job = await waitFor(
        async () => {
          const j = await jobOf(A, 'ep-503');
          return j && j.attemptsMade === 1 && (await j.getState()) === 'delayed' ? j : null;
        },
        { what: 'the first attempt failed' },
      );
      assert.equal(job.opts.attempts, 2, 'attempts: one more than the schedule has delays');
      // BullMQ keeps a delayed job in a sorted set scored `due ms * 0x1000 + sequence`.
      const score = Number(await cs.callsync.redis.worker.zscore(`${cs.prefix}:${A}:delayed`, job.id!));
      const dueInMs = Math.floor(score / 0x1000) - Date.now();
      assert.ok(dueInMs > 55 * 60_000 && dueInMs <= 66 * 60_000, `retry due in ${Math.round(dueInMs / 1000)} s`);
      assert.equal(await (await jobOf(B, 'ep-503'))?.getState(), 'completed');
    } finally {
      a.answer = null;
    }
  });

  test("a job in the sink's own queue (queued before endpoints had queues) is handed on to each endpoint once", async () => {
    const call = normalizeWebhook(webhookPayload('ep-old'), { agentId: 'agent-1', receivedAt: new Date() });
    const legacy = queues.get(sinkQueueName('hooks'))! as Queue<SinkDeliverJob>;
    const jobId = sinkJobId(call);
    await legacy.add(JobName.sinkDeliver, { kind: JobName.sinkDeliver, sink: 'hooks', call }, { jobId });
    await waitFor(() => received(a, 'ep-old') && received(b, 'ep-old'), { what: 'both endpoints got the older job' });
    const handedOn = await waitFor(() => jobIn(legacy, jobId, 'completed'), { what: 'the older job completed' });
    assert.deepEqual(handedOn.returnvalue, { endpoints: ['a', 'b'] });
    for (const q of [A, B]) assert.equal((await queues.get(q)!.getJob(jobId))?.data.endpoint, q.slice(-1));
    // The call's sinks are its endpoints, each done: the hand-over is no delivery of the sink itself
    // (before: a chip "hooks: done" of its own, done while its endpoints still waited).
    const shown = await waitFor(
      async () => {
        const res = await fetch(`${cs.url}/api/calls/${jobId}`, { headers: { authorization: `Bearer ${TOKEN}` } });
        if (res.status !== 200) return null;
        const [call] = ((await res.json()) as { calls: { sinks: Record<string, string> }[] }).calls;
        return call?.sinks['hooks.a'] === 'done' && call.sinks['hooks.b'] === 'done' ? call : null;
      },
      { what: "the call's endpoints done in its timeline" },
    );
    assert.deepEqual(shown.sinks, { 'hooks.a': 'done', 'hooks.b': 'done' });
    // The same call fanned out again (a redelivery) adds nothing: the endpoint jobs have the same ids.
    await legacy.add(
      JobName.sinkDeliver,
      { kind: JobName.sinkDeliver, sink: 'hooks', call },
      { jobId: `${jobId}-again` },
    );
    await waitFor(async () => (await (await legacy.getJob(`${jobId}-again`))?.getState()) === 'completed', {
      what: 'handed on again',
    });
    for (const r of [a, b]) assert.equal(r.records.get([...r.byCall.get('ep-old')!][0]!)!.deliveries, 1);
  });
});
