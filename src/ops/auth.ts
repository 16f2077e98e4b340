// Credentials for the operator's endpoints: basic auth (a browser prompts for it) or a bearer
// token, compared in constant time. Failures answer 401 in the spec's error shape.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { errorBody } from '../ingress/errors.js';

export interface OperatorAuthOptions {
  /** Basic auth user and password; both needed for basic auth. */
  username?: string;
  password?: string;
  /** Accepted as `Authorization: Bearer <token>`. */
  token?: string;
  /** Realm shown by the browser's login prompt. Default `callsync`. */
  realm?: string;
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

export function operatorAuth(options: OperatorAuthOptions): MiddlewareHandler {
  const realm = options.realm ?? 'callsync';
  const basic = options.username && options.password ? { user: options.username, password: options.password } : null;
  return async function operatorAuthMiddleware(c, next) {
    const header = c.req.header('authorization') ?? '';
    const [scheme, value = ''] = header.split(/\s+/, 2) as [string, string?];
    let ok = false;
    if (scheme?.toLowerCase() === 'bearer' && options.token) ok = same(value, options.token);
    if (scheme?.toLowerCase() === 'basic' && basic) {
      const decoded = Buffer.from(value, 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      if (colon >= 0) {
        // Evaluate both so a wrong user takes as long as a wrong password.
        const userOk = same(decoded.slice(0, colon), basic.user);
        const passwordOk = same(decoded.slice(colon + 1), basic.password);
        ok = userOk && passwordOk;
      }
    }
    if (!ok) {
      const challenge = basic ? `Basic realm="${realm}", charset="UTF-8"` : `Bearer realm="${realm}"`;
      return c.json(errorBody(401, 'credentials required'), 401, { 'www-authenticate': challenge });
    }
    await next();
  };
}
