// Bounds the request bodies the ingress holds at once, in bytes: a body is read, decoded, parsed,
// normalized and serialized before it is stored, several copies of it alive until the answer, so
// many large bodies at once would run the process out of memory. A request with a Content-Length
// reserves it before its body is read; a chunked one (length unknown up front) reserves its bytes as
// they arrive (./read-body.ts calls `take` per chunk). A request that would go beyond the budget is
// answered 503 with Retry-After — before its body is read, or as soon as its chunks pass the budget —
// and its connection closed: the sender retries. One body is always let in alone, whatever its size
// (the body limit refuses what is too large). The default budget is sized by what a body really
// costs in memory (BODY_MEMORY_FACTOR), so the process stays under its stated RSS bound.
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

declare module 'hono' {
  interface ContextVariableMap {
    /**
     * Reserves `bytes` more of the body budget for this request (a chunked body, as it arrives);
     * throws the budget's 503 when they do not fit. Absent when no budget runs.
     */
    bodyBudgetTake: ((bytes: number) => void) | undefined;
  }
}

/**
 * Bytes of memory a request body of one byte costs the ingress at its peak, measured: one 10 MB
 * call took a `callsync start` ingress from ~142 MB to ~234 MB RSS (×9: the bytes, the decoded
 * text, the parsed payload, the record serialized with `raw`, the Redis command and its socket
 * buffer); a sustained flood of bodies admitted as soon as others were answered cost up to ×20 of
 * the bytes held (garbage of answered bodies not yet collected). docs/operations.md "Memory".
 */
const BODY_MEMORY_FACTOR = 40;
/** Memory the ingress may spend on request bodies: a 512 MB RSS bound, less ~150 MB at rest and ~50 MB of margin. */
const BODY_MEMORY_BYTES = 320 * 1024 * 1024;
/** The default budget: 8 MiB of bodies (BODY_MEMORY_BYTES / BODY_MEMORY_FACTOR). */
export const BODY_BUDGET_BYTES = BODY_MEMORY_BYTES / BODY_MEMORY_FACTOR;

export function bodyBudget(options: BodyBudgetOptions): MiddlewareHandler {
  let held = 0;
  const refusal = (size: number) =>
    new ApiError(503, `the ingress holds as many request bodies as it can (${held} bytes): retry shortly`, {
      // The connection closes after the answer: reading (and dropping) the body the sender still
      // writes would cost as much memory, for a while, as keeping it.
      headers: { 'retry-after': options.retryAfterSeconds, connection: 'close' },
      logFields: { heldBytes: held, bodyBytes: size },
    });
  return async function bodyBudgetMiddleware(c, next) {
    const declared = c.req.header('content-length');
    // A chunked body reserves nothing up front: its chunks are taken as they arrive.
    let mine =
      declared !== undefined && /^\d+$/.test(declared) ? Math.min(Number(declared), options.bodyLimitBytes + 1) : 0;
    if (held > 0 && held + mine > options.maxBytes) throw refusal(mine);
    held += mine;
    c.set('bodyBudgetTake', (bytes: number) => {
      // Alone (nothing held by others), a body may grow up to the body limit.
      if (held - mine > 0 && held + bytes > options.maxBytes) throw refusal(mine + bytes);
      held += bytes;
      mine += bytes;
    });
    try {
      await next();
    } finally {
      c.set('bodyBudgetTake', undefined);
      held -= mine;
    }
  };
}
