// The legacy "AI Assistant Webhook" of the platform's desktop app (contracts signed before
// 2025-08-25; Labs → AI Assistant Webhook), posted to the same route as the current payload and
// recognised by its shape: no `version`, `call.caller` / `call.callee` instead of `from` / `to`,
// `callHeadline` and `summary` as text at the top level, `channel {id, name}` at the top level,
// `startTime` / `endTime` in epoch ms, `duration` in seconds, `direction` `inbound` / `outbound`.
//
// It is read by the current payload's code (src/model/webhook.ts): `legacyAsCurrent` places each
// field where the current payload has it, and `legacyPointer` names a field in the legacy body
// again (for a 400's pointers and the unread-field metric), so the sender is told about the field
// it sent. Fields of the legacy body that are not listed here are kept only in the original.

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The legacy payload: an object without `version` whose `call` object names its parties
 * `caller` / `callee` (and has neither `from` nor `to`).
 */
export function isLegacyWebhook(body: unknown): body is Json {
  if (!isObject(body) || 'version' in body || !isObject(body.call)) return false;
  const call = body.call;
  return ('caller' in call || 'callee' in call) && !('from' in call) && !('to' in call);
}

/** The legacy body with its fields where the current payload has them (the version is `legacy`). */
export function legacyAsCurrent(body: Json): Json {
  const { caller, callee, ...call } = body.call as Json;
  return {
    version: 'legacy',
    call: { ...call, from: caller, to: callee },
    channel: body.channel,
    agentId: body.agentId,
    assist: { callHeadline: body.callHeadline, summary: body.summary },
  };
}

const POINTERS: [current: string, legacy: string][] = [
  ['/call/from', '/call/caller'],
  ['/call/to', '/call/callee'],
  ['/assist/callHeadline', '/callHeadline'],
  ['/assist/summary', '/summary'],
];

/** A pointer into `legacyAsCurrent`'s object as a pointer into the legacy body. */
export function legacyPointer(pointer: string): string {
  for (const [current, legacy] of POINTERS) {
    if (pointer === current || pointer.startsWith(`${current}/`)) return legacy + pointer.slice(current.length);
  }
  return pointer;
}
