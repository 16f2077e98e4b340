// The `webhook refused` log line names where a body went wrong without the sender's data: a JSON
// pointer made of the sender's keys (phone numbers, sentences) is masked and cut in the log, and
// sent back whole to the sender. Through app.request(), no Redis.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { createIngressApp } from '../src/ingress/app.js';
import { createLogger } from '../src/log.js';
import { minimalPayload } from './support/calls.js';
import { webhookConfig } from './support/webhook-config.js';

const webhook = webhookConfig();

/** An ingress whose log lines are kept (as text) for the test to read. */
function ingressLogging() {
  const lines: string[] = [];
  const log = createLogger({
    level: 'info',
    destination: new Writable({
      write(chunk: Buffer, _enc, done) {
        lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
        done();
      },
    }),
  });
  const app = createIngressApp({
    webhook,
    acceptor: { accept: async () => ({ id: 'id-1', duplicate: false }) },
    ready: async () => true,
    log,
    remoteAddress: () => '127.0.0.1',
  });
  return { app, lines };
}

test('a body nesting too deep under phone-number and sentence keys: the log masks the pointer, the answer keeps it', async () => {
  const { app, lines } = ingressLogging();
  const keys = ['+4917612349876', '0176/1234-9876', 'Frau Müller will kündigen', 'phone_4917612349876'];
  let deep: unknown = 1;
  for (let i = 0; i < 70; i++) deep = { [keys[i % keys.length]!]: deep };
  const body = JSON.stringify({ ...minimalPayload('deep-keys'), zz: deep });

  const res = await app.request('/webhooks/ai-agent/agent-1', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  assert.equal(res.status, 400);
  const answer = (await res.json()) as { errors: { detail: string; source: { pointer: string } }[] };
  assert.match(answer.errors[0]!.detail, /nesting deeper than 64 levels/);
  assert.ok(
    answer.errors[0]!.source.pointer.startsWith('/zz/0176~11234-9876/+4917612349876/phone_4917612349876/'),
    'the sender gets it whole',
  );

  const refused = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'webhook refused');
  assert.ok(refused, lines.join('\n'));
  const logged = JSON.stringify(refused);
  for (const piece of ['17612349876', '1234-9876', 'Müller', 'kündigen'])
    assert.ok(!logged.includes(piece), `"${piece}" in ${logged}`);
  const pointer = String(refused.pointer);
  assert.ok(pointer.startsWith('/zz/****876/+****876/phone_****876/…/****876/'), pointer);
  assert.ok(pointer.length <= 200, `${pointer.length} characters`);
  assert.deepEqual(
    (refused.errors as { pointer: string }[]).map((e) => e.pointer),
    [pointer],
  );
});

test('array indices and plain field names in a logged pointer stay readable', async () => {
  const { app, lines } = ingressLogging();
  const nested = `${'['.repeat(70)}${']'.repeat(70)}`;
  const body = `${JSON.stringify(minimalPayload('deep-arrays')).slice(0, -1)},"x":${nested}}`;
  const res = await app.request('/webhooks/ai-agent/agent-1', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
  assert.equal(res.status, 400);
  const refused = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'webhook refused');
  assert.equal(refused?.pointer, `/x${'/0'.repeat(63)}`);
});

test('a number in the path of a refused webhook is masked in its line', async () => {
  const { app, lines } = ingressLogging();
  const res = await app.request('/webhooks/ai-agent/+4917612349876', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(minimalPayload('path-number')),
  });
  assert.equal(res.status, 400);
  const refused = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'webhook refused');
  assert.equal(refused?.path, '/webhooks/ai-agent/+****876');
});
