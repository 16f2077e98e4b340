// Signed, expiring sessions for the dashboard's login page (./login.ts). Unlike a password the
// browser caches for Basic auth, their cookie is sent only with requests started on the dashboard's
// own site (`SameSite=Strict`), never with another site's form or script.
import { createHmac, randomBytes, scryptSync, timingSafeEqual } from 'node:crypto';

/** Name of the session cookie (path /admin). */
export const SESSION_COOKIE = 'callsync_session';

/** Default lifetime of a session: a working day. */
const DEFAULT_SESSION_TTL_MS = 8 * 3600_000;

export interface SessionOptions {
  /** The dashboard's Basic auth user and password: the key is derived from them. */
  username: string;
  password: string;
  /** How long a session lasts after login. Default 8 h. */
  ttlMs?: number;
}

export interface Sessions {
  readonly ttlMs: number;
  /** A new cookie value for `user`, valid for ttlMs. */
  issue(user: string, now?: number): string;
  /** The session's user when the value is ours and not expired, else null. */
  verify(value: string | undefined, now?: number): { user: string } | null;
}

const b64 = (buf: Buffer) => buf.toString('base64url');

export function createSessions(options: SessionOptions): Sessions {
  const ttlMs = options.ttlMs ?? DEFAULT_SESSION_TTL_MS;
  // Derived from the credentials, so every process configured with the same password accepts the
  // same sessions (the ingress and each ops server) and changing the password ends them all. scrypt
  // makes guessing the password from a stolen cookie slow (~20 ms a guess, once at start here).
  const key = scryptSync(options.password, `callsync-admin-session\0${options.username}`, 32, {
    N: 2 ** 14,
    r: 8,
    p: 1,
  });
  const mac = (payload: string) => createHmac('sha256', key).update(payload).digest();

  return {
    ttlMs,
    issue(user, now = Date.now()) {
      const payload = b64(
        Buffer.from(JSON.stringify({ u: user, e: Math.floor((now + ttlMs) / 1000), n: b64(randomBytes(9)) })),
      );
      return `${payload}.${b64(mac(payload))}`;
    },
    verify(value, now = Date.now()) {
      if (!value || value.length > 512) return null;
      const [payload, signature, extra] = value.split('.');
      if (!payload || !signature || extra !== undefined) return null;
      const given = Buffer.from(signature, 'base64url');
      const expected = mac(payload);
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return null;
      try {
        const data = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as { u?: unknown; e?: unknown };
        if (typeof data.u !== 'string' || typeof data.e !== 'number' || data.e * 1000 <= now) return null;
        return { user: data.u };
      } catch {
        return null;
      }
    },
  };
}
