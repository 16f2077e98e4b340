// The ingress role: the webhook app behind the acceptor (the inbound log, with the local spool in
// front while Redis is away), served on HTTP.
import type { Server } from 'node:http';
import { isIPv4, isIPv6 } from 'node:net';
import type { Hono } from 'hono';
import { createIngressApp } from '../../src/ingress/app.js';
import { errorBodyText } from '../../src/ingress/errors.js';
import { InboundAcceptor, withTimeout, type CallAcceptor } from '../../src/ingress/accept.js';
import { buildBlockList } from '../../src/ingress/middleware/ip-allow.js';
import { SpoolingAcceptor, spoolDirWritable } from '../../src/ingress/spool.js';
import { listen } from '../../src/listen.js';
import { neverReachedReason } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import { createSources } from '../../src/sources/index.js';
import { Closers, type Role, type RoleDeps } from './lifecycle.js';

export interface IngressRole extends Role {
  app: Hono;
  server: Server;
  /** `http://host:port` of the ingress. */
  url: string;
  /** The ingress spool (acknowledges into local disk while Redis is away), when on. */
  spool: SpoolingAcceptor | null;
}

/** The spool for this prefix when it is enabled (or, by default, when its folder is writable). */
async function openSpool({ config, log }: RoleDeps, inner: CallAcceptor): Promise<SpoolingAcceptor | null> {
  // One spool folder per queue prefix: what is spooled belongs to that prefix's queues.
  const { dir, enabled, maxBytes, minFreeBytes } = config.spool;
  if (!(enabled ?? (await spoolDirWritable(dir)))) {
    log.warn({ dir }, 'spool off: without Redis the ingress answers 503');
    return null;
  }
  const spool = new SpoolingAcceptor(inner, { dir, log, maxBytes, minFreeBytes });
  try {
    await spool.open();
    return spool;
  } catch (err) {
    if (enabled) throw err;
    log.warn({ err: { message: (err as Error).message } }, 'spool unavailable: without Redis the ingress answers 503');
    return null;
  }
}

/** Logs refused connections (at the connection cap): the first at once, then a count at most once a minute. */
function warnDropped(log: RoleDeps['log'], maxConnections: number): () => void {
  let dropped = 0;
  let quietUntil = 0;
  return () => {
    dropped++;
    const now = Date.now();
    if (now < quietUntil) return;
    log.warn({ dropped, maxConnections }, 'connection refused: HTTP_MAX_CONNECTIONS reached');
    dropped = 0;
    quietUntil = now + 60_000;
  };
}

/** Whether a peer is on the webhook allow list or a trusted proxy (src/listen.ts, `Admission`). */
function listedPeer(webhook: RoleDeps['config']['webhook']): (peer: string) => boolean {
  if (webhook.allowedIps === '*') return () => true;
  const list = buildBlockList([...webhook.allowedIps, ...(webhook.trustedProxies ?? [])]);
  return (peer) => (isIPv4(peer) && list.check(peer, 'ipv4')) || (isIPv6(peer) && list.check(peer, 'ipv6'));
}

/** One line a minute at most about connections refused for their peer, with the counts by reason. */
function warnUnlisted(log: RoleDeps['log']): (peer: string, reason: string) => void {
  let counts: Record<string, number> = {};
  let quietUntil = 0;
  return (peer, reason) => {
    counts[reason] = (counts[reason] ?? 0) + 1;
    const now = Date.now();
    if (now < quietUntil) return;
    log.warn(
      { peer, refused: counts },
      'connection refused: its peer is not on WEBHOOK_ALLOWED_IPS and holds its share, or was slow to send headers',
    );
    counts = {};
    quietUntil = now + 60_000;
  };
}

export interface IngressRoleOptions {
  /** Why this process' fan-out makes no progress, or null (role all: readiness reports it). */
  fanOutStalled?: () => string | null;
  /** What /readyz adds when ready (role all: the paused sink queues, with why). */
  readyDetail?: () => Promise<Record<string, unknown>>;
}

export async function startIngressRole(deps: RoleDeps, roleOptions: IngressRoleOptions = {}): Promise<IngressRole> {
  const { config, options, log, redis, inboundLog, redisReached, redisError } = deps;
  const closers = new Closers(log, deps.closers);
  return closers.opening(async () => {
    const inbound = new InboundAcceptor(inboundLog, {
      dedupeWindowMs: config.webhook.dedupeWindowMs,
      timeoutMs: config.webhook.enqueueTimeoutMs,
      timeline: deps.timelines.producer,
      timelineConnection: redis.producer,
    });
    const spool = await openSpool(deps, inbound);
    // A spool holding events of an earlier run: this process was restarted during an outage (the
    // one before reached Redis), so it keeps serving it before its own first connection.
    const restartedInOutage = (spool?.pending ?? 0) > 0;
    if (spool) closers.add('close spool', () => spool.close());
    const acceptor = options.wrapAcceptor ? options.wrapAcceptor(spool ?? inbound) : (spool ?? inbound);
    const app = createIngressApp({
      webhook: config.webhook,
      acceptor,
      sources: createSources(config.sources, {
        redis: redis.producer,
        keys: redisKeys(config.redis),
        now: options.now,
      }),
      // Ready when events can be acknowledged durably: Redis answers, or the spool takes them.
      // (A load balancer routing on /readyz keeps sending to an ingress that spools.) The spool
      // serves outages only: a Redis never reached since start (a wrong address, nothing running)
      // is not ready, unless the spool held events of an earlier run (restarted during an outage).
      ready: async () => {
        const redisUp = await withTimeout(redis.producer.ping(), 1000, 'redis ping').then(
          (r) => r === 'PONG',
          () => false,
        );
        if (!redisUp && !redisReached() && !restartedInOutage) return neverReachedReason(config.redis, redisError());
        // Redis answers and still the fan-out makes no progress: not ready (an outage is the spool's case).
        const stalled = redisUp ? (roleOptions.fanOutStalled?.() ?? null) : null;
        if (stalled) return stalled;
        return redisUp || ((await spool?.checkAccepting()) ?? false);
      },
      log,
      refusals: deps.timelines.producer,
      readyDetail: roleOptions.readyDetail,
      events: options.ingressEvents,
      before: options.ingressBefore,
    });
    const http = await listen(app.fetch, {
      port: config.http.port,
      host: config.http.host,
      settings: { port: 'PORT', host: 'HOST' },
      limits: {
        // A slow sender is cut off (408) instead of holding a connection for Node's default 300 s.
        requestTimeoutMs: config.http.requestTimeoutMs,
        // Counted from a request's first byte (Node >= 18), so the keep-alive idle time below does
        // not count against it: no need for the old "headers timeout > keep-alive" rule (nodejs/node#27363).
        headersTimeoutMs: config.http.headersTimeoutMs,
        // Keep-alive longer than typical load balancers' idle timeout, so they close first.
        keepAliveTimeoutMs: 65_000,
        maxConnections: config.http.maxConnections,
        // Peers that can never pass the allow list hold only a small share of the cap (src/listen.ts).
        admission: { listed: listedPeer(config.webhook), onRefused: warnUnlisted(log) },
      },
      // Node's own answers (unparsable requests, too slow ones) carry the error body too.
      errorBody: errorBodyText,
    });
    closers.add('stop http intake', () => http.close());
    http.server.on('drop', warnDropped(log, config.http.maxConnections));
    log.info(
      {
        url: http.url,
        allowedIps: config.webhook.allowedIps,
        auth: config.webhook.authHeader ? 'shared-secret' : 'none',
      },
      'ingress listening',
    );
    return { app, server: http.server, url: http.url, spool, close: () => closers.close() };
  });
}
