// Credentials for the operator's endpoints: the login page's session cookie (./session.ts), basic
// auth, or a bearer token, compared in constant time. Failures answer 401 in the spec's error shape;
// with a login page, a browser asking for a page is sent there instead. Wrong passwords and tokens
// are throttled per peer and per account (./throttle.ts): 429 with Retry-After, logged without them.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { Logger } from 'pino';
import { errorBody } from '../ingress/errors.js';
import { buildBlockList, canonicalIp, resolveClient } from '../ingress/middleware/ip-allow.js';
import { SESSION_COOKIE, type Sessions } from './session.js';
import { retryAfterSeconds, type LoginThrottle } from './throttle.js';

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
  /** Throttles wrong passwords and tokens per peer and account. Default none (no throttling). */
  throttle?: LoginThrottle;
  /** Who tries: the socket's peer, or the client behind TRUSTED_PROXIES. Default the socket's peer. */
  clientAddress?: (c: Context) => string;
  /** Where refusals and throttling are logged (never a password or token). */
  log?: Logger;
}

/**
 * The address a login try comes from: the socket's peer, or with `trustedProxies` the client their
 * X-Forwarded-For names (as the webhook allow list reads it). `unknown` without a socket.
 */
export function clientAddressOf(trustedProxies: string[] = [], trustProxyHops?: number): (c: Context) => string {
  const list = trustedProxies.length > 0 ? buildBlockList(trustedProxies) : null;
  const trusted = (ip: string) => list !== null && list.check(ip, ip.includes(':') ? 'ipv6' : 'ipv4');
  return (c) => {
    let peer: string | undefined;
    try {
      peer = getConnInfo(c).remote.address;
    } catch {
      peer = undefined; // no socket (app.request in a test)
    }
    if (peer === undefined) return 'unknown';
    if (list === null) return canonicalIp(peer);
    return resolveClient(peer, c.req.header('x-forwarded-for'), trusted, trustProxyHops).client ?? 'unknown';
  };
}

/** The account a try names, as logged: the configured user by name, anything else as `(other)` (it may be a password typed in the wrong field). */
function loggedAccount(tried: string, configured: string | undefined): string {
  return configured !== undefined && tried === configured ? configured : '(other)';
}

/** A throttle's refusal: 429, Retry-After, the spec's error body. */
export function throttled(c: Context, waitMs: number): Response {
  const seconds = retryAfterSeconds(waitMs);
  return c.json(errorBody(429, `too many failed logins: try again in ${seconds} s`), 429, {
    'retry-after': seconds,
    'cache-control': 'no-store',
  });
}

/** A try at a credential, as the throttle sees it. */
interface Attempt {
  /** Milliseconds to wait before this try may be checked (0: check it). */
  waitMs: number;
  /** Call with the result of the check. */
  done(ok: boolean): void;
}

/**
 * Checks a try against the throttle (`waitMs` > 0: refuse it unchecked, 429), then counts its
 * result with `done`; shared by the login page, Basic auth and bearer tokens.
 */
export function attempt(
  c: Context,
  options: Pick<OperatorAuthOptions, 'throttle' | 'clientAddress' | 'log' | 'username'>,
  account: string,
  via: 'login' | 'basic' | 'bearer',
): Attempt {
  const throttle = options.throttle;
  if (!throttle) return { waitMs: 0, done: () => undefined };
  const peer = (options.clientAddress ?? clientAddressOf())(c);
  const key = account.slice(0, 200);
  const decision = throttle.check(peer, key);
  if (decision.waitMs > 0) {
    return { waitMs: decision.waitMs, done: () => undefined };
  }
  return {
    waitMs: 0,
    done(ok) {
      if (ok) {
        throttle.succeeded(peer, key);
        return;
      }
      const failures = throttle.failed(peer, key);
      const next = throttle.check(peer, key);
      options.log?.warn(
        {
          peer,
          account: loggedAccount(account, options.username),
          via,
          failures,
          ...(next.waitMs > 0 ? { throttledForMs: next.waitMs, throttledBy: next.by } : {}),
        },
        next.waitMs > 0 ? 'wrong credentials: further tries from this peer are throttled' : 'wrong credentials',
      );
    },
  };
}

function same(a: string, b: string): boolean {
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

/** Allowed, refused (401), or held back by the throttle (429 after `waitMs`). */
type Verdict = { ok: true } | { ok: false; waitMs: number };

function authorize(c: Context, options: OperatorAuthOptions): Verdict {
  if (options.sessions?.verify(getCookie(c, SESSION_COOKIE))) return { ok: true };
  const header = c.req.header('authorization') ?? '';
  const [scheme, value = ''] = header.split(/\s+/, 2) as [string, string?];
  if (scheme?.toLowerCase() === 'bearer' && options.token) {
    const tried = attempt(c, options, '(token)', 'bearer');
    if (tried.waitMs > 0) return { ok: false, waitMs: tried.waitMs };
    const ok = same(value, options.token);
    tried.done(ok);
    return ok ? { ok: true } : { ok: false, waitMs: 0 };
  }
  if (scheme?.toLowerCase() === 'basic') {
    const decoded = Buffer.from(value, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon < 0) return { ok: false, waitMs: 0 };
    const user = decoded.slice(0, colon);
    const tried = attempt(c, options, user, 'basic');
    if (tried.waitMs > 0) return { ok: false, waitMs: tried.waitMs };
    const ok = basicCredentialsMatch(options, user, decoded.slice(colon + 1));
    tried.done(ok);
    return ok ? { ok: true } : { ok: false, waitMs: 0 };
  }
  return { ok: false, waitMs: 0 };
}

export function operatorAuth(options: OperatorAuthOptions): MiddlewareHandler {
  const realm = options.realm ?? 'callsync';
  const basic = Boolean(options.username && options.password);
  return async function operatorAuthMiddleware(c, next) {
    const verdict = authorize(c, options);
    if (verdict.ok) return next();
    if (verdict.waitMs > 0) return throttled(c, verdict.waitMs);
    const loginPath = options.loginPath;
    if (loginPath && c.req.method === 'GET' && (c.req.header('accept') ?? '').includes('text/html')) {
      const url = new URL(c.req.url);
      return c.redirect(`${loginPath}?next=${encodeURIComponent(url.pathname + url.search)}`, 302);
    }
    const challenge =
      basic && !loginPath
        ? `Basic realm="${realm}", charset="UTF-8"`
        : options.token
          ? `Bearer realm="${realm}"`
          : null;
    return c.json(
      errorBody(401, loginPath ? `credentials required: log in at ${loginPath}` : 'credentials required'),
      401,
      challenge ? { 'www-authenticate': challenge } : {},
    );
  };
}
