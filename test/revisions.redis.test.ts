// Two revisions of one call at each sink that writes records (src/sinks/revisions.ts), against the
// loopback fakes and real Redis: an update arriving while the first revision is still being written
// never becomes a second record, and an older revision arriving after a newer one (a retry of the
// original after the update succeeded) never overwrites it.
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { callHash, callKeySegment, contentHash, type CallRevision, type CanonicalCall } from '../src/model/call.js';
import { ArchiveSink } from '../src/sinks/archive/index.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { HubSpotSink, hubspotSinkType } from '../src/sinks/crm/hubspot.js';
import { PipedriveSink, pipedriveSinkType } from '../src/sinks/crm/pipedrive.js';
import { WebhookSink, webhookSinkType } from '../src/sinks/crm/webhook.js';
import { RetryLaterError } from '../src/errors.js';
import type { Sink, SinkContext, SinkResult } from '../src/sinks/types.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, type CrmTestDeps } from './support/crm-deps.js';
import { FakeCrmServer, type RecordedRequest, type Reply } from './support/fake-crm-server.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { waitFor } from './support/redis.js';

const CORRECTED = 'Corrected later: the appointment moved to Friday 10:00.';

/** The first revision (no summary yet) and the update (with one), as the fan-out stamps them. */
function revisions(callId: string): {
  first: CanonicalCall;
  update: CanonicalCall;
  r1: CallRevision;
  r2: CallRevision;
} {
  const first = sampleCall(callId, { patch: (p) => delete p.assist.summary });
  const update = sampleCall(callId, { patch: (p) => (p.assist.summary.content = CORRECTED) });
  return {
    first,
    update,
    r1: { stamp: '1775642600000-0', update: false, content: contentHash(first) },
    r2: { stamp: '1775642600000-1', update: true, content: contentHash(update) },
  };
}

function ctxOf(deps: CrmTestDeps, jobId: string, revision: CallRevision | undefined): SinkContext {
  return { ...deps.ctx(), jobId, ...(revision ? { revision } : {}) };
}

/** Delivers like the queue runner: a RetryLaterError waits its delay and tries again. */
async function deliverUntilDone(
  sink: Sink,
  call: CanonicalCall,
  ctx: SinkContext,
  tries: { n: number } = { n: 0 },
): Promise<SinkResult> {
  for (;;) {
    try {
      return await sink.deliver(call, ctx);
    } catch (err) {
      if (!(err instanceof RetryLaterError)) throw err;
      await new Promise((r) => setTimeout(r, Math.min(err.delayMs, 300)));
    } finally {
      tries.n++;
    }
  }
}

/** A webhook receiver that can hold a request; records the webhook-ids in the order it handled them. */
class SlowReceiver extends FakeCrmServer {
  readonly handled: string[] = [];
  protected handle(req: RecordedRequest): Reply {
    this.handled.push(String(req.headers['webhook-id']));
    return { status: 204 };
  }
}

/** A promise the test resolves to let a held request through. */
function gate(): { promise: Promise<void>; open(): void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

describe('revisions at HubSpot', () => {
  let fake: FakeHubSpot;
  let deps: CrmTestDeps;
  before(async () => {
    fake = await new FakeHubSpot().start();
  });
  after(async () => fake.stop());
  beforeEach(() => {
    fake.reset(); // also its search limit (5 per second per account, as HubSpot's)
    deps = crmTestDeps({ HUBSPOT_ACCESS_TOKEN: fake.token, HUBSPOT_API_URL: fake.url });
  });
  afterEach(async () => deps.close());
  const sink = () => new HubSpotSink('hubspot', hubspotSinkType.options.parse({}), deps);

  it('an update arriving while the first revision is being created: one call, PATCHed with the newest content', async () => {
    const { first, update, r1, r2 } = revisions('race-hs');
    const held = gate();
    fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/crm/objects/2026-09/calls', hold: held.promise });
    const s = sink();
    const original = deliverUntilDone(s, first, ctxOf(deps, 'job-first', r1));
    await waitFor(() => fake.requestsTo('POST', '/crm/objects/2026-09/calls').length === 1, {
      what: 'the first create in flight',
    });
    const tries = { n: 0 };
    const corrected = deliverUntilDone(s, update, ctxOf(deps, 'job-update', r2), tries);
    await waitFor(() => tries.n >= 1, { what: 'the update tried while the first is in flight' });
    held.open();
    await Promise.all([original, corrected]);

    assert.equal(fake.calls.size, 1, 'one call engagement, never a second');
    assert.equal(fake.requestsTo('POST', '/crm/objects/2026-09/calls').length, 1, 'created once');
    const [call] = [...fake.calls.values()];
    assert.match(call!.properties.hs_call_body!, /Corrected later/);
    assert.equal(
      fake.requestsTo('PATCH', '/crm/objects/2026-09/calls/').length,
      1,
      'the update PATCHed the record the first revision created',
    );
  });

  it('the original retried after its update succeeded is skipped: the record keeps the newest content', async () => {
    const { first, update, r1, r2 } = revisions('order-hs');
    const s = sink();
    assert.equal((await s.deliver(update, ctxOf(deps, 'job-update', r2))).status, 'done');
    const late = await s.deliver(first, ctxOf(deps, 'job-first', r1));
    assert.equal(late.status, 'skipped');
    assert.match(late.reason ?? '', /newer revision/);
    // A job queued before revisions existed counts as the oldest revision.
    assert.equal((await s.deliver(first, ctxOf(deps, 'job-legacy', undefined))).status, 'skipped');
    assert.equal(fake.calls.size, 1);
    assert.match([...fake.calls.values()][0]!.properties.hs_call_body!, /Corrected later/);
    assert.equal(fake.requestsTo('PATCH').length, 0, 'nothing older was written over it');
    // The same revision again (a redelivery) is written again, as before.
    assert.equal((await s.deliver(update, ctxOf(deps, 'job-update', r2))).reason, 'updated');
  });

  it('a lock left by a killed attempt of the same job is taken over at once; another job waits for it', async () => {
    const { first, update, r1, r2 } = revisions('killed-hs');
    await deps.state.set(`lock:${callHash(first.key)}`, 'job-first deadbeef', 60_000);
    await assert.rejects(sink().deliver(update, ctxOf(deps, 'job-update', r2)), RetryLaterError);
    assert.equal((await sink().deliver(first, ctxOf(deps, 'job-first', r1))).status, 'done');
    assert.equal(await deps.state.get(`lock:${callHash(first.key)}`), null, 'released');
    assert.equal((await sink().deliver(update, ctxOf(deps, 'job-update', r2))).reason, 'updated');
    assert.equal(fake.calls.size, 1);
  });
});

describe('revisions at Pipedrive', () => {
  let fake: FakePipedrive;
  let deps: CrmTestDeps;
  before(async () => {
    fake = await new FakePipedrive().start();
  });
  after(async () => fake.stop());
  beforeEach(() => {
    fake.requests.length = 0;
    fake.callLogs.length = 0;
    fake.activities.clear();
    deps = crmTestDeps({ PIPEDRIVE_API_TOKEN: fake.token, PIPEDRIVE_API_URL: fake.url });
  });
  afterEach(async () => deps.close());
  const sink = () => new PipedriveSink('pipedrive', pipedriveSinkType.options.parse({}), deps);

  it('an update arriving while the call log is being created: one call log, its activity updated to the newest note', async () => {
    const { first, update, r1, r2 } = revisions('race-pd');
    const held = gate();
    fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/v1/callLogs', hold: held.promise });
    const s = sink();
    const original = deliverUntilDone(s, first, ctxOf(deps, 'job-first', r1));
    await waitFor(() => fake.requestsTo('POST', '/v1/callLogs').length === 1, { what: 'the first call log in flight' });
    const tries = { n: 0 };
    const corrected = deliverUntilDone(s, update, ctxOf(deps, 'job-update', r2), tries);
    await waitFor(() => tries.n >= 1, { what: 'the update tried while the first is in flight' });
    held.open();
    await Promise.all([original, corrected]);

    assert.equal(fake.callLogs.length, 1, 'one call log, never a second');
    const activity = fake.activities.get(fake.callLogs[0]!.activity_id)!;
    assert.match(activity.note, /Corrected later/);
    assert.equal(fake.requestsTo('PATCH', '/api/v2/activities/').length, 1);
  });

  it('the original retried after its update succeeded is skipped: the activity keeps the newest note', async () => {
    const { first, update, r1, r2 } = revisions('order-pd');
    const s = sink();
    await s.deliver(update, ctxOf(deps, 'job-update', r2));
    assert.equal((await s.deliver(first, ctxOf(deps, 'job-first', r1))).status, 'skipped');
    assert.equal(fake.callLogs.length, 1);
    assert.match(fake.activities.get(fake.callLogs[0]!.activity_id)!.note, /Corrected later/);
    assert.equal(fake.requestsTo('PATCH').length, 0);
  });
});

describe('revisions at the signed webhook', () => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  let receiver: FakeWebhookReceiver;
  let deps: CrmTestDeps;
  before(async () => {
    receiver = await new FakeWebhookReceiver(secret).start();
  });
  after(async () => receiver.stop());
  beforeEach(() => {
    receiver.records.clear();
    receiver.byCall.clear();
    receiver.requests = 0;
    deps = crmTestDeps({ CRM_WEBHOOK_SECRET: secret });
    deps.clock.now = Date.now(); // the receiver checks the signature's timestamp against the real clock
  });
  afterEach(async () => deps.close());
  const sink = () => new WebhookSink('webhook', webhookSinkType.options.parse({ urls: [receiver.url] }), deps);

  it('an update is a new message with a new webhook-id; a redelivery of either revision sends nothing', async () => {
    const { first, update, r1, r2 } = revisions('wh-update');
    const s = sink();
    await s.deliver(first, ctxOf(deps, 'job-first', r1));
    await s.deliver(update, ctxOf(deps, 'job-update', r2));
    const ids = [...(receiver.byCall.get(first.callId) ?? [])];
    assert.deepEqual(ids, [s.payload(first).id, s.payload(update).id]);
    assert.notEqual(ids[0], ids[1]);
    await s.deliver(update, ctxOf(deps, 'job-update', r2));
    await s.deliver(first, ctxOf(deps, 'job-first', r1));
    assert.equal(receiver.requests, 2, 'neither revision is sent again');
  });

  it('the original retried after its update was sent is not sent after it', async () => {
    const { first, update, r1, r2 } = revisions('wh-order');
    const s = sink();
    await s.deliver(update, ctxOf(deps, 'job-update', r2));
    const late = await s.deliver(first, ctxOf(deps, 'job-first', r1));
    assert.equal(late.status, 'skipped');
    assert.equal(receiver.requests, 1);
    assert.deepEqual([...receiver.byCall.get(first.callId)!], [s.payload(update).id]);
  });

  it('per endpoint: an update is sent to each endpoint; the older revision is skipped only where the newer one went', async () => {
    const { first, update, r1, r2 } = revisions('wh-endpoints');
    const other = await new FakeWebhookReceiver(secret).start();
    try {
      const s = new WebhookSink(
        'webhook',
        webhookSinkType.options.parse({
          endpoints: [
            { name: 'a', url: receiver.url },
            { name: 'b', url: other.url },
          ],
        }),
        deps,
      );
      const at = (endpoint: string, jobId: string, r: typeof r1) => ({ ...ctxOf(deps, jobId, r), endpoint });
      // Endpoint a gets the update first (b is behind, e.g. it was paused); the original then reaches both.
      await s.deliver(update, at('a', 'job-update', r2));
      assert.equal((await s.deliver(first, at('a', 'job-first', r1))).status, 'skipped', 'a has the newer revision');
      assert.equal((await s.deliver(first, at('b', 'job-first', r1))).status, 'done', 'b had none: the original goes');
      assert.equal((await s.deliver(update, at('b', 'job-update', r2))).status, 'done', 'and then its update');
      assert.deepEqual([...receiver.byCall.get(first.callId)!], [s.payload(update).id]);
      assert.deepEqual(
        [...other.byCall.get(first.callId)!],
        [s.payload(first).id, s.payload(update).id],
        'b: each revision once, in order',
      );
    } finally {
      await other.stop();
    }
  });

  it('an update while the first revision is still being sent waits for it: the receiver gets the newest last', async () => {
    const { first, update, r1, r2 } = revisions('wh-race');
    const slow = await new SlowReceiver().start();
    try {
      const s = new WebhookSink('webhook', webhookSinkType.options.parse({ urls: [`${slow.url}/hooks`] }), deps);
      const held = gate();
      slow.enqueue({ hold: held.promise });
      const original = deliverUntilDone(s, first, ctxOf(deps, 'job-first', r1));
      await waitFor(() => slow.requests.length === 1, { what: 'the first message in flight' });
      const tries = { n: 0 };
      const corrected = deliverUntilDone(s, update, ctxOf(deps, 'job-update', r2), tries);
      await waitFor(() => tries.n >= 1, { what: 'the update tried meanwhile' });
      held.open();
      await Promise.all([original, corrected]);
      assert.deepEqual(slow.handled, [s.payload(first).id, s.payload(update).id], 'handled in revision order');
    } finally {
      await slow.stop();
    }
  });
});

describe('revisions at the archive', () => {
  let dir: string;
  let deps: CrmTestDeps;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'rev-archive-'));
    deps = crmTestDeps();
  });
  afterEach(async () => {
    await deps.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('last revision wins: an older one arriving later does not overwrite the newer object', async () => {
    const { first, update, r1, r2 } = revisions('arch-order');
    const s = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, null, deps.state);
    await s.deliver(first, ctxOf(deps, 'job-first', r1));
    const base = join(dir, 'transcripts/2026/04/08', callKeySegment(first));
    const path = `${base}.json`;
    assert.equal(JSON.parse(await readFile(path, 'utf8')).call.summary, null);
    await s.deliver(update, ctxOf(deps, 'job-update', r2));
    assert.equal(JSON.parse(await readFile(path, 'utf8')).call.summary.content, CORRECTED, 'the update overwrites');
    const late = await s.deliver(first, ctxOf(deps, 'job-first', r1));
    assert.equal(late.status, 'skipped');
    const doc = JSON.parse(await readFile(path, 'utf8'));
    assert.equal(doc.call.summary.content, CORRECTED, 'the older revision did not overwrite the newer');
    assert.match(await readFile(`${base}.txt`, 'utf8'), /Corrected later/);
  });
});
