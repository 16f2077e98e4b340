// OpenTelemetry (src/telemetry.ts): with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a small OTLP/HTTP
// receiver on loopback, one call gives one trace — the ingress' acceptance, the fan-out linked to it,
// the sink attempts linked to the fan-out, and their outbound requests as children of the attempts
// (the signed webhook's fetch; the archive's S3 PUTs over node:http and the e-mail over SMTP, which
// the fetch instrumentation does not see) — with ids and outcomes in the attributes and no phone
// number anywhere.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { callHash } from '../src/model/call.js';
import { redactQuery, startTracing, stopTracing, tracingOn, tracingWanted } from '../src/telemetry.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';
import { TestSmtpServer } from './support/smtp.js';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes?: { key: string; value: Record<string, unknown> }[];
  links?: { traceId: string; spanId: string }[];
}

const attr = (span: OtlpSpan, key: string) => {
  const value = span.attributes?.find((a) => a.key === key)?.value;
  return value ? Object.values(value)[0] : undefined;
};

describe('OpenTelemetry: one trace per call', () => {
  let collector: Server;
  const spans: OtlpSpan[] = [];
  const bodies: string[] = [];
  let hook: FakeWebhookReceiver;
  let s3: TestS3;
  let smtp: TestSmtpServer;
  let cs: TestCallsync;

  before(async () => {
    // The OTLP/HTTP receiver: the exporter posts JSON to <endpoint>/v1/traces.
    collector = createServer((req, res) => {
      let text = '';
      req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
      req.on('end', () => {
        bodies.push(text);
        if (req.url === '/v1/traces') {
          const body = JSON.parse(text) as { resourceSpans: { scopeSpans: { spans: OtlpSpan[] }[] }[] };
          for (const rs of body.resourceSpans) for (const ss of rs.scopeSpans) spans.push(...ss.spans);
        }
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
    process.env.OTEL_BSP_SCHEDULE_DELAY = '100';
    assert.equal(await startTracing(process.env), true);
    [hook, s3, smtp] = await Promise.all([
      new FakeWebhookReceiver(`whsec_${randomBytes(32).toString('base64')}`).start(),
      startS3('otel-archive'),
      TestSmtpServer.start(),
    ]);
    cs = await startTestCallsync({
      CRM_WEBHOOK_URL: hook.url,
      CRM_WEBHOOK_SECRET: hook.secret,
      ...s3.env,
      SMTP_URL: smtp.url,
      SMTP_FROM: 'calls@example.com',
      NOTIFY_EMAIL_TO: 'team@example.com',
    });
  });
  after(async () => {
    await cs?.stop();
    await stopTracing();
    await Promise.all([hook?.stop(), s3?.destroy(), smtp?.close()]);
    delete process.env.OTEL_EXPORTER_OTLP_ENDPOINT;
    delete process.env.OTEL_BSP_SCHEDULE_DELAY;
    await new Promise((r) => collector.close(r));
  });

  test('off without an endpoint', () => {
    assert.equal(tracingWanted({}), false);
    assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://x', OTEL_SDK_DISABLED: 'true' }), false);
    assert.equal(tracingOn(), true, 'on in this test');
    assert.equal(redactQuery('?api_token=abc123&term=%2B4915112345678&exact'), '?api_token=…&term=…&exact');
  });

  test("ingress → fan-out (linked) → sink attempt (linked) → its HTTP request (child), in the call's trace", async () => {
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('otel-1'));
    assert.equal(res.status, 202);
    const traceId = callHash('ai-agent:agent-1:otel-1');
    const ofCall = await waitFor(
      () => {
        const mine = spans.filter((s) => s.traceId === traceId);
        const attempt = mine.find((s) => s.name === 'callsync.sink webhook');
        return attempt && mine.some((s) => s.kind === 3 && s.parentSpanId === attempt.spanId) ? mine : null;
      },
      { timeoutMs: 20_000, what: 'the spans of the call' },
    );
    const ingress = ofCall.find((s) => s.name === 'callsync.ingress accept')!;
    const fanout = ofCall.find((s) => s.name === 'callsync.fanout')!;
    const attempt = ofCall.find((s) => s.name === 'callsync.sink webhook')!;
    const http = ofCall.find((s) => s.kind === 3 && s.parentSpanId === attempt.spanId);
    assert.ok(ingress && fanout && attempt, `spans: ${ofCall.map((s) => s.name).join(', ')}`);
    assert.equal(attr(ingress, 'callsync.revision'), 'new');
    assert.equal(attr(ingress, 'callsync.ack_id'), res.body.id);
    assert.deepEqual(
      fanout.links?.map((l) => [l.traceId, l.spanId]),
      [[traceId, ingress.spanId]],
      'the fan-out links to the ingress span',
    );
    assert.deepEqual(
      attempt.links?.map((l) => [l.traceId, l.spanId]),
      [[traceId, fanout.spanId]],
      'the attempt links to the fan-out span',
    );
    assert.equal(attr(attempt, 'callsync.outcome'), 'done');
    assert.equal(attr(attempt, 'callsync.attempt'), 1);
    assert.ok(http, 'the webhook request is a child of the attempt');
    assert.match(String(attr(http, 'url.full')), /^http:\/\/127\.0\.0\.1:\d+\//);
    assert.equal(http.name, 'POST');
    assert.equal(attr(http, 'http.request.method'), 'POST');
    const status = Number(attr(http, 'http.response.status_code'));
    assert.ok(status >= 200 && status < 300, `status ${status}`);
    assert.equal(attr(http, 'server.address'), '127.0.0.1');
    const all = bodies.join('\n');
    for (const digits of ['6355340', '55550100']) assert.ok(!all.includes(digits), 'no number in any span');
  });

  test('the S3 PUTs (node:http) and the e-mail (SMTP) are children of their attempts, with ids only', async () => {
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('otel-2'));
    assert.equal(res.status, 202);
    const traceId = callHash('ai-agent:agent-1:otel-2');
    const clientOf = (mine: OtlpSpan[], sink: string, name: string) => {
      const attempt = mine.find((s) => s.name === `callsync.sink ${sink}`);
      return attempt && mine.filter((s) => s.name === name && s.kind === 3 && s.parentSpanId === attempt.spanId);
    };
    const ofCall = await waitFor(
      () => {
        const mine = spans.filter((s) => s.traceId === traceId);
        return clientOf(mine, 'archive', 'S3.PutObject')?.length && clientOf(mine, 'email', 'SMTP send')?.length
          ? mine
          : null;
      },
      { timeoutMs: 20_000, what: 'the S3 and SMTP spans of the call' },
    ).catch((err: Error) => {
      const mine = spans.filter((s) => s.traceId === traceId);
      throw new Error(`${err.message}; spans: ${mine.map((s) => `${s.name}(${s.kind})`).join(', ')}`);
    });
    const puts = clientOf(ofCall, 'archive', 'S3.PutObject')!;
    assert.ok(puts.length >= 2, 'the record and its text, each a PUT');
    for (const put of puts) {
      assert.equal(attr(put, 'rpc.service'), 'S3');
      assert.equal(attr(put, 'aws.s3.bucket'), 'otel-archive');
      assert.equal(attr(put, 'server.address'), new URL(s3.endpoint).host);
    }
    const [mail] = clientOf(ofCall, 'email', 'SMTP send')!;
    assert.equal(attr(mail!, 'server.address'), '127.0.0.1');
    assert.match(String(attr(mail!, 'callsync.message_id')), /^<.+@.+>$/);
    assert.equal(smtp.messages.length >= 1, true, 'the e-mail was sent');
    const all = bodies.join('\n');
    for (const digits of ['6355340', '55550100']) assert.ok(!all.includes(digits), 'no number in any span');
    assert.ok(!all.includes('team@example.com'), 'no address in any span');
  });
});
