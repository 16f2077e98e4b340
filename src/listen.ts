// Serves a Hono app on a port: one place for listening, the URL a log line shows, and closing.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
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
}

export async function listen(fetch: Parameters<typeof serve>[0]['fetch'], at: { port: number; host: string; limits?: ServerLimits }): Promise<Listening> {
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
    const s = serve({ fetch, port: at.port, hostname: at.host, serverOptions: at.limits ? serverOptions : undefined }, () => resolve(s as Server)) as Server;
    s.once('error', reject);
  });
  if (limits.keepAliveTimeoutMs !== undefined) server.keepAliveTimeout = limits.keepAliveTimeoutMs;
  if (limits.maxConnections !== undefined) server.maxConnections = limits.maxConnections;
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
