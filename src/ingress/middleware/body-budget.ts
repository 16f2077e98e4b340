// Bounds the request bodies the ingress holds at once, in bytes: a body is read, decoded, parsed,
// normalized and serialized before it is stored, several copies of it alive until the answer, so
// many large bodies at once would run the process out of memory. Each request reserves its declared
// length until it is answered (a chunked one, whose length is unknown up front: CHUNKED_RESERVE, so
// chunked bodies are bounded only by their number and the body limit — a known gap); a request that
// would go beyond the budget is answered 503 with Retry-After at once, before its body is read, and
// its connection closed — the sender retries. One body is always let in alone, whatever its size
// (the body limit refuses what is too large).
import type { MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';

export interface BodyBudgetOptions {
  /** Bytes of bodies held at once. */
  maxBytes: number;
  /** The largest body (WEBHOOK_BODY_LIMIT): what a declared length is counted as at most. */
  bodyLimitBytes: number;
  /** Retry-After of the 503, seconds. */
  retryAfterSeconds: string;
}

/**
 * The default budget: 32 MiB of bodies. A 10 MB call alone took the ingress from ~130 MB to a peak
 * of ~560 MB RSS (its text, parsed payload, the record with `raw`, the Redis command, the spool
 * line); 24 × 10 MB at once stayed between 500 and 800 MB with this budget (docs/reliability.md §9).
 */
export const BODY_BUDGET_BYTES = 32 * 1024 * 1024;
/** What a chunked body (no Content-Length) reserves. */
const CHUNKED_RESERVE = 1024 * 1024;

export function bodyBudget(options: BodyBudgetOptions): MiddlewareHandler {
  let held = 0;
  return async function bodyBudgetMiddleware(c, next) {
    const declared = c.req.header('content-length');
    const size =
      declared !== undefined && /^\d+$/.test(declared)
        ? Math.min(Number(declared), options.bodyLimitBytes + 1)
        : Math.min(CHUNKED_RESERVE, options.bodyLimitBytes);
    if (held > 0 && held + size > options.maxBytes) {
      throw new ApiError(503, `the ingress holds as many request bodies as it can (${held} bytes): retry shortly`, {
        // The connection closes after the answer: reading (and dropping) the body the sender still
        // writes would cost as much memory, for a while, as keeping it.
        headers: { 'retry-after': options.retryAfterSeconds, connection: 'close' },
        logFields: { heldBytes: held, bodyBytes: size },
      });
    }
    held += size;
    try {
      await next();
    } finally {
      held -= size;
    }
  };
}
