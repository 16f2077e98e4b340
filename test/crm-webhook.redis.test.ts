// Generic signed webhook sink: signatures verified by an independent implementation (the
// `standardwebhooks` package), secret rotation, per-endpoint secrets, stable message ids, partial
// failures, errors as the Standard Webhooks spec sorts them (410 Gone and redirects disable the
// endpoint), endpoint names and the retry schedule. Behind the real queues: webhook-endpoints.test.ts.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, afterEach, before, beforeEach, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { describeConfig } from '../src/cli/check-config.js';
import { loadConfig } from '../src/config/index.js';
import { AuthError, EndpointDisabledError, PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { CrmHttp } from '../src/sinks/crm/http.js';
import { WebhookSink, webhookEndpoints, webhookSinkType, type WebhookOptions } from '../src/sinks/crm/webhook.js';
import { STANDARD_WEBHOOKS_SCHEDULE } from '../src/sinks/retry.js';
import { defaultRetryPolicy } from '../queues/registry.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps, parsedSinkSettings, type CrmTestDeps } from './support/crm-deps.js';
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
    return new WebhookSink(
      'webhook',
      webhookSinkType.options.parse({ urls: [`${a.url}/hooks/calls`], ...options }),
      deps,
    );
  }

  it('POSTs the canonical call to every URL with custom headers, signed so standardwebhooks verifies it', async () => {
    const call = sampleCall('c-1');
    const result = await sink({
      urls: [`${a.url}/in`, `${b.url}/other?tenant=7`],
      headers: { 'X-Api-Key': 'receiver-key' },
    }).deliver(call, deps.ctx());
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
    deps.settings = parsedSinkSettings({ CRM_WEBHOOK_SECRET: `${secret}, ${next}` });
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
    await assert.rejects(
      s.deliver(sampleCall('c-5'), deps.ctx(1)),
      (e: unknown) => e instanceof TransientError && /db down/.test(e.message),
    );
    await s.deliver(sampleCall('c-5'), deps.ctx(2));
    assert.equal(a.requests.length, 1);
    assert.equal(b.requests.length, 2);
    assert.equal(b.requests[1]!.headers['webhook-id'], a.requests[0]!.headers['webhook-id']);
    assert.doesNotThrow(() => new Webhook(secret).verify(b.requests[1]!.rawBody, signed(b.requests[1]!)));
  });

  it("429 pauses the queue for Retry-After; 401 is an AuthError; 400 is permanent with the receiver's message", async () => {
    a.enqueue({ status: 429, headers: { 'retry-after': '5' } });
    const e1 = await sink()
      .deliver(sampleCall('c-6'), deps.ctx())
      .catch((e: unknown) => e);
    assert.ok(e1 instanceof RetryLaterError && e1.scope === 'queue' && e1.delayMs === 5000);
    a.enqueue({ status: 401, body: { message: 'bad api key' } });
    const e2 = await sink()
      .deliver(sampleCall('c-7'), deps.ctx())
      .catch((e: unknown) => e);
    assert.ok(e2 instanceof AuthError && /bad api key/.test(e2.message));
    a.enqueue({ status: 400, body: { error: 'unknown field callId' } });
    const e3 = await sink()
      .deliver(sampleCall('c-8'), deps.ctx())
      .catch((e: unknown) => e);
    assert.ok(e3 instanceof PermanentError && /answered 400: unknown field callId/.test(e3.message));
  });

  it('a 2xx is delivered whatever its body: too large, or cut off after the status (never sent again)', async () => {
    // The receiver took the message with its 2xx; what it says after is not needed. Read as a failed
    // request, the retry sent the same message again and again (each answered the same way).
    let posts = 0;
    const big = 'x'.repeat(17 * 1024 * 1024);
    const server = createServer((req, res) => {
      posts++;
      req.resume();
      req.on('end', () => {
        if (req.url === '/big') {
          res.writeHead(200, { 'content-type': 'text/plain' });
          res.end(big);
        } else {
          res.writeHead(202, { 'content-type': 'application/json', 'content-length': '1000' });
          res.write('{"ok":');
          setTimeout(() => res.destroy(), 20);
        }
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      for (const path of ['/big', '/cut']) {
        posts = 0;
        const s = sink({ urls: [`${base}${path}`] });
        const call = sampleCall(`c-2xx${path.slice(1)}`);
        const result = await s.deliver(call, deps.ctx(1));
        assert.match(String(result.refs?.webhookId), /^msg_/, path);
        await s.deliver(call, deps.ctx(2));
        assert.equal(posts, 1, `${path}: delivered once, remembered`);
      }
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('bare payload without envelope; raw only when asked', async () => {
    const call = sampleCall('c-9');
    await sink({ envelope: false, includeRaw: true }).deliver(call, deps.ctx());
    const body = JSON.parse(a.requests[0]!.rawBody) as Record<string, unknown>;
    assert.equal(body.callId, 'c-9');
    assert.deepEqual(body.raw, call.raw);
  });

  it('validates options: whsec_ secrets, URLs, reserved headers; env shortcut', () => {
    assert.throws(() => webhookSinkType.options.parse({ urls: ['http://x'], secrets: ['plain-secret'] }), /whsec_/);
    assert.throws(() => webhookSinkType.options.parse({ urls: ['ftp://x'] }));
    assert.throws(
      () => webhookSinkType.options.parse({ urls: ['http://x'], headers: { 'Webhook-Signature': 'x' } }),
      /set by callsync/,
    );
    // The connection's own headers too: fetch refused them at delivery; node:http would send them as given.
    for (const name of ['Transfer-Encoding', 'connection', 'Keep-Alive', 'upgrade', 'Host', 'expect'])
      assert.throws(
        () => webhookSinkType.options.parse({ urls: ['http://x'], headers: { [name]: 'x' } }),
        /set by callsync/,
        name,
      );
    // A value pasted with its line break is refused with the configuration, without being repeated.
    for (const value of ['key-123\n', 'a\r\nX-Evil: 1', 'nul\u0000'])
      assert.throws(
        () => webhookSinkType.options.parse({ urls: ['http://x'], headers: { 'X-Api-Key': value } }),
        (err: Error) => /line breaks or other control characters/.test(err.message) && !err.message.includes('key-123'),
        JSON.stringify(value),
      );
    assert.equal(
      webhookSinkType.options.parse({ urls: ['http://x'], headers: { 'X-Api-Key': 'tab\tand ümlaut' } }).headers[
        'X-Api-Key'
      ],
      'tab\tand ümlaut',
    );
    assert.throws(
      () => new WebhookSink('w', webhookSinkType.options.parse({ urls: ['http://x'] }), { ...deps, settings: {} }),
      /CRM_WEBHOOK_SECRET/,
    );
    assert.equal(webhookSinkType.fromEnv?.({}, { configFile: false }), null);
    assert.deepEqual(
      webhookSinkType.fromEnv?.({ CRM_WEBHOOK_URL: 'https://a.example/h, https://b.example/h' }, { configFile: false }),
      {
        sinks: { webhook: { type: 'webhook', urls: ['https://a.example/h', 'https://b.example/h'] } },
        routes: [{ name: 'webhook (env)', when: {}, to: ['webhook'] }],
      },
    );
  });
  it('a job of one endpoint (ctx.endpoint) goes to that endpoint only, signed with its own secret', async () => {
    const own = newSecret();
    const s = sink({
      urls: undefined,
      endpoints: [
        { name: 'a', url: a.url, secrets: [own] },
        { name: 'b', url: b.url },
      ],
    });
    await s.deliver(sampleCall('c-10'), { ...deps.ctx(), endpoint: 'a' });
    assert.equal(a.requests.length, 1);
    assert.equal(b.requests.length, 0, 'the other endpoint has a job of its own');
    const r = a.requests[0]!;
    assert.doesNotThrow(() => new Webhook(own).verify(r.rawBody, signed(r)));
    assert.throws(
      () => new Webhook(secret).verify(r.rawBody, signed(r)),
      /No matching signature/,
      "not signed with the sink's secret",
    );
    await s.deliver(sampleCall('c-10'), { ...deps.ctx(), endpoint: 'b' });
    assert.doesNotThrow(
      () => new Webhook(secret).verify(b.requests[0]!.rawBody, signed(b.requests[0]!)),
      "an endpoint without secrets uses the sink's",
    );
    assert.equal(
      b.requests[0]!.headers['webhook-id'],
      r.headers['webhook-id'],
      'the same message id at every endpoint',
    );
  });

  it("410 Gone disables the endpoint (not a dead letter), with the receiver's message", async () => {
    a.enqueue({ status: 410, body: { message: 'hook deleted' } });
    const err = await sink({ urls: [`${a.url}/in`] })
      .deliver(sampleCall('c-11'), deps.ctx())
      .catch((e: unknown) => e);
    assert.ok(err instanceof EndpointDisabledError, String(err));
    assert.equal(err.kind, 'disable');
    assert.equal(err.status, 410);
    assert.match(
      err.message,
      /POST 127\.0\.0\.1:\d+\/in \(endpoint "127-0-0-1-\d+" of sink "webhook"\) answered 410 Gone: hook deleted: the receiver takes no more messages there/,
    );
  });

  it('a redirect is reported with where it points, without its query string, and disables the endpoint; never "fetch failed"', async () => {
    for (const status of [301, 302, 307, 308]) {
      a.requests.length = 0;
      a.enqueue({ status, headers: { location: '/moved/here?token=abc#x' } });
      const err = await sink()
        .deliver(sampleCall(`c-12-${status}`), deps.ctx())
        .catch((e: unknown) => e);
      assert.ok(err instanceof EndpointDisabledError, `${status}: ${String(err)}`);
      assert.match(
        err.message,
        new RegExp(
          `answered ${status} redirect to http://127\\.0\\.0\\.1:\\d+/moved/here \\(redirects are not followed\\)\\. The endpoint is disabled: update its URL`,
        ),
      );
      assert.doesNotMatch(err.message, /token=abc|fetch failed/);
      assert.equal(a.requests.length, 1, 'the redirect was not followed');
    }
    a.enqueue({ status: 303 });
    const bare = await sink()
      .deliver(sampleCall('c-13'), deps.ctx())
      .catch((e: unknown) => e);
    assert.match((bare as Error).message, /answered 303 redirect to nowhere \(no Location header\)/);
  });

  it('the CRM client reports a redirect as a permanent error naming it (HubSpot, Pipedrive), never "fetch failed"', async () => {
    a.enqueue({ status: 308, headers: { location: 'https://api.example/v2/x?api_token=secret' } });
    const http = new CrmHttp({
      crm: 'SomeCrm',
      sink: 'crm',
      baseUrl: a.url,
      headers: {},
      timeoutMs: 2000,
      now: () => new Date(),
      authHint: '',
      errorDetail: () => undefined,
      rateLimitDelayMs: () => 1000,
    });
    const err = await http.request({ method: 'GET', path: '/v1/things' }).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError, String(err));
    assert.equal(
      err.message,
      'SomeCrm GET /v1/things answered 308 redirect to https://api.example/v2/x (redirects are not followed)',
    );
  });

  it('a 429 of one endpoint holds that endpoint only', async () => {
    a.enqueue({ status: 429, headers: { 'retry-after': '60' } });
    const s = sink({ urls: [a.url, b.url] });
    const [nameA, nameB] = webhookEndpoints(webhookSinkType.options.parse({ urls: [a.url, b.url] })).map((e) => e.name);
    const held = await s.deliver(sampleCall('c-14'), { ...deps.ctx(), endpoint: nameA }).catch((e: unknown) => e);
    assert.ok(held instanceof RetryLaterError && held.scope === 'queue' && held.delayMs === 60_000);
    await s.deliver(sampleCall('c-14'), { ...deps.ctx(), endpoint: nameB });
    assert.equal(b.requests.length, 1, "B is not held by A's rate limit");
    const again = await s.deliver(sampleCall('c-15'), { ...deps.ctx(), endpoint: nameA }).catch((e: unknown) => e);
    assert.ok(again instanceof RetryLaterError, 'A still waits without asking');
    assert.equal(a.requests.length, 1);
  });

  it("endpoint names: from the host (numbered when shared), or given; each endpoint's headers over the sink's", () => {
    const parsed = webhookSinkType.options.parse({
      urls: ['https://hooks.example.com/a', 'https://hooks.example.com/b', 'http://127.0.0.1:8080/x'],
      endpoints: [{ name: 'erp', url: 'https://erp.example/in', headers: { 'x-api-key': 'erp-key' } }],
      headers: { 'X-Api-Key': 'shared', 'X-Tenant': '7' },
    });
    const endpoints = webhookEndpoints(parsed);
    assert.deepEqual(
      endpoints.map((e) => e.name),
      ['hooks-example-com', 'hooks-example-com-2', '127-0-0-1-8080', 'erp'],
    );
    assert.deepEqual(endpoints[3]!.headers, { 'x-api-key': 'erp-key', 'x-tenant': '7' });
    assert.deepEqual(endpoints[0]!.headers, { 'x-api-key': 'shared', 'x-tenant': '7' });
    assert.deepEqual(webhookSinkType.endpoints?.(parsed), [
      'hooks-example-com',
      'hooks-example-com-2',
      '127-0-0-1-8080',
      'erp',
    ]);
    // A given name is never taken by a derived one.
    assert.deepEqual(
      webhookEndpoints(
        webhookSinkType.options.parse({
          urls: ['https://a.example/'],
          endpoints: [{ name: 'a-example', url: 'https://b.example/' }],
        }),
      ).map((e) => e.name),
      ['a-example-2', 'a-example'],
    );

    assert.throws(() => webhookSinkType.options.parse({}), /give the receivers as `urls` or `endpoints`/);
    assert.throws(
      () =>
        webhookSinkType.options.parse({
          endpoints: [
            { name: 'x', url: 'https://a/' },
            { name: 'X', url: 'https://b/' },
          ],
        }),
      /endpoint name \\"X\\" is used twice/,
    );
    assert.throws(
      () => webhookSinkType.options.parse({ endpoints: [{ name: 'a.b', url: 'https://a/' }] }),
      /endpoint names are letters, digits/,
    );
    assert.throws(
      () => webhookSinkType.options.parse({ endpoints: [{ url: 'https://a/', secrets: ['nope'] }] }),
      /whsec_/,
    );
    assert.throws(
      () => webhookSinkType.options.parse({ endpoints: [{ url: 'https://a/', headers: { 'webhook-id': 'x' } }] }),
      /set by callsync/,
    );
    const noSecret = webhookSinkType.options.parse({
      endpoints: [
        { name: 'own', url: 'https://a/', secrets: [newSecret()] },
        { name: 'bare', url: 'https://b/' },
      ],
    });
    assert.throws(
      () => new WebhookSink('w', noSecret, { ...deps, settings: {} }),
      /endpoint "bare" has no signing secret/,
    );
  });

  it('retry: the Standard Webhooks schedule by default (ten attempts over three days); a schedule and attempts of its own', () => {
    const policy = (retry?: unknown) =>
      webhookSinkType.retry?.(
        webhookSinkType.options.parse({ urls: ['https://a/'], ...(retry ? { retry } : {}) }),
        defaultRetryPolicy,
      );
    assert.deepEqual(policy(), { ...defaultRetryPolicy, attempts: 10, schedule: STANDARD_WEBHOOKS_SCHEDULE });
    assert.deepEqual(
      STANDARD_WEBHOOKS_SCHEDULE,
      [5_000, 300_000, 1_800_000, 7_200_000, 18_000_000, 36_000_000, 50_400_000, 72_000_000, 86_400_000],
    );
    assert.deepEqual(policy({ schedule: ['5s', '1h', 90] }), {
      ...defaultRetryPolicy,
      attempts: 4,
      schedule: [5000, 3_600_000, 90_000],
    });
    assert.equal(policy({ schedule: ['1m'], attempts: 20 })!.attempts, 20);
    assert.throws(() => policy({ schedule: [] }));
    assert.throws(() => policy({ schedule: ['soon'] }), /expected a duration/);
    assert.throws(() => policy({ backoffMs: 5 }), /backoffMs/);

    const config = loadConfig({
      CRM_WEBHOOK_URL: 'https://a.example/h, https://b.example/h',
      CRM_WEBHOOK_SECRET: secret,
      JOB_ATTEMPTS: '3',
    });
    assert.deepEqual(config.sinks.webhook!.endpoints, ['a-example', 'b-example']);
    assert.equal(config.sinks.webhook!.retry!.attempts, 10, "the sink's schedule, not JOB_ATTEMPTS");
    assert.equal(config.retry.attempts, 3);
  });
  it('check-config shows the endpoint queues and the schedule, and redacts endpoint secrets and API-key headers', () => {
    const config = loadConfig(
      { CALLSYNC_CONFIG: 'callsync.yaml' },
      {
        readFile: () => `
sinks:
  hooks:
    type: webhook
    secrets: ["${secret}"]
    headers: { X-Api-Key: shared-key-1234 }
    endpoints:
      - { name: erp, url: "https://erp.example/in", secrets: ["${newSecret()}"], headers: { x-api-key: erp-key-5678 } }
    retry: { schedule: [5s, 1h], attempts: 5 }
routes:
  - to: [hooks]
`,
      },
    );
    const text = describeConfig(config).join('\n');
    assert.match(text, /queues: +inbound, sink-hooks, sink-hooks\.erp, poll-dead-letters/);
    assert.match(text, /sink hooks: 5 attempts, after 5s, 1h/);
    assert.doesNotMatch(text, /whsec_|shared-key-1234|erp-key-5678/);
  });
});
