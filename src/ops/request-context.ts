// Gives every HTTP request an id (the caller's `X-Request-Id` when it is sane, else a new one),
// puts it on the context (`c.get('requestId')`: handlers log with `requestLog(log, id)`), answers
// with it, and logs one access line (at debug for probes, scrapes and accepted webhooks; at info
// otherwise), numbers in its path masked.
import { randomUUID } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import type { Logger } from 'pino';
import { maskDigitRuns } from '../redact.js';

export interface RequestContextOptions {
  log: Logger;
  /** Header carrying the id in and out. Default `x-request-id`. */
  header?: string;
  /** Paths logged at debug rather than info (probes and scrapes). Default /healthz, /readyz, /metrics. */
  quietPaths?: string[];
  /**
   * Path prefixes whose successful requests (status < 400) are logged at debug; their failures stay
   * at info. Default `/webhooks/`: one info line per accepted webhook cost ~7 % of the ingress' CPU.
   */
  quietWhenOk?: string[];
}

const SANE_ID = /^[A-Za-z0-9._:-]{8,128}$/;

export function requestContext(options: RequestContextOptions): MiddlewareHandler {
  const header = options.header ?? 'x-request-id';
  const quiet = new Set(options.quietPaths ?? ['/healthz', '/readyz', '/metrics']);
  const quietOk = options.quietWhenOk ?? ['/webhooks/'];
  return async function requestContextMiddleware(c, next) {
    const incoming = c.req.header(header);
    const requestId = incoming && SANE_ID.test(incoming) ? incoming : randomUUID();
    c.set('requestId', requestId);
    const started = performance.now();
    // Set before the handler answers, so c.json() builds the response with it. Setting a header on a
    // finished response makes Hono copy it, which turns @hono/node-server's cached answer into a web
    // Response with a stream (~30 µs a request); only raw responses (the ops app) still need that.
    c.header(header, requestId);
    try {
      await next();
    } finally {
      if (c.res.headers.get(header) !== requestId) c.header(header, requestId);
      const path = c.req.path;
      const status = c.res.status;
      const level = quiet.has(path) || (status < 400 && quietOk.some((p) => path.startsWith(p))) ? 'debug' : 'info';
      if (options.log.isLevelEnabled(level))
        options.log[level](
          // A path may name a number (`GET /api/calls/%2B4915112345678`, a lookup by number): its
          // digit runs are masked as in a remote's text (src/redact.ts); ids and hashes stay.
          {
            requestId,
            method: c.req.method,
            path: maskDigitRuns(path),
            status,
            ms: Math.round(performance.now() - started),
          },
          'request',
        );
    }
  };
}
