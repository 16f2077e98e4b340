// Source `push`: the Push API, the platform's call events for every call of the account,
// `POST /webhooks/push` (form-urlencoded `newCall`, `answer`, `hangup`, `dtmf`).
//
// - Every request is signed: `X-Sipgate-Signature` is a base64 RSA-SHA256 signature of the raw body,
//   checked against the platform's public key (PUSH_API_PUBLIC_KEY replaces the default below).
// - `newCall` is answered with `<Response onAnswer="…" onHangup="…"/>` so the platform sends the
//   call's answer and hangup events too; the events of a call are assembled in Redis
//   (src/sources/push-assembly.ts) and the hangup yields one canonical call.
//
// Reference: the official Node library, github.com/sipgate-io/sipgateio-node, lib/webhook/
// (webhook.ts: the XML response and its onAnswer/onHangup attributes; signatureVerifier.ts: the
// signature check and the platform's public key, from which the default key below is taken).
import { createPublicKey, createVerify, type KeyObject } from 'node:crypto';
import { declaredEncoding, textIn } from '../charset.js';
import { parsePushEvent, unreadPushFields } from '../model/push.js';
import { InvalidPayloadError } from '../model/webhook.js';
import { envBool, envInt, envString, envUrl, type EnvShape } from '../env-values.js';
import { PushAssembly, pushOpenKey } from './push-assembly.js';
import {
  defineSourceType,
  every,
  sourceEnvOf,
  SourceRefusal,
  SourceUnavailable,
  type BackgroundTask,
  type Source,
  type SourceDeps,
  type SourceReply,
  type SourceTaskDeps,
} from './types.js';

/** The platform's Push API signing key, as published in sipgateio-node lib/webhook/signatureVerifier.ts (commit 8060fd9). */
const PUSH_API_DEFAULT_PUBLIC_KEY = `-----BEGIN PUBLIC KEY-----
MIICIjANBgkqhkiG9w0BAQEFAAOCAg8AMIICCgKCAgEAvFdlnqRfO5TmqzjtsFVC
qPz+oW+poi3lXQFvMJJMEAtlU4MbX+yuIkgnC+Qt3AQWIK+oWSEQiybg+p39wEMl
16PZxEzf9gONQvTg1XhyHnwqYUFQj/AoxPKGYC3jmdjZ224SrESiTN3CdxoOc3vk
cXiQstYE7SxnksPtzfk0aIOkicim5/tAP9izNQ18/zmX3ChjK2k72gf5dDlq+qZ8
pRiHAPZ64TySH6cLQDhaoh6Nbq8FEG3usXXPClbUMh2DZaTMPafpd+LNuTngJ/y+
KoZasVuFfXAeBqGA6l5d4Uedfr99Z6qjwDrJ8sU4z2Do9bJrbuqP+mOXEebhSI1K
vi8trEfrIt8hnDBGsBaB9NEO3kYxvDT2/PhC9fNYFocjEpZNd7/mUqTJDYlpa4UC
NDQaU+ATdXG8/P5sGAegks6MQTu+qe9XTO0CV48eswDkz6g3UbLOwmrJK59SjD3J
yAZ52sluwyDKRWw/PPTt8BTQLjvkdbiLUlc4ehJ4b1X7D7diYWHDPeFL47cAvaXh
dXVrZDeBJYibvD1jRx4ES0KlfhwzNXBYUoM/Movg9zMM2PzyHHKS//xIjwUC/FJ6
/6eykno0Hy2B1ev6s3hdY6VkN2zd7Wf+EK4DxRliwsg1U99szFE3ewLfexF+Uag5
M+TfPtOUumI/NHMTvsRW9+ECAwEAAQ==
-----END PUBLIC KEY-----`;

export const PUSH_PATH = '/webhooks/push';
/** Push API events are a few hundred bytes; anything near this is not one. */
const MAX_BODY_BYTES = 64 * 1024;
/** Base64 of a signature by a key of at most 16384 bits, with room. */
const MAX_SIGNATURE_CHARS = 4096;

/** @internal Exported for its tests only (test/push.redis.test.ts). */
export interface PushSourceOptions {
  assembly: PushAssembly;
  /** PEM (PUSH_API_PUBLIC_KEY); default: the platform's published key. */
  publicKeyPem?: string;
  /** false: signatures are not checked (PUSH_API_VERIFY=false; warned about at every start). */
  verify: boolean;
  /** Public base URL of the ingress (PUSH_API_PUBLIC_URL); unset: the URL the request came in on (src/ingress/app.ts, `requestUrl`). */
  publicUrl?: string;
}

/**
 * The key from PEM text; `\n` written as two characters (one-line .env values) is read as a newline.
 * @internal Exported for its tests only (test/push-config.test.ts).
 */
export function pushPublicKey(pem: string | undefined): KeyObject {
  return createPublicKey((pem ?? PUSH_API_DEFAULT_PUBLIC_KEY).replace(/\\n/g, '\n'));
}

/** @internal Exported for its tests only (test/push-config.test.ts). */
export function verifyPushSignature(key: KeyObject, body: Buffer, signature: string | null): boolean {
  if (!signature || signature.length > MAX_SIGNATURE_CHARS || !/^[A-Za-z0-9+/]+={0,2}$/.test(signature.trim()))
    return false;
  try {
    return createVerify('RSA-SHA256').update(body).verify(key, Buffer.from(signature.trim(), 'base64'));
  } catch {
    return false;
  }
}

const xmlAttr = (s: string): string =>
  s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

const XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n';

/**
 * The answer to `newCall`: subscribe to the call's answer and hangup events at `url`.
 * @internal Exported for its tests only (test/push-config.test.ts).
 */
export function subscribeXml(url: string): string {
  return `${XML_HEAD}<Response onAnswer="${xmlAttr(url)}" onHangup="${xmlAttr(url)}"/>\n`;
}

const EMPTY_XML = `${XML_HEAD}<Response/>\n`;

/** A form name's or value's bytes: `+` a space, `%XX` its byte (WHATWG's percent-decode: a stray `%` is itself). */
function formBytes(part: string): Buffer {
  const bytes = part
    .replace(/\+/g, ' ')
    .replace(/%([0-9A-Fa-f]{2})/g, (_, hex: string) => String.fromCharCode(parseInt(hex, 16)));
  return Buffer.from(bytes, 'latin1');
}

/** A form name or value as text in `encoding`; one that is not text in it as windows-1252, `ok` false. */
function formText(part: string, encoding: string): { text: string; ok: boolean } {
  const bytes = formBytes(part);
  const text = textIn(bytes, encoding);
  return text === null ? { text: textIn(bytes, 'windows-1252')!, ok: false } : { text, ok: true };
}

/**
 * The form's name/value pairs (WHATWG's form-urlencoded parsing), decoded in the body's charset —
 * its escapes too: `%FC` is ü in ISO-8859-1. A name or value that is not text in it is read as
 * windows-1252 (every byte a character: none lost) and its field named in `notText` (`user[]` as
 * `user`): a name that is not UTF-8 is no reason to lose a call's event.
 */
function formFields(body: Buffer, encoding: string): { pairs: [string, string][]; notText: Set<string> } {
  const pairs: [string, string][] = [];
  const notText = new Set<string>();
  // Latin-1 maps each byte to one character: the split is on the bytes `&` and `=`.
  for (const sequence of body.toString('latin1').split('&')) {
    if (sequence === '') continue;
    const eq = sequence.indexOf('=');
    const name = formText(eq < 0 ? sequence : sequence.slice(0, eq), encoding);
    const value = formText(eq < 0 ? '' : sequence.slice(eq + 1), encoding);
    if (!name.ok || !value.ok) notText.add(name.text.replace(/\[\]$/, ''));
    pairs.push([name.text, value.text]);
  }
  return { pairs, notText };
}

/** @internal Exported for its tests only (test/push.redis.test.ts). */
export function pushSource(options: PushSourceOptions): Source {
  const key = pushPublicKey(options.publicKeyPem);
  const callbackUrl = (requestUrl: string): string => {
    if (options.publicUrl) return `${options.publicUrl.replace(/\/+$/, '')}${PUSH_PATH}`;
    const u = new URL(requestUrl);
    return `${u.origin}${PUSH_PATH}`;
  };
  return {
    name: 'push',
    paths: [PUSH_PATH],
    body: 'raw',
    maxBodyBytes: MAX_BODY_BYTES,
    async receive(request) {
      const body = request.raw ?? Buffer.alloc(0);
      if (options.verify && !verifyPushSignature(key, body, request.headers.get('x-sipgate-signature')))
        throw new SourceRefusal(
          401,
          'X-Sipgate-Signature is missing or does not match the body',
          'x-sipgate-signature',
        );
      const contentType = request.headers.get('content-type') ?? '';
      const type = contentType.split(';')[0]!.trim().toLowerCase();
      if (type !== 'application/x-www-form-urlencoded')
        throw new SourceRefusal(415, 'expected Content-Type application/x-www-form-urlencoded', 'content-type');
      // The webhook's charsets (README "Charsets"), but not UTF-16: a form's `&`, `=` and `%` are single bytes.
      const declared = declaredEncoding(contentType);
      if (!('encoding' in declared) || declared.encoding.startsWith('utf-16'))
        throw new SourceRefusal(
          415,
          'charset not supported for a form: send utf-8 or iso-8859-1 (latin1, windows-1252, us-ascii)',
          'content-type',
        );
      const { pairs, notText } = formFields(body, declared.encoding);
      let event;
      try {
        event = parsePushEvent(pairs);
      } catch (err) {
        if (err instanceof InvalidPayloadError) {
          const sent = new URLSearchParams(pairs).get('callId')?.trim();
          throw new SourceRefusal(400, err.detail, err.pointer, undefined, sent ? sent.slice(0, 200) : null);
        }
        throw err;
      }
      let recorded;
      try {
        recorded = await options.assembly.recordEvent(event);
      } catch (err) {
        throw new SourceUnavailable(err);
      }
      if (recorded.late) {
        throw new SourceRefusal(
          409,
          `call ${event.callId} was closed and its events have expired: a ${event.event} event this late (a replay?) cannot change it`,
          '/callId',
          undefined,
          event.callId,
        );
      }
      const call = recorded.call;
      const reply: SourceReply = {
        status: 200,
        contentType: 'application/xml',
        body: event.event === 'newCall' ? subscribeXml(callbackUrl(request.url)) : EMPTY_XML,
      };
      return { calls: call ? [{ call }] : [], unread: unreadPushFields(event, notText), reply: () => reply };
    },
  };
}

/** The Push API's environment variables (composed into the one schema by src/config/env.ts). */
const pushEnv = {
  /** Push API (POST /webhooks/push): the platform's public key (PEM) checking X-Sipgate-Signature. Default: the key the platform publishes. */
  PUSH_API_PUBLIC_KEY: envString,
  /** Check X-Sipgate-Signature on Push API requests. Default true; false is warned about at every start. */
  PUSH_API_VERIFY: envBool(true),
  /** Public base URL of the ingress as the platform reaches it; newCall subscribes to `<url>/webhooks/push`. Default: the request's own URL. */
  PUSH_API_PUBLIC_URL: envUrl,
  /** A Push API call whose hangup never comes is closed as outcome unknown this long after its first event. Default 6 h. */
  PUSH_CALL_TIMEOUT_SECONDS: envInt(6 * 3600, 1),
} satisfies EnvShape;

/** The Push API source's settings (`config.sources.push`). */
export interface PushSettings {
  /** PEM replacing the platform's published key (PUSH_API_PUBLIC_KEY). */
  publicKeyPem?: string;
  verify: boolean;
  publicUrl?: string;
  /** PUSH_CALL_TIMEOUT_SECONDS in ms. */
  timeoutMs: number;
}

function pushAssembly(settings: PushSettings, deps: SourceDeps): PushAssembly {
  return new PushAssembly(deps.redis, { prefix: deps.keys.area('push'), timeoutMs: settings.timeoutMs, now: deps.now });
}

/**
 * Closes Push API calls whose hangup never came (outcome `unknown`): every quarter of
 * PUSH_CALL_TIMEOUT_SECONDS (between 250 ms and a minute) the open calls past their deadline are
 * claimed (one sweeper wins each, ./push-assembly.ts) and accepted into the inbound log.
 */
function pushSweeper(settings: PushSettings, deps: SourceTaskDeps): BackgroundTask {
  const assembly = pushAssembly(settings, deps);
  const everyMs = Math.min(60_000, Math.max(250, Math.floor(settings.timeoutMs / 4)));
  return every('push sweeper', everyMs, () =>
    assembly
      // Batch after batch while they come back full, for up to half the interval.
      .sweepDue((call) => deps.accept(call), everyMs / 2)
      .then(
        (closed) => {
          if (closed > 0) deps.log.info({ closed }, 'push calls without hangup closed as unknown');
        },
        (err: unknown) =>
          deps.log.warn({ err: { message: (err as Error).message } }, 'push call sweep failed; retried next time'),
      ),
  );
}

export const pushSourceType = defineSourceType<PushSettings>({
  name: 'push',
  env: pushEnv,
  options(raw, { problems, warnings }) {
    const env = sourceEnvOf(pushEnv, raw);
    if (!env.PUSH_API_VERIFY)
      warnings.push('PUSH_API_VERIFY=false: Push API requests are accepted without checking their signature');
    if (env.PUSH_API_PUBLIC_KEY !== undefined) {
      try {
        pushPublicKey(env.PUSH_API_PUBLIC_KEY);
      } catch {
        problems.push('PUSH_API_PUBLIC_KEY: expected a public key in PEM (-----BEGIN PUBLIC KEY----- …)');
      }
    }
    return {
      publicKeyPem: env.PUSH_API_PUBLIC_KEY,
      verify: env.PUSH_API_VERIFY,
      publicUrl: env.PUSH_API_PUBLIC_URL,
      timeoutMs: env.PUSH_CALL_TIMEOUT_SECONDS * 1000,
    };
  },
  routes: (settings, deps) => pushSource({ ...settings, assembly: pushAssembly(settings, deps) }),
  background: (settings, deps) => [pushSweeper(settings, deps)],
  stateLabel: 'Push assembly',
  async leftBehind(redis, areaPrefix) {
    const open = await redis.zcard(pushOpenKey(areaPrefix));
    return open > 0
      ? `push: ${open} call(s) being assembled from Push API events (their events so far stay here; the new deployment sees only the later ones)`
      : null;
  },
});
