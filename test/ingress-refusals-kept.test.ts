// Which refusals the ingress keeps (IngressDeps.refusals: `callsync refused`, /api/refusals, the
// Calls page): every 4xx of a source's route once the sender is known — under the call id when it
// could be read, else without one (a body that is not JSON, a call id missing: after a change of the
// platform's payload, the refusals that matter most) — and none of those anyone could send: the
// allow list's 403, the credential's 401, a Push API signature that does not match, a body too
// large for a push route before its signature is checked, a GET. Through app.request(), no Redis.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Context } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { createLogger } from '../src/log.js';
import { aiAgentSource } from '../src/sources/ai-agent.js';
import type { PushAssembly } from '../src/sources/push-assembly.js';
import { pushSource } from '../src/sources/push.js';
import type { Refusal } from '../queues/timeline.js';
import { webhookPayload } from './support/calls.js';
import { sign, testKeyPair } from './support/fake-push.js';
import { webhookConfig } from './support/webhook-config.js';

const keys = testKeyPair();
const PLATFORM = '217.116.118.254';
const SECRET = 'kept-refusals-secret-4b1e';

function ingress(verify: boolean) {
  const kept: Refusal[] = [];
  const app = createIngressApp({
    webhook: webhookConfig({
      allowedIps: [PLATFORM],
      authHeader: 'x-callsync-token',
      authTokens: [SECRET],
      bodyLimitBytes: 64 * 1024,
    }),
    acceptor: { accept: async () => ({ id: 'id-1', duplicate: false }) },
    ready: async () => true,
    log: createLogger({ level: 'silent' }),
    remoteAddress: (c: Context) => c.req.header('x-test-peer'),
    refusals: { refused: (r: Refusal) => void kept.push(r) },
    sources: [
      aiAgentSource(),
      // Never reached by these requests: each is refused before the event is read.
      pushSource({ assembly: {} as PushAssembly, publicKeyPem: keys.publicKeyPem, verify }),
    ],
  });
  const post = (body: string, headers: Record<string, string> = {}, path = '/webhooks/ai-agent/agent-1') =>
    app.request(path, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-test-peer': PLATFORM, 'x-callsync-token': SECRET, ...headers },
      body,
    });
  return { app, kept, post };
}

test('a known sender: every 4xx kept, the call id where it could be read, null where not', async () => {
  const { kept, post } = ingress(false);
  const cases: [string, Response, string | null, number, string][] = [
    ['not JSON', await post('{"call": '), null, 400, '/'],
    ['no call id', await post(JSON.stringify(webhookPayload('x', (p) => delete p.call.id))), null, 400, '/call/id'],
    [
      'a start time that cannot be read',
      await post(JSON.stringify(webhookPayload('kept-1', (p) => (p.call.startTime = 'soon')))),
      'kept-1',
      400,
      '/call/startTime',
    ],
    ['larger than the body limit', await post(`{"x":"${'a'.repeat(70 * 1024)}"}`), null, 413, '/'],
    [
      'a push event of another content type',
      await post('callId=p-1', { 'content-type': 'text/plain' }, '/webhooks/push'),
      null,
      415,
      'content-type',
    ],
    [
      'a push event that cannot be read',
      await post('callId=p-2&direction=in', { 'content-type': 'application/x-www-form-urlencoded' }, '/webhooks/push'),
      'p-2',
      400,
      '/event',
    ],
  ];
  for (const [what, res, , status] of cases) assert.equal(res.status, status, what);
  assert.deepEqual(
    kept.map((r) => [r.callId, r.status, r.pointer, r.source]),
    cases.map(([what, , callId, status, pointer]) => [
      callId,
      status,
      pointer,
      what.startsWith('a push') ? 'push' : 'ai-agent',
    ]),
  );
});

test('nothing anyone could send is kept: the allow list, the credential, the push signature, a push body too large unsigned, a GET', async () => {
  const { app, kept, post } = ingress(true);
  const bad = JSON.stringify(webhookPayload('gate-1', (p) => (p.call.startTime = 'soon')));
  const answers = [
    await post(bad, { 'x-test-peer': '203.0.113.9' }),
    await post(bad, { 'x-callsync-token': 'wrong' }),
    await post(bad, { 'x-callsync-token': '' }),
    await post(
      'callId=g-2&direction=in',
      {
        'content-type': 'application/x-www-form-urlencoded',
        'x-sipgate-signature': sign(keys, 'something else'),
      },
      '/webhooks/push',
    ),
    await post(
      `callId=g-3&x=${'a'.repeat(100 * 1024)}`,
      { 'content-type': 'application/x-www-form-urlencoded' },
      '/webhooks/push',
    ),
    await app.request('/webhooks/ai-agent/agent-1', { headers: { 'x-test-peer': PLATFORM } }),
  ];
  assert.deepEqual(
    answers.map((r) => r.status),
    [403, 401, 401, 401, 413, 405],
  );
  assert.equal(kept.length, 0, JSON.stringify(kept));
  // Signed, the same sender is known: its refusal is kept.
  const body = 'callId=g-4&direction=in';
  const signed = await post(
    body,
    { 'content-type': 'application/x-www-form-urlencoded', 'x-sipgate-signature': sign(keys, body) },
    '/webhooks/push',
  );
  assert.equal(signed.status, 400);
  assert.deepEqual(
    kept.map((r) => r.callId),
    ['g-4'],
  );
});
