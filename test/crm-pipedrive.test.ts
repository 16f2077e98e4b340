// Pipedrive sink against a fake Pipedrive on loopback: exact request bodies, person matching,
// idempotency (redelivery, crash window), rate limits, auth and validation errors.
import assert from 'node:assert/strict';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { AuthError, PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { PipedriveSink, pipedriveOptionsSchema, pipedriveSinkType, type PipedriveOptions } from '../src/sinks/crm/pipedrive.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, EXPECTED_DEFAULT_BODY, expectedDefaultBody, type CrmTestDeps } from './support/crm-deps.js';
import { FakePipedrive } from './support/fake-pipedrive.js';

const EXPECTED_NOTE = EXPECTED_DEFAULT_BODY;

describe('pipedrive sink', () => {
  let fake: FakePipedrive;
  let deps: CrmTestDeps;

  before(async () => {
    fake = await new FakePipedrive().start();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(() => {
    fake.requests.length = 0;
    fake.persons.clear();
    fake.callLogs.length = 0;
    fake.activities.clear();
    fake.token = 'pd-test-token';
    deps = crmTestDeps({ PIPEDRIVE_API_TOKEN: 'pd-test-token', PIPEDRIVE_API_URL: fake.url });
  });
  afterEach(async () => {
    await deps.close();
  });

  function sink(options: Partial<PipedriveOptions> = {}): PipedriveSink {
    return new PipedriveSink('pipedrive', pipedriveOptionsSchema.parse(options), deps);
  }

  it('finds the person stored as "0211 6355340" and posts the exact documented call log', async () => {
    const personId = fake.addPerson('Grace Hopper', '0211 6355340');
    const result = await sink().deliver(sampleCall('c-1'), deps.ctx());

    const [search, create, ...rest] = fake.requests;
    assert.equal(rest.length, 0);
    assert.equal(search?.method, 'GET');
    assert.equal(search?.path, '/v1/persons/search');
    assert.deepEqual(search?.query, { term: '6355340', fields: 'phone', limit: '20' });
    assert.equal(search?.headers['x-api-token'], 'pd-test-token');
    assert.equal(create?.method, 'POST');
    assert.equal(create?.path, '/v1/callLogs');
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
      refs: { pipedriveCallLogId: log?.id, pipedriveActivityId: String(log?.activity_id), pipedrivePersonId: String(personId) },
    });
  });

  it('matches "+49 211 6355340" but not a number that merely shares the last digits', async () => {
    fake.addPerson('Lookalike', '+1 (212) 635-5340'); // same trailing 7 digits, other line
    const personId = fake.addPerson('Grace', '+49 211 6355340');
    const result = await sink().deliver(sampleCall('c-2'), deps.ctx());
    assert.equal(result.refs?.pipedrivePersonId, String(personId));
  });

  it('logs the call without person when none matches (two bounded searches)', async () => {
    fake.addPerson('Other', '+49 30 1234567');
    const result = await sink().deliver(sampleCall('c-3'), deps.ctx());
    assert.equal(result.reason, 'created; no matching person');
    assert.deepEqual(
      fake.requests.map((r) => `${r.method} ${r.path} ${r.query.term ?? ''}`.trim()),
      ['GET /v1/persons/search 6355340', 'GET /v1/persons/search +492116355340', 'POST /v1/callLogs'],
    );
    assert.equal((fake.requests[2]?.body as Record<string, unknown>).person_id, undefined);
  });

  it('anonymous caller: no person search, no from number', async () => {
    const call = sampleCall('c-anon', { patch: (p) => (p.call.from = 'anonymous') });
    const result = await sink().deliver(call, deps.ctx());
    assert.equal(result.reason, 'created; anonymous caller, no person');
    assert.deepEqual(fake.requests.map((r) => r.path), ['/v1/callLogs']);
    assert.equal((fake.requests[0]?.body as Record<string, unknown>).from_phone_number, undefined);
  });

  it('maps outcomes (missed -> no_answer, busy -> busy) and accepts operator overrides', async () => {
    await sink().deliver(sampleCall('c-4', { patch: (p) => (p.call.duration = 0) }), deps.ctx());
    const missed = { ...sampleCall('c-5'), outcome: 'missed' as const };
    await sink({ outcomeMap: { missed: 'left_voicemail' } }).deliver(missed, deps.ctx());
    const busy = { ...sampleCall('c-6'), outcome: 'busy' as const };
    await sink().deliver(busy, deps.ctx());
    assert.deepEqual(fake.callLogs.map((l) => l.outcome), ['connected', 'left_voicemail', 'busy']);
    assert.equal(fake.callLogs[0]?.duration, '0');
  });

  it('a redelivery updates the call log\'s activity instead of logging the call twice', async () => {
    const s = sink();
    const first = await s.deliver(sampleCall('c-7'), deps.ctx());
    const personId = fake.addPerson('Late Contact', '0211/6355340');
    const changed = sampleCall('c-7', { patch: (p) => (p.assist.summary.content = 'Updated summary.') });
    const second = await sink().deliver(changed, deps.ctx());
    assert.equal(fake.callLogs.length, 1);
    assert.equal(second.reason, 'updated');
    assert.equal(second.refs?.pipedriveCallLogId, first.refs?.pipedriveCallLogId);
    const put = fake.requests.find((r) => r.method === 'PUT');
    assert.equal(put?.path, `/v1/activities/${first.refs?.pipedriveActivityId}`);
    assert.deepEqual(put?.body, {
      subject: 'Inbound call +492116355340 (answered)',
      note: expectedDefaultBody('c-7').replace('The caller asked to move her dentist appointment to Friday morning.', 'Updated summary.'),
      person_id: personId,
    });
    const activity = fake.activities.get(Number(first.refs?.pipedriveActivityId));
    assert.equal(activity?.person_id, personId);
    assert.match(activity?.note ?? '', /^Updated summary\./);
  });

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

  it('429 with Retry-After pauses the queue for that long; then the call is logged once', async () => {
    fake.enqueue({ status: 429, headers: { 'retry-after': '3', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '3' }, body: { success: false, error: 'Request over limit', errorCode: 429 } });
    const s = sink();
    const err = await s.deliver(sampleCall('c-9'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof RetryLaterError);
    assert.equal(err.scope, 'queue');
    assert.equal(err.delayMs, 3000);
    assert.match(err.message, /Request over limit/);
    const count = fake.requests.length;
    await assert.rejects(s.deliver(sampleCall('c-9'), deps.ctx()), RetryLaterError);
    assert.equal(fake.requests.length, count, 'no request while paused');
    deps.clock.advance(3000);
    await s.deliver(sampleCall('c-9'), deps.ctx());
    assert.equal(fake.callLogs.length, 1);
  });

  it('429 without Retry-After waits x-ratelimit-reset seconds', async () => {
    fake.enqueue({ status: 429, headers: { 'x-ratelimit-reset': '2' }, body: { success: false, error: 'Request over limit' } });
    const err = await sink().deliver(sampleCall('c-10'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof RetryLaterError && err.delayMs === 2000 && err.scope === 'queue');
  });

  it('a 429 storm loses no call, duplicates none, and spends no attempt', async () => {
    const s = sink();
    fake.enqueue({ status: 429, times: 6, headers: { 'retry-after': '2' }, body: { success: false, error: 'Request over limit' } });
    const calls = ['s-1', 's-2', 's-3', 's-4'].map((id, i) => sampleCall(id, { patch: (p) => (p.call.startTime += i * 60_000) }));
    const done = new Set<string>();
    for (let round = 0; round < 20 && done.size < calls.length; round++) {
      for (const c of calls) {
        if (done.has(c.callId)) continue;
        try {
          await s.deliver(c, deps.ctx(1));
          done.add(c.callId);
        } catch (err) {
          assert.ok(err instanceof RetryLaterError && err.scope === 'queue', `only rate-limit pauses expected, got ${String(err)}`);
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

  it('500s are transient, then the call is logged once', async () => {
    fake.enqueue({ status: 500, times: 2, body: { success: false, error: 'Internal server error' } });
    const s = sink();
    await assert.rejects(s.deliver(sampleCall('c-11'), deps.ctx(1)), (e: unknown) => e instanceof TransientError && e.status === 500);
    await assert.rejects(s.deliver(sampleCall('c-11'), deps.ctx(2)), TransientError);
    await s.deliver(sampleCall('c-11'), deps.ctx(3));
    assert.equal(fake.callLogs.length, 1);
  });

  it('401 is an AuthError naming PIPEDRIVE_API_TOKEN, never the token itself', async () => {
    fake.token = 'rotated';
    const err = await sink().deliver(sampleCall('c-12'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof AuthError);
    assert.equal(err.status, 401);
    assert.match(err.message, /Pipedrive rejected the credentials of sink "pipedrive".*unauthorized access/);
    assert.match(err.message, /PIPEDRIVE_API_TOKEN/);
    assert.doesNotMatch(err.message, /pd-test-token/);
  });

  it('a 400 is permanent with Pipedrive\'s message', async () => {
    fake.enqueue({ match: (r) => r.path === '/v1/callLogs', status: 400, body: { success: false, error: 'to_phone_number is required', error_info: 'Please check developers.pipedrive.com', data: null, additional_data: null } });
    const err = await sink().deliver(sampleCall('c-13'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError);
    assert.match(err.message, /Pipedrive POST \/v1\/callLogs answered 400: to_phone_number is required \(Please check developers.pipedrive.com\)/);
  });

  it('can send the token as api_token query parameter, which never appears in error messages', async () => {
    fake.enqueue({ match: (r) => r.path === '/v1/callLogs', status: 422, body: { success: false, error: 'Unprocessable' } });
    const err = await sink({ tokenIn: 'query' }).deliver(sampleCall('c-14'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError);
    assert.equal(fake.requests[0]?.query.api_token, 'pd-test-token');
    assert.equal(fake.requests[0]?.headers['x-api-token'], undefined);
    assert.doesNotMatch(err.message, /pd-test-token/);
  });

  it('PIPEDRIVE_API_TOKEN alone implies a pipedrive sink and route; limit defaults to 5 calls / 2 s', () => {
    assert.equal(pipedriveSinkType.fromEnv?.({}, { configFile: true }), null);
    assert.deepEqual(pipedriveSinkType.fromEnv?.({ PIPEDRIVE_API_TOKEN: 'x' }, { configFile: true }), {
      sinks: { pipedrive: { type: 'pipedrive' } },
      routes: [{ name: 'pipedrive (env)', when: {}, to: ['pipedrive'] }],
    });
    assert.deepEqual(pipedriveSinkType.limit?.(pipedriveOptionsSchema.parse({})), { max: 5, durationMs: 2000 });
  });
});
