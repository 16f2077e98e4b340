// Once shutdown starts, new requests get 503 with Retry-After (the sender tries again, another
// instance takes it) while requests already inside finish normally. Probes of liveness and the
// metrics scrape still answer.
import type { MiddlewareHandler } from 'hono';
import { errorBody } from '../ingress/errors.js';

export interface ShutdownGateOptions {
  /** Seconds in Retry-After. Default 5. */
  retryAfterSeconds?: number;
  /** Paths that keep answering during shutdown. Default /healthz and /metrics. */
  openPaths?: string[];
  /** Called for each webhook turned away (metrics). */
  onRejected?(path: string): void;
}

export interface ShutdownGate {
  middleware: MiddlewareHandler;
  /** From now on, new requests get 503. */
  close(): void;
  readonly closed: boolean;
  /** Requests inside the app right now. */
  readonly inFlight: number;
}

export function createShutdownGate(options: ShutdownGateOptions = {}): ShutdownGate {
  const retryAfter = String(options.retryAfterSeconds ?? 5);
  const open = new Set(options.openPaths ?? ['/healthz', '/metrics']);
  let closed = false;
  let inFlight = 0;
  const middleware: MiddlewareHandler = async function shutdownGate(c, next) {
    if (closed && !open.has(c.req.path)) {
      options.onRejected?.(c.req.path);
      return c.json(errorBody(503, 'callsync is shutting down; retry later'), 503, {
        'retry-after': retryAfter,
        connection: 'close',
      });
    }
    inFlight++;
    try {
      await next();
    } finally {
      inFlight--;
      // Keep-alive clients should open their next connection elsewhere.
      if (closed) c.header('connection', 'close');
    }
  };
  return {
    middleware,
    close() {
      closed = true;
    },
    get closed() {
      return closed;
    },
    get inFlight() {
      return inFlight;
    },
  };
}
