// Serves a Hono app on a port: one place for listening, the URL a log line shows, and closing; the
// admission of connections by who opens them (see `Admission`); and the answers Node's HTTP layer
// gives itself, with the caller's error body (see `ErrorBody`).
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { serve } from '@hono/node-server';

export interface Listening {
  server: Server;
  /** `http://host:port`; 0.0.0.0 is shown as 127.0.0.1 (what a local client can open). */
  url: string;
  /** Stops accepting, lets requests in flight finish, drops idle keep-alive connections. */
  close(): Promise<void>;
}

/** Limits on what clients may hold; Node's defaults where unset. */
export interface ServerLimits {
  /** Longest time to receive a whole request, headers and body (Node's default 300 s). */
  requestTimeoutMs?: number;
  /** Longest time to receive a request's headers, counted from its first byte (or from the connection's start); at most requestTimeoutMs. */
  headersTimeoutMs?: number;
  /** How long an idle keep-alive connection stays open (Node's default 5 s). */
  keepAliveTimeoutMs?: number;
  /** Connections beyond this many are closed at once (Node's default: no limit). */
  maxConnections?: number;
  /** Who may hold how many of them (default: anyone, up to maxConnections). */
  admission?: Admission;
}

/**
 * The body of an answer the HTTP layer gives below the app (a request Node cannot parse, headers
 * too large, a request or its headers too slow): JSON text, the platform's error body where the
 * caller gives it (src/ingress/errors.ts; this layer imports nothing of the app's).
 */
export type ErrorBody = (status: number, detail: string) => string;

/** Node's parser and timeout errors, answered as Node answers them (its `socketOnError`), with a body. */
const CLIENT_ERRORS: Record<string, [number, string, string]> = {
  HPE_HEADER_OVERFLOW: [431, 'Request Header Fields Too Large', 'the request headers are too large'],
  HPE_CHUNK_EXTENSIONS_OVERFLOW: [413, 'Payload Too Large', 'the chunk extensions are too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'Request Timeout', 'the request did not arrive in time'],
};
const BAD_REQUEST: [number, string, string] = [400, 'Bad Request', 'the request is not valid HTTP/1.1'];

/** A whole HTTP/1.1 answer that closes the connection, with `errorBody`'s JSON (none without it). */
function rawAnswer(status: number, reason: string, detail: string, errorBody: ErrorBody | undefined): string {
  if (!errorBody) return `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`;
  const body = errorBody(status, detail);
  return (
    `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
  );
}

/**
 * Answers what Node's HTTP parser refuses, and requests that run out of time, with the error body
 * — Node's own answers are bare. The same cases as Node's: nothing is written on a connection that
 * has written before (an answer may be under way) or can no longer be written to.
 */
function answerClientErrors(server: Server, errorBody: ErrorBody): void {
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const net = socket as Socket;
    if (err.code === 'ECONNRESET' || !socket.writable || net.bytesWritten !== 0) {
      socket.destroy();
      return;
    }
    const [status, reason, detail] = CLIENT_ERRORS[err.code ?? ''] ?? BAD_REQUEST;
    socket.write(rawAnswer(status, reason, detail, errorBody));
    net.destroySoon();
  });
}

/**
 * Admission by peer, so that addresses that can never post a webhook cannot fill the connection cap.
 * A peer is *listed* when it is on the allow list or is a trusted proxy (its clients are checked per
 * request, from X-Forwarded-For); any other peer is *unlisted*: it can never pass the allow list,
 * and may only reach the endpoints that do not ask for it (/healthz, /readyz, /metrics, the
 * dashboard). Unlisted peers get a small share of the cap — UNLISTED_SHARE of it in all, at most
 * UNLISTED_PER_PEER connections per address — and are refused at accept time beyond it, so the rest
 * stays for listed peers. A peer not yet known good (no answer below 400 yet; unlisted peers never
 * are) must send its first request's headers within UNKNOWN_HEADERS_TIMEOUT_MS (or the headers
 * timeout, when shorter), not the full headers timeout.
 */
interface Admission {
  /**
   * Whether a peer (its address, an IPv4-mapped IPv6 one as IPv4) is listed: on the webhook allow
   * list (WEBHOOK_ALLOWED_IPS; `*`: every peer) or a trusted proxy (TRUSTED_PROXIES).
   */
  listed(peer: string): boolean;
  /** Told about every connection refused for its peer (not about those over the whole cap: Node's `drop`). */
  onRefused?(peer: string, reason: 'unlisted-share' | 'unlisted-per-peer' | 'headers-timeout'): void;
}

/** Part of the connection cap unlisted peers may hold together (at least 1). */
const UNLISTED_SHARE = 0.1;
/** Connections one unlisted address may hold. */
const UNLISTED_PER_PEER = 4;
/** Time a peer not yet known good has for its first request's headers. */
const UNKNOWN_HEADERS_TIMEOUT_MS = 3000;
/** Known-good peers remembered (the oldest forgotten first). */
const MAX_KNOWN_GOOD = 10_000;

/** `::ffff:10.0.0.1` -> `10.0.0.1`; other addresses as they are. */
function peerOf(socket: Socket): string {
  const address = socket.remoteAddress ?? '';
  return address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address;
}

/** Counts connections by peer class and refuses the unlisted beyond their share. Attached to `server`. */
function admit(server: Server, admission: Admission, limits: ServerLimits, errorBody: ErrorBody | undefined): void {
  const known = new Map<string, boolean>();
  const listed = (ip: string): boolean => {
    let decided = known.get(ip);
    if (decided === undefined) {
      decided = admission.listed(ip);
      if (known.size < MAX_KNOWN_GOOD) known.set(ip, decided);
    }
    return decided;
  };
  const cap = limits.maxConnections ?? Number.POSITIVE_INFINITY;
  const unlistedCap = Math.max(1, Math.floor(cap * UNLISTED_SHARE));
  const headersMs = Math.min(
    UNKNOWN_HEADERS_TIMEOUT_MS,
    limits.headersTimeoutMs ?? 60_000,
    limits.requestTimeoutMs ?? 300_000,
  );
  const perPeer = new Map<string, number>();
  let unlisted = 0;
  const good = new Map<string, true>();
  const firstRequest = new WeakMap<Socket, NodeJS.Timeout>();

  server.on('connection', (socket: Socket) => {
    const peer = peerOf(socket);
    if (!listed(peer)) {
      const held = perPeer.get(peer) ?? 0;
      const reason =
        unlisted >= unlistedCap ? 'unlisted-share' : held >= UNLISTED_PER_PEER ? 'unlisted-per-peer' : null;
      if (reason !== null) {
        socket.destroy();
        admission.onRefused?.(peer, reason);
        return;
      }
      unlisted++;
      perPeer.set(peer, held + 1);
      socket.once('close', () => {
        unlisted--;
        const left = (perPeer.get(peer) ?? 1) - 1;
        if (left > 0) perPeer.set(peer, left);
        else perPeer.delete(peer);
      });
    }
    if (!good.has(peer)) {
      const timer = setTimeout(() => {
        if (socket.destroyed) return;
        admission.onRefused?.(peer, 'headers-timeout');
        socket.write(rawAnswer(408, 'Request Timeout', 'the request headers did not arrive in time', errorBody));
        socket.destroySoon();
      }, headersMs);
      timer.unref();
      firstRequest.set(socket, timer);
      socket.once('close', () => clearTimeout(timer));
    }
  });
  server.on('request', (req: IncomingMessage, res: ServerResponse) => {
    const timer = firstRequest.get(req.socket);
    if (timer !== undefined) {
      clearTimeout(timer);
      firstRequest.delete(req.socket);
    }
    res.once('finish', () => {
      const peer = peerOf(req.socket);
      if (res.statusCode < 400 && listed(peer) && !good.has(peer)) {
        good.set(peer, true);
        if (good.size > MAX_KNOWN_GOOD) good.delete(good.keys().next().value!);
      }
    });
  });
}

/** The settings a port and address came from (`PORT`, `HOST`), for the line a failed listen ends the start with. */
export interface ListenSettings {
  port: string;
  host: string;
}

/**
 * A listen that failed, said with the setting to change: `PORT=3000 is taken (listen EADDRINUSE: …)`.
 * Before, Node's line alone (`listen EADDRINUSE: address already in use 0.0.0.0:3000`) named no variable.
 */
function listenFailure(err: NodeJS.ErrnoException, port: number, host: string, names: ListenSettings): Error {
  const why =
    err.code === 'EADDRINUSE'
      ? `${names.port}=${port} is taken: another process listens there (stop it, or set ${names.port} to a free port)`
      : err.code === 'EACCES'
        ? `${names.port}=${port} is not allowed to this user (ports below 1024 need privileges: set ${names.port} to 1024 or above)`
        : err.code === 'EADDRNOTAVAIL' || err.code === 'ENOTFOUND' || err.code === 'EAI_AGAIN'
          ? `${names.host}=${host} is no address of this machine (0.0.0.0 listens on all)`
          : null;
  return why === null ? err : Object.assign(new Error(`${why} (${err.message})`), { code: err.code });
}

export async function listen(
  fetch: Parameters<typeof serve>[0]['fetch'],
  at: { port: number; host: string; limits?: ServerLimits; errorBody?: ErrorBody; settings?: ListenSettings },
): Promise<Listening> {
  const limits = at.limits ?? {};
  const shortest = Math.min(limits.headersTimeoutMs ?? 60_000, limits.requestTimeoutMs ?? 300_000);
  const serverOptions = {
    requestTimeout: limits.requestTimeoutMs,
    headersTimeout: limits.headersTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    // Node looks for overdue requests this often (default every 30 s, which would let a 10 s limit
    // run to 40 s): a tenth of the shortest timeout, between 25 ms and 1 s.
    connectionsCheckingInterval: Math.max(25, Math.min(1000, Math.floor(shortest / 10))),
  };
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve(
      { fetch, port: at.port, hostname: at.host, serverOptions: at.limits ? serverOptions : undefined },
      () => resolve(s as Server),
    ) as Server;
    s.once('error', (err: NodeJS.ErrnoException) =>
      reject(at.settings ? listenFailure(err, at.port, at.host, at.settings) : err),
    );
  });
  if (limits.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  if (limits.maxConnections !== undefined) server.maxConnections = limits.maxConnections;
  if (limits.admission) admit(server, limits.admission, limits, at.errorBody);
  if (at.errorBody) answerClientErrors(server, at.errorBody);
  const address = server.address() as AddressInfo;
  const host = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const url = `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${address.port}`;
  return {
    server,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeIdleConnections();
      }),
  };
}
