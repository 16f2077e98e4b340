// A call whose one sink is down for hours (a remote answering 429 again and again: each wait is an
// attempt's two entries, up to 200 waits per job) fills its timeline past the cap. What the trim
// drops first are that sink's own attempts and retries that later ones superseded: the fan-out (which
// sinks the call was routed to) and the other sinks' outcomes stay, so `callsync call`, the API and
// `calls --sink … --status done` still show the archive done, not a call that only ever had one sink.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload, sampleCall } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { apiCallOf, startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline } from '../queues/timeline.js';

const TOKEN = 'timeline-outage-token-77ab';
const auth = { authorization: `Bearer ${TOKEN}` };

type ApiCall = {
  id: string;
  callId: string;
  sinks: Record<string, string>;
  reasons: Record<string, string>;
  entries: { event: string; sink?: string; endpoint?: string; attempt?: number; jobId?: string }[];
};

let cs: OpsCallsync;
let dir: string;
let env: Record<string, string>;
const secret = `whsec_${randomBytes(32).toString('base64')}`;
const receiver = new FakeWebhookReceiver(secret);

before(async () => {
  await receiver.start();
  receiver.answer = () => ({ status: 503, body: { message: 'backend down' } });
  dir = await mkdtemp(join(tmpdir(), 'timeline-outage-'));
  env = { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, CRM_WEBHOOK_URL: receiver.url, CRM_WEBHOOK_SECRET: secret };
  cs = await startOpsCallsync(env);
});
after(async () => {
  await cs?.stop();
  await receiver.stop();
  await rm(dir, { recursive: true, force: true });
});

const api = async (ref: string): Promise<ApiCall> => {
  const call = await apiCallOf<ApiCall>(cs.url, ref, auth);
  assert.ok(call, ref);
  return call;
};
async function cli(argv: string[]) {
  const out: string[] = [];
  const code = await runCli(argv, {
    env: { REDIS_URL, ...(await testRedis()).env(), QUEUE_PREFIX: cs.prefix, ...env },
    out: (l) => out.push(l),
    err: (l) => out.push(l),
  });
  return { code, out: out.join('\n') };
}

test("a sink retrying past the timeline's cap: the fan-out and the other sink's outcome stay", async () => {
  const id = 'outage-1';
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
  const first = await waitFor(async () => {
    const c = await api(id);
    const hook = Object.keys(c.sinks).find((s) => s.startsWith('webhook.'));
    return c.sinks.archive === 'done' && hook && c.sinks[hook] === 'retrying' ? c : null;
  });
  const hook = Object.keys(first.sinks).find((s) => s.startsWith('webhook.'))!;
  const endpoint = hook.slice('webhook.'.length);
  const jobId = first.entries.find((e) => e.sink === 'webhook')!.jobId!;
  // The remote answers 429 for hours: 150 more waits of the job, written as the worker writes each
  // (CallTimeline.sinkEvents, with the running callsync's cap), one attempt at a time.
  const timeline = new CallTimeline(cs.callsync.redis.worker, redisKeys(cs.callsync.config.redis), { ttlDays: 1 });
  const call = sampleCall(id);
  for (let n = 0; n < 150; n++) {
    const base = { sink: 'webhook', endpoint, jobId, attempt: 2 };
    await timeline.sinkEvents(
      call,
      [
        { event: 'attempt', ...base },
        { event: 'retry', ...base, kind: 'retry-later', reason: 'answered 429', nextAt: Date.now() + 60_000 },
      ],
      first.id,
    );
  }
  assert.ok((await cs.callsync.redis.worker.llen(timeline.key(first.id))) <= timeline.maxEntries, 'bounded');

  const shown = await api(id);
  assert.equal(shown.callId, id);
  assert.deepEqual(shown.sinks, { archive: 'done', [hook]: 'retrying' }, 'both sinks, each in its state');
  assert.ok(
    shown.entries.some((e) => e.event === 'fanned-out'),
    'the fan-out entry (which sinks the call was routed to) is kept',
  );
  assert.ok(
    shown.entries.some((e) => e.event === 'done' && e.sink === 'archive'),
    "the archive's outcome is kept",
  );
  const one = await cli(['call', id]);
  assert.match(one.out, new RegExp(`^sinks: archive:done ${hook.replace(/[.]/g, '\\.')}:retrying$`, 'm'));
  const done = await cli(['calls', '--since', '1h', '--sink', 'archive', '--status', 'done', '--json']);
  assert.ok(
    (JSON.parse(done.out) as { calls: ApiCall[] }).calls.some((c) => c.id === shown.id),
    '`calls --sink archive --status done` lists it',
  );

  // The remote is back: the job's next attempt (promoted, not waited for) delivers, and its entries
  // (written by the sink state's release on the one-slot layout) trim the full timeline once more.
  receiver.answer = null;
  const queue = cs.operations.queues.find((q) => q.name === `sink-${hook}`)!;
  await (await queue.getJob(jobId))!.promote();
  const delivered = await waitFor(async () => {
    const c = await api(id);
    return c.sinks[hook] === 'done' ? c : null;
  });
  assert.deepEqual(delivered.sinks, { archive: 'done', [hook]: 'done' });
  assert.ok(
    delivered.entries.some((e) => e.event === 'fanned-out'),
    'the fan-out entry is still kept',
  );
  assert.ok(delivered.entries.some((e) => e.event === 'done' && e.sink === 'archive'));
  assert.ok((await cs.callsync.redis.worker.llen(timeline.key(first.id))) <= timeline.maxEntries, 'bounded');
  assert.match(
    (await cli(['call', id])).out,
    new RegExp(`^sinks: archive:done ${hook.replace(/[.]/g, '\\.')}:done$`, 'm'),
  );
});
