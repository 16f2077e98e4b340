// Fixtures: spec-format webhook payloads and canonical call records.
import { readFileSync } from 'node:fs';
import type { CanonicalCall } from '../../src/model/call.js';
import { normalizeWebhook } from '../../src/model/webhook.js';

const v2 = JSON.parse(readFileSync(new URL('../fixtures/webhook-v2.json', import.meta.url), 'utf8')) as Record<
  string,
  unknown
>;

/** A full v2 payload (summary, playbook, transcript); `callId` makes it unique. */
export function webhookPayload(
  callId = 'c-1',
  patch: (p: Record<string, any>) => void = () => undefined,
): Record<string, any> {
  const payload = structuredClone(v2) as Record<string, any>;
  payload.call.id = callId;
  patch(payload);
  return payload;
}

/** A minimal v1 payload: only the required call metadata. */
export function minimalPayload(callId = 'c-min'): Record<string, any> {
  return {
    version: 'v1',
    call: {
      id: callId,
      from: '+492116355340',
      to: '+4921155550100',
      startTime: 1775642400000,
      endTime: 1775642460000,
      duration: 60,
      direction: 'in',
      users: [],
    },
  };
}

/** A canonical call record built through the real normalizer. */
export function sampleCall(
  callId = 'c-1',
  options: { agentId?: string; patch?: (p: Record<string, any>) => void } = {},
): CanonicalCall {
  return normalizeWebhook(webhookPayload(callId, options.patch), {
    agentId: options.agentId ?? 'agent-1',
    receivedAt: new Date('2026-04-08T10:03:00Z'),
  });
}

/**
 * A webhook body (text) with `depth` nested arrays inside an unknown field: valid JSON that
 * `JSON.parse` reads, but that `JSON.stringify` (BullMQ's job serializer) overflows the stack on.
 */
export function deepWebhookBody(
  callId: string,
  depth = 10_000,
  patch: (p: Record<string, any>) => void = () => undefined,
): string {
  const head = JSON.stringify(webhookPayload(callId, patch));
  return `${head.slice(0, -1)},"x-vendor-trace":${'['.repeat(depth)}${']'.repeat(depth)}}`;
}
