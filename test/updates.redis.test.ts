// A corrected call through the real pipeline: the platform sends a call, then the same call again
// with more in it (a summary finished later). The resend is accepted as an update and reaches every
// sink as an update of the same record — the archive overwrites, HubSpot PATCHes its call, Pipedrive
// updates the activity of its call log, the signed webhook sends a new message — while an identical
// resend stays a duplicate and the caller still gets one SMS. Also when the update meets the first
// revision still in flight, or the first revision is retried after its update succeeded. On the
// shared Redis, or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys (npm run test:cluster).
import { after, before, beforeEach, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { redisKeys } from '../queues/keys.js';
import { sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { callHash, callKey, callKeySegment, contentHash } from '../src/model/call.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { webhookPayload } from './support/calls.js';
import { assertSpread, postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { jobIn } from './support/jobs.js';
import type { RecordedRequest } from './support/fake-crm-server.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3, S3_ARCHIVE_SINK_YAML } from './support/s3.js';

const SINKS = ['archive', 'hubspot', 'pipedrive', 'webhook', 'sms'] as const;
const CORRECTED = 'The caller moved her dentist appointment to Friday 10:00 (corrected summary).';
const MOBILE = '+491701234567';

/** The call as first sent (no summary yet) and as resent with the summary. */
function revisions(callId: string) {
  const first = webhookPayload(callId, (p) => {
    p.call.from = MOBILE;
    delete p.assist.summary;
  });
  const corrected = webhookPayload(callId, (p) => {
    p.call.from = MOBILE;
    p.assist.summary.content = CORRECTED;
  });
  return { first, corrected };
}

/** The sink job id of the update: the call hash and the content hash of the corrected record. */
function updateJobId(agentId: string, payload: Record<string, unknown>): string {
  const call = normalizeWebhook(payload, { agentId, receivedAt: new Date() });
  return `${callHash(call.key)}-${contentHash(call)}`;
}

function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('a corrected call, end to end', () => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  let s3: TestS3;
  let hubspot: FakeHubSpot;
  let pipedrive: FakePipedrive;
  let receiver: FakeWebhookReceiver;
  let api: FakeTelephony;
  let cs: TestCallsync;
  let dir: string;
  let queues: Map<string, Queue<SinkDeliverJob>>;

  before(async () => {
    [s3, hubspot, pipedrive, receiver, api] = await Promise.all([
      startS3(),
      new FakeHubSpot().start(),
      new FakePipedrive().start(),
      new FakeWebhookReceiver(secret).start(),
      FakeTelephony.start(),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'updates-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
${S3_ARCHIVE_SINK_YAML}  hubspot:
    type: hubspot
    apiUrl: ${hubspot.url}
    rateLimit: { max: 1000, durationMs: 1000 }
  pipedrive:
    type: pipedrive
    apiUrl: ${pipedrive.url}
    rateLimit: { max: 1000, durationMs: 1000 }
  webhook:
    type: webhook
    endpoints: [{ name: receiver, url: "${receiver.url}" }]
  sms:
    type: sms
    smsId: s0
    to: caller
    message: "Thanks for calling, we will get back to you."
routes:
  - to: [archive, hubspot, pipedrive, webhook, sms]
`,
    );
    cs = await startTestCallsync({
      ...s3.env,
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      PIPEDRIVE_API_TOKEN: pipedrive.token,
      CRM_WEBHOOK_SECRET: secret,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      // The wrong-order test keeps the original failing until its update is through.
      JOB_ATTEMPTS: '60',
    });
    // The signed webhook's jobs are in its endpoint's queue.
    const queueName = (name: string) => (name === 'webhook' ? sinkQueueName(name, 'receiver') : sinkQueueName(name));
    const keys = redisKeys(cs.config.redis);
    queues = new Map(
      SINKS.map((name) => [
        name,
        new Queue<SinkDeliverJob>(queueName(name), {
          connection: cs.redis.worker,
          prefix: keys.queuePrefix(queueName(name)),
        }),
      ]),
    );
  });

  after(async () => {
    await Promise.all([...(queues?.values() ?? [])].map((q) => q.close()));
    await cs?.stop();
    await Promise.all([s3?.destroy(), hubspot?.stop(), pipedrive?.stop(), receiver?.stop(), api?.close()]);
    await rm(dir, { recursive: true, force: true });
  });

  beforeEach(() => {
    hubspot.requests.length = 0;
    hubspot.calls.clear();
    pipedrive.requests.length = 0;
    pipedrive.callLogs.length = 0;
    pipedrive.activities.clear();
  });

  /** Waits until the job `jobId` of every sink in `sinks` has completed; returns their results. */
  async function completed(
    jobId: string,
    sinks: readonly string[] = SINKS,
  ): Promise<Map<string, { status: string; reason?: string }>> {
    return waitFor(
      async () => {
        const out = new Map<string, { status: string; reason?: string }>();
        for (const name of sinks) {
          const job = await jobIn(queues.get(name)!, jobId, 'completed');
          if (!job) return null;
          out.set(name, job.returnvalue as { status: string; reason?: string });
        }
        return out;
      },
      { what: `job ${jobId} completed at ${sinks.join(', ')}`, timeoutMs: 30_000 },
    );
  }

  const isCreate = (r: RecordedRequest) => r.method === 'POST' && r.path === '/crm/objects/2026-09/calls';
  const isCallLog = (r: RecordedRequest) => r.method === 'POST' && r.path === '/v1/callLogs';

  test('an update reaches every sink as an update of the same record; an identical resend stays a duplicate; one SMS', async () => {
    const { first, corrected } = revisions('upd-1');
    const url = `${cs.url}/webhooks/ai-agent/agent-1`;
    const smsBefore = api.smsAttempts.length;
    const r1 = await postJson(url, first);
    assert.equal(r1.status, 202);
    assert.deepEqual(r1.body, { id: r1.body.id, duplicate: false }, 'a first delivery answers as before');
    const firstJob = callHash('ai-agent:agent-1:upd-1');
    await completed(firstJob);
    assert.equal(api.smsAttempts.length - smsBefore, 1, 'the caller got the SMS');

    const r2 = await postJson(url, corrected);
    assert.equal(r2.status, 202);
    assert.deepEqual(r2.body, { id: r2.body.id, duplicate: false, update: true }, 'the changed resend is an update');
    assert.notEqual(r2.body.id, r1.body.id);
    // An identical resend of either revision stays a duplicate, answered with the first id.
    assert.deepEqual((await postJson(url, corrected)).body, { id: r1.body.id, duplicate: true });
    assert.deepEqual((await postJson(url, first)).body, { id: r1.body.id, duplicate: true });

    const results = await completed(updateJobId('agent-1', corrected));
    for (const name of SINKS) {
      const jobs = (await queues.get(name)!.getJobs(['completed', 'waiting', 'active', 'delayed', 'failed'])).filter(
        (j) => j.data.call.callId === 'upd-1',
      );
      assert.equal(jobs.length, 2, `${name}: one job per revision, none for the duplicates`);
    }

    // Archive: the same objects, overwritten with the summary; no revision bookkeeping in them.
    const base = `transcripts/2026/04/08/${callKeySegment({ key: callKey('ai-agent', 'agent-1', 'upd-1'), callId: 'upd-1' })}`;
    assert.deepEqual(await s3.list('transcripts/2026/04/08/upd-1'), [
      `${base}.json`,
      `${base}.txt`,
      `${base}.vcon.json`,
    ]);
    const doc = JSON.parse((await s3.get(`${base}.json`)).body);
    assert.equal(doc.call.summary.content, CORRECTED);
    assert.equal(doc.call.revision, undefined);
    assert.deepEqual(doc.original, corrected);
    assert.match((await s3.get(`${base}.txt`)).body, /corrected summary/);

    // HubSpot: one call engagement, PATCHed with the new body.
    assert.equal(hubspot.calls.size, 1);
    assert.equal(hubspot.requestsTo('POST', '/crm/objects/2026-09/calls').filter(isCreate).length, 1);
    assert.deepEqual(
      hubspot.requestsTo('PATCH', '/crm/objects/2026-09/calls/').map((r) => r.path),
      [`/crm/objects/2026-09/calls/${[...hubspot.calls.keys()][0]}`],
      'the same call',
    );
    assert.match([...hubspot.calls.values()][0]!.properties.hs_call_body!, /corrected summary/);
    assert.equal(results.get('hubspot')!.reason, 'updated');

    // Pipedrive: one call log; its activity updated.
    assert.equal(pipedrive.callLogs.length, 1);
    assert.deepEqual(
      pipedrive.requestsTo('PATCH', '/api/v2/activities/').map((r) => r.path),
      [`/api/v2/activities/${pipedrive.callLogs[0]!.activity_id}`],
      'the same activity',
    );
    assert.match(pipedrive.activities.get(pipedrive.callLogs[0]!.activity_id)!.note, /corrected summary/);

    // Signed webhook: two messages with different webhook-ids, each delivered once.
    const ids = [...(receiver.byCall.get('upd-1') ?? [])];
    assert.equal(ids.length, 2);
    assert.notEqual(ids[0], ids[1]);
    for (const id of ids) assert.equal(receiver.records.get(id)!.deliveries, 1);

    // SMS: still one for the call.
    assert.equal(results.get('sms')!.status, 'skipped');
    assert.match(results.get('sms')!.reason ?? '', /already sent/);
    assert.equal(api.smsAttempts.length - smsBefore, 1, 'no second SMS for the update');
    // On the cluster: the five sink queues and the revision state beside them, spread over the masters.
    await assertSpread(cs, { minSinkQueues: SINKS.length });
  });

  test('the update arrives while the first revision is still being created: one CRM record with the newest content', async () => {
    const { first, corrected } = revisions('upd-race');
    const url = `${cs.url}/webhooks/ai-agent/agent-2`;
    const held = gate();
    hubspot.enqueue({ match: isCreate, hold: held.promise });
    pipedrive.enqueue({ match: isCallLog, hold: held.promise });
    try {
      assert.equal((await postJson(url, first)).status, 202);
      await waitFor(() => hubspot.requests.some(isCreate) && pipedrive.requests.some(isCallLog), {
        what: 'both creates in flight',
      });
      const r2 = await postJson(url, corrected);
      assert.equal(r2.body.update, true, JSON.stringify(r2.body));
      // The update's CRM jobs run meanwhile (a worker runs several jobs at once) and find the call busy.
      const updateJob = updateJobId('agent-2', corrected);
      await waitFor(
        async () => {
          const states = await Promise.all(
            ['hubspot', 'pipedrive'].map(async (n) =>
              queues
                .get(n)!
                .getJob(updateJob)
                .then((j) => j?.getState()),
            ),
          );
          return states.every((s) => s === 'delayed');
        },
        { what: 'the update jobs waiting for the first revision' },
      );
    } finally {
      held.open();
    }
    await completed(callHash('ai-agent:agent-2:upd-race'), ['hubspot', 'pipedrive']);
    await completed(updateJobId('agent-2', corrected), ['hubspot', 'pipedrive']);

    assert.equal(hubspot.calls.size, 1, 'one HubSpot call, never a second');
    assert.equal(hubspot.requests.filter(isCreate).length, 1);
    assert.match([...hubspot.calls.values()][0]!.properties.hs_call_body!, /corrected summary/);
    assert.equal(pipedrive.callLogs.length, 1, 'one Pipedrive call log, never a second');
    assert.match(pipedrive.activities.get(pipedrive.callLogs[0]!.activity_id)!.note, /corrected summary/);
  });

  test('the first revision is retried after its update succeeded: skipped, the record keeps the newest content', async () => {
    const { first, corrected } = revisions('upd-order');
    const url = `${cs.url}/webhooks/ai-agent/agent-3`;
    // HubSpot fails the first revision's create (no summary in its body) until the update is through.
    let failOriginal = true;
    const isOriginalCreate = (r: RecordedRequest) =>
      failOriginal &&
      isCreate(r) &&
      !String((r.body as { properties?: Record<string, string> }).properties?.hs_call_body).includes(
        'corrected summary',
      );
    hubspot.enqueue({
      match: isOriginalCreate,
      times: 10_000,
      status: 503,
      body: { status: 'error', message: 'try again', category: 'INTERNAL_ERROR' },
    });

    assert.equal((await postJson(url, first)).status, 202);
    const firstJob = callHash('ai-agent:agent-3:upd-order');
    await waitFor(async () => ((await queues.get('hubspot')!.getJob(firstJob))?.attemptsMade ?? 0) >= 1, {
      what: 'the original failed once at HubSpot',
    });
    assert.equal((await postJson(url, corrected)).body.update, true);
    await completed(updateJobId('agent-3', corrected), ['hubspot']);
    failOriginal = false;

    const late = (await completed(firstJob, ['hubspot'])).get('hubspot')!;
    assert.equal(late.status, 'skipped');
    assert.match(late.reason ?? '', /newer revision/);
    assert.equal(hubspot.calls.size, 1);
    assert.match([...hubspot.calls.values()][0]!.properties.hs_call_body!, /corrected summary/);
    assert.equal(hubspot.requestsTo('PATCH').length, 0, 'the older revision wrote nothing over the newer');
  });
});
