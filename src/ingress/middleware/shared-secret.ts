// Optional shared credential: a configured header must carry one of the accepted values
// (several, so a value can be rotated). Compared in constant time.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';

export interface SharedSecretOptions {
  /** Header name, e.g. `x-callsync-token`. */
  header: string;
  /** Accepted values; any one of them lets the request in. */
  tokens: string[];
}

const digest = (value: string) => createHash('sha256').update(value).digest();

export function sharedSecret(options: SharedSecretOptions): MiddlewareHandler {
  const accepted = options.tokens.map(digest);
  return async function sharedSecretMiddleware(c, next) {
    const presented = c.req.header(options.header);
    if (presented === undefined || presented === '') {
      throw new ApiError(401, `missing credential header ${options.header}`, {
        gate: true,
        pointer: options.header,
        headers: { 'www-authenticate': 'SharedSecret' },
      });
    }
    const presentedDigest = digest(presented);
    // Compare against every accepted value so timing does not reveal which one (or whether any) matched.
    let ok = false;
    for (const value of accepted) ok = timingSafeEqual(value, presentedDigest) || ok;
    if (!ok)
      throw new ApiError(401, `credential in ${options.header} is not valid`, { gate: true, pointer: options.header });
    await next();
  };
}
