// Generic signed webhook sink: signatures verified by an independent implementation (the
// `standardwebhooks` package), secret rotation, stable message ids, partial failures, errors.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { AuthError, PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { WebhookSink, webhookOptionsSchema, webhookSinkType, type WebhookOptions } from '../src/sinks/crm/webhook.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, type CrmTestDeps } from './support/crm-deps.js';
import { FakeCrmServer, type RecordedRequest, type Reply } from './support/fake-crm-server.js';

class Receiver extends FakeCrmServer {
  protected handle(_req: RecordedRequest): Reply {
    return { status: 204 };
  }
}

const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

function signed(r: RecordedRequest): Record<string, string> {
  return {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  };
}

describe('webhook sink', () => {
  let a: Receiver;
  let b: Receiver;
  let deps: CrmTestDeps;
  const secret = newSecret();

  before(async () => {
    a = await new Receiver().start();
    b = await new Receiver().start();
  });
  after(async () => {
    await a.stop();
    await b.stop();
  });
  beforeEach(() => {
    a.requests.length = 0;
    b.requests.length = 0;
    deps = crmTestDeps({ CRM_WEBHOOK_SECRET: secret });
    deps.clock.now = Date.now(); // standardwebhooks checks the timestamp against the real clock
  });
  afterEach(async () => {
    await deps.close();
  });

  function sink(options: Partial<WebhookOptions> = {}): WebhookSink {
    return new WebhookSink('webhook', webhookOptionsSchema.parse({ urls: [`${a.url}/hooks/calls`], ...options }), deps);
  }

  it('POSTs the canonical call to every URL with custom headers, signed so standardwebhooks verifies it', async () => {
    const call = sampleCall('c-1');
    const result = await sink({ urls: [`${a.url}/in`, `${b.url}/other?tenant=7`], headers: { 'X-Api-Key': 'receiver-key' } }).deliver(call, deps.ctx());
    assert.equal(a.requests.length, 1);
    assert.equal(b.requests.length, 1);
    const [ra, rb] = [a.requests[0]!, b.requests[0]!];
    assert.equal(ra.method, 'POST');
    assert.equal(ra.path, '/in');
    assert.equal(rb.path, '/other');
    assert.deepEqual(rb.query, { tenant: '7' });
    assert.equal(ra.headers['x-api-key'], 'receiver-key');
    assert.equal(ra.headers['content-type'], 'application/json');
    assert.match(String(ra.headers['webhook-id']), /^msg_[0-9a-f]{32}$/);
    assert.equal(ra.headers['webhook-id'], rb.headers['webhook-id']);
    assert.equal(result.refs?.webhookId, ra.headers['webhook-id']);

    const verified = new Webhook(secret).verify(ra.rawBody, signed(ra));
    const { raw: _raw, ...withoutRaw } = call;
    assert.deepEqual(verified, { type: 'call.completed', timestamp: call.endedAt, data: withoutRaw });
    assert.doesNotThrow(() => new Webhook(secret).verify(rb.rawBody, signed(rb)));
  });

  it('signs with every secret while rotating: the old and the new secret both verify, others do not', async () => {
    const oldSecret = secret;
    const rotated = newSecret();
    await sink({ secrets: [oldSecret, rotated] }).deliver(sampleCall('c-2'), deps.ctx());
    const r = a.requests[0]!;
    assert.equal(String(r.headers['webhook-signature']).split(' ').length, 2);
    assert.doesNotThrow(() => new Webhook(oldSecret).verify(r.rawBody, signed(r)));
    assert.doesNotThrow(() => new Webhook(rotated).verify(r.rawBody, signed(r)));
    assert.throws(() => new Webhook(newSecret()).verify(r.rawBody, signed(r)), /No matching signature/);
    // A tampered body fails too.
    assert.throws(() => new Webhook(rotated).verify(r.rawBody.replace('c-2', 'c-X'), signed(r)));
  });

  it('reads several secrets from CRM_WEBHOOK_SECRET (rotation without a config file)', async () => {
    const next = newSecret();
    deps.env.CRM_WEBHOOK_SECRET = `${secret}, ${next}`;
    await sink().deliver(sampleCall('c-3'), deps.ctx());
    assert.doesNotThrow(() => new Webhook(next).verify(a.requests[0]!.rawBody, signed(a.requests[0]!)));
  });

  it('the same call redelivered is the same message id; changed content is a new one', async () => {
    const s = sink();
    await s.deliver(sampleCall('c-4'), deps.ctx());
    const again = { ...sampleCall('c-4'), receivedAt: '2026-04-08T11:00:00.000Z' };
    const resent = await s.deliver(again, deps.ctx());
    assert.equal(a.requests.length, 1, 'the same message is not sent twice to a URL that took it');
    assert.equal(resent.refs?.webhookId, a.requests[0]!.headers['webhook-id']);
    const changed = sampleCall('c-4', { patch: (p) => (p.assist.summary.content = 'Updated.') });
    await s.deliver(changed, deps.ctx());
    assert.equal(a.requests.length, 2);
    assert.notEqual(a.requests[1]!.headers['webhook-id'], a.requests[0]!.headers['webhook-id']);
  });

  it('after a partial failure the retry only resends to the URL that failed, with the same id', async () => {
    b.enqueue({ status: 500, body: { message: 'db down' } });
    const s = sink({ urls: [a.url, b.url] });
    await assert.rejects(s.deliver(sampleCall('c-5'), deps.ctx(1)), (e: unknown) => e instanceof TransientError && /db down/.test(e.message));
    await s.deliver(sampleCall('c-5'), deps.ctx(2));
    assert.equal(a.requests.length, 1);
    assert.equal(b.requests.length, 2);
    assert.equal(b.requests[1]!.headers['webhook-id'], a.requests[0]!.headers['webhook-id']);
    assert.doesNotThrow(() => new Webhook(secret).verify(b.requests[1]!.rawBody, signed(b.requests[1]!)));
  });

  it('429 pauses the queue for Retry-After; 401 is an AuthError; 400 is permanent with the receiver\'s message', async () => {
    a.enqueue({ status: 429, headers: { 'retry-after': '5' } });
    const e1 = await sink().deliver(sampleCall('c-6'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(e1 instanceof RetryLaterError && e1.scope === 'queue' && e1.delayMs === 5000);
    a.enqueue({ status: 401, body: { message: 'bad api key' } });
    const e2 = await sink().deliver(sampleCall('c-7'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(e2 instanceof AuthError && /bad api key/.test(e2.message));
    a.enqueue({ status: 400, body: { error: 'unknown field callId' } });
    const e3 = await sink().deliver(sampleCall('c-8'), deps.ctx()).catch((e: unknown) => e);
    assert.ok(e3 instanceof PermanentError && /answered 400: unknown field callId/.test(e3.message));
  });

  it('bare payload without envelope; raw only when asked', async () => {
    const call = sampleCall('c-9');
    await sink({ envelope: false, includeRaw: true }).deliver(call, deps.ctx());
    const body = JSON.parse(a.requests[0]!.rawBody) as Record<string, unknown>;
    assert.equal(body.callId, 'c-9');
    assert.deepEqual(body.raw, call.raw);
  });

  it('validates options: whsec_ secrets, URLs, reserved headers; env shortcut', () => {
    assert.throws(() => webhookOptionsSchema.parse({ urls: ['http://x'], secrets: ['plain-secret'] }), /whsec_/);
    assert.throws(() => webhookOptionsSchema.parse({ urls: ['ftp://x'] }));
    assert.throws(() => webhookOptionsSchema.parse({ urls: ['http://x'], headers: { 'Webhook-Signature': 'x' } }), /set by callsync/);
    assert.throws(() => new WebhookSink('w', webhookOptionsSchema.parse({ urls: ['http://x'] }), { ...deps, env: {} }), /CRM_WEBHOOK_SECRET/);
    assert.equal(webhookSinkType.fromEnv?.({}, { configFile: false }), null);
    assert.deepEqual(webhookSinkType.fromEnv?.({ CRM_WEBHOOK_URL: 'https://a.example/h, https://b.example/h' }, { configFile: false }), {
      sinks: { webhook: { type: 'webhook', urls: ['https://a.example/h', 'https://b.example/h'] } },
      routes: [{ name: 'webhook (env)', when: {}, to: ['webhook'] }],
    });
  });
});
