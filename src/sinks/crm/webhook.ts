// Generic signed webhook: POSTs the canonical call as JSON to one or more URLs, signed per the
// Standard Webhooks spec (https://www.standardwebhooks.com):
//   webhook-id         msg_<hash of the call's content>: the same on every retry and redelivery of
//                      the same content (receivers dedupe on it), new when the call changed
//   webhook-timestamp  Unix seconds of this attempt
//   webhook-signature  `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>` per secret,
//                      space-separated: list the new secret beside the old one while rotating
// A URL that accepted a message is remembered, so a retry after a partial failure only resends
// to the URLs that have not. An update of a call (sent again with more in it) is a new message
// with a new webhook-id; per URL, an older revision is never sent after a newer one, and the
// revisions of one call are sent one at a time (src/sinks/revisions.ts).
import { createHash, createHmac } from 'node:crypto';
import { z } from 'zod';
import type { CanonicalCall } from '../../model/call.js';
import { RevisionGuard } from '../revisions.js';
import { envOf, type Sink, type SinkContext, type SinkDeps, type SinkResult, type SinkType } from '../types.js';
import { envString, type EnvShape } from '../../env-values.js';
import { queueLimitSchema, timeoutSchema } from './common.js';
import { CrmHttp, stringField } from './http.js';

const secretSchema = z
  .string()
  .trim()
  .refine((s) => secretKey(s) !== null, { message: 'expected a `whsec_` secret: whsec_ followed by base64 (at least 24 bytes)' });

/** Header names a config may not set: the signature headers and what fetch owns. */
const reservedHeaders = new Set(['webhook-id', 'webhook-timestamp', 'webhook-signature', 'content-type', 'content-length', 'host']);

export const webhookOptionsSchema = z.strictObject({
  urls: z.array(z.url({ protocol: /^https?$/ })).min(1),
  /** Extra headers on every request (e.g. an API key of the receiver). */
  headers: z
    .record(z.string().regex(/^[A-Za-z0-9-]+$/), z.string())
    .default({})
    .refine((h) => Object.keys(h).every((k) => !reservedHeaders.has(k.toLowerCase())), { message: 'webhook-* and content headers are set by callsync' }),
  /** Signing secrets (`whsec_...`); several while rotating. Default CRM_WEBHOOK_SECRET (comma/space separated). */
  secrets: z.array(secretSchema).optional(),
  /** Wrap the call as `{ type, timestamp, data }` (Standard Webhooks' payload shape) or send it bare. */
  envelope: z.boolean().default(true),
  /** Event type in the envelope. */
  eventType: z.string().min(1).default('call.completed'),
  /** Include `raw` (the sender's original payload, transcript included). Default false. */
  includeRaw: z.boolean().default(false),
  rateLimit: queueLimitSchema.optional(),
  timeoutMs: timeoutSchema,
});

export type WebhookOptions = z.infer<typeof webhookOptionsSchema>;

/** The HMAC key of a `whsec_` secret, or null when it is not one. */
export function secretKey(secret: string): Buffer | null {
  const m = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(secret.trim());
  if (!m) return null;
  const key = Buffer.from(m[1] as string, 'base64');
  return key.length >= 24 ? key : null;
}

/** The `webhook-signature` header value for one message, one `v1,` signature per secret. */
export function signWebhook(id: string, timestampSec: number, body: string, secrets: string[]): string {
  return secrets
    .map((s) => {
      const key = secretKey(s);
      if (key === null) throw new Error('invalid webhook secret');
      return `v1,${createHmac('sha256', key).update(`${id}.${timestampSec}.${body}`).digest('base64')}`;
    })
    .join(' ');
}

function splitList(value: string | undefined): string[] {
  return (value ?? '').split(/[\s,]+/).map((s) => s.trim()).filter((s) => s.length > 0);
}

/** The environment variables the signed-webhook sink type reads. */
export const webhookEnv = {
  /** URLs of the shortcut sink `webhook`, separated by commas or spaces. */
  CRM_WEBHOOK_URL: envString.refine((v) => splitList(v).every((u) => /^https?:$/.test(URL.canParse(u) ? new URL(u).protocol : '')), {
    message: 'expected http(s) URLs separated by commas',
  }),
  /** Signing secrets (`whsec_…`, separated by commas or spaces; two while rotating): the sinks' `secrets` default. */
  CRM_WEBHOOK_SECRET: envString.refine((v) => splitList(v).every((s) => secretKey(s) !== null), {
    message: 'expected whsec_ secrets (whsec_ followed by base64 of at least 24 bytes), separated by commas or spaces',
  }),
} satisfies EnvShape;

const NO_SECRET = 'no signing secret: set CRM_WEBHOOK_SECRET or the sink\'s secrets';

export class WebhookSink implements Sink {
  readonly type = 'webhook';
  private readonly secrets: string[];
  private readonly clients: { url: string; http: CrmHttp }[];
  private readonly revisions: RevisionGuard;

  constructor(
    readonly name: string,
    private readonly options: WebhookOptions,
    private readonly deps: SinkDeps,
  ) {
    this.secrets = options.secrets ?? splitList(envOf(webhookEnv, deps.env).CRM_WEBHOOK_SECRET);
    if (this.secrets.length === 0) throw new Error(`sink "${name}" (webhook): ${NO_SECRET}`);
    for (const s of this.secrets) {
      if (secretKey(s) === null) throw new Error(`sink "${name}" (webhook): a signing secret is not a whsec_ secret`);
    }
    this.revisions = new RevisionGuard(deps.state, { what: 'the webhook receivers', lockTtlMs: 30_000 + options.urls.length * options.timeoutMs });
    this.clients = options.urls.map((url) => ({
      url,
      http: new CrmHttp({
        crm: 'Webhook',
        sink: name,
        baseUrl: url,
        headers: { 'user-agent': 'callsync-webhook/1', ...options.headers },
        timeoutMs: options.timeoutMs,
        now: deps.now,
        authHint: `Check the receiver's credentials in the sink's headers (${new URL(url).host}).`,
        errorDetail: (body, text) => stringField(body, 'message') ?? stringField(body, 'error') ?? (text.length < 300 ? text : undefined),
        rateLimitDelayMs: () => 10_000,
      }),
    }));
  }

  /** The JSON body: the canonical call (without `raw` unless asked), in an envelope by default. */
  payload(call: CanonicalCall): { id: string; body: string } {
    const data: Partial<CanonicalCall> = { ...call };
    if (!this.options.includeRaw) delete data.raw;
    // The id hashes the content without `receivedAt`: a redelivery of the same call is the same message.
    const { receivedAt: _receivedAt, ...stable } = data;
    const id = `msg_${createHash('sha256').update(call.key).update('\n').update(JSON.stringify(stable)).digest('hex').slice(0, 32)}`;
    const body = this.options.envelope
      ? JSON.stringify({ type: this.options.eventType, timestamp: call.endedAt ?? call.startedAt, data })
      : JSON.stringify(data);
    return { id, body };
  }

  deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    return this.revisions.exclusive(call.key, ctx, () => this.send(call, ctx));
  }

  private async send(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const { id, body } = this.payload(call);
    const refs: Record<string, string> = { webhookId: id };
    let skipped = 0;
    let newer = 0;
    for (const [i, client] of this.clients.entries()) {
      const urlTag = `${i}:${createHash('sha256').update(client.url).digest('hex').slice(0, 12)}`;
      const sentKey = `sent:${id}:${urlTag}`;
      if (await this.revisions.superseded(call.key, ctx.revision, urlTag)) {
        newer++;
        continue;
      }
      if ((await this.deps.state.get(sentKey)) !== null) {
        skipped++;
        continue;
      }
      const timestamp = Math.floor(this.deps.now().getTime() / 1000);
      await this.post(client.http, id, timestamp, body, ctx.signal);
      await this.deps.state.set(sentKey, String(timestamp), 7 * 24 * 3600 * 1000);
      await this.revisions.written(call.key, ctx.revision, urlTag);
      ctx.log.debug({ sink: this.name, callId: call.callId, host: new URL(client.url).host, webhookId: id }, 'webhook delivered');
    }
    if (newer === this.clients.length) return this.revisions.skipped();
    const reasons = [skipped > 0 ? `${skipped} URL(s) already had this message` : '', newer > 0 ? `${newer} URL(s) already had a newer revision` : ''].filter(Boolean);
    return { status: 'done', refs, reason: reasons.length > 0 ? reasons.join('; ') : undefined };
  }

  private async post(http: CrmHttp, id: string, timestamp: number, body: string, signal: AbortSignal): Promise<void> {
    // The signature covers the exact bytes, so the serialized body is sent as-is.
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signWebhook(id, timestamp, body, this.secrets),
    };
    await http.request({ method: 'POST', path: '', rawBody: body, headers, signal });
  }
}

export const webhookSinkType: SinkType<WebhookOptions> = {
  type: 'webhook',
  options: webhookOptionsSchema,
  create: (name, options, deps) => new WebhookSink(name, options, deps),
  needsRaw: (options) => options.includeRaw,
  limit: (options) => options.rateLimit,
  env: webhookEnv,
  check: (options, env) => ((options.secrets ?? splitList(envOf(webhookEnv, env).CRM_WEBHOOK_SECRET)).length > 0 ? [] : [NO_SECRET]),
  fromEnv(env) {
    const urls = splitList(envOf(webhookEnv, env).CRM_WEBHOOK_URL);
    if (urls.length === 0) return null;
    // Secrets stay in the environment (read at create).
    return { sinks: { webhook: { type: 'webhook', urls } }, routes: [{ name: 'webhook (env)', when: {}, to: ['webhook'] }] };
  },
};
