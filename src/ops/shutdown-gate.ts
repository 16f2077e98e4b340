// Once shutdown starts, new requests get 503 with Retry-After (the sender tries again, another
// instance takes it) while requests already inside finish normally. Probes of liveness and the
// metrics scrape still answer.
import type { Context, MiddlewareHandler } from 'hono';
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
  /**
   * The middleware in parts, for one that folds it with others (workers/operations.ts): `turnAway`
   * answers a request refused (or returns null), `enter` and `leave` go around a request let in.
   */
  turnAway(c: Context): Response | null;
  enter(): void;
  leave(c: Context): void;
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
  const turnAway = (c: Context): Response | null => {
    if (!closed || open.has(c.req.path)) return null;
    options.onRejected?.(c.req.path);
    return c.json(errorBody(503, 'callsync is shutting down; retry later'), 503, {
      'retry-after': retryAfter,
      connection: 'close',
    });
  };
  const enter = () => {
    inFlight++;
  };
  const leave = (c: Context) => {
    inFlight--;
    // Keep-alive clients should open their next connection elsewhere.
    if (closed) c.header('connection', 'close');
  };
  const middleware: MiddlewareHandler = async function shutdownGate(c, next) {
    const refused = turnAway(c);
    if (refused) return refused;
    enter();
    try {
      await next();
    } finally {
      leave(c);
    }
  };
  return {
    middleware,
    turnAway,
    enter,
    leave,
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
