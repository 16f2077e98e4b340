// Credentials for the operator's endpoints: the login page's session cookie (./session.ts), basic
// auth, or a bearer token, compared in constant time. Failures answer 401 in the spec's error shape;
// with a login page, a browser asking for a page is sent there instead.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { errorBody } from '../ingress/errors.js';
import { SESSION_COOKIE, type Sessions } from './session.js';

export interface OperatorAuthOptions {
  /** Basic auth user and password; both needed for basic auth. */
  username?: string;
  password?: string;
  /** Accepted as `Authorization: Bearer <token>`. */
  token?: string;
  /** Realm named in the 401's challenge. Default `callsync`. */
  realm?: string;
  /** Session cookies of the login page, accepted when given. Default none. */
  sessions?: Sessions;
  /**
   * The login page. When set, a browser's page request without credentials is redirected there
   * (`?next=` the page), and 401s carry no Basic challenge: the browser never prompts for the
   * password, so it never caches it and sends it along with other sites' requests. Clients that
   * send Basic credentials unasked (`curl -u`) still get in. Default none: a Basic challenge.
   */
  loginPath?: string;
}

export function same(a: string, b: string): boolean {
  // Hashing first makes the comparison constant-time whatever the lengths.
  const ha = createHash('sha256').update(a).digest();
  const hb = createHash('sha256').update(b).digest();
  return timingSafeEqual(ha, hb);
}

/** True when at least one credential is configured. */
export function authConfigured(options: OperatorAuthOptions): boolean {
  return Boolean((options.username && options.password) || options.token);
}

/** True when `user` and `password` are the configured Basic credentials (both always compared). */
export function basicCredentialsMatch(options: OperatorAuthOptions, user: string, password: string): boolean {
  if (!options.username || !options.password) return false;
  const userOk = same(user, options.username);
  const passwordOk = same(password, options.password);
  return userOk && passwordOk;
}

function authorized(c: Context, options: OperatorAuthOptions): boolean {
  if (options.sessions?.verify(getCookie(c, SESSION_COOKIE))) return true;
  const header = c.req.header('authorization') ?? '';
  const [scheme, value = ''] = header.split(/\s+/, 2) as [string, string?];
  if (scheme?.toLowerCase() === 'bearer' && options.token) return same(value, options.token);
  if (scheme?.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    return colon >= 0 && basicCredentialsMatch(options, decoded.slice(0, colon), decoded.slice(colon + 1));
  }
  return false;
}

export function operatorAuth(options: OperatorAuthOptions): MiddlewareHandler {
  const realm = options.realm ?? 'callsync';
  const basic = Boolean(options.username && options.password);
  return async function operatorAuthMiddleware(c, next) {
    if (authorized(c, options)) return next();
    const loginPath = options.loginPath;
    if (loginPath && c.req.method === 'GET' && (c.req.header('accept') ?? '').includes('text/html')) {
      const url = new URL(c.req.url);
      return c.redirect(`${loginPath}?next=${encodeURIComponent(url.pathname + url.search)}`, 302);
    }
    const challenge = basic && !loginPath ? `Basic realm="${realm}", charset="UTF-8"` : options.token ? `Bearer realm="${realm}"` : null;
    return c.json(errorBody(401, loginPath ? `credentials required: log in at ${loginPath}` : 'credentials required'), 401, challenge ? { 'www-authenticate': challenge } : {});
  };
}
