// Bounds the request bodies the ingress holds at once, in bytes: a body is read, decoded, parsed,
// normalized and serialized before it is stored, several copies of it alive until the answer, so
// many large bodies at once would run the process out of memory. A request with a Content-Length
// reserves it before its body is read; a chunked one (length unknown up front) reserves its bytes as
// they arrive (./read-body.ts calls `take` per chunk).
//
// A declared body that does not fit waits for room, in line (first come, first in), before its body
// is read — its sender's bytes stay in the socket meanwhile — for at most `maxWaitMs`
// (WEBHOOK_BODY_WAIT_MS); then, or when `maxWaiters` already wait, it is answered 503 with
// Retry-After and its connection closed: the sender retries. In line, a large body is not passed by
// the small ones that keep coming (without the line, a body near the limit was refused until the
// moment nothing else was held, which under steady traffic may never come: docs/performance.md,
// round 13). A chunked body's chunks do not wait: one that passes the budget is refused with that
// 503 at once. One body is always let in alone, whatever its size (the body limit refuses what is
// too large), unless a heap limit leaves no room for it: 413, not a crash. A body larger than the
// whole budget does not wait in line: it is let in alone, when nothing else is held, or refused at
// once. The default budget is sized by what a body really costs in memory (BODY_MEMORY_FACTOR), so
// the process stays under its stated RSS bound. That sizing is an average: under a flood on a loaded
// machine the garbage of answered bodies can outrun the collector (a peak of 668 MB once, against
// 330–520 MB in most runs), so the process' RSS is read too — above CROWDED_RSS_BYTES, a body of
// CHECKED_BODY_BYTES or more is let in only alone (it waits in line for the others to be answered; a
// chunked one is refused), until the RSS is back under it.
import { getHeapStatistics } from 'node:v8';
import type { IncomingMessage } from 'node:http';
import type { Context, MiddlewareHandler } from 'hono';
import { ApiError } from '../errors.js';

export interface BodyBudgetOptions {
  /** Bytes of bodies held at once. */
  maxBytes: number;
  /** The largest body (WEBHOOK_BODY_LIMIT): what a declared length is counted as at most. */
  bodyLimitBytes: number;
  /** Retry-After of the 503, seconds. */
  retryAfterSeconds: string;
  /** Longest a declared body waits in line for room before it is refused (WEBHOOK_BODY_WAIT_MS); 0: refused at once. */
  maxWaitMs: number;
  /** Most requests waiting in line at once; one more is refused at once. Default MAX_WAITERS. */
  maxWaiters?: number;
  /**
   * RSS above which a body of CHECKED_BODY_BYTES or more is let in only alone. Default
   * CROWDED_RSS_BYTES (448 MB); `Infinity`: never.
   */
  crowdedRssBytes?: number;
  /** The process' resident bytes (tests give their own). Default `process.memoryUsage.rss`. */
  residentBytes?: () => number;
  /** Called once with a reader of the budget's state (the metrics read it at scrape time). */
  observe?(read: () => { heldBytes: number; waiting: number }): void;
}

/**
 * Requests waiting for room at most: each holds a connection and what Node buffered of its body
 * (up to ~64 KB), so 256 of them are at most ~16 MB beside the budget.
 */
const MAX_WAITERS = 256;

interface Waiter {
  bytes: number;
  admit(): void;
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

const MB = 1024 * 1024;
/**
 * RSS above which a body of CHECKED_BODY_BYTES or more is let in only alone: 70 % of the 640 MB
 * bound, so what the bodies already in cost on top of it (up to the budget's 320 MB at worst, ~100 MB
 * in the floods measured) stays under the bound. A process running every role counts its workers'
 * memory too: there, large bodies come in one at a time sooner.
 */
const CROWDED_RSS_BYTES = 448 * MB;
/** Bodies below this are let in whatever the RSS: they cost little, and reading the RSS costs ~2.5 µs. */
const CHECKED_BODY_BYTES = 64 * 1024;
/** How long an RSS reading is used before it is read again, ms. */
const RSS_READ_EVERY_MS = 5;

/**
 * Bytes of V8 heap a body of one byte may take while it is handled (its decoded text, the parsed
 * payload, the record serialized with `raw`, the Redis command flattened): with
 * `--max-old-space-size=160`, a 24 MB body was stored and a 48 MB one ran the heap out of memory
 * (×3–4; test/ingress-memory.redis.test.ts). With a heap limit, bodies are held to what fits in it,
 * so the process answers 503 or 413 before it would die.
 */
const BODY_HEAP_FACTOR = 4;
/** Heap the ingress takes without bodies, with room to spare. */
const HEAP_AT_REST_BYTES = 96 * 1024 * 1024;

/** Bytes of bodies the heap limit leaves room for (large without a limit: Node's default heap is GiBs). */
function heapRoom(): number {
  return Math.max(0, (getHeapStatistics().heap_size_limit - HEAP_AT_REST_BYTES) / BODY_HEAP_FACTOR);
}

export function bodyBudget(options: BodyBudgetOptions): MiddlewareHandler {
  let held = 0;
  const room = heapRoom();
  const maxBytes = Math.min(options.maxBytes, room);
  const maxWaitMs = options.maxWaitMs;
  const maxWaiters = options.maxWaiters ?? MAX_WAITERS;
  /** Requests waiting for room, in the order they came. */
  const line: Waiter[] = [];
  const crowdedRss = options.crowdedRssBytes ?? CROWDED_RSS_BYTES;
  const residentBytes = options.residentBytes ?? process.memoryUsage.rss;
  let rss = 0;
  let rssReadAt = -Infinity;
  /** Whether the process' RSS is above `crowdedRss` (read at most every RSS_READ_EVERY_MS). */
  const crowded = () => {
    if (crowdedRss === Infinity) return false;
    const now = performance.now();
    if (now - rssReadAt >= RSS_READ_EVERY_MS) {
      rss = residentBytes();
      rssReadAt = now;
    }
    return rss > crowdedRss;
  };
  /** A body of `bytes` fits beside `others` bytes held by other requests. */
  const fitsBeside = (others: number, bytes: number) =>
    others === 0 || (others + bytes <= maxBytes && (bytes < CHECKED_BODY_BYTES || !crowded()));
  const fits = (bytes: number) => fitsBeside(held, bytes);
  options.observe?.(() => ({ heldBytes: held, waiting: line.length }));
  /** Lets in the requests at the head of the line that now fit, in order. */
  const admitWaiting = () => {
    while (line.length > 0 && fits(line[0]!.bytes)) {
      const next = line.shift()!;
      held += next.bytes;
      next.admit();
    }
  };
  const beyondHeap = (size: number) =>
    new ApiError(
      413,
      `request body is larger than this ingress can hold with its heap limit (${Math.floor(room)} bytes)`,
      {
        gate: true,
        headers: { connection: 'close' },
        logFields: { bodyBytes: size, heapRoomBytes: Math.floor(room) },
      },
    );
  /** The budget's 503 for a body of `size` bytes, `others` held by other requests. */
  const refusal = (size: number, waitedMs?: number, others = held) => {
    // Why it did not fit: the bytes held, or (a large body that would have fitted) the RSS.
    const memory = size >= CHECKED_BODY_BYTES && others + size <= maxBytes && rss > crowdedRss;
    const now = waitedMs === undefined;
    const what = memory
      ? `the ingress ${now ? 'is' : 'was'} near its memory bound (RSS ${Math.round(rss / MB)} MB), letting in large bodies only one at a time (${others} bytes held)`
      : `the ingress ${now ? 'holds' : 'held'} as many request bodies as it can (${others} bytes)`;
    return new ApiError(503, `${what}${now ? '' : ` for the ${waitedMs} ms this one waited`}: retry shortly`, {
      // The connection closes after the answer: reading (and dropping) the body the sender still
      // writes would cost as much memory, for a while, as keeping it.
      headers: { 'retry-after': options.retryAfterSeconds, connection: 'close' },
      reason: 'body-budget',
      logFields: {
        heldBytes: others,
        bodyBytes: size,
        waiting: line.length,
        ...(waitedMs !== undefined && { waitedMs }),
        ...(memory && { rssBytes: rss }),
      },
    });
  };
  /** Waits in line until `bytes` fit (they are then held); refused after maxWaitMs, or when the line is full. */
  const wait = (c: Context, bytes: number) =>
    new Promise<void>((resolve, reject) => {
      if (maxWaitMs <= 0 || line.length >= maxWaiters) {
        reject(refusal(bytes));
        return;
      }
      const socket = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket;
      const leave = (err: unknown) => {
        const at = line.indexOf(waiter);
        if (at < 0) return;
        line.splice(at, 1);
        clearTimeout(timer);
        socket?.removeListener('close', gone);
        reject(err);
        // The head gave up: those behind it may fit now.
        if (at === 0) admitWaiting();
      };
      const timer = setTimeout(() => leave(refusal(bytes, maxWaitMs)), maxWaitMs);
      // A sender that hangs up while it waits leaves the line at once (its place would block those behind).
      const gone = () => leave(new Error('the connection closed while the request waited for room'));
      const waiter: Waiter = {
        bytes,
        admit: () => {
          clearTimeout(timer);
          socket?.removeListener('close', gone);
          resolve();
        },
      };
      socket?.once('close', gone);
      line.push(waiter);
    });
  return async function bodyBudgetMiddleware(c, next) {
    const declared = c.req.header('content-length');
    // A chunked body reserves nothing up front: its chunks are taken as they arrive.
    let mine =
      declared !== undefined && /^\d+$/.test(declared) ? Math.min(Number(declared), options.bodyLimitBytes + 1) : 0;
    if (mine > room) throw beyondHeap(mine);
    // Nobody passes those waiting in line.
    if (line.length === 0 && fits(mine)) held += mine;
    // A body larger than the whole budget (WEBHOOK_BODY_LIMIT raised above it) is outside what the
    // budget is sized for: let in alone or refused, never lined up to come in back to back (24
    // bodies of 10 MB at once took an ingress to ~620 MB through the line, ~450 MB without).
    else if (mine > maxBytes) throw refusal(mine);
    else await wait(c, mine);
    c.set('bodyBudgetTake', (bytes: number) => {
      if (mine + bytes > room) throw beyondHeap(mine + bytes);
      // Alone (nothing held by others), a body may grow up to the body limit.
      if (!fitsBeside(held - mine, mine + bytes)) throw refusal(mine + bytes, undefined, held - mine);
      held += bytes;
      mine += bytes;
    });
    try {
      await next();
    } finally {
      c.set('bodyBudgetTake', undefined);
      held -= mine;
      admitWaiting();
    }
  };
}
