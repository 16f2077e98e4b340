// Fields the platform already sends in the AI-agent webhook: `call.channel` becomes the call's
// channel (so channel routes match webhook calls), `assist.callHeadline` the call's title (CRM
// titles, archive text) and `assist.provider` is kept.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { normalizeWebhook } from '../src/model/webhook.js';
import { contentHash, encodeCall } from '../src/model/call.js';
import { sinksFor } from '../src/routing/router.js';
import { routeSchema } from '../src/routing/types.js';
import { templateVars } from '../src/sinks/template-vars.js';
import { renderTemplate } from '../src/sinks/template.js';
import { defaultTitleTemplate } from '../src/sinks/crm/vars.js';
import { renderTranscriptText } from '../src/sinks/archive/render.js';
import { webhookPayload } from './support/calls.js';

const receivedAt = new Date('2026-04-08T10:05:00Z');
const normalize = (body: unknown) => normalizeWebhook(body, { agentId: 'agent-1', receivedAt });

test('call.channel {id, name} becomes the channel id; a channel route matches the webhook call', () => {
  const call = normalize(
    webhookPayload('ch-1', (p) => {
      p.call.channel = { id: 'sales-line', name: 'Sales' };
    }),
  );
  assert.equal(call.channelId, 'sales-line');
  assert.deepEqual(call.channel, { id: 'sales-line', name: 'Sales' });
  const route = routeSchema.parse({ when: { channel: 'sales-line' }, to: ['crm'] });
  assert.deepEqual(sinksFor([route], call), ['crm']);
  const other = routeSchema.parse({ when: { channel: 'support-line' }, to: ['crm'] });
  assert.deepEqual(sinksFor([other], call), []);
  // Top-level channel too, and numbers as text; a plain string is the channel id (issue 20: both
  // shapes); anything without an id stays without a channel.
  assert.equal(normalize(webhookPayload('ch-2', (p) => (p.channel = { id: 42, name: 'x' }))).channelId, '42');
  assert.equal(normalize(webhookPayload('ch-3', (p) => (p.call.channel = { name: 'no id' }))).channelId, null);
  assert.equal(normalize(webhookPayload('ch-4', (p) => (p.call.channel = 'sales-line'))).channelId, 'sales-line');
  assert.equal(normalize(webhookPayload('ch-4b', (p) => (p.call.channel = true))).channelId, null);
  assert.equal(normalize(webhookPayload('ch-5')).channelId, null);
});

test('a channel object with a "__proto__" key is stored and hashed with it (kept verbatim, never a prototype)', () => {
  const withKey = (value: string) =>
    normalize(webhookPayload('ch-proto', (p) => (p.call.channel = JSON.parse(`{"id":"x","__proto__":"${value}"}`))));
  const a = encodeCall(withKey('a'));
  const b = encodeCall(withKey('b'));
  assert.notEqual(a.contentHash, b.contentHash, 'the content differs in the channel\'s "__proto__" key');
  assert.equal((JSON.parse(a.json) as { channel: Record<string, unknown> }).channel['__proto__'], 'a');
});

test('assist.callHeadline is the title of CRM records and the archive text; assist.provider is kept', () => {
  const call = normalize(
    webhookPayload('t-1', (p) => {
      p.assist.callHeadline = 'Customer asks to move the appointment';
      p.assist.provider = 'acme-ai';
    }),
  );
  assert.equal(call.title, 'Customer asks to move the appointment');
  assert.equal(call.provider, 'acme-ai');
  assert.equal(renderTemplate(defaultTitleTemplate, templateVars(call)), 'Customer asks to move the appointment');
  assert.match(renderTranscriptText(call), /^Call t-1\nTitle: Customer asks to move the appointment\n/);
  assert.equal(templateVars(call).provider, 'acme-ai');
});

test('without a headline the title is what it always was, and the content hash does not change', () => {
  const call = normalize(webhookPayload('t-2'));
  assert.equal(call.title, undefined);
  assert.equal('title' in call, false);
  assert.match(renderTemplate(defaultTitleTemplate, templateVars(call)), /^Inbound call \S+ \(answered\)$/);
  assert.doesNotMatch(renderTranscriptText(call), /Title:/);
  const blank = normalize(webhookPayload('t-2', (p) => (p.assist.callHeadline = '   ')));
  assert.equal(contentHash(blank), contentHash(call));
});
