// The Hono ingress: the AI-agent call-data webhook, health and readiness. Thin on purpose: check
// the sender, parse and normalize, store in Redis, answer.
import type { IncomingMessage } from 'node:http';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import { every } from 'hono/combine';
import type { Logger } from 'pino';
import { requestLog } from '../log.js';
import { isVcon, normalizeVcon } from '../model/vcon.js';
import { InvalidPayloadError, normalizeWebhook } from '../model/webhook.js';
import { QueueUnavailableError, type CallAcceptor } from './accept.js';
import { ApiError, errorBody, problemsBody, WHOLE_REQUEST, type Problem } from './errors.js';
import { ipAllow } from './middleware/ip-allow.js';
import { jsonBody } from './middleware/json-body.js';
import { jsonLimits } from './middleware/json-limits.js';
import { sharedSecret } from './middleware/shared-secret.js';
import type { Config } from '../config/index.js';

export interface IngressEvents {
  received?(): void;
  accepted?(duplicate: boolean): void;
  rejected?(status: number, reason: string): void;
}

export interface IngressDeps {
  webhook: Config['webhook'];
  acceptor: CallAcceptor;
  /** Resolves true when ready; false when Redis does not answer; a text: not ready, for that reason. */
  ready: () => Promise<boolean | string>;
  log: Logger;
  now?: () => Date;
  events?: IngressEvents;
  /** Overrides how the peer address is read (tests without a socket). */
  remoteAddress?: Parameters<typeof ipAllow>[0]['remoteAddress'];
  /** Extra middleware run first on every request (e.g. request ids, metrics, shutdown gate). */
  before?: MiddlewareHandler[];
}

declare module 'hono' {
  interface ContextVariableMap {
    /** The request's id (src/ops/request-context.ts), when that middleware runs. */
    requestId: string;
  }
}

const AGENT_ID = /^[A-Za-z0-9._:@-]{1,200}$/;
const RETRY_AFTER_SECONDS = '5';
/** Problems listed in one error body; more are summed up in a last entry. */
const MAX_LISTED_PROBLEMS = 20;

function listed(problems: Problem[]): Problem[] {
  if (problems.length <= MAX_LISTED_PROBLEMS) return problems;
  const rest = problems.length - MAX_LISTED_PROBLEMS + 1;
  return [...problems.slice(0, MAX_LISTED_PROBLEMS - 1), { detail: `${rest} more problems not listed`, pointer: WHOLE_REQUEST }];
}

/**
 * A refusal's detail fit for the logs: quoted text (values from the payload, JSON.parse's snippet
 * of the body) becomes "…", so no payload text or phone number reaches a log line.
 */
export function logSafeDetail(detail: string): string {
  return detail
    .replace(/"[^]*"/g, '"…"')
    .replace(/'[^']*'/g, "'…'")
    .slice(0, 300);
}

/** The request's connection died before its body was complete (only over a real socket). */
function bodyCutOff(c: Context): boolean {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return incoming !== undefined && !incoming.complete && (incoming.destroyed || incoming.errored !== null);
}

export function createIngressApp(deps: IngressDeps): Hono {
  const app = new Hono();
  const now = deps.now ?? (() => new Date());
  for (const mw of deps.before ?? []) app.use('*', mw);

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const ok = await deps.ready().catch(() => false);
    if (ok !== true) return c.json(errorBody(503, ok || 'Redis is not reachable'), 503, { 'retry-after': RETRY_AFTER_SECONDS });
    return c.json({ status: 'ready' });
  });

  const guards: MiddlewareHandler[] = [
    async function countReceived(_c, next) {
      deps.events?.received?.();
      await next();
    },
    ipAllow({
      allow: deps.webhook.allowedIps,
      trustedProxies: deps.webhook.trustedProxies,
      trustProxyHops: deps.webhook.trustProxyHops,
      remoteAddress: deps.remoteAddress,
    }),
  ];
  if (deps.webhook.authHeader) guards.push(sharedSecret({ header: deps.webhook.authHeader, tokens: deps.webhook.authTokens }));
  guards.push(jsonBody({ maxBytes: deps.webhook.bodyLimitBytes }), jsonLimits(deps.webhook.jsonLimits));

  const receive = async (c: Parameters<MiddlewareHandler>[0]) => {
    const agentId = c.req.param('agentId') ?? null;
    if (agentId !== null && !AGENT_ID.test(agentId)) throw new ApiError(400, 'agent id in the path is not valid', { pointer: WHOLE_REQUEST });
    let call;
    try {
      const body = c.get('jsonBody');
      call = isVcon(body) ? normalizeVcon(body, { agentId, receivedAt: now() }) : normalizeWebhook(body, { agentId, receivedAt: now() });
    } catch (err) {
      if (err instanceof InvalidPayloadError) throw new ApiError(400, err.detail, { pointer: err.pointer, problems: err.problems });
      throw err;
    }
    // The payload is stored as received (normalizeWebhook keeps the parsed body as `raw`).
    const result = await deps.acceptor.accept(call, { rawJson: c.get('jsonText') });
    deps.events?.accepted?.(result.duplicate);
    if (result.duplicate) requestLog(deps.log, c.get('requestId')).info({ jobId: result.id, agentId }, 'duplicate webhook acknowledged');
    else if (result.update) requestLog(deps.log, c.get('requestId')).info({ jobId: result.id, agentId }, 'changed call acknowledged as an update');
    // `update` only on an update, `spooled` only when spooled: the plain answer stays `{id, duplicate}`.
    const body: { id: string; duplicate: boolean; update?: true; spooled?: true } = { id: result.id, duplicate: result.duplicate };
    if (result.update) body.update = true;
    if (result.spooled) body.spooled = true;
    return c.json(body, 202);
  };

  const guarded = every(...guards);
  app.post('/webhooks/ai-agent', guarded, receive);
  app.post('/webhooks/ai-agent/:agentId', guarded, receive);
  app.all('/webhooks/ai-agent', () => {
    throw new ApiError(405, 'use POST', { headers: { allow: 'POST' } });
  });
  app.all('/webhooks/ai-agent/:agentId', () => {
    throw new ApiError(405, 'use POST', { headers: { allow: 'POST' } });
  });

  app.notFound((c) => c.json(errorBody(404, `no route for ${c.req.method} ${c.req.path}`), 404));

  app.onError((err, c) => {
    if (err instanceof ApiError) {
      deps.events?.rejected?.(err.status, String(err.status));
      const problems = listed(err.problems);
      // One line per refusal, saying why: the sender rarely tells, and the platform's retries are unknown.
      requestLog(deps.log, c.get('requestId')).warn(
        {
          status: err.status,
          method: c.req.method,
          path: c.req.path,
          detail: logSafeDetail(err.message),
          pointer: err.pointer,
          errors: problems.map((p) => ({ pointer: p.pointer, detail: logSafeDetail(p.detail) })),
          ...err.logFields,
        },
        'webhook refused',
      );
      return c.json(problemsBody(err.status, problems), err.status, err.headers);
    }
    if (err instanceof QueueUnavailableError) {
      deps.events?.rejected?.(503, 'queue-unavailable');
      requestLog(deps.log, c.get('requestId')).error({ err: { message: err.message } }, 'webhook not acknowledged: queue unavailable');
      return c.json(errorBody(503, 'the event could not be stored; retry later'), 503, { 'retry-after': RETRY_AFTER_SECONDS });
    }
    if (bodyCutOff(c)) {
      // Node answered 408 and closed the socket (WEBHOOK_REQUEST_TIMEOUT_MS), or the sender hung up.
      deps.events?.rejected?.(408, 'incomplete');
      requestLog(deps.log, c.get('requestId')).warn(
        { status: 408, method: c.req.method, path: c.req.path, reason: err.message },
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
