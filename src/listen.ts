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

export async function listen(fetch: Parameters<typeof serve>[0]['fetch'], at: { port: number; host: string }): Promise<Listening> {
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve({ fetch, port: at.port, hostname: at.host }, () => resolve(s as Server)) as Server;
    s.once('error', reject);
  });
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
