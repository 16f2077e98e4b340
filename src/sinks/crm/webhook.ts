// Generic signed webhook: POSTs the canonical call as JSON to one or more endpoints, signed per the
// Standard Webhooks spec (https://www.standardwebhooks.com; github.com/standard-webhooks/standard-webhooks
// spec/standard-webhooks.md):
//   webhook-id         msg_<hash of the call's content>: the same on every retry and redelivery of
//                      the same content (receivers dedupe on it), new when the call changed
//   webhook-timestamp  Unix seconds of this attempt
//   webhook-signature  `v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>` per secret of the
//                      endpoint, space-separated: list the new secret beside the old one while rotating
// Each endpoint has a queue of its own (`sink-<sink>.<endpoint>`, see `endpoints` below): one job,
// one retry schedule, one dead letter and one pause per endpoint, so a receiver that refuses a call
// or its credentials never holds up the others. Answers, as the spec suggests:
//   2xx                 delivered
//   410 Gone            the endpoint is disabled (its queue paused and marked) until an operator re-enables it
//   3xx                 the same, naming where it points: redirects are not followed (update the URL)
//   429 / 503 + Retry-After   the endpoint's queue waits that long
//   401 / 403           the endpoint's queue is paused (check the receiver's credentials in `headers`)
//   other 4xx           dead letter with the receiver's message
//   5xx, timeout, reset retried on the sink's `retry` schedule (default: the spec's, over three days)
// An endpoint that accepted a message is remembered, so a redelivery of the same content sends
// nothing again. An update of a call (sent again with more in it) is a new message with a new
// webhook-id; per endpoint, an older revision is never sent after a newer one, and the revisions of
// one call are sent one at a time (src/sinks/revisions.ts).
import { createHash, createHmac } from 'node:crypto';
import { z } from 'zod';
import { EndpointDisabledError } from '../../errors.js';
import { redactRemoteText } from '../../redact.js';
import type { CanonicalCall } from '../../model/call.js';
import { retryOptionsSchema, retryPolicy, STANDARD_WEBHOOKS_SCHEDULE } from '../retry.js';
import { RevisionGuard, type Held } from '../revisions.js';
import type { Sink, SinkContext, SinkDeps, SinkResult, SinkSettings, SinkType } from '../types.js';
import { envString, type EnvShape } from '../../env-values.js';
import { queueLimitSchema, timeoutSchema } from './common.js';
import { redirectTarget } from '../../http-request.js';
import { CrmHttp, stringField } from './http.js';

const secretSchema = z
  .string()
  .trim()
  .refine((s) => secretKey(s) !== null, {
    message: 'expected a `whsec_` secret: whsec_ followed by base64 (at least 24 bytes)',
  });

/**
 * Header names a config may not set: the signature headers and what the HTTP client owns — the
 * body's type and framing, the host and the connection's own (hop-by-hop) headers, which `fetch`
 * refused at delivery and node:http would send as given.
 */
const reservedHeaders = new Set([
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
  'content-type',
  'content-length',
  'host',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'expect',
]);

/**
 * A header value as HTTP carries it: tab, visible ASCII and bytes from 0x80 (RFC 9110 §5.5). A line
 * break or another control character — a secret pasted with its newline — is refused with the
 * configuration, not by the HTTP client at every delivery. The message never repeats the value.
 */
const headerValueSchema = z
  .string()
  .regex(/^[\t\x20-\x7e\x80-\xff]*$/, 'a header value may not hold line breaks or other control characters');

const headersSchema = z
  .record(z.string().regex(/^[A-Za-z0-9-]+$/), headerValueSchema)
  .refine((h) => Object.keys(h).every((k) => !reservedHeaders.has(k.toLowerCase())), {
    message: 'webhook-*, content, host and connection headers are set by callsync',
  });

const urlSchema = z.url({ protocol: /^https?$/ });

/** Names the endpoint's queue, so like sink names: letters, digits, - and _ (no `.`, which separates them). */
const endpointNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i, "endpoint names are letters, digits, - and _ (they name the endpoint's queue)");

const endpointSchema = z.strictObject({
  /** Its queue is `sink-<sink>.<name>`. Default: from the URL's host. Keep the name when the URL changes. */
  name: endpointNameSchema.optional(),
  url: urlSchema,
  /** This endpoint's signing secrets (`whsec_...`; several while rotating). Default: the sink's `secrets`. */
  secrets: z.array(secretSchema).min(1).optional(),
  /** Extra headers of this endpoint, over the sink's `headers`. */
  headers: headersSchema.optional(),
});

const webhookOptionsSchema = z
  .strictObject({
    /** Endpoints by URL alone (names from their hosts, the sink's secrets and headers). */
    urls: z.array(urlSchema).min(1).optional(),
    /** Endpoints with a name, secrets or headers of their own. */
    endpoints: z.array(endpointSchema).min(1).optional(),
    /** Extra headers on every request (e.g. an API key of the receiver). */
    headers: headersSchema.default({}),
    /** Signing secrets (`whsec_...`) of every endpoint without its own; several while rotating. Default CRM_WEBHOOK_SECRET (comma/space separated). */
    secrets: z.array(secretSchema).optional(),
    /** Wrap the call as `{ type, timestamp, data }` (Standard Webhooks' payload shape) or send it bare. */
    envelope: z.boolean().default(true),
    /** Event type in the envelope. */
    eventType: z.string().min(1).default('call.completed'),
    /** Include `raw` (the sender's original payload, transcript included). Default false. */
    includeRaw: z.boolean().default(false),
    /** Steady rate limit of each endpoint's queue. */
    rateLimit: queueLimitSchema.optional(),
    timeoutMs: timeoutSchema,
    /**
     * Retries of each endpoint's jobs (`schedule` of delays, `attempts`). Default: the Standard
     * Webhooks schedule, 5s, 5m, 30m, 2h, 5h, 10h, 14h, 20h, 24h (ten attempts over about three days).
     */
    retry: retryOptionsSchema.optional(),
  })
  .superRefine((o, ctx) => {
    if (!o.urls && !o.endpoints)
      ctx.addIssue({ code: 'custom', path: ['urls'], message: 'give the receivers as `urls` or `endpoints`' });
    const seen = new Set<string>();
    for (const [i, e] of (o.endpoints ?? []).entries()) {
      if (e.name === undefined) continue;
      const key = e.name.toLowerCase();
      if (seen.has(key))
        ctx.addIssue({
          code: 'custom',
          path: ['endpoints', i, 'name'],
          message: `endpoint name "${e.name}" is used twice`,
        });
      seen.add(key);
    }
  });

export type WebhookOptions = z.infer<typeof webhookOptionsSchema>;

/**
 * One endpoint as the sink uses it: its name, URL, own secrets (if any) and headers (the sink's merged in).
 * @internal Part of a signature only tests use (exported with it).
 */
export interface WebhookEndpoint {
  name: string;
  url: string;
  secrets?: string[];
  headers: Record<string, string>;
}

/** `hooks.example.com:8443` -> `hooks-example-com-8443`. */
function hostName(url: string): string {
  const slug = new URL(url).host
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+/, '')
    .slice(0, 56)
    .replace(/-+$/, '');
  return slug === '' ? 'endpoint' : slug;
}

const lowerKeys = (h: Record<string, string>) =>
  Object.fromEntries(Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]));

/**
 * The endpoints of the options, `urls` first, then `endpoints`. An endpoint without a name is named
 * after its URL's host (`-2`, `-3` … when several share one): give names to keep an endpoint's queue
 * when its URL changes, or when several endpoints share a host and their order may change.
 * @internal Exported for its tests only (test/crm-webhook.redis.test.ts).
 */
export function webhookEndpoints(options: Pick<WebhookOptions, 'urls' | 'endpoints' | 'headers'>): WebhookEndpoint[] {
  const listed: z.infer<typeof endpointSchema>[] = [
    ...(options.urls ?? []).map((url) => ({ url })),
    ...(options.endpoints ?? []),
  ];
  const taken = new Set(listed.flatMap((e) => (e.name === undefined ? [] : [e.name.toLowerCase()])));
  return listed.map((e) => {
    let name = e.name;
    if (name === undefined) {
      const base = hostName(e.url);
      name = base;
      for (let n = 2; taken.has(name); n++) name = `${base}-${n}`;
      taken.add(name);
    }
    return {
      name,
      url: e.url,
      ...(e.secrets ? { secrets: e.secrets } : {}),
      headers: { ...lowerKeys(options.headers ?? {}), ...lowerKeys(e.headers ?? {}) },
    };
  });
}

/** The HMAC key of a `whsec_` secret, or null when it is not one. */
function secretKey(secret: string): Buffer | null {
  const m = /^whsec_([A-Za-z0-9+/]+={0,2})$/.exec(secret.trim());
  if (!m) return null;
  const key = Buffer.from(m[1] as string, 'base64');
  return key.length >= 24 ? key : null;
}

/** The `webhook-signature` header value for one message, one `v1,` signature per secret. */
function signWebhook(id: string, timestampSec: number, body: string, secrets: string[]): string {
  return secrets
    .map((s) => {
      const key = secretKey(s);
      if (key === null) throw new Error('invalid webhook secret');
      return `v1,${createHmac('sha256', key).update(`${id}.${timestampSec}.${body}`).digest('base64')}`;
    })
    .join(' ');
}

function splitList(value: string | undefined): string[] {
  return (value ?? '')
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** The environment variables the signed-webhook sink type reads. */
const webhookEnv = {
  /** URLs of the shortcut sink `webhook`, separated by commas or spaces. */
  CRM_WEBHOOK_URL: envString.refine(
    (v) => splitList(v).every((u) => /^https?:$/.test(URL.canParse(u) ? new URL(u).protocol : '')),
    {
      message: 'expected http(s) URLs separated by commas',
    },
  ),
  /** Signing secrets (`whsec_…`, separated by commas or spaces; two while rotating): the sinks' `secrets` default. */
  CRM_WEBHOOK_SECRET: envString.refine((v) => splitList(v).every((s) => secretKey(s) !== null), {
    message: 'expected whsec_ secrets (whsec_ followed by base64 of at least 24 bytes), separated by commas or spaces',
  }),
} satisfies EnvShape;

/** The webhook type's section of the configuration: its variables, parsed. */
type WebhookSettings = SinkSettings<typeof webhookEnv>;

const NO_SECRET = "no signing secret: set CRM_WEBHOOK_SECRET or the sink's secrets";

/** Answers that disable an endpoint (the spec: 410 = stop sending; 3xx = update the URL instead of following). */
const DISABLING = [301, 302, 303, 307, 308, 410];

interface Endpoint extends WebhookEndpoint {
  secrets: string[];
  http: CrmHttp;
  /** This endpoint's memory: what it accepted, the revision it has, the lock of a call's revisions. */
  revisions: RevisionGuard;
  state: SinkDeps['state'];
}

/** @internal Exported for its tests only (test/crm-webhook.redis.test.ts, test/revisions.redis.test.ts). */
export class WebhookSink implements Sink {
  readonly type = 'webhook';
  private readonly endpoints = new Map<string, Endpoint>();

  constructor(
    readonly name: string,
    private readonly options: WebhookOptions,
    private readonly deps: SinkDeps<WebhookSettings>,
  ) {
    const sinkSecrets = options.secrets ?? splitList(deps.settings.CRM_WEBHOOK_SECRET);
    for (const s of sinkSecrets) {
      if (secretKey(s) === null) throw new Error(`sink "${name}" (webhook): a signing secret is not a whsec_ secret`);
    }
    for (const e of webhookEndpoints(options)) {
      const secrets = e.secrets ?? sinkSecrets;
      if (secrets.length === 0) {
        throw new Error(
          `sink "${name}" (webhook): endpoint "${e.name}" has no signing secret; set CRM_WEBHOOK_SECRET, the sink's secrets or the endpoint's secrets`,
        );
      }
      const host = new URL(e.url).host;
      const state = deps.state.scoped(`endpoint:${e.name}`);
      this.endpoints.set(e.name, {
        ...e,
        secrets,
        state,
        revisions: new RevisionGuard(state, {
          what: `webhook endpoint "${e.name}"`,
          lockTtlMs: 30_000 + options.timeoutMs,
        }),
        http: new CrmHttp({
          crm: 'Webhook',
          sink: name,
          baseUrl: e.url,
          headers: { 'user-agent': 'callsync-webhook/1', ...e.headers },
          timeoutMs: options.timeoutMs,
          now: deps.now,
          authHint: `Check the receiver's credentials in the headers of endpoint "${e.name}" (${host}).`,
          errorDetail: (body, text) =>
            stringField(body, 'message') ?? stringField(body, 'error') ?? (text.length < 300 ? text : undefined),
          rateLimitDelayMs: () => 10_000,
        }),
      });
    }
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

  /**
   * Sends the call to `ctx.endpoint` (the endpoint whose queue the job is in). Without one (a direct
   * caller), to every endpoint, one after the other, stopping at the first failure.
   */
  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const message = this.payload(call);
    if (ctx.endpoint === undefined) {
      const results: SinkResult[] = [];
      for (const endpoint of this.endpoints.values())
        results.push(await this.sendTo(endpoint, call, message, ctx, false));
      if (results.every((r) => r.status === 'skipped')) return results[0]!;
      const reasons = results.flatMap((r) => (r.reason ? [r.reason] : []));
      return {
        status: 'done',
        refs: { webhookId: message.id },
        ...(reasons.length > 0 ? { reason: reasons.join('; ') } : {}),
      };
    }
    const endpoint = this.endpoints.get(ctx.endpoint);
    if (!endpoint)
      throw new EndpointDisabledError(
        `sink "${this.name}" (webhook) has no endpoint "${ctx.endpoint}" (any more): its queue is disabled; add the endpoint back, or remove its jobs`,
      );
    return this.sendTo(endpoint, call, message, ctx, true);
  }

  /** `final`: its result is the attempt's (the lock's release then carries the attempt's timeline entries). */
  private sendTo(
    endpoint: Endpoint,
    call: CanonicalCall,
    message: { id: string; body: string },
    ctx: SinkContext,
    final: boolean,
  ): Promise<SinkResult> {
    const { id, body } = message;
    const sentKey = `sent:${id}`;
    // Two round trips: the lock taken with the revision stamp and the "sent" marker read; the marker
    // and the stamp written as the lock is released.
    const send = async (held: Held): Promise<SinkResult> => {
      const refs = { webhookId: id };
      if (held.superseded) return endpoint.revisions.skipped();
      if (held.values[0] !== null)
        return { status: 'done', refs, reason: `endpoint "${endpoint.name}" already had this message` };
      const timestamp = Math.floor(this.deps.now().getTime() / 1000);
      await this.post(endpoint, id, timestamp, body, ctx.signal);
      held.set(sentKey, String(timestamp), 7 * 24 * 3600 * 1000);
      held.written();
      ctx.log.debug(
        {
          sink: this.name,
          endpoint: endpoint.name,
          callId: call.callId,
          host: new URL(endpoint.url).host,
          webhookId: id,
        },
        'webhook delivered',
      );
      return { status: 'done', refs };
    };
    return final
      ? endpoint.revisions.holdToEnd(call.key, ctx, [sentKey], send)
      : endpoint.revisions.hold(call.key, ctx, [sentKey], send);
  }

  private async post(
    endpoint: Endpoint,
    id: string,
    timestamp: number,
    body: string,
    signal: AbortSignal,
  ): Promise<void> {
    // The signature covers the exact bytes, so the serialized body is sent as-is.
    const headers = {
      'webhook-id': id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signWebhook(id, timestamp, body, endpoint.secrets),
    };
    const answer = await endpoint.http.request({
      method: 'POST',
      path: '',
      rawBody: body,
      headers,
      signal,
      accept: DISABLING,
      // The receiver's 2xx is the delivery; a body too large or cut off after it changes nothing.
      statusOnly: true,
    });
    if (answer.status < 300) return;
    const url = new URL(endpoint.url);
    const what = `Webhook POST ${url.host}${url.pathname} (endpoint "${endpoint.name}" of sink "${this.name}")`;
    if (answer.status === 410) {
      const detail = stringField(answer.body, 'message') ?? stringField(answer.body, 'error');
      throw new EndpointDisabledError(
        `${what} answered 410 Gone${detail ? `: ${redactRemoteText(detail, 200)}` : ''}: the receiver takes no more messages there. ` +
          'The endpoint is disabled until an operator re-enables it (resume its queue).',
        { status: 410 },
      );
    }
    throw new EndpointDisabledError(
      `${what} answered ${answer.status} redirect to ${redirectTarget(answer.headers.get('location'), url)} (redirects are not followed). ` +
        'The endpoint is disabled: update its URL, then re-enable it (resume its queue).',
      { status: answer.status },
    );
  }
}

export const webhookSinkType: SinkType<WebhookOptions, WebhookSettings> = {
  queueWide: true,
  type: 'webhook',
  options: webhookOptionsSchema as z.ZodType<WebhookOptions>,
  create: (name, options, deps) => new WebhookSink(name, options, deps),
  needsRaw: (options) => options.includeRaw,
  limit: (options) => options.rateLimit,
  env: webhookEnv,
  check: (options, env) => {
    const fallback = options.secrets ?? splitList(env.CRM_WEBHOOK_SECRET);
    return webhookEndpoints(options).every((e) => (e.secrets ?? fallback).length > 0) ? [] : [NO_SECRET];
  },
  endpoints: (options) => webhookEndpoints(options).map((e) => e.name),
  retry: (options, global) => retryPolicy(options.retry, STANDARD_WEBHOOKS_SCHEDULE, global),
  fromEnv(env) {
    const urls = splitList(env.CRM_WEBHOOK_URL);
    if (urls.length === 0) return null;
    // Secrets stay in the environment (read at create).
    return {
      sinks: { webhook: { type: 'webhook', urls } },
      routes: [{ name: 'webhook (env)', when: {}, to: ['webhook'] }],
    };
  },
};
