// Pipedrive sink against a fake Pipedrive on loopback that answers as Pipedrive documents it today
// (test/support/fake-pipedrive.ts): v2 person search and activity updates, exact request bodies,
// person matching, open deals, created persons, recordings, idempotency (redelivery, crash window,
// also for another user's call logs), the daily token budget, the search limiter, auth and validation.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { AuthError, PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { callKeySegment, type CanonicalCall } from '../src/model/call.js';
import { PipedriveSink, pipedriveSinkType, type PipedriveOptions } from '../src/sinks/crm/pipedrive.js';
import type { SinkResult } from '../src/sinks/types.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, EXPECTED_DEFAULT_BODY, expectedDefaultBody, type CrmTestDeps } from './support/crm-deps.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { FakeTelephony } from './support/fake-telephony.js';

const EXPECTED_NOTE = EXPECTED_DEFAULT_BODY;
const HOUR = 3600_000;

describe('pipedrive sink', () => {
  let fake: FakePipedrive;
  let api: FakeTelephony;
  let deps: CrmTestDeps;

  before(async () => {
    fake = await new FakePipedrive().start();
    api = await FakeTelephony.start();
  });
  after(async () => {
    await fake.stop();
    await api.close();
  });
  beforeEach(() => {
    fake.reset();
    deps = crmTestDeps({ PIPEDRIVE_API_TOKEN: 'pd-test-token', PIPEDRIVE_API_URL: fake.url });
  });
  afterEach(async () => {
    await deps.close();
  });

  function sink(options: Partial<PipedriveOptions> = {}): PipedriveSink {
    return new PipedriveSink('pipedrive', pipedriveSinkType.options.parse(options), deps);
  }

  const lines = () => fake.requests.map((r) => `${r.method} ${r.path}`);

  /** A call from +492116355340 (or `from`) starting `minutes` after the sample's start. */
  function callAt(callId: string, minutes: number, from?: string): CanonicalCall {
    return sampleCall(callId, {
      patch: (p) => {
        p.call.startTime += minutes * 60_000;
        p.call.endTime += minutes * 60_000;
        if (from !== undefined) p.call.from = from;
      },
    });
  }

  describe('API v2 and the call log', () => {
    it('finds the person stored as "0211 6355340" (v2 search) and posts the exact documented call log', async () => {
      const personId = fake.addPerson('Grace Hopper', '0211 6355340');
      const result = await sink().deliver(sampleCall('c-1'), deps.ctx());

      assert.deepEqual(lines(), ['GET /api/v2/persons/search', 'GET /api/v2/deals', 'POST /v1/callLogs']);
      const [search, deals, create] = fake.requests;
      assert.deepEqual(search?.query, { term: '6355340', fields: 'phone', limit: '50' });
      assert.equal(search?.headers['x-api-token'], 'pd-test-token');
      assert.deepEqual(deals?.query, { person_id: String(personId), status: 'open', limit: '2' });
      assert.deepEqual(create?.query, {}, 'the token is not in the URL');
      assert.deepEqual(create?.body, {
        outcome: 'connected',
        from_phone_number: '+492116355340',
        to_phone_number: '+4921155550100',
        start_time: '2026-04-08 10:00:00',
        end_time: '2026-04-08 10:02:15',
        duration: '135',
        subject: 'Inbound call +492116355340 (answered)',
        note: EXPECTED_NOTE,
        person_id: personId,
      });
      const log = fake.callLogs[0];
      assert.deepEqual(result, {
        status: 'done',
        reason: 'created',
        refs: {
          pipedriveCallLogId: log?.id,
          pipedriveActivityId: String(log?.activity_id),
          pipedrivePersonId: String(personId),
        },
      });
    });

    it('the retired v1 endpoints answer 410 Gone with the v1 error body; the sink never calls them', async () => {
      const get = await fetch(`${fake.url}/v1/persons/search?term=6355340&fields=phone`, {
        headers: { 'x-api-token': fake.token },
      });
      assert.equal(get.status, 410);
      const body = (await get.json()) as Record<string, unknown>;
      assert.equal(body.success, false);
      assert.match(String(body.error), /GET \/api\/v2\/persons\/search/);
      assert.equal(body.data, null);
      const put = await fetch(`${fake.url}/v1/activities/500`, {
        method: 'PUT',
        headers: { 'x-api-token': fake.token, 'content-type': 'application/json' },
        body: '{"subject":"x"}',
      });
      assert.equal(put.status, 410);

      fake.requests.length = 0;
      const s = sink();
      fake.addPerson('Grace', '+49 211 6355340');
      await s.deliver(sampleCall('c-v1'), deps.ctx());
      await s.deliver(sampleCall('c-v1', { patch: (p) => (p.assist.summary.content = 'Changed.') }), deps.ctx());
      assert.deepEqual(
        fake.requests.filter((r) => r.path.startsWith('/v1/') && r.path !== '/v1/callLogs'),
        [],
      );
    });

    it('the fake refuses what v2 refuses: unknown fields and parameters, strings for numbers', async () => {
      await sink().deliver(sampleCall('c-strict'), deps.ctx());
      const activity = fake.callLogs[0]!.activity_id;
      const patch = (body: unknown) =>
        fetch(`${fake.url}/api/v2/activities/${activity}`, {
          method: 'PATCH',
          headers: { 'x-api-token': fake.token, 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      assert.equal((await patch({ subject: 'ok' })).status, 200);
      const numberAsString = await patch({ person_id: '1' });
      assert.equal(numberAsString.status, 400);
      assert.match(String(((await numberAsString.json()) as Record<string, unknown>).error), /person_id/);
      assert.equal((await patch({ done: 1 })).status, 400);
      assert.equal((await patch({ user_id: 1 })).status, 400, 'v1 names are unknown fields in v2');
      const typeFilter = await fetch(`${fake.url}/api/v2/activities?type=call`, {
        headers: { 'x-api-token': fake.token },
      });
      assert.equal(typeFilter.status, 400);
      const fraction = await fetch(`${fake.url}/api/v2/activities?updated_since=2026-04-08T10:00:00.123Z`, {
        headers: { 'x-api-token': fake.token },
      });
      assert.equal(fraction.status, 400);
    });

    it('a company domain with /api works: v1 under /v1, v2 under /api/v2', async () => {
      fake.addPerson('Grace', '0211 6355340');
      await sink({ apiUrl: `${fake.url}/api` }).deliver(sampleCall('c-domain'), deps.ctx());
      assert.deepEqual(lines(), ['GET /api/v2/persons/search', 'GET /api/v2/deals', 'POST /v1/callLogs']);
    });

    it('matches "+49 211 6355340" but not a number that merely shares the last digits', async () => {
      fake.addPerson('Lookalike', '+1 (212) 635-5340'); // same trailing 7 digits, other line
      const personId = fake.addPerson('Grace', '+49 211 6355340');
      const result = await sink().deliver(sampleCall('c-2'), deps.ctx());
      assert.equal(result.refs?.pipedrivePersonId, String(personId));
    });

    it('follows the search cursor: the person behind 55 lookalikes is found on the second page', async () => {
      for (let i = 0; i < 55; i++) fake.addPerson(`Lookalike ${i}`, `+1 ${200 + i} 6355340`);
      const personId = fake.addPerson('Grace', '0211 6355340');
      const result = await sink().deliver(sampleCall('c-page'), deps.ctx());
      assert.equal(result.refs?.pipedrivePersonId, String(personId));
      const searches = fake.requestsTo('GET', '/api/v2/persons/search');
      assert.equal(searches.length, 2);
      assert.equal(searches[0]?.query.cursor, undefined);
      assert.ok(searches[1]?.query.cursor, 'the second page asked with next_cursor');
    });

    it('logs the call without person when none matches (two bounded searches, no deal lookup)', async () => {
      fake.addPerson('Other', '+49 30 1234567');
      const result = await sink().deliver(sampleCall('c-3'), deps.ctx());
      assert.equal(result.reason, 'created; no matching person');
      assert.deepEqual(
        fake.requests.map((r) => `${r.method} ${r.path} ${r.query.term ?? ''}`.trim()),
        ['GET /api/v2/persons/search 6355340', 'GET /api/v2/persons/search +492116355340', 'POST /v1/callLogs'],
      );
      assert.equal((fake.requests[2]?.body as Record<string, unknown>).person_id, undefined);
    });

    it('anonymous caller: no person search, no from number', async () => {
      const call = sampleCall('c-anon', { patch: (p) => (p.call.from = 'anonymous') });
      const result = await sink().deliver(call, deps.ctx());
      assert.equal(result.reason, 'created; anonymous caller, no person');
      assert.deepEqual(
        fake.requests.map((r) => r.path),
        ['/v1/callLogs'],
      );
      assert.equal((fake.requests[0]?.body as Record<string, unknown>).from_phone_number, undefined);
    });

    it('maps outcomes (missed -> no_answer, busy -> busy) and accepts operator overrides', async () => {
      await sink().deliver(sampleCall('c-4', { patch: (p) => (p.call.duration = 0) }), deps.ctx());
      const missed = { ...sampleCall('c-5'), outcome: 'missed' as const };
      await sink({ outcomeMap: { missed: 'left_voicemail' } }).deliver(missed, deps.ctx());
      const busy = { ...sampleCall('c-6'), outcome: 'busy' as const };
      await sink().deliver(busy, deps.ctx());
      assert.deepEqual(
        fake.callLogs.map((l) => l.outcome),
        ['connected', 'left_voicemail', 'busy'],
      );
      assert.equal(fake.callLogs[0]?.duration, '0');
    });
  });

  describe('updates', () => {
    it("a redelivery PATCHes the call log's activity (v2) instead of logging the call twice", async () => {
      const s = sink();
      const first = await s.deliver(sampleCall('c-7'), deps.ctx());
      const personId = fake.addPerson('Late Contact', '0211/6355340');
      const changed = sampleCall('c-7', { patch: (p) => (p.assist.summary.content = 'Updated summary.') });
      const second = await sink().deliver(changed, deps.ctx());
      assert.equal(fake.callLogs.length, 1);
      assert.equal(second.reason, 'updated');
      assert.equal(second.refs?.pipedriveCallLogId, first.refs?.pipedriveCallLogId);
      const patches = fake.requestsTo('PATCH');
      assert.equal(patches.length, 1);
      assert.equal(patches[0]?.path, `/api/v2/activities/${first.refs?.pipedriveActivityId}`);
      assert.deepEqual(patches[0]?.body, {
        subject: 'Inbound call +492116355340 (answered)',
        note: expectedDefaultBody('c-7').replace(
          'The caller asked to move her dentist appointment to Friday morning.',
          'Updated summary.',
        ),
        person_id: personId,
      });
      const activity = fake.activities.get(Number(first.refs?.pipedriveActivityId));
      assert.equal(activity?.person_id, personId);
      assert.match(activity?.note ?? '', /^Updated summary\./);
    });

    it('an activity deleted in Pipedrive (404) is logged again', async () => {
      const s = sink();
      const first = await s.deliver(sampleCall('c-del'), deps.ctx());
      fake.activities.delete(Number(first.refs?.pipedriveActivityId));
      const second = await s.deliver(sampleCall('c-del'), deps.ctx());
      assert.equal(second.reason, 'created; no matching person');
      assert.equal(fake.callLogs.length, 2);
    });
  });

  describe('open deals (linkDeal)', () => {
    it("links the call log to the person's one open deal; won and lost deals do not count", async () => {
      const personId = fake.addPerson('Grace', '0211 6355340');
      const open = fake.addDeal(personId, 'open');
      fake.addDeal(personId, 'won');
      fake.addDeal(personId, 'lost');
      fake.addDeal(null, 'open');
      const result = await sink().deliver(sampleCall('c-deal'), deps.ctx());
      assert.equal((fake.requestsTo('POST', '/v1/callLogs')[0]?.body as Record<string, unknown>).deal_id, open);
      assert.equal(fake.activities.get(fake.callLogs[0]!.activity_id)?.deal_id, open);
      assert.equal(result.refs?.pipedriveDealId, String(open));
    });

    it('two open deals, or none: no link', async () => {
      const personId = fake.addPerson('Grace', '0211 6355340');
      await sink().deliver(sampleCall('c-nodeal'), deps.ctx());
      fake.addDeal(personId, 'open');
      fake.addDeal(personId, 'open');
      const result = await sink().deliver(sampleCall('c-twodeals'), deps.ctx());
      assert.deepEqual(
        fake.callLogs.map((l) => l.deal_id),
        [undefined, undefined],
      );
      assert.equal(result.refs?.pipedriveDealId, undefined);
    });

    it('linkDeal: none never asks for deals', async () => {
      const personId = fake.addPerson('Grace', '0211 6355340');
      fake.addDeal(personId, 'open');
      await sink({ linkDeal: 'none' }).deliver(sampleCall('c-none'), deps.ctx());
      assert.deepEqual(lines(), ['GET /api/v2/persons/search', 'POST /v1/callLogs']);
      assert.equal(fake.callLogs[0]?.deal_id, undefined);
    });

    it('an update links a deal opened since the call was logged', async () => {
      const personId = fake.addPerson('Grace', '0211 6355340');
      const s = sink();
      await s.deliver(sampleCall('c-later'), deps.ctx());
      const deal = fake.addDeal(personId, 'open');
      await s.deliver(sampleCall('c-later', { patch: (p) => (p.assist.summary.content = 'Again.') }), deps.ctx());
      assert.equal((fake.requestsTo('PATCH')[0]?.body as Record<string, unknown>).deal_id, deal);
      assert.equal(fake.activities.get(fake.callLogs[0]!.activity_id)?.deal_id, deal);
    });
  });

  describe('unknown numbers (createPerson)', () => {
    it('off by default: no person is created', async () => {
      await sink().deliver(sampleCall('c-nocreate'), deps.ctx());
      assert.equal(fake.requestsTo('POST', '/api/v2/persons').length, 0);
      assert.equal(fake.persons.size, 0);
    });

    it('on: creates a person named by the number with it as phone (v2 body), and logs the call on it', async () => {
      const result = await sink({ createPerson: true, userId: 42 }).deliver(sampleCall('c-create'), deps.ctx());
      const [post] = fake.requestsTo('POST', '/api/v2/persons');
      assert.deepEqual(post?.body, {
        name: '+49 211 6355340',
        phones: [{ value: '+492116355340', primary: true, label: 'other' }],
        owner_id: 42,
      });
      const person = [...fake.persons.values()][0]!;
      assert.equal(person.owner_id, 42);
      assert.equal(fake.callLogs[0]?.person_id, person.id);
      assert.equal(result.reason, 'created; new person');
      assert.equal(result.refs?.pipedrivePersonId, String(person.id));
    });

    it('two calls from one unknown number at once create one person', async () => {
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/api/v2/persons', hold: held });
      const s = sink({ createPerson: true });
      const first = s.deliver(callAt('c-same-1', 0), { ...deps.ctx(), jobId: 'job-a' });
      while (fake.requestsTo('POST', '/api/v2/persons').length === 0) await new Promise((r) => setTimeout(r, 10));
      const err = await s.deliver(callAt('c-same-2', 5), { ...deps.ctx(), jobId: 'job-b' }).catch((e: unknown) => e);
      assert.ok(
        err instanceof RetryLaterError && err.scope === 'job',
        `the second waits for the first: ${String(err)}`,
      );
      release();
      await first;
      await s.deliver(callAt('c-same-2', 5), { ...deps.ctx(), jobId: 'job-b' });
      assert.equal(fake.persons.size, 1);
      assert.equal(fake.requestsTo('POST', '/api/v2/persons').length, 1);
      assert.deepEqual(
        fake.callLogs.map((l) => l.person_id),
        [1, 1],
      );
    });

    it('a created person merged into another meanwhile: the next call finds the surviving person', async () => {
      const s = sink({ createPerson: true });
      await s.deliver(callAt('c-merge-1', 0), deps.ctx());
      const created = [...fake.persons.keys()][0]!;
      fake.persons.delete(created); // merged away in Pipedrive
      const survivor = fake.addPerson('Grace Hopper', '0211 6355340', '+49 211 6355340');
      const result = await s.deliver(callAt('c-merge-2', 5), deps.ctx());
      assert.equal(result.refs?.pipedrivePersonId, String(survivor));
      assert.equal(fake.callLogs[1]?.person_id, survivor);
    });

    it('never for an anonymous caller', async () => {
      await sink({ createPerson: true }).deliver(
        sampleCall('c-anon2', { patch: (p) => (p.call.from = 'anonymous') }),
        deps.ctx(),
      );
      assert.equal(fake.persons.size, 0);
    });
  });

  describe('recordings', () => {
    function withRecordings(callId: string, ...recordings: CanonicalCall['recordings']): CanonicalCall {
      return { ...sampleCall(callId), recordings };
    }
    beforeEach(() => {
      deps.telephony = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth });
    });

    it("uploads the recording (multipart `file`, audio type, the archive's file name) to the new call log", async () => {
      const url = api.addRecording('pd-rec-1', { size: 700_000, contentType: 'audio/mpeg', seed: 4 });
      const call = withRecordings('c-rec', { downloadUrl: url, type: 'call_recorder' });
      const result = await sink().deliver(call, deps.ctx());
      const log = fake.callLogs[0]!;
      assert.deepEqual(lines(), [
        'GET /api/v2/persons/search',
        'GET /api/v2/persons/search',
        'POST /v1/callLogs',
        `POST /v1/callLogs/${log.id}/recordings`,
      ]);
      assert.match(
        String(fake.requestsTo('POST', `/v1/callLogs/${log.id}/recordings`)[0]?.headers['content-type']),
        /^multipart\/form-data; boundary=/,
      );
      assert.deepEqual(fake.recordings.get(log.id), {
        fileName: `${callKeySegment(call)}-call_recorder-1.mp3`,
        contentType: 'audio/mpeg',
        bytes: 700_000,
        sha256: api.recordingSha256('pd-rec-1'),
      });
      assert.equal(log.has_recording, true);
      assert.equal(result.reason, 'created; no matching person; recording attached');
    });

    it('attaches once per call log: an update of the call does not upload again', async () => {
      const url = api.addRecording('pd-rec-2', { size: 10_000, contentType: 'audio/wav' });
      const s = sink();
      await s.deliver(withRecordings('c-rec2', { downloadUrl: url, type: 'voicemail' }), deps.ctx());
      const update = { ...withRecordings('c-rec2', { downloadUrl: url, type: 'voicemail' }), summary: null };
      const second = await s.deliver(update, deps.ctx());
      assert.equal(second.reason, 'updated');
      assert.equal(fake.requests.filter((r) => r.path.endsWith('/recordings')).length, 1);
      assert.equal(api.requests.filter((r) => r.path === '/v2/recordings/pd-rec-2').length, 1, 'downloaded once');
    });

    it('an upload whose answer was lost is not repeated: the retry sees has_recording', async () => {
      const url = api.addRecording('pd-rec-3', { size: 20_000, contentType: 'audio/wav' });
      fake.enqueue({ match: (r) => r.path.endsWith('/recordings'), dropAfterHandling: true });
      const s = sink();
      const call = withRecordings('c-rec3', { downloadUrl: url, type: 'call_recorder' });
      await assert.rejects(s.deliver(call, deps.ctx(1)), TransientError);
      const result = await s.deliver(call, deps.ctx(2));
      assert.equal(fake.callLogs.length, 1);
      assert.equal(fake.requests.filter((r) => r.path.endsWith('/recordings')).length, 1, 'no second upload');
      assert.equal(fake.requestsTo('GET', `/v1/callLogs/${fake.callLogs[0]!.id}`).length, 1);
      assert.equal(result.reason, 'updated; recording attached');
    });

    it('a recording added by an update is attached then; of several, the call recording', async () => {
      const vm = api.addRecording('pd-vm', { size: 5000, contentType: 'audio/wav' });
      const cr = api.addRecording('pd-cr', { size: 6000, contentType: 'audio/ogg' });
      const s = sink();
      await s.deliver(sampleCall('c-rec4'), deps.ctx());
      assert.equal(fake.recordings.size, 0);
      await s.deliver(
        withRecordings('c-rec4', { downloadUrl: vm, type: 'voicemail' }, { downloadUrl: cr, type: 'call_recorder' }),
        deps.ctx(),
      );
      const rec = fake.recordings.get(fake.callLogs[0]!.id);
      assert.equal(rec?.contentType, 'audio/ogg');
      assert.equal(rec?.sha256, api.recordingSha256('pd-cr'));
    });

    it('without a telephony API the call log is written and the reason says why there is no recording', async () => {
      deps.telephony = null;
      const result = await sink().deliver(
        withRecordings('c-rec5', { downloadUrl: '/recordings/x', type: 'voicemail' }),
        deps.ctx(),
      );
      assert.equal(fake.callLogs.length, 1);
      assert.match(result.reason ?? '', /recording not attached \(no telephony API/);
    });

    it('a recording Pipedrive refuses does not dead-letter the call', async () => {
      const url = api.addRecording('pd-rec-6', { size: 1000, contentType: 'audio/wav' });
      fake.enqueue({
        match: (r) => r.path.endsWith('/recordings'),
        status: 413,
        body: { success: false, error: 'File too large', error_info: 'x', data: null, additional_data: null },
      });
      const result = await sink().deliver(
        withRecordings('c-rec6', { downloadUrl: url, type: 'voicemail' }),
        deps.ctx(),
      );
      assert.equal(result.status, 'done');
      assert.match(result.reason ?? '', /recording not attached \(.*File too large/);
    });
  });

  describe('crash window', () => {
    it('after a crash between "created" and "id stored" the retry finds the call log instead of creating another', async () => {
      fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/v1/callLogs', dropAfterHandling: true });
      const s = sink();
      await assert.rejects(s.deliver(sampleCall('c-8'), deps.ctx(1)), TransientError);
      assert.equal(fake.callLogs.length, 1, 'the create reached Pipedrive');
      const result = await s.deliver(sampleCall('c-8'), deps.ctx(2));
      assert.equal(fake.callLogs.length, 1, 'no second call log');
      assert.equal(result.reason, 'updated');
      assert.equal(result.refs?.pipedriveCallLogId, fake.callLogs[0]?.id);
      const list = fake.requests.find((r) => r.method === 'GET' && r.path === '/v1/callLogs');
      assert.deepEqual(list?.query, { start: '0', limit: '50' });
    });

    it('a call log answered 201 without data.id (not JSON): transient, and the retry finds it instead of logging the call twice', async () => {
      fake.enqueue({
        match: (r) => r.method === 'POST' && r.path === '/v1/callLogs',
        rawAfterHandling: { status: 201, body: '<html>proxy glitch</html>' },
      });
      const s = sink();
      const err = await s.deliver(sampleCall('c-8b'), deps.ctx(1)).catch((e: unknown) => e);
      assert.ok(err instanceof TransientError, `expected a TransientError, got ${String(err)}`);
      assert.match((err as Error).message, /answered 201 without data\.id/);
      assert.equal(fake.callLogs.length, 1, 'the create reached Pipedrive');
      const result = await s.deliver(sampleCall('c-8b'), deps.ctx(2));
      assert.equal(fake.callLogs.length, 1, 'no second call log');
      assert.equal(result.reason, 'updated');
    });

    it('a lookup answered 200 with a body it cannot read is no "nothing found": transient, no second call log or person', async () => {
      // Before: the call-log list read as empty, and the call was logged twice.
      fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/v1/callLogs', dropAfterHandling: true });
      const s = sink({ createPerson: true });
      await assert.rejects(s.deliver(sampleCall('c-8d'), deps.ctx(1)), TransientError);
      assert.equal(fake.callLogs.length, 1);
      const persons = fake.persons.size;
      for (const [method, path] of [
        ['GET', '/v1/callLogs'],
        ['GET', '/api/v2/persons/search'],
      ] as const) {
        fake.enqueue({
          match: (r) => r.method === method && r.path === path,
          rawAfterHandling: { status: 200, body: '<html>proxy glitch</html>' },
        });
        const err = await s.deliver(sampleCall('c-8d'), deps.ctx(2)).catch((e: unknown) => e);
        assert.ok(err instanceof TransientError, `${path}: expected a TransientError, got ${String(err)}`);
        assert.match((err as Error).message, /answered 200 without a readable list/);
        assert.equal(fake.callLogs.length, 1, `${path}: no second call log`);
        assert.equal(fake.persons.size, persons, `${path}: no person created`);
      }
      const result = await s.deliver(sampleCall('c-8d'), deps.ctx(3));
      assert.equal(result.reason, 'updated');
      assert.equal(fake.callLogs.length, 1);
    });

    it("with userId set (another user's call logs are not listed) the retry finds the activity instead of creating another", async () => {
      fake.now = () => deps.clock.now;
      fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/v1/callLogs', dropAfterHandling: true });
      const s = sink({ userId: 42 });
      await assert.rejects(s.deliver(sampleCall('c-user'), deps.ctx(1)), TransientError);
      assert.equal(fake.callLogs[0]?.user_id, 42);
      deps.clock.advance(60_000);
      const result = await s.deliver(sampleCall('c-user'), deps.ctx(2));
      assert.equal(fake.callLogs.length, 1, 'no second call log');
      assert.equal(result.reason, 'updated');
      assert.equal(result.refs?.pipedriveActivityId, String(fake.callLogs[0]?.activity_id));
      const [list] = fake.requestsTo('GET', '/api/v2/activities');
      assert.equal(list?.query.owner_id, '42');
      assert.equal(list?.query.updated_since, '2026-04-08T11:50:00Z', 'since the first try, with 10 min margin');
    });

    it("with userId, the recovery never takes an activity another call's record holds (same subject and person)", async () => {
      fake.now = () => deps.clock.now;
      const personId = fake.addPerson('Grace', '0211 6355340');
      // Notes alike too (no transcript link): only the claim tells the two activities apart.
      const s = sink({ userId: 42, linkDeal: 'none', noteTemplate: '{{summary}}' });
      const a = await s.deliver(callAt('c-twin-a', 0), deps.ctx());
      deps.clock.advance(60_000);
      fake.enqueue({ match: (r) => r.method === 'POST' && r.path === '/v1/callLogs', dropAfterHandling: true });
      await assert.rejects(s.deliver(callAt('c-twin-b', 3), deps.ctx(1)), TransientError);
      deps.clock.advance(60_000);
      const b = await s.deliver(callAt('c-twin-b', 3), deps.ctx(2));
      assert.equal(fake.callLogs.length, 2);
      assert.notEqual(b.refs?.pipedriveActivityId, a.refs?.pipedriveActivityId);
      assert.equal(b.refs?.pipedriveActivityId, String(fake.callLogs[1]?.activity_id));
      assert.equal(fake.activities.get(fake.callLogs[0]!.activity_id)?.person_id, personId);
    });
  });

  describe('rate limits', () => {
    it('429 on the call log with Retry-After pauses the queue for that long; then the call is logged once', async () => {
      fake.enqueue({
        match: (r) => r.path === '/v1/callLogs',
        status: 429,
        headers: { 'retry-after': '3', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '3' },
        body: { success: false, error: 'Request over limit', errorCode: 429 },
      });
      const s = sink();
      const err = await s.deliver(sampleCall('c-9'), deps.ctx()).catch((e: unknown) => e);
      assert.ok(err instanceof RetryLaterError);
      assert.equal(err.scope, 'queue');
      assert.equal(err.delayMs, 3000);
      assert.match(err.message, /Request over limit/);
      const count = fake.requestsTo('POST').length;
      await assert.rejects(s.deliver(sampleCall('c-9'), deps.ctx()), RetryLaterError);
      assert.equal(fake.requestsTo('POST').length, count, 'no write while paused');
      deps.clock.advance(3000);
      await s.deliver(sampleCall('c-9'), deps.ctx());
      assert.equal(fake.callLogs.length, 1);
    });

    it('429 without Retry-After waits x-ratelimit-reset seconds', async () => {
      fake.enqueue({
        match: (r) => r.path === '/v1/callLogs',
        status: 429,
        headers: { 'x-ratelimit-reset': '2' },
        body: { success: false, error: 'Request over limit' },
      });
      const err = await sink()
        .deliver(sampleCall('c-10'), deps.ctx())
        .catch((e: unknown) => e);
      assert.ok(err instanceof RetryLaterError && err.delayMs === 2000 && err.scope === 'queue');
    });

    it('the daily budget spent: the queue waits until the reset (00:00 UTC), not 2 s again and again', async () => {
      fake.now = () => deps.clock.now;
      fake.budget = { limit: 100_000, remaining: 30 }; // a search (20) and then nothing
      const s = sink();
      const err = await s.deliver(sampleCall('c-budget'), deps.ctx()).catch((e: unknown) => e);
      assert.ok(err instanceof RetryLaterError, String(err));
      assert.equal(err.scope, 'queue');
      assert.equal(err.delayMs, 12 * HOUR, 'from 12:00 UTC to midnight');
      const seen = fake.requests.length;
      for (const later of [2000, HOUR, 6 * HOUR]) {
        deps.clock.advance(later);
        const again = await s.deliver(sampleCall('c-budget'), deps.ctx()).catch((e: unknown) => e);
        assert.ok(again instanceof RetryLaterError && again.scope === 'queue' && again.delayMs > 2000);
      }
      assert.equal(fake.requests.length, seen, 'no request before the reset');
      deps.clock.now = Date.parse('2026-04-09T00:00:01Z');
      await s.deliver(sampleCall('c-budget'), deps.ctx());
      assert.equal(fake.callLogs.length, 1);
    });

    it('the budget spent on a call log write (Retry-After: 2): the first pause already lasts until the reset', async () => {
      fake.now = () => deps.clock.now;
      fake.budget = { limit: 100_000, remaining: 0 };
      const err = await sink()
        .deliver(sampleCall('c-budget-w', { patch: (p) => (p.call.from = 'anonymous') }), deps.ctx())
        .catch((e: unknown) => e);
      assert.deepEqual(lines(), ['POST /v1/callLogs']);
      assert.ok(err instanceof RetryLaterError && err.scope === 'queue', String(err));
      assert.equal(err.delayMs, 12 * HOUR);
    });

    it('a budget still spent after the UTC reset is tried again hourly, not after another day', async () => {
      fake.now = () => deps.clock.now;
      fake.budget = { limit: 100_000, remaining: 0, resetOffsetMs: 2 * HOUR }; // this company's day starts at 02:00 UTC
      const s = sink();
      const delays: number[] = [];
      for (;;) {
        const r = await s.deliver(sampleCall('c-tz'), deps.ctx()).catch((e: unknown) => e);
        if (!(r instanceof RetryLaterError)) break;
        assert.equal(r.scope, 'queue');
        delays.push(r.delayMs);
        deps.clock.advance(r.delayMs);
        assert.ok(delays.length < 10, `too many waits: ${delays.join(', ')}`);
      }
      assert.deepEqual(delays, [12 * HOUR, HOUR, HOUR]);
      assert.equal(fake.callLogs.length, 1);
    });

    it('a search 429 delays only that job: call log writes of other jobs go on', async () => {
      fake.enqueue({
        match: (r) => r.path === '/api/v2/persons/search',
        status: 429,
        headers: {
          'x-ratelimit-limit': '10',
          'x-ratelimit-remaining': '0',
          'x-ratelimit-reset': '10',
          'retry-after': '10',
        },
        body: { success: false, error: 'Request over limit', errorCode: 429 },
      });
      const s = sink();
      const err = await s.deliver(sampleCall('c-s429'), deps.ctx()).catch((e: unknown) => e);
      assert.ok(err instanceof RetryLaterError, String(err));
      assert.equal(err.scope, 'job', 'the queue is not paused for a search');
      assert.equal(err.delayMs, 10_000);
      const anonymous = await s.deliver(
        sampleCall('c-s429-anon', { patch: (p) => (p.call.from = 'anonymous') }),
        deps.ctx(),
      );
      assert.equal(anonymous.status, 'done', 'a call that needs no search is written meanwhile');
      const searches = fake.requestsTo('GET', '/api/v2/persons/search').length;
      await assert.rejects(
        s.deliver(sampleCall('c-s429'), deps.ctx()),
        (e: unknown) => e instanceof RetryLaterError && e.scope === 'job',
      );
      assert.equal(fake.requestsTo('GET', '/api/v2/persons/search').length, searches, 'no search during the penalty');
      deps.clock.advance(10_000);
      await s.deliver(sampleCall('c-s429'), deps.ctx());
      assert.equal(fake.callLogs.length, 2);
    });

    it('searches keep to their own limit (10 / 2 s) and never earn a 429; writes are not held by it', async () => {
      fake.now = () => deps.clock.now;
      fake.burst = { limit: 20, searchLimit: 10, windowMs: 2000, penaltyMs: 10_000 };
      const s = sink();
      const results: (SinkResult | RetryLaterError)[] = [];
      for (let i = 0; i < 6; i++)
        results.push(
          await s.deliver(callAt(`c-burst-${i}`, i), deps.ctx()).catch((e: unknown) => e as RetryLaterError),
        );
      assert.equal(
        results.filter((r) => !(r instanceof RetryLaterError)).length,
        5,
        'five calls (10 searches) in the window',
      );
      const waited = results[5];
      assert.ok(waited instanceof RetryLaterError && waited.scope === 'job' && waited.delayMs <= 2000, String(waited));
      assert.equal(fake.requests.filter((r) => r.path === '/api/v2/persons/search').length, 10);
      const anonymous = await s.deliver(
        sampleCall('c-burst-anon', { patch: (p) => (p.call.from = 'anonymous') }),
        deps.ctx(),
      );
      assert.equal(anonymous.status, 'done');
      deps.clock.advance(waited.delayMs);
      await s.deliver(callAt('c-burst-5', 5), deps.ctx());
      assert.equal(fake.callLogs.length, 7);
      assert.equal(fake.requests.filter((r) => r.path === '/api/v2/persons/search').length, 12);
    });

    it('the search limiter holds even when answers do not report the search window', async () => {
      // No burst headers at 0 here: only callsync's own limiter keeps searches to 10 per 2 s.
      const s = sink();
      for (let i = 0; i < 5; i++) await s.deliver(callAt(`c-quiet-${i}`, i), deps.ctx());
      const err = await s.deliver(callAt('c-quiet-5', 5), deps.ctx()).catch((e: unknown) => e);
      assert.ok(err instanceof RetryLaterError && err.scope === 'job' && err.delayMs === 2000, String(err));
      assert.equal(fake.requestsTo('GET', '/api/v2/persons/search').length, 10);
      deps.clock.advance(1999);
      await assert.rejects(s.deliver(callAt('c-quiet-5', 5), deps.ctx()), RetryLaterError);
      deps.clock.advance(1);
      await s.deliver(callAt('c-quiet-5', 5), deps.ctx());
      assert.equal(fake.requestsTo('GET', '/api/v2/persons/search').length, 12);
    });

    it('a 429 storm loses no call, duplicates none, and spends no attempt', async () => {
      const s = sink();
      fake.enqueue({
        status: 429,
        times: 6,
        headers: { 'retry-after': '2' },
        body: { success: false, error: 'Request over limit' },
      });
      const calls = ['s-1', 's-2', 's-3', 's-4'].map((id, i) => callAt(id, i));
      const done = new Set<string>();
      for (let round = 0; round < 30 && done.size < calls.length; round++) {
        for (const c of calls) {
          if (done.has(c.callId)) continue;
          try {
            await s.deliver(c, deps.ctx(1));
            done.add(c.callId);
          } catch (err) {
            assert.ok(err instanceof RetryLaterError, `only rate-limit waits expected, got ${String(err)}`);
            deps.clock.advance(err.delayMs);
          }
        }
      }
      assert.equal(done.size, 4);
      assert.equal(fake.callLogs.length, 4);
      assert.equal(new Set(fake.callLogs.map((l) => l.start_time)).size, 4);
      // A 429 proves nothing was created, so no retry needed a crash-recovery scan.
      assert.equal(fake.requests.filter((r) => r.method === 'GET' && r.path === '/v1/callLogs').length, 0);
    });
  });

  describe('failures', () => {
    it('500s are transient, then the call is logged once', async () => {
      fake.enqueue({ status: 500, times: 2, body: { success: false, error: 'Internal server error' } });
      const s = sink();
      await assert.rejects(
        s.deliver(sampleCall('c-11'), deps.ctx(1)),
        (e: unknown) => e instanceof TransientError && e.status === 500,
      );
      await assert.rejects(s.deliver(sampleCall('c-11'), deps.ctx(2)), TransientError);
      await s.deliver(sampleCall('c-11'), deps.ctx(3));
      assert.equal(fake.callLogs.length, 1);
    });

    it('401 is an AuthError naming PIPEDRIVE_API_TOKEN, never the token itself', async () => {
      fake.token = 'rotated';
      const err = await sink()
        .deliver(sampleCall('c-12'), deps.ctx())
        .catch((e: unknown) => e);
      assert.ok(err instanceof AuthError);
      assert.equal(err.status, 401);
      assert.match(err.message, /Pipedrive rejected the credentials of sink "pipedrive".*unauthorized access/);
      assert.match(err.message, /PIPEDRIVE_API_TOKEN/);
      assert.doesNotMatch(err.message, /pd-test-token/);
    });

    it("a 400 is permanent with Pipedrive's message", async () => {
      fake.enqueue({
        match: (r) => r.path === '/v1/callLogs',
        status: 400,
        body: {
          success: false,
          error: 'to_phone_number is required',
          error_info: 'Please check developers.pipedrive.com',
          data: null,
          additional_data: null,
        },
      });
      const err = await sink()
        .deliver(sampleCall('c-13'), deps.ctx())
        .catch((e: unknown) => e);
      assert.ok(err instanceof PermanentError);
      assert.match(
        err.message,
        /Pipedrive POST \/v1\/callLogs answered 400: to_phone_number is required \(Please check developers.pipedrive.com\)/,
      );
    });

    it('can send the token as api_token query parameter, which never appears in error messages', async () => {
      fake.enqueue({
        match: (r) => r.path === '/v1/callLogs',
        status: 422,
        body: { success: false, error: 'Unprocessable' },
      });
      const err = await sink({ tokenIn: 'query' })
        .deliver(sampleCall('c-14'), deps.ctx())
        .catch((e: unknown) => e);
      assert.ok(err instanceof PermanentError);
      assert.equal(fake.requests[0]?.query.api_token, 'pd-test-token');
      assert.equal(fake.requests[0]?.headers['x-api-token'], undefined);
      assert.doesNotMatch(err.message, /pd-test-token/);
    });
  });

  it('PIPEDRIVE_API_TOKEN alone implies a pipedrive sink and route; limits default to 5 calls and 10 searches / 2 s', () => {
    assert.equal(pipedriveSinkType.fromEnv?.({}, { configFile: true }), null);
    assert.deepEqual(pipedriveSinkType.fromEnv?.({ PIPEDRIVE_API_TOKEN: 'x' }, { configFile: true }), {
      sinks: { pipedrive: { type: 'pipedrive' } },
      routes: [{ name: 'pipedrive (env)', when: {}, to: ['pipedrive'] }],
    });
    const options = pipedriveSinkType.options.parse({});
    assert.deepEqual(pipedriveSinkType.limit?.(options), { max: 5, durationMs: 2000 });
    assert.deepEqual(options.searchRateLimit, { max: 10, durationMs: 2000 });
    assert.equal(options.linkDeal, 'open');
    assert.equal(options.createPerson, false);
  });
});
