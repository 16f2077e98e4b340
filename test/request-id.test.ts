// Every answer of the ingress carries X-Request-Id: accepted and rejected webhooks, guard refusals,
// unknown routes, probes and the ops routes mounted beside the ingress (answered by another app).
// A sane id from the caller is kept; anything else is replaced by a fresh UUID.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createIngressApp } from '../src/ingress/app.js';
import { createLogger } from '../src/log.js';
import { createOpsApp, opsRoutes } from '../src/ops/app.js';
import { requestContext } from '../src/ops/request-context.js';
import type { Config } from '../src/config/index.js';
import { webhookPayload } from './support/calls.js';

const log = createLogger({ level: 'silent' });
const webhook: Config['webhook'] = {
  allowedIps: ['217.116.118.254'],
  trustProxyHops: 0,
  authHeader: undefined,
  authTokens: [],
  bodyLimitBytes: 1024 * 1024,
  dedupeWindowMs: 60_000,
  enqueueTimeoutMs: 1000,
};

test('every answer carries X-Request-Id; a sane caller id is kept, others are replaced', async () => {
  const ops = createOpsApp({ log, queues: [], auth: {}, ready: async () => true });
  let peer = '217.116.118.254';
  const app = createIngressApp({
    webhook,
    acceptor: { accept: async () => ({ id: 'id-1', duplicate: false }) },
    ready: async () => true,
    log,
    remoteAddress: () => peer,
    before: [requestContext({ log }), opsRoutes(ops)],
  });
  const post = (body: string, headers: Record<string, string> = {}) =>
    app.request('/webhooks/ai-agent/agent-1', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body,
    });
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

  const answers: [string, Response][] = [
    ['accepted webhook', await post(JSON.stringify(webhookPayload('rid-1')))],
    ['invalid JSON', await post('{"call": ')],
    ['wrong content type', await post('x', { 'content-type': 'text/plain' })],
    ['unknown route', await app.request('/nowhere')],
    ['wrong method', await app.request('/webhooks/ai-agent')],
    ['liveness probe', await app.request('/healthz')],
    ['metrics (answered by the ops app)', await app.request('/metrics')],
  ];
  peer = '203.0.113.9';
  answers.push(['address not allowed', await post(JSON.stringify(webhookPayload('rid-2')))]);
  peer = '217.116.118.254';

  const statuses = answers.map(([, res]) => res.status);
  assert.deepEqual(statuses, [202, 400, 415, 404, 405, 200, 200, 403]);
  const ids = new Set<string>();
  for (const [what, res] of answers) {
    const id = res.headers.get('x-request-id') ?? '';
    assert.match(id, UUID, `${what}: X-Request-Id`);
    ids.add(id);
  }
  assert.equal(ids.size, answers.length, 'a fresh id per request');

  // The accepted webhook's answer is built with plain headers (src/ingress/app.ts): both are there.
  assert.equal(answers[0]![1].headers.get('content-type'), 'application/json');
  assert.deepEqual(await answers[0]![1].json(), { id: 'id-1', duplicate: false });

  const kept = await post(JSON.stringify(webhookPayload('rid-3')), { 'x-request-id': 'platform-req-12345' });
  assert.equal(kept.headers.get('x-request-id'), 'platform-req-12345');
  const keptOnError = await post('{"call": ', { 'x-request-id': 'platform-req-67890' });
  assert.equal(keptOnError.headers.get('x-request-id'), 'platform-req-67890');
  const replaced = await post(JSON.stringify(webhookPayload('rid-4')), { 'x-request-id': 'bad id\twith spaces' });
  assert.match(replaced.headers.get('x-request-id') ?? '', UUID);
});

test('the request id in a header of another name: the accepted webhook answers in that one', async () => {
  const app = createIngressApp({
    webhook,
    acceptor: { accept: async () => ({ id: 'id-1', duplicate: false }) },
    ready: async () => true,
    log,
    remoteAddress: () => '217.116.118.254',
    before: [requestContext({ log, header: 'x-correlation-id' })],
  });
  const res = await app.request('/webhooks/ai-agent/agent-1', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-correlation-id': 'platform-req-12345' },
    body: JSON.stringify(webhookPayload('rid-5')),
  });
  assert.equal(res.status, 202);
  assert.equal(res.headers.get('x-correlation-id'), 'platform-req-12345');
  assert.equal(res.headers.get('x-request-id'), null);
});
