// Source-IP allow list. The client is the socket's peer; X-Forwarded-For is read only while the
// address at hand is a trusted proxy (TRUSTED_PROXIES), one entry at a time from the right, so a
// header sent by anyone else, or entries a client forged on the left, never decide. The standard
// `Forwarded` header is never read.
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type { Context, MiddlewareHandler } from 'hono';
import { getConnInfo } from '@hono/node-server/conninfo';
import { ApiError } from '../errors.js';

export interface IpAllowOptions {
  /** IPs and CIDRs (IPv4 and IPv6), or `'*'` for any address. */
  allow: string[] | '*';
  /** IPs and CIDRs of the proxies in front of callsync whose X-Forwarded-For is read. Default none (the header is ignored). */
  trustedProxies?: string[];
  /** At most this many trusted proxies are stepped through. Default: every trusted proxy in the chain. */
  trustProxyHops?: number;
  /** Where the socket's peer address comes from; default the Node adapter's connection info. */
  remoteAddress?: (c: Context) => string | undefined;
}

/** `::ffff:10.0.0.1` -> `10.0.0.1`; strips brackets and zone ids. */
export function canonicalIp(ip: string): string {
  let s = ip.trim().replace(/^\[|\]$/g, '');
  const zone = s.indexOf('%');
  if (zone >= 0) s = s.slice(0, zone);
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(s);
  return mapped ? mapped[1]! : s;
}

/**
 * One X-Forwarded-For entry as an address (`1.2.3.4`, `1.2.3.4:5678`, `[2001:db8::1]:443`, ...), or undefined when it is none.
 * @internal Exported for its tests only (test/ingress-proxy.redis.test.ts).
 */
export function forwardedAddress(entry: string): string | undefined {
  let s = entry.trim();
  const bracketed = /^\[([^\]]+)\](?::\d{1,5})?$/.exec(s);
  if (bracketed) s = bracketed[1]!;
  else s = s.replace(/^(\d+\.\d+\.\d+\.\d+):\d{1,5}$/, '$1');
  const ip = canonicalIp(s);
  return isIPv4(ip) || isIPv6(ip) ? ip : undefined;
}

/**
 * An IPv4-mapped IPv6 entry (`::ffff:10.0.0.0/104`) as its IPv4 form (`10.0.0.0/8`); other entries
 * as they are. Prefixes shorter than 96 bits reach beyond the mapped range and stay IPv6.
 */
function canonicalCidr(entry: string): { address: string; bits: number | undefined; family: 'ipv4' | 'ipv6' } {
  const [addrRaw = '', bitsRaw] = entry.trim().split('/');
  const raw = addrRaw.replace(/^\[|\]$/g, '');
  const address = canonicalIp(raw);
  const bits = bitsRaw === undefined ? undefined : Number(bitsRaw);
  const mapped = address !== raw && isIPv4(address) && isIPv6(raw);
  if (mapped && bits !== undefined)
    return bits >= 96 ? { address, bits: bits - 96, family: 'ipv4' } : { address: raw, bits, family: 'ipv6' };
  return { address, bits, family: isIPv6(address) ? 'ipv6' : 'ipv4' };
}

export function buildBlockList(entries: string[]): BlockList {
  const list = new BlockList();
  for (const entry of entries) {
    const { address, bits, family } = canonicalCidr(entry);
    if (bits !== undefined) list.addSubnet(address, bits, family);
    else list.addAddress(address, family);
  }
  return list;
}

const MAX_DECISIONS = 4096;

/**
 * `ip -> on the list?`, remembered: the list never changes, and BlockList.check builds a
 * SocketAddress per call (a few % of the ingress' CPU). Bounded, then checked afresh.
 */
function membership(entries: string[]): (ip: string) => boolean {
  if (entries.length === 0) return () => false;
  const list = buildBlockList(entries);
  const decided = new Map<string, boolean>();
  return (ip) => {
    const known = decided.get(ip);
    if (known !== undefined) return known;
    const member = (isIPv4(ip) && list.check(ip, 'ipv4')) || (isIPv6(ip) && list.check(ip, 'ipv6'));
    if (decided.size < MAX_DECISIONS) decided.set(ip, member);
    return member;
  };
}

export interface ClientAddress {
  /** What the allow list is checked against: an IP, the text of a malformed entry, or undefined (no peer). */
  client: string | undefined;
  /** The socket's peer, canonical. */
  peer: string | undefined;
  /** X-Forwarded-For entries stepped over (each vouched for by a trusted proxy). */
  hops: number;
  /** The entry that became the client is not an IP address. */
  malformed: boolean;
}

/**
 * The client behind the trusted proxies: from the socket's peer, step one X-Forwarded-For entry to
 * the left (from the right end) while the current address is a trusted proxy, at most `maxHops` times.
 */
export function resolveClient(
  peer: string | undefined,
  forwardedFor: string | undefined,
  trusted: (ip: string) => boolean,
  maxHops = Number.POSITIVE_INFINITY,
): ClientAddress {
  if (peer === undefined) return { client: undefined, peer: undefined, hops: 0, malformed: false };
  const peerIp = forwardedAddress(peer) ?? canonicalIp(peer);
  let client = peerIp;
  let hops = 0;
  if (forwardedFor === undefined || maxHops <= 0 || !trusted(client))
    return { client, peer: peerIp, hops, malformed: false };
  const entries = forwardedFor.split(',');
  for (let i = entries.length - 1; i >= 0 && hops < maxHops && trusted(client); i--) {
    const entry = entries[i]!.trim();
    if (entry === '') continue;
    hops++;
    const ip = forwardedAddress(entry);
    if (ip === undefined) return { client: entry.slice(0, 64), peer: peerIp, hops, malformed: true };
    client = ip;
  }
  return { client, peer: peerIp, hops, malformed: false };
}

/**
 * The client address (see resolveClient); kept for callers that need only the address.
 * @internal Exported for its tests only (test/ingress.redis.test.ts).
 */
export function clientIp(
  remote: string | undefined,
  forwardedFor: string | undefined,
  trustedProxies: string[],
  maxHops?: number,
): string | undefined {
  return resolveClient(remote, forwardedFor, membership(trustedProxies), maxHops).client;
}

const LOGGED_HEADER_CHARS = 200;

/** Why the address was refused, for the operator reading the log line. */
function refusalHint(c: Context, who: ClientAddress, peerTrusted: boolean, proxiesConfigured: boolean): string {
  const xff = c.req.header('x-forwarded-for');
  if (who.malformed)
    return `X-Forwarded-For entry "${who.client}" is not an IP address; the trusted proxy in front should append the client's address`;
  if (xff !== undefined && !peerTrusted) {
    return proxiesConfigured
      ? `X-Forwarded-For was ignored: the peer ${who.peer} is not in TRUSTED_PROXIES (add it there if it is your proxy)`
      : `X-Forwarded-For was ignored: set TRUSTED_PROXIES to the proxy's address (the peer ${who.peer}, if it is your proxy)`;
  }
  if (peerTrusted && xff === undefined) {
    const forwarded = c.req.header('forwarded') !== undefined ? ' (the Forwarded header is not read)' : '';
    return `the trusted proxy ${who.peer} sent no X-Forwarded-For${forwarded}; configure it to append the client's address`;
  }
  if (xff === undefined && c.req.header('forwarded') !== undefined)
    return 'the Forwarded header is not read; have the proxy send X-Forwarded-For and set TRUSTED_PROXIES';
  return `${who.client ?? 'the sender'} is not in WEBHOOK_ALLOWED_IPS`;
}

export function ipAllow(options: IpAllowOptions): MiddlewareHandler {
  const proxies = options.trustedProxies ?? [];
  const maxHops = options.trustProxyHops ?? Number.POSITIVE_INFINITY;
  const allowed = options.allow === '*' ? null : membership(options.allow);
  const trusted = membership(proxies);
  const remoteOf = options.remoteAddress ?? ((c) => getConnInfo(c).remote.address);
  return async function ipAllowMiddleware(c, next) {
    if (allowed) {
      const who = resolveClient(remoteOf(c), c.req.header('x-forwarded-for'), trusted, maxHops);
      if (who.client === undefined || who.malformed || !allowed(who.client)) {
        const peerTrusted = who.peer !== undefined && trusted(who.peer);
        const xff = c.req.header('x-forwarded-for');
        throw new ApiError(403, `source address ${who.client ?? 'unknown'} is not allowed to post webhooks`, {
          gate: true,
          // A refused direct client gives its connection back (the connection cap counts idle ones).
          headers: peerTrusted ? {} : { connection: 'close' },
          logFields: {
            peer: who.peer ?? null,
            client: who.client ?? null,
            forwardedFor: xff === undefined ? null : xff.slice(0, LOGGED_HEADER_CHARS),
            hint: refusalHint(c, who, peerTrusted, proxies.length > 0),
          },
        });
      }
    }
    await next();
  };
}
