// Refuses cross-site requests that would change something (cross-site request forgery). A browser
// sends an operator's credentials (a cached Basic password, a cookie) with requests any other page
// makes; what it cannot hide is where they come from (`Sec-Fetch-Site`, `Origin`), and what it
// cannot send without asking the server first (a CORS preflight, which the ops app never grants)
// is a JSON body. So a state-changing request (any method but GET, HEAD and OPTIONS) passes only
// when neither header names another origin and its body, if any, is JSON. Requests without either
// header (curl, scripts: no browser carries credentials for them) pass on to the credential check.
// Hono's own `csrf()` is not enough here: it lets a request pass on either header alone, checks
// only form content types, and answers in plain text rather than the spec's error body.
import type { Context, MiddlewareHandler } from 'hono';
import { errorBody } from '../ingress/errors.js';

export interface SameOriginOptions {
  /**
   * Origins (`https://ops.example.com`) the operator's browser uses for these endpoints, as the
   * browser writes them. Default: the request's own origin (see `requestOrigin`).
   */
  origins?: string[];
  /** Require `Content-Type: application/json` on every request body. Default true. */
  requireJson?: boolean;
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
const JSON_TYPE = /^application\/json\s*(;|$)/i;

function firstValue(header: string | undefined): string | undefined {
  const first = header?.split(',')[0]?.trim();
  return first ? first : undefined;
}

/**
 * The origin the browser addressed: scheme and host of a proxy in front (`X-Forwarded-Proto`,
 * `X-Forwarded-Host`) when it says so, else those of the connection and the `Host` header. Trusting
 * the forwarded headers is safe here: a page on another site cannot add them to a request without a
 * preflight, so they come from a proxy or from a client that is not a browser. Null when unusable.
 */
export function requestOrigin(c: Context): string | null {
  const url = new URL(c.req.url);
  const proto = firstValue(c.req.header('x-forwarded-proto'))?.toLowerCase() ?? url.protocol.slice(0, -1);
  const host = firstValue(c.req.header('x-forwarded-host')) ?? c.req.header('host') ?? url.host;
  if (proto !== 'http' && proto !== 'https') return null;
  try {
    return new URL(`${proto}://${host}`).origin;
  } catch {
    return null;
  }
}

function hasBody(c: Context): boolean {
  const length = c.req.header('content-length');
  if (length !== undefined) return Number(length) !== 0;
  return c.req.header('transfer-encoding') !== undefined;
}

export function sameOriginOnly(options: SameOriginOptions = {}): MiddlewareHandler {
  const configured = options.origins && options.origins.length > 0 ? options.origins : null;
  const requireJson = options.requireJson ?? true;
  return async function sameOriginOnlyMiddleware(c, next) {
    if (SAFE_METHODS.has(c.req.method)) return next();

    // `none` is a request the user started (typed URL, bookmark): never a form or a button of ours.
    const site = c.req.header('sec-fetch-site');
    if (site !== undefined && site !== 'same-origin') {
      return c.json(
        errorBody(
          403,
          `cross-site request refused: Sec-Fetch-Site is "${site.slice(0, 20)}"; use the dashboard's own page`,
        ),
        403,
      );
    }
    const origin = c.req.header('origin');
    if (origin !== undefined) {
      const allowed = configured ?? [requestOrigin(c)].filter((o): o is string => o !== null);
      if (!allowed.includes(origin)) {
        const expected = allowed.length > 0 ? allowed.join(', ') : 'unknown';
        return c.json(
          errorBody(
            403,
            `cross-origin request refused: Origin "${origin.slice(0, 200)}" is not ${expected} (behind a proxy that changes the Host, set ADMIN_ORIGIN)`,
          ),
          403,
        );
      }
    }

    if (requireJson) {
      const type = c.req.header('content-type');
      if (type !== undefined ? !JSON_TYPE.test(type) : hasBody(c)) {
        return c.json(
          errorBody(415, 'a request body must be Content-Type: application/json', '/headers/content-type'),
          415,
        );
      }
    }
    await next();
  };
}
