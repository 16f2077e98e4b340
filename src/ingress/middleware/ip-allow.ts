// Source-IP allow list. X-Forwarded-For is believed only for the configured number of trusted
// proxy hops, counted from the right, so a header the client forges never decides.
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type { MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { ApiError } from '../errors.js';

export interface IpAllowOptions {
  /** IPs and CIDRs (IPv4 and IPv6), or `'*'` for any address. */
  allow: string[] | '*';
  /** How many proxies in front of callsync append to X-Forwarded-For. Default 0 (header ignored). */
  trustProxyHops?: number;
  /** Where the socket's peer address comes from; default the Node adapter's connection info. */
  remoteAddress?: (c: Parameters<MiddlewareHandler>[0]) => string | undefined;
}

/** `::ffff:10.0.0.1` -> `10.0.0.1`; strips brackets and zone ids. */
export function canonicalIp(ip: string): string {
  let s = ip.trim().replace(/^\[|\]$/g, '');
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(s);
  return mapped ? mapped[1]! : s;
}

export function buildBlockList(entries: string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const [addrRaw, bits] = entry.split('/');
    const addr = canonicalIp(addrRaw ?? '');
    const type = isIPv6(addr) ? 'ipv6' : 'ipv4';
    if (bits !== undefined) list.addSubnet(addr, Number(bits), type);
    else list.addAddress(addr, type);
  }
  return list;
}

/** The client address after peeling off `hops` trusted proxies; undefined when it cannot be told. */
export function clientIp(remote: string | undefined, forwardedFor: string | undefined, hops: number): string | undefined {
  if (remote === undefined) return undefined;
  if (hops <= 0) return canonicalIp(remote);
  const forwarded = (forwardedFor ?? '').split(',').map((s) => s.trim()).filter(Boolean);
  const chain = [...forwarded, remote];
  const index = chain.length - 1 - hops;
  return canonicalIp(chain[Math.max(0, index)]!);
}

const MAX_DECISIONS = 4096;

export function ipAllow(options: IpAllowOptions): MiddlewareHandler {
  const hops = options.trustProxyHops ?? 0;
  const list = options.allow === '*' ? null : buildBlockList(options.allow);
  const remoteOf = options.remoteAddress ?? ((c) => getConnInfo(c).remote.address);
  // The list never changes, so each address' answer is remembered (BlockList.check builds a
  // SocketAddress per call, a few % of the ingress' CPU); bounded, then checked afresh.
  const decided = new Map<string, boolean>();
  const check = (ip: string) => list !== null && ((isIPv4(ip) && list.check(ip, 'ipv4')) || (isIPv6(ip) && list.check(ip, 'ipv6')));
  return async function ipAllowMiddleware(c, next) {
    if (list) {
      const ip = clientIp(remoteOf(c), c.req.header('x-forwarded-for'), hops);
      let allowed = false;
      if (ip !== undefined) {
        const known = decided.get(ip);
        allowed = known ?? check(ip);
        if (known === undefined && decided.size < MAX_DECISIONS) decided.set(ip, allowed);
      }
      if (!allowed) throw new ApiError(403, `source address ${ip ?? 'unknown'} is not allowed to post webhooks`);
    }
    await next();
  };
}
