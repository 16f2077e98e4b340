// A fake of the platform's Push API sender: form-urlencoded events as the platform sends them
// (field names from sipgateio-node lib/webhook/webhook.types.ts), signed with a key pair made here.
import { generateKeyPairSync, createSign } from 'node:crypto';

export interface TestKeys {
  publicKeyPem: string;
  privateKeyPem: string;
}

export function testKeyPair(): TestKeys {
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    publicKeyPem: publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    privateKeyPem: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(),
  };
}

/** Base64 RSA-SHA256 signature of `body`, as X-Sipgate-Signature carries it. */
export function sign(keys: TestKeys, body: string | Buffer): string {
  return createSign('RSA-SHA256').update(body).sign(keys.privateKeyPem, 'base64');
}

/** The form body of one event; arrays become repeated `name[]` fields as the platform sends them. */
export function pushBody(fields: Record<string, string | string[]>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(fields)) {
    if (Array.isArray(value)) for (const v of value) params.append(`${name}[]`, v);
    else params.append(name, value);
  }
  return params.toString();
}

/** The fields every call event of the fake carries (an inbound call to the test number). */
const callFields = (event: string, callId: string) => ({
  event,
  direction: 'in',
  from: '492111234567',
  to: '4915799912345',
  callId,
  originalCallId: callId,
  xcid: `x-${callId}`,
});

export const newCall = (callId: string, over: Record<string, string | string[]> = {}) =>
  pushBody({
    ...callFields('newCall', callId),
    user: ['Alice Example', 'Bob Example'],
    userId: ['w0', 'w1'],
    fullUserId: ['1234567w0', '1234567w1'],
    ...over,
  });

export const answer = (callId: string, over: Record<string, string | string[]> = {}) =>
  pushBody({
    ...callFields('answer', callId),
    user: 'Bob Example',
    userId: 'w1',
    fullUserId: '1234567w1',
    answeringNumber: '4921100000001',
    ...over,
  });

export const hangup = (callId: string, cause = 'normalClearing', over: Record<string, string | string[]> = {}) =>
  pushBody({
    ...callFields('hangup', callId),
    cause,
    answeringNumber: cause === 'normalClearing' ? '4921100000001' : '',
    ...over,
  });

export const dtmf = (callId: string, digits = '0123') =>
  pushBody({ event: 'dtmf', callId, originalCallId: callId, dtmf: digits });
