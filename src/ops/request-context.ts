// Gives every HTTP request an id (the caller's `X-Request-Id` when it is sane, else a new one),
// puts it on every line logged while the request runs, answers with it, and logs one access line.
import { randomUUID } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import { withLogContext } from '../log.js';

export interface RequestContextOptions {
  log: Logger;
  /** Header carrying the id in and out. Default `x-request-id`. */
  header?: string;
  /** Paths logged at debug rather than info (probes and scrapes). Default /healthz, /readyz, /metrics. */
  quietPaths?: string[];
}

const SANE_ID = /^[A-Za-z0-9._:-]{8,128}$/;

export function requestContext(options: RequestContextOptions): MiddlewareHandler {
  const header = options.header ?? 'x-request-id';
  const quiet = new Set(options.quietPaths ?? ['/healthz', '/readyz', '/metrics']);
  return async function requestContextMiddleware(c, next) {
    const incoming = c.req.header(header);
    const requestId = incoming && SANE_ID.test(incoming) ? incoming : randomUUID();
    c.set('requestId' as never, requestId as never);
    const started = performance.now();
    await withLogContext({ requestId }, async () => {
      try {
        await next();
      } finally {
        c.header(header, requestId);
        const line = { requestId, method: c.req.method, path: c.req.path, status: c.res.status, ms: Math.round(performance.now() - started) };
        if (quiet.has(c.req.path)) options.log.debug(line, 'request');
        else options.log.info(line, 'request');
      }
    });
  };
}
