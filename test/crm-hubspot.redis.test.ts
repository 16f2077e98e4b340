// HubSpot sink against a fake HubSpot on loopback: exact request bodies, contact matching,
// idempotency (redelivery, crash window, deleted record), rate limits, auth and validation errors.
import assert from 'node:assert/strict';
import { after, before, beforeEach, afterEach, describe, it } from 'node:test';
import client from 'prom-client';
import { AuthError, PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { HubSpotSink, hubspotOptionsSchema, hubspotSinkType, type HubSpotOptions } from '../src/sinks/crm/hubspot.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, EXPECTED_DEFAULT_BODY, expectedDefaultBody, type CrmTestDeps } from './support/crm-deps.js';
import { FakeHubSpot } from './support/fake-hubspot.js';

const EXPECTED_BODY = EXPECTED_DEFAULT_BODY;

const EXPECTED_PROPERTIES = {
  hs_timestamp: '2026-04-08T10:00:00.000Z',
  hs_call_title: 'Inbound call +492116355340 (answered)',
  hs_call_body: EXPECTED_BODY,
  hs_call_direction: 'INBOUND',
  hs_call_status: 'COMPLETED',
  hs_call_duration: '135000',
  hs_call_from_number: '+492116355340',
  hs_call_to_number: '+4921155550100',
};

describe('hubspot sink', () => {
  let fake: FakeHubSpot;
  let deps: CrmTestDeps;

  before(async () => {
    fake = await new FakeHubSpot().start();
  });
  after(async () => {
    await fake.stop();
  });
  beforeEach(() => {
    fake.requests.length = 0;
    fake.contacts.clear();
    fake.calls.clear();
    fake.token = 'pat-test-token';
    deps = crmTestDeps({ HUBSPOT_ACCESS_TOKEN: 'pat-test-token', HUBSPOT_API_URL: fake.url });
  });
  afterEach(async () => {
    await deps.close();
  });

  function sink(options: Partial<HubSpotOptions> = {}): HubSpotSink {
    return new HubSpotSink('hubspot', hubspotOptionsSchema.parse(options), deps);
  }

  it('finds the contact stored as "0211 6355340" and creates the call with the exact documented body', async () => {
    const contactId = fake.addContact({ firstname: 'Grace', lastname: 'Hopper', phone: '0211 6355340' });
    const result = await sink().deliver(sampleCall('c-1'), deps.ctx());

    assert.deepEqual(result, { status: 'done', reason: 'created', refs: { hubspotCallId: [...fake.calls.keys()][0], hubspotContactId: contactId } });
    const [search, create, ...rest] = fake.requests;
    assert.equal(rest.length, 0);
    assert.equal(search?.method, 'POST');
    assert.equal(search?.path, '/crm/v3/objects/contacts/search');
    assert.equal(search?.headers.authorization, 'Bearer pat-test-token');
    assert.deepEqual(search?.body, {
      filterGroups: [
        { filters: [{ propertyName: 'phone', operator: 'EQ', value: '+492116355340' }] },
        { filters: [{ propertyName: 'mobilephone', operator: 'EQ', value: '+492116355340' }] },
        { filters: [{ propertyName: 'hs_searchable_calculated_phone_number', operator: 'EQ', value: '2116355340' }] },
        { filters: [{ propertyName: 'hs_searchable_calculated_mobile_number', operator: 'EQ', value: '2116355340' }] },
      ],
      properties: ['firstname', 'lastname', 'phone', 'mobilephone'],
      sorts: [{ propertyName: 'createdate', direction: 'ASCENDING' }],
      limit: 10,
    });
    assert.equal(create?.path, '/crm/v3/objects/calls');
    assert.equal(create?.headers['content-type'], 'application/json');
    assert.deepEqual(create?.body, {
      properties: EXPECTED_PROPERTIES,
      associations: [{ to: { id: contactId }, types: [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: 194 }] }],
    });
    const stored = [...fake.calls.values()][0];
    assert.deepEqual(stored?.associations, [{ toId: contactId, typeId: 194 }]);
  });

  it('matches a contact whose mobile phone is "+49 211 6355340"; a different number does not match', async () => {
    fake.addContact({ firstname: 'Other', phone: '+49 211 6355341' });
    const contactId = fake.addContact({ firstname: 'Mobile', mobilephone: '+49 211 6355340' });
    const result = await sink().deliver(sampleCall('c-2'), deps.ctx());
    assert.equal(result.refs?.hubspotContactId, contactId);
  });

  it('creates the call without association when no contact matches (contact creation off by default)', async () => {
    fake.addContact({ firstname: 'Someone', phone: '+1 415 555 0100' });
    const result = await sink().deliver(sampleCall('c-3'), deps.ctx());
    assert.equal(result.reason, 'created; no matching contact');
    assert.equal(fake.requestsTo('POST').filter((r) => r.path === '/crm/v3/objects/contacts').length, 0);
    const create = fake.requestsTo('POST').find((r) => r.path === '/crm/v3/objects/calls');
    assert.equal((create?.body as Record<string, unknown>).associations, undefined);
  });

  it('creates the contact when configured, then associates the call with it', async () => {
    const s = sink({ createContacts: true, newContactProperties: { lifecyclestage: 'lead' } });
    const result = await s.deliver(sampleCall('c-4'), deps.ctx());
    const createContact = fake.requests.find((r) => r.path === '/crm/v3/objects/contacts');
    assert.deepEqual(createContact?.body, { properties: { lifecyclestage: 'lead', phone: '+492116355340' } });
    const contactId = [...fake.contacts.keys()][0];
    assert.equal(result.refs?.hubspotContactId, contactId);
    assert.deepEqual([...fake.calls.values()][0]?.associations, [{ toId: contactId, typeId: 194 }]);
    // The next call from the same number finds that contact instead of creating another.
    await s.deliver(sampleCall('c-5'), deps.ctx());
    assert.equal(fake.contacts.size, 1);
  });

  it('syncs an anonymous caller without contact search and without a from number', async () => {
    const call = sampleCall('c-anon', { patch: (p) => (p.call.from = '<unknown>') });
    assert.equal(call.from, null);
    const result = await sink({ createContacts: true }).deliver(call, deps.ctx());
    assert.equal(result.reason, 'created; anonymous caller, no contact');
    assert.deepEqual(fake.requests.map((r) => `${r.method} ${r.path}`), ['POST /crm/v3/objects/calls']);
    const props = (fake.requests[0]?.body as { properties: Record<string, string> }).properties;
    assert.equal(props.hs_call_from_number, undefined);
    assert.equal(props.hs_call_title, 'Inbound call anonymous (answered)');
  });

  it('a redelivery of the same call updates (PATCH) the record instead of creating a second one', async () => {
    const contactId = fake.addContact({ phone: '+492116355340' });
    const s = sink();
    const first = await s.deliver(sampleCall('c-6'), deps.ctx());
    const changed = sampleCall('c-6', { patch: (p) => (p.assist.summary.content = 'Updated summary.') });
    const second = await sink().deliver(changed, deps.ctx(1)); // a fresh sink instance: memory is in Redis
    assert.equal(fake.calls.size, 1);
    assert.equal(second.reason, 'updated');
    assert.equal(second.refs?.hubspotCallId, first.refs?.hubspotCallId);
    const patch = fake.requests.find((r) => r.method === 'PATCH');
    assert.equal(patch?.path, `/crm/v3/objects/calls/${first.refs?.hubspotCallId}`);
    assert.deepEqual(patch?.body, {
      properties: { ...EXPECTED_PROPERTIES, hs_call_body: expectedDefaultBody('c-6').replace('The caller asked to move her dentist appointment to Friday morning.', 'Updated summary.') },
    });
    assert.match([...fake.calls.values()][0]?.properties.hs_call_body ?? '', /^Updated summary\./);
    // Same contact as before: no extra association request.
    assert.equal(fake.requests.filter((r) => r.method === 'PUT').length, 0);
    assert.deepEqual([...fake.calls.values()][0]?.associations, [{ toId: contactId, typeId: 194 }]);
  });

  it('associates a contact that appeared after the first sync when the call is redelivered', async () => {
    const s = sink();
    const first = await s.deliver(sampleCall('c-7'), deps.ctx());
    const contactId = fake.addContact({ phone: '0211-6355340' });
    const second = await s.deliver(sampleCall('c-7'), deps.ctx());
    assert.equal(second.refs?.hubspotContactId, contactId);
    const put = fake.requests.find((r) => r.method === 'PUT');
    assert.equal(put?.path, `/crm/v4/objects/calls/${first.refs?.hubspotCallId}/associations/contacts/${contactId}`);
    assert.deepEqual(put?.body, [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: 194 }]);
  });

  it('after a crash between "created" and "id stored" the retry finds the call instead of creating another', async () => {
    fake.enqueue({ match: (r) => r.path === '/crm/v3/objects/calls', dropAfterHandling: true });
    const s = sink();
    await assert.rejects(s.deliver(sampleCall('c-8'), deps.ctx(1)), TransientError);
    assert.equal(fake.calls.size, 1, 'the create reached HubSpot');
    const result = await s.deliver(sampleCall('c-8'), deps.ctx(2));
    assert.equal(fake.calls.size, 1, 'no second call record');
    assert.equal(result.reason, 'updated');
    const search = fake.requests.find((r) => r.path === '/crm/v3/objects/calls/search');
    assert.deepEqual(search?.body, {
      filterGroups: [
        {
          filters: [
            { propertyName: 'hs_timestamp', operator: 'EQ', value: String(Date.parse('2026-04-08T10:00:00Z')) },
            { propertyName: 'hs_call_direction', operator: 'EQ', value: 'INBOUND' },
            { propertyName: 'hs_call_from_number', operator: 'EQ', value: '+492116355340' },
            { propertyName: 'hs_call_to_number', operator: 'EQ', value: '+4921155550100' },
          ],
        },
      ],
      properties: ['hs_call_title'],
      limit: 1,
    });
    // The first try never searched: a call that was never started costs no extra request.
    assert.equal(fake.requests.filter((r) => r.path === '/crm/v3/objects/calls/search').length, 1);
  });

  it('with externalIdProperty the crash recovery searches by that property', async () => {
    fake.enqueue({ match: (r) => r.path === '/crm/v3/objects/calls', dropAfterHandling: true });
    const s = sink({ externalIdProperty: 'callsync_call_id' });
    await assert.rejects(s.deliver(sampleCall('c-9'), deps.ctx(1)), TransientError);
    const created = [...fake.calls.values()][0];
    assert.match(created?.properties.callsync_call_id ?? '', /^[0-9a-f]{32}$/);
    await s.deliver(sampleCall('c-9'), deps.ctx(2));
    assert.equal(fake.calls.size, 1);
    const search = fake.requests.find((r) => r.path === '/crm/v3/objects/calls/search');
    assert.deepEqual((search?.body as { filterGroups: unknown }).filterGroups, [
      { filters: [{ propertyName: 'callsync_call_id', operator: 'EQ', value: created?.properties.callsync_call_id }] },
    ]);
  });

  it('recreates the call when the remembered record was deleted in HubSpot', async () => {
    const s = sink();
    const first = await s.deliver(sampleCall('c-10'), deps.ctx());
    fake.calls.clear();
    const second = await s.deliver(sampleCall('c-10'), deps.ctx());
    assert.equal(fake.calls.size, 1);
    assert.notEqual(second.refs?.hubspotCallId, first.refs?.hubspotCallId);
    assert.equal(second.reason, 'created; no matching contact');
  });

  it('429 with Retry-After pauses the queue for exactly that long, without touching HubSpot meanwhile', async () => {
    fake.enqueue({ status: 429, headers: { 'retry-after': '7' }, body: { status: 'error', message: 'You have reached your secondly limit.', errorType: 'RATE_LIMIT', correlationId: 'x', policyName: 'SECONDLY' } });
    const s = sink();
    const err = await s.deliver(sampleCall('c-11'), deps.ctx()).then(
      () => assert.fail('expected a RetryLaterError'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof RetryLaterError);
    assert.equal(err.scope, 'queue');
    assert.equal(err.delayMs, 7000);
    assert.equal(err.status, 429);
    const before = fake.requests.length;
    deps.clock.advance(3000);
    const again = await s.deliver(sampleCall('c-11'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(again instanceof RetryLaterError && again.scope === 'queue' && again.delayMs === 4000);
    assert.equal(fake.requests.length, before, 'no request while the window is closed');
    deps.clock.advance(4000);
    const done = await s.deliver(sampleCall('c-11'), deps.ctx());
    assert.equal(done.status, 'done');
    assert.equal(fake.calls.size, 1);
  });

  it('429 without Retry-After waits HubSpot\'s window: ten-secondly interval header, daily until midnight', async () => {
    fake.enqueue({ status: 429, headers: { 'x-hubspot-ratelimit-interval-milliseconds': '10000', 'x-hubspot-ratelimit-remaining': '0' }, body: { status: 'error', message: 'You have reached your ten_secondly_rolling limit.', errorType: 'RATE_LIMIT', policyName: 'TEN_SECONDLY_ROLLING' } });
    const e1 = await sink().deliver(sampleCall('c-12'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(e1 instanceof RetryLaterError && e1.delayMs === 10_000 && e1.scope === 'queue');
    fake.enqueue({ status: 429, body: { status: 'error', message: 'You have reached your daily limit.', errorType: 'RATE_LIMIT', policyName: 'DAILY' } });
    const e2 = await sink().deliver(sampleCall('c-12'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(e2 instanceof RetryLaterError);
    assert.equal(e2.delayMs, 12 * 3600 * 1000, 'clock is 12:00 UTC');
  });

  it('a 429 storm loses no call, makes no duplicate and never spends an attempt', async () => {
    const s = sink();
    fake.enqueue({ status: 429, times: 5, headers: { 'retry-after': '1' }, body: { status: 'error', message: 'You have reached your ten_secondly_rolling limit.', policyName: 'TEN_SECONDLY_ROLLING' } });
    const calls = ['s-1', 's-2', 's-3'].map((id, i) => sampleCall(id, { patch: (p) => (p.call.startTime += i * 60_000) }));
    const done = new Set<string>();
    for (let round = 0; round < 20 && done.size < calls.length; round++) {
      for (const c of calls) {
        if (done.has(c.callId)) continue;
        try {
          await s.deliver(c, deps.ctx(1)); // attempt stays 1: RetryLaterError is not a failed attempt
          done.add(c.callId);
        } catch (err) {
          assert.ok(err instanceof RetryLaterError, `only rate-limit errors expected, got ${String(err)}`);
          assert.equal(err.scope, 'queue');
          deps.clock.advance(err.delayMs);
        }
      }
    }
    assert.equal(done.size, 3);
    assert.equal(fake.calls.size, 3, 'one record per call, no duplicates');
    assert.equal(fake.requests.filter((r) => r.path === '/crm/v3/objects/calls' && r.body !== undefined).length >= 3, true);
    // A 429 proves nothing was created, so no retry needed a crash-recovery search.
    assert.equal(fake.requests.filter((r) => r.path === '/crm/v3/objects/calls/search').length, 0);
  });

  it('500s are transient, then the call is created once', async () => {
    fake.enqueue({ status: 500, times: 2, body: { status: 'error', message: 'internal error', category: 'INTERNAL_ERROR' } });
    const s = sink();
    await assert.rejects(s.deliver(sampleCall('c-13'), deps.ctx(1)), (e: unknown) => e instanceof TransientError && e.status === 500);
    await assert.rejects(s.deliver(sampleCall('c-13'), deps.ctx(2)), TransientError);
    const result = await s.deliver(sampleCall('c-13'), deps.ctx(3));
    assert.equal(result.status, 'done');
    assert.equal(fake.calls.size, 1);
  });

  it('401 is an AuthError naming the setting to check, counted in a metric, without leaking the token', async () => {
    fake.token = 'another-token';
    const err = await sink().deliver(sampleCall('c-14'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof AuthError);
    assert.equal(err.status, 401);
    assert.match(err.message, /HubSpot rejected the credentials of sink "hubspot"/);
    assert.match(err.message, /HUBSPOT_ACCESS_TOKEN/);
    assert.match(err.message, /Authentication credentials not found/);
    assert.doesNotMatch(err.message, /pat-test-token/);
    const metric = await client.register.getSingleMetric('callsync_crm_auth_failures_total')?.get();
    assert.ok(metric?.values.some((v) => v.labels.sink === 'hubspot' && v.labels.status === '401' && v.value >= 1));
    assert.equal(fake.calls.size, 0);
  });

  it('403 (missing scopes) is an AuthError too', async () => {
    fake.enqueue({ status: 403, body: { status: 'error', message: 'This app hasn\'t been granted all required scopes', category: 'MISSING_SCOPES' } });
    await assert.rejects(sink().deliver(sampleCall('c-15'), deps.ctx()), (e: unknown) => e instanceof AuthError && e.status === 403);
  });

  it('a 400 validation error is permanent and carries HubSpot\'s message', async () => {
    const err = await sink({ externalIdProperty: 'not_created_prop' }).deliver(sampleCall('c-16'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError);
    assert.equal(err.status, 400);
    assert.match(err.message, /HubSpot POST \/crm\/v3\/objects\/calls answered 400: Property values were not valid/);
    assert.match(err.message, /not_created_prop.*does not exist/);
    assert.match(err.message, /\[VALIDATION_ERROR\]/);
  });

  it('rate-limit headers at 0 pause the queue before the next request earns a 429', async () => {
    fake.enqueue({ status: 200, match: (r) => r.path === '/crm/v3/objects/contacts/search', headers: { 'x-hubspot-ratelimit-remaining': '0', 'x-hubspot-ratelimit-interval-milliseconds': '10000' }, body: { total: 0, results: [] } });
    const err = await sink().deliver(sampleCall('c-17'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof RetryLaterError && err.scope === 'queue' && err.delayMs === 10_000);
    assert.equal(fake.calls.size, 0);
  });

  it('operator templates drive the title and body; HTML in values is escaped', async () => {
    const s = sink({ titleTemplate: 'Call {{callId}} with {{contactName}}', bodyTemplate: '<b>{{summary}}</b>\n{{topics}}' });
    fake.addContact({ firstname: 'Ada', lastname: '<script>', phone: '+492116355340' });
    await s.deliver(sampleCall('c-18', { patch: (p) => (p.assist.summary.content = 'a < b & c') }), deps.ctx());
    const props = [...fake.calls.values()][0]?.properties;
    assert.equal(props?.hs_call_title, 'Call c-18 with Ada <script>');
    assert.equal(props?.hs_call_body, '<b>a &lt; b &amp; c</b><br>\nappointment, rescheduling');
  });

  it('rejects a template with an unknown field and an unknown status when the config is parsed', () => {
    assert.throws(() => hubspotOptionsSchema.parse({ bodyTemplate: '{{sumary}}' }), /unknown field\(s\) \{\{sumary\}\}; known: callId, /);
    assert.throws(() => hubspotOptionsSchema.parse({ statusMap: { missed: 'LOST' } }));
  });

  it('never logs the token or the transcript, and masks phone numbers', async () => {
    fake.addContact({ phone: '+492116355340' });
    await sink().deliver(sampleCall('c-19'), deps.ctx());
    const text = JSON.stringify(deps.logs);
    assert.ok(deps.logs.length > 0);
    assert.doesNotMatch(text, /pat-test-token/);
    assert.doesNotMatch(text, /\+492116355340/);
    assert.doesNotMatch(text, /move my appointment/);
  });

  it('HUBSPOT_ACCESS_TOKEN alone implies a hubspot sink and a catch-all route; the token stays out of the config', () => {
    assert.equal(hubspotSinkType.fromEnv?.({}, { configFile: false }), null);
    const implied = hubspotSinkType.fromEnv?.({ HUBSPOT_ACCESS_TOKEN: 'secret', HUBSPOT_API_URL: 'http://127.0.0.1:1' }, { configFile: false });
    assert.deepEqual(implied, {
      sinks: { hubspot: { type: 'hubspot', apiUrl: 'http://127.0.0.1:1' } },
      routes: [{ name: 'hubspot (env)', when: {}, to: ['hubspot'] }],
    });
    assert.deepEqual(hubspotSinkType.limit?.(hubspotOptionsSchema.parse({})), { max: 25, durationMs: 10_000 });
  });
});
