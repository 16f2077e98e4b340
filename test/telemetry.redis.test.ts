// OpenTelemetry (src/telemetry.ts): with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a small OTLP/HTTP
// receiver on loopback, one call gives one trace — the ingress' acceptance, the fan-out linked to it,
// the sink attempt linked to the fan-out, and the signed webhook's HTTP request as a child of the
// attempt — with ids and outcomes in the attributes and no phone number anywhere.
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
    hook = await new FakeWebhookReceiver(`whsec_${randomBytes(32).toString('base64')}`).start();
    cs = await startTestCallsync({ CRM_WEBHOOK_URL: hook.url, CRM_WEBHOOK_SECRET: hook.secret });
  });
  after(async () => {
    await cs?.stop();
    await stopTracing();
    await hook?.stop();
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
        return mine.some((s) => s.name === 'callsync.sink webhook') && mine.some((s) => s.kind === 3 && s.parentSpanId)
          ? mine
          : null;
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
    const all = bodies.join('\n');
    for (const digits of ['6355340', '55550100']) assert.ok(!all.includes(digits), 'no number in any span');
  });
});
