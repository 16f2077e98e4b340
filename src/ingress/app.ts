// The Hono ingress: the sources' webhooks (src/sources: the AI-agent call data, the Push API),
// health and readiness. Thin on purpose: check the sender, let the source parse and normalize,
// store in Redis, answer as the source says.
import type { CallTimeline } from '../../queues/timeline.js';
import type { IncomingMessage } from 'node:http';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import { requestLog } from '../log.js';
import { callHash } from '../model/call.js';
import { maskDigitRuns } from '../redact.js';
import { traceAccepted, tracingOn } from '../telemetry.js';
import { aiAgentSource } from '../sources/ai-agent.js';
import {
  SourceRefusal,
  SourceUnavailable,
  type Source,
  type SourceAccepted,
  type SourceRequest,
} from '../sources/types.js';
import { QueueUnavailableError, type CallAcceptor } from './accept.js';
import { ApiError, errorBody, problemsBody, WHOLE_REQUEST, type Problem } from './errors.js';
import { BODY_BUDGET_BYTES, bodyBudget } from './middleware/body-budget.js';
import { ipAllow } from './middleware/ip-allow.js';
import { jsonBody } from './middleware/json-body.js';
import { logSafeDetail, logSafePointer, refusalDetail } from './log-safe.js';
import { jsonLimits } from './middleware/json-limits.js';
import { readBody } from './middleware/read-body.js';
import { sharedSecret } from './middleware/shared-secret.js';
import type { Config } from '../config/index.js';
import { DEFAULT_BODY_WAIT_MS } from '../config/sections.js';

export interface IngressEvents {
  received?(): void;
  accepted?(duplicate: boolean): void;
  rejected?(status: number, reason: string): void;
  /** An accepted webhook had a value of this optional field callsync could not read (once per webhook and field). */
  unreadField?(field: string): void;
  /** Called once, as the app is built, with a reader of the body budget's state (bytes held, requests in line). */
  bodyBudget?(read: () => { heldBytes: number; waiting: number }): void;
}

export interface IngressDeps {
  webhook: Config['webhook'];
  acceptor: CallAcceptor;
  /** Resolves true when ready; false when Redis does not answer; a text: not ready, for that reason. */
  ready: () => Promise<boolean | string>;
  log: Logger;
  now?: () => Date;
  events?: IngressEvents;
  /** Details /readyz adds when ready (the paused queues of a process running workers too). */
  readyDetail?: () => Promise<Record<string, unknown>>;
  /** Overrides how the peer address is read (tests without a socket). */
  remoteAddress?: Parameters<typeof ipAllow>[0]['remoteAddress'];
  /** Extra middleware run first on every request (e.g. request ids, metrics, shutdown gate). */
  before?: MiddlewareHandler[];
  /** The sources mounted (src/sources/index.ts); default: the AI-agent webhook alone. */
  sources?: Source[];
  /** Bytes of request bodies held at once (./middleware/body-budget.ts). Default BODY_BUDGET_BYTES (8 MiB). */
  bodyBudgetBytes?: number;
  /** Where refusals of calls with a readable call id are kept (the call timelines'); absent: nowhere. */
  refusals?: Pick<CallTimeline, 'refused'>;
}

declare module 'hono' {
  interface ContextVariableMap {
    /** The request's id (src/ops/request-context.ts), when that middleware runs. */
    requestId: string;
  }
}

const RETRY_AFTER_SECONDS = '5';
/** Problems listed in one error body; more are summed up in a last entry. */
const MAX_LISTED_PROBLEMS = 20;

function listed(problems: Problem[]): Problem[] {
  if (problems.length <= MAX_LISTED_PROBLEMS) return problems;
  const rest = problems.length - MAX_LISTED_PROBLEMS + 1;
  return [
    ...problems.slice(0, MAX_LISTED_PROBLEMS - 1),
    { detail: `${rest} more problems not listed`, pointer: WHOLE_REQUEST },
  ];
}

/**
 * An id for a log line: an agent id is part of a call's key and may be as long as the body allows;
 * past 200 characters it is cut, with its length (every duplicate wrote megabytes to the log).
 */
function shortId(id: string | null): string | null {
  return id === null || id.length <= 200 ? id : `${id.slice(0, 200)}… (${id.length} characters)`;
}

/** Unread fields already logged by this process: each is logged once (the metric counts every one). */
const unreadLogged = new Set<string>();

/** The body's bytes, refused with 413 beyond `maxBytes` (read as it arrives, never buffered past it). */
async function rawBody(c: Context, maxBytes: number): Promise<Buffer> {
  let bytes;
  try {
    bytes = await readBody(c, maxBytes, `the body is larger than ${maxBytes} bytes`);
  } catch (err) {
    // Read before the source checks who sent it (a Push API signature): not kept as a refusal.
    if (err instanceof ApiError) err.gate = true;
    throw err;
  }
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The request's connection died before its body was complete (only over a real socket). */
function bodyCutOff(c: Context): boolean {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return incoming !== undefined && !incoming.complete && (incoming.destroyed || incoming.errored !== null);
}

/**
 * The URL the request came in on. Without a Host header (HTTP/1.0 allows that) the Node adapter
 * names the listening host without a port: the socket's local address and port say where the
 * request came in (the Push API's callback URL is built from this when PUSH_API_PUBLIC_URL is unset).
 */
function requestUrl(c: Context): string {
  if (c.req.header('host')) return c.req.url;
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  const socket = incoming?.socket;
  // An absolute request target (`POST http://host:port/… HTTP/1.0`) names its authority itself.
  if (!incoming?.url?.startsWith('/') || !socket?.localAddress || !socket.localPort) return c.req.url;
  const url = new URL(c.req.url);
  url.hostname = socket.localAddress.includes(':') ? `[${socket.localAddress}]` : socket.localAddress;
  url.port = String(socket.localPort);
  return url.href;
}

type SourceResult = Awaited<ReturnType<Source['receive']>>;

/** What a call's slot in a source's list holds once the call was handed to the acceptor. */
const RELEASED = null as unknown as SourceResult['calls'][number];

/**
 * `handler` behind `guards`, as one route handler: each guard (a middleware that throws or calls
 * `next`, never answers itself) runs in order, an error propagates to the app's `onError` through
 * the guards before it (their `finally` blocks run), as with `hono/combine`'s `every`. A 4xx on the
 * way, but for one of the gate's, is a refusal of `source` to keep (its call id named where read).
 */
function guarded(guards: MiddlewareHandler[], handler: (c: Context) => Promise<Response>, source: string) {
  const refused = (err: unknown): never => {
    if (err instanceof ApiError && !err.gate && err.refusedCall === undefined && err.status >= 400 && err.status < 500)
      err.refusedCall = { callId: null, source };
    throw err;
  };
  return (c: Context): Promise<Response> => {
    let response: Response | undefined;
    const run = (i: number): Promise<void> =>
      i === guards.length
        ? handler(c).then((r) => {
            response = r;
          })
        : (guards[i]!(c, () => run(i + 1)) as Promise<void>);
    return run(0).then(() => {
      if (response === undefined) throw new Error('a guard neither answered nor called next');
      return response;
    }, refused);
  };
}

export function createIngressApp(deps: IngressDeps): Hono {
  // Not strict: `/webhooks/ai-agent/` is `/webhooks/ai-agent`, as a sender pasting the URL means it.
  const app = new Hono({ strict: false });
  const now = deps.now ?? (() => new Date());
  for (const mw of deps.before ?? []) app.use('*', mw);

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const ok = await deps.ready().catch(() => false);
    if (ok !== true)
      return c.json(errorBody(503, ok || 'Redis is not reachable'), 503, { 'retry-after': RETRY_AFTER_SECONDS });
    return c.json({ status: 'ready', ...(await deps.readyDetail?.().catch(() => ({}))) });
  });

  const countReceived: MiddlewareHandler = async (_c, next) => {
    deps.events?.received?.();
    await next();
  };
  const allowList = ipAllow({
    allow: deps.webhook.allowedIps,
    trustedProxies: deps.webhook.trustedProxies,
    trustProxyHops: deps.webhook.trustProxyHops,
    remoteAddress: deps.remoteAddress,
  });
  // Bodies held at once, by bytes (./middleware/body-budget.ts): beyond, a wait in line, then 503 before reading.
  const budget = bodyBudget({
    maxBytes: deps.bodyBudgetBytes ?? BODY_BUDGET_BYTES,
    bodyLimitBytes: deps.webhook.bodyLimitBytes,
    retryAfterSeconds: RETRY_AFTER_SECONDS,
    maxWaitMs: deps.webhook.bodyWaitMs ?? DEFAULT_BODY_WAIT_MS,
    observe: deps.events?.bodyBudget,
  });
  // JSON sources: the shared secret (when configured), then charset, size and shape limits.
  const jsonGuards: MiddlewareHandler[] = [];
  if (deps.webhook.authHeader)
    jsonGuards.push(sharedSecret({ header: deps.webhook.authHeader, tokens: deps.webhook.authTokens }));
  jsonGuards.push(jsonBody({ maxBytes: deps.webhook.bodyLimitBytes }), jsonLimits(deps.webhook.jsonLimits));

  /** Hands call `i` to the acceptor and lets go of it (the list's slot emptied); answers what the ingress needs after. */
  const startAccept = (calls: SourceResult['calls'], i: number, requestId: string | undefined) => {
    const { call, rawJson } = calls[i]!;
    calls[i] = RELEASED;
    return {
      pending: deps.acceptor.accept(call, { rawJson, requestId }),
      key: call.key,
      callSource: call.source,
      agentId: call.agentId,
    };
  };

  const receive = (source: Source) => async (c: Context) => {
    const request: SourceRequest = {
      params: c.req.param() as Record<string, string>,
      headers: c.req.raw.headers,
      url: requestUrl(c),
      receivedAt: now(),
    };
    if (source.body === 'json') {
      request.json = { value: c.get('jsonBody'), text: c.get('jsonText') };
      // The source holds them from here on: nothing on the context keeps the body alive while the
      // request waits for Redis (fewer live bytes across scavenges: docs/performance.md, round 7).
      c.set('jsonBody', undefined);
      c.set('jsonText', '');
    } else request.raw = await rawBody(c, source.maxBodyBytes ?? deps.webhook.bodyLimitBytes);
    let result;
    try {
      result = await source.receive(request);
    } catch (err) {
      if (err instanceof SourceRefusal)
        throw new ApiError(err.status, err.detail, {
          pointer: err.pointer,
          problems: err.problems,
          logFields: { source: source.name, ...(err.callId ? { callId: err.callId } : {}) },
          // A Push API signature that does not match: anyone could send it (not kept).
          ...(err.status === 401 ? { gate: true as const } : {}),
          ...(err.callId ? { refusedCall: { callId: err.callId, source: source.name } } : {}),
        });
      if (err instanceof SourceUnavailable) throw new QueueUnavailableError(err.cause);
      throw err;
    }
    request.json = undefined;
    request.raw = undefined;
    const { calls } = result;
    const accepted: SourceAccepted[] = [];
    for (let i = 0; i < calls.length; i++) {
      // Started by a function of its own, so this frame keeps only small values of the call (not the
      // call, its parsed payload or its text) while the request waits for Redis.
      const { pending, key, callSource, agentId } = startAccept(calls, i, c.get('requestId'));
      const r = await pending;
      accepted.push(r);
      if (tracingOn())
        traceAccepted(
          callHash(key),
          {
            source: callSource,
            jobId: r.id,
            revision: r.duplicate ? 'duplicate' : r.update ? 'update' : 'new',
            spooled: r.spooled,
          },
          request.receivedAt.getTime(),
        );
      deps.events?.accepted?.(r.duplicate);
      const fields = { jobId: r.id, source: source.name, agentId: shortId(agentId) };
      if (r.duplicate) requestLog(deps.log, c.get('requestId')).info(fields, 'duplicate webhook acknowledged');
      else if (r.update)
        requestLog(deps.log, c.get('requestId')).info(fields, 'changed call acknowledged as an update');
    }
    for (const { field, pointer, detail } of result.unread ?? []) {
      deps.events?.unreadField?.(field);
      if (unreadLogged.has(field)) continue;
      unreadLogged.add(field);
      // The field, where this webhook had it, and the JSON type that came — never the value.
      requestLog(deps.log, c.get('requestId')).warn(
        { source: source.name, field, pointer: logSafePointer(pointer), detail },
        'webhook field not read: accepted without it (kept in the archived original; counted in callsync_webhook_fields_unread_total, logged once per field)',
      );
    }
    const reply = result.reply(accepted);
    return c.body(reply.body, reply.status, {
      'content-type': reply.contentType === 'application/json' ? 'application/json' : 'application/xml; charset=utf-8',
    });
  };

  for (const source of deps.sources ?? [aiAgentSource()]) {
    // One route handler running the guards in order, then the source: no per-request composition
    // (hono/combine's `every` built closures and a compose per request).
    const handler = guarded(
      [countReceived, allowList, budget, ...(source.body === 'json' ? jsonGuards : [])],
      receive(source),
      source.name,
    );
    for (const path of source.paths) {
      app.post(path, handler);
      app.all(path, () => {
        throw new ApiError(405, 'use POST', { headers: { allow: 'POST' } });
      });
    }
  }

  app.notFound((c) => c.json(errorBody(404, `no route for ${c.req.method} ${c.req.path}`), 404));

  app.onError((err, c) => {
    if (err instanceof ApiError) {
      deps.events?.rejected?.(err.status, err.reason ?? String(err.status));
      const problems = listed(err.problems);
      // One line per refusal, saying why: the sender rarely tells, and the platform's retries are unknown.
      requestLog(deps.log, c.get('requestId')).warn(
        {
          status: err.status,
          method: c.req.method,
          path: maskDigitRuns(c.req.path),
          detail: logSafeDetail(err.message),
          pointer: logSafePointer(err.pointer),
          errors: problems.map((p) => ({ pointer: logSafePointer(p.pointer), detail: logSafeDetail(p.detail) })),
          ...err.logFields,
        },
        'webhook refused',
      );
      // Kept (under its call id when read): `callsync call <callId>` says why a call the platform sent
      // is not there, `callsync refused` lists a time range's refusals.
      if (err.refusedCall && deps.refusals)
        deps.refusals.refused({
          at: now().getTime(),
          callId: err.refusedCall.callId,
          source: err.refusedCall.source,
          status: err.status,
          pointer: logSafePointer(err.pointer) ?? '/',
          // As logged, and no digit run a number could hide in (a detail may quote the sender's values).
          detail: refusalDetail(err.message),
          ...(c.get('requestId') ? { requestId: c.get('requestId') } : {}),
        });
      return c.json(problemsBody(err.status, problems), err.status, err.headers);
    }
    if (err instanceof QueueUnavailableError) {
      deps.events?.rejected?.(503, 'queue-unavailable');
      requestLog(deps.log, c.get('requestId')).error(
        { err: { message: err.message } },
        'webhook not acknowledged: queue unavailable',
      );
      return c.json(errorBody(503, 'the event could not be stored; retry later'), 503, {
        'retry-after': RETRY_AFTER_SECONDS,
      });
    }
    if (bodyCutOff(c)) {
      // Node answered 408 and closed the socket (WEBHOOK_REQUEST_TIMEOUT_MS), or the sender hung up.
      deps.events?.rejected?.(408, 'incomplete');
      requestLog(deps.log, c.get('requestId')).warn(
        { status: 408, method: c.req.method, path: maskDigitRuns(c.req.path), reason: err.message },
        'webhook not received: the connection closed before the whole request arrived (slower than WEBHOOK_REQUEST_TIMEOUT_MS, or the sender went away)',
      );
      return c.json(errorBody(408, 'the request did not arrive in time'), 408);
    }
    deps.events?.rejected?.(500, 'internal');
    requestLog(deps.log, c.get('requestId')).error({ err }, 'unexpected error in ingress');
    return c.json(errorBody(500, 'internal error'), 500);
  });

  return app;
}
