// Redis connections for BullMQ: workers block and must retry forever; producers must fail fast
// so the ingress can answer 503 instead of hanging while Redis is away.
import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
// ioredis' own connectors (exported from its connectors module; the package index has only the Sentinel one).
import { SentinelConnector, StandaloneConnector } from 'ioredis/built/connectors/index.js';

type NetStream = Awaited<ReturnType<StandaloneConnector['connect']>>;
const laterSocketError = (): void => undefined;

/**
 * ioredis listens for a socket's 'error' with `once` (redis/ioredis#961, #1183, both unfixed): a
 * socket that fails twice — over TLS a certificate refused, then the server's alert arriving — has
 * no listener for the second error, which Node throws as an unhandled 'error' event: the process
 * dies (seen in CI with an untrusted Redis certificate). Every socket callsync's connections open
 * keeps a listener of its own; ioredis still handles the first error as always (reconnect, its
 * 'error' event). test/redis-tls.redis.test.ts.
 */
class GuardedStandaloneConnector extends StandaloneConnector {
  override async connect(emitter: Parameters<StandaloneConnector['connect']>[0]): Promise<NetStream> {
    const stream = await super.connect(emitter);
    stream.on('error', laterSocketError);
    return stream;
  }
}

/** The same for the master found through Sentinel (its sentinel clients are ioredis' own). */
class GuardedSentinelConnector extends SentinelConnector {
  override async connect(emitter: Parameters<SentinelConnector['connect']>[0]): Promise<NetStream> {
    const stream = await super.connect(emitter);
    stream.on('error', laterSocketError);
    return stream;
  }
}

export type ConnectionRole = 'worker' | 'producer';

/** A connection to one Redis (or one found through Sentinel), or to a Redis Cluster. */
export type RedisClient = Redis | Cluster;

export interface RedisNode {
  host: string;
  port: number;
}

/** How callsync finds or starts a Redis when none is configured (config: REDIS_LOCAL_PROBE, DATA_DIR, REDIS_SERVER_BIN). */
export interface LocalRedisSettings {
  /** The address used when a Redis answers there (REDIS_LOCAL_PROBE, default 127.0.0.1:6379); null: never probe. */
  probe: RedisNode | null;
  /** The private Redis' folder: DATA_DIR/redis. */
  dir: string;
  /** REDIS_SERVER_BIN: the redis-server to start; unset: `redis-server` on PATH. */
  serverBin?: string;
}

/**
 * Where callsync's Redis is and how to log in, parsed once by the config: one Redis at `url`
 * (REDIS_URL), or a Redis Cluster (REDIS_CLUSTER_NODES, any of its nodes), or the master of
 * `sentinelName` found through Sentinel (REDIS_SENTINELS, REDIS_SENTINEL_NAME).
 */
export interface RedisSettings {
  url: string;
  /** Seed nodes of a Redis Cluster (REDIS_CLUSTER_NODES); empty: not a cluster. */
  clusterNodes: RedisNode[];
  /** Sentinels (REDIS_SENTINELS); empty: no Sentinel. */
  sentinels: RedisNode[];
  /** The master's name at the sentinels (REDIS_SENTINEL_NAME). */
  sentinelName?: string;
  /** REDIS_PASSWORD: wins over a password in `url`; also the sentinels' password. */
  password?: string;
  /** TLS to Redis (a `rediss://` REDIS_URL, or REDIS_TLS for cluster nodes and sentinels). */
  tls: boolean;
  /**
   * QUEUE_PREFIX: what every key starts with (queues/keys.ts). On a Redis Cluster a prefix without
   * `{…}` spreads the keys over the masters; a `{hash-tag}` keeps them all in one slot.
   */
  prefix: string;
  /** INBOUND_SHARDS: streams of the inbound log. Unset: 1, or 8 when a cluster spreads the keys (queues/keys.ts). */
  inboundShards?: number;
  /**
   * Set when no Redis is configured (REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS unset): `url`
   * is then only the probe address, and queues/private-redis.ts `resolveRedis` decides (the probe
   * address when a Redis answers there, else a private one) before anything connects.
   */
  local?: LocalRedisSettings;
}

export type RedisMode = 'single' | 'cluster' | 'sentinel';

export function redisMode(settings: Pick<RedisSettings, 'clusterNodes' | 'sentinels'>): RedisMode {
  if (settings.clusterNodes.length > 0) return 'cluster';
  if (settings.sentinels.length > 0) return 'sentinel';
  return 'single';
}

/**
 * Settings of one Redis at `url` (tests, tools): no cluster, no Sentinel.
 * @internal Exported for its tests only (test/redis-tls.redis.test.ts, test/startup-failure.redis.test.ts …).
 */
export function singleRedis(url: string, prefix = 'callsync'): RedisSettings {
  return { url, clusterNodes: [], sentinels: [], tls: url.startsWith('rediss://'), prefix };
}

/** Where the settings point, for logs and check-config: never a password. */
export function describeRedis(settings: RedisSettings): string {
  const nodes = (list: RedisNode[]) => list.map((n) => `${n.host}:${n.port}`).join(',');
  const tls = settings.tls ? ' (TLS)' : '';
  switch (redisMode(settings)) {
    case 'cluster':
      return `cluster ${nodes(settings.clusterNodes)}${tls}`;
    case 'sentinel':
      return `sentinel ${nodes(settings.sentinels)} master "${settings.sentinelName ?? ''}"${tls}`;
    default: {
      try {
        const u = new URL(settings.url);
        if (u.password) u.password = '***';
        else if (u.username) u.username = '***';
        return u.toString();
      } catch {
        return '(unparsable REDIS_URL)';
      }
    }
  }
}

/**
 * The one way callsync connects to Redis: queues, inbound log, state, locks, CLI, dashboard and
 * metrics all come here. `worker` connections block and must retry forever; `producer` ones fail
 * fast so the ingress can answer 503 instead of hanging while Redis is away. The same role
 * settings apply to each node of a cluster and to the master found through Sentinel.
 */
export function createRedis(settings: RedisSettings, role: ConnectionRole, extra: RedisOptions = {}): RedisClient {
  const base: RedisOptions =
    role === 'worker'
      ? { maxRetriesPerRequest: null, enableReadyCheck: true }
      : { maxRetriesPerRequest: 1, enableOfflineQueue: false, connectTimeout: 1000, enableReadyCheck: true };
  const login: RedisOptions = {
    ...(settings.password !== undefined ? { password: settings.password } : {}),
    ...(settings.tls ? { tls: {} } : {}),
  };
  const mode = redisMode(settings);
  // ioredis types the constructor's argument as unknown; it passes the connection's options, as to its own.
  const Connector = (mode === 'sentinel'
    ? GuardedSentinelConnector
    : GuardedStandaloneConnector) as unknown as RedisOptions['Connector'];
  // Reconnect quickly at first, then at most every 2 s: a restarted Redis is picked up fast.
  const retryStrategy = (times: number) => Math.min(times * 100, 2000);
  if (mode === 'cluster') {
    const { enableOfflineQueue, ...nodeBase } = base;
    const options: ClusterOptions = {
      redisOptions: { ...nodeBase, ...login, Connector, ...extra },
      clusterRetryStrategy: extra.retryStrategy ?? retryStrategy,
      enableOfflineQueue: extra.enableOfflineQueue ?? enableOfflineQueue ?? true,
      enableReadyCheck: true,
      lazyConnect: extra.lazyConnect ?? false,
      // A failover takes the cluster a few seconds: retry MOVED/CLUSTERDOWN meanwhile.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 300,
      retryDelayOnTryAgain: 100,
      slotsRefreshTimeout: 2000,
      // Over TLS the nodes are connected by the names they are known by (REDIS_CLUSTER_NODES, then
      // the names the cluster announces), not by the address a name resolves to first: a managed
      // cluster's certificate names its hosts, never their addresses (ioredis' README on
      // ElastiCache with TLS). Plain connections keep ioredis' own lookup.
      ...(settings.tls
        ? { dnsLookup: (address: string, callback: (err: null, address: string) => void) => callback(null, address) }
        : {}),
    };
    return new Cluster(settings.clusterNodes, options);
  }
  if (mode === 'sentinel') {
    return new Redis({
      ...base,
      sentinels: settings.sentinels,
      name: settings.sentinelName ?? 'mymaster',
      ...login,
      ...(settings.password !== undefined ? { sentinelPassword: settings.password } : {}),
      ...(settings.tls ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      retryStrategy,
      sentinelRetryStrategy: retryStrategy,
      // After a failover the old master answers READONLY: reconnect to the new one.
      reconnectOnError: (err) => /^READONLY/.test(err.message),
      lazyConnect: false,
      Connector,
      ...extra,
    });
  }
  return new Redis(settings.url, {
    ...base,
    ...login,
    retryStrategy,
    lazyConnect: false,
    Connector,
    ...extra,
  });
}

/**
 * Whether `client` has been ready at least once since it was made. Readiness tells a Redis that was
 * never reached (a wrong address, nothing started: not ready) from an outage after it was (the
 * ingress spool's case).
 */
export function readyOnce(client: RedisClient): () => boolean {
  let reached = client.status === 'ready';
  if (!reached) client.once('ready', () => (reached = true));
  return () => reached;
}

/**
 * The last error `client` reported (a cluster's: the last node's), cleared when it is ready: why a
 * connection was never made — connect() itself fails with only "Connection is closed.".
 */
export function lastRedisError(client: RedisClient): () => Error | undefined {
  let last: Error | undefined;
  const keep = (err: Error & { lastNodeError?: Error }) => (last = err.lastNodeError ?? err);
  client.on('error', keep);
  client.on('node error', keep);
  client.on('ready', () => (last = undefined));
  return () => last;
}

/** Network errors as a person reads them; the code stays beside, for searching. */
const NETWORK_REASONS: Record<
  string,
  (err: NodeJS.ErrnoException & { hostname?: string }, timeoutMs?: number) => string
> = {
  ECONNREFUSED: () => 'connection refused',
  ENOTFOUND: (err) => `host "${err.hostname ?? '?'}" not found`,
  EAI_AGAIN: (err) => `host "${err.hostname ?? '?'}" could not be looked up (DNS did not answer)`,
  ETIMEDOUT: (_err, timeoutMs) =>
    timeoutMs === undefined ? 'no answer in time' : `no answer within ${timeoutMs / 1000} s`,
  ECONNRESET: () => 'connection reset',
  EHOSTUNREACH: () => 'host unreachable',
  ENETUNREACH: () => 'network unreachable',
};

/** Redis answered but refused the credentials: the first word of its reply, and what to do. */
const CREDENTIAL_REPLIES: Record<string, (passwordFrom: string) => string> = {
  WRONGPASS: (from) => `refused the password (WRONGPASS): check ${from}`,
  NOAUTH: (from) => `wants a password (NOAUTH): set it in ${from}`,
};

/**
 * Why connecting to Redis failed, in a few words (`connection refused (ECONNREFUSED)`, `host "x"
 * not found (ENOTFOUND)`); `answered` when Redis answered but refused the credentials, and then
 * where the password comes from (`passwordFrom`) is named.
 */
export function redisFailure(
  cause: Error,
  passwordFrom = 'REDIS_URL or REDIS_PASSWORD',
  timeoutMs?: number,
): { reason: string; answered: boolean } {
  const credentials = CREDENTIAL_REPLIES[cause.message.split(' ')[0]!];
  if (credentials) return { reason: credentials(passwordFrom), answered: true };
  // ioredis' Sentinel client, every sentinel tried: its text ends in "retry is disabled. Last error: …".
  if (cause.message.startsWith('All sentinels are unreachable'))
    return { reason: 'no sentinel answers (REDIS_SENTINELS)', answered: false };
  const code = (cause as NodeJS.ErrnoException).code;
  const network = code === undefined ? undefined : NETWORK_REASONS[code];
  return {
    reason: network ? `${network(cause, timeoutMs)} (${code})` : cause.message.split('\n')[0]!,
    answered: false,
  };
}

/** The reason /readyz gives while Redis was never reached since start, with the last error's cause. */
export function neverReachedReason(settings: RedisSettings, cause?: Error): string {
  return `Redis not reached since start (${describeRedis(settings)})${cause ? `: ${redisFailure(cause).reason}` : ''}`;
}

/** Network failures of the connection to Redis (Node's error codes). */
const CONNECTION_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ETIMEDOUT',
  'EPIPE',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ECONNABORTED',
  'ENOTCONN',
]);

/**
 * Redis replies that describe Redis or its surroundings, never the data sent: loading, full, a
 * replica, a cluster or failover in progress, a script blocking it, persistence failing, the
 * credentials or ACLs, a key of another type. Retrying later is right; the command was fine.
 */
const UNAVAILABLE_REPLY =
  /^(LOADING|OOM|READONLY|CLUSTERDOWN|TRYAGAIN|MASTERDOWN|NOREPLICAS|BUSY|MISCONF|NOAUTH|WRONGPASS|NOPERM|WRONGTYPE|MOVED|ASK|ERR max number of clients)\b/;

/**
 * Errors of ioredis and its parser that mean the connection, not the command, failed; and too few
 * replicas confirming a write (ACK_REPLICAS, queues/inbound.ts).
 */
const CONNECTION_ERROR_NAMES = new Set([
  'ReplicationError',
  'MaxRetriesPerRequestError',
  'AbortError',
  'InterruptError',
  'ParserError',
  'ClusterAllFailedError',
  'TimeoutError',
]);
// ioredis' Cluster client: a failover outlasting its redirections (MOVED/TRYAGAIN/CLUSTERDOWN retried
// `maxRedirections` times), its nodes or the whole cluster disconnected, or not ready yet.
const CONNECTION_MESSAGES =
  /^(Connection is closed\.|Stream isn't writeable|Command timed out|Connection timed out|connect ETIMEDOUT|.* timed out after \d+ ms$|Too many Cluster redirections|Cluster is disconnect(ed|ing)\.|Node is disconnected|None of startup nodes is available|Cluster isn't ready and enableOfflineQueue options is false)/;

/**
 * True when `err` says Redis is unavailable (connection refused, reset, closed or timed out;
 * retries used up; Redis loading, full, read-only, failing over, or refusing the credentials):
 * the same command may succeed later, so the caller keeps its work and retries it.
 * False for everything else — a RangeError or TypeError, a value that cannot be serialized, a
 * Redis reply about the data sent (`ERR ...` for a script argument, a protocol error for a too
 * large value): retrying the same data would fail the same way.
 */
export function isRedisUnavailable(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 5) return false;
  const e = err as Error & { code?: unknown };
  if (typeof e.code === 'string' && CONNECTION_CODES.has(e.code)) return true;
  if (CONNECTION_ERROR_NAMES.has(e.name)) return true;
  if (e.name === 'ReplyError') return UNAVAILABLE_REPLY.test(e.message);
  if (CONNECTION_MESSAGES.test(e.message)) return true;
  // A failure wrapping a connection failure (e.g. the ingress' QueueUnavailableError).
  return e.cause !== undefined && isRedisUnavailable(e.cause, depth + 1);
}

/** How long start-up waits for Redis before serving anyway (the ingress then answers 503 or spools). */
export const STARTUP_REDIS_WAIT_MS = 2000;
/** How long shutdown waits for queue handles still setting up their connection before closing them. */
export const SHUTDOWN_SETUP_WAIT_MS = 1000;

/**
 * Waits until every promise has settled, at most `ms`. Never rejects; true when all settled in
 * time. For BullMQ handles: `queue.waitUntilReady()` is the handle's connection set-up (INFO,
 * scripts), which must not be left running when the handle is closed (see `bullmqReady`).
 */
export async function settledWithin(promises: Iterable<Promise<unknown>>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([Promise.allSettled(promises).then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** What a BullMQ Queue or Worker offers to wait for its connection set-up. */
export interface BullmqHandle {
  waitUntilReady(): Promise<unknown>;
}

/**
 * Waits (at most `ms`) for the connection set-up of these BullMQ handles. Call it after opening
 * them and before closing them: BullMQ reports a set-up that fails after `close()` as an 'error'
 * event on an emitter whose listeners `close()` removed, which throws inside a promise callback:
 * an unhandled rejection ("Connection is closed.", "Stream isn't writeable...") that crashes Node.
 * True when every handle finished its set-up (or failed it) in time.
 */
export function bullmqReady(handles: Iterable<BullmqHandle>, ms: number): Promise<boolean> {
  const setups: Promise<unknown>[] = [];
  for (const handle of handles) {
    try {
      setups.push(handle.waitUntilReady());
    } catch (err) {
      setups.push(Promise.reject(err));
    }
  }
  return settledWithin(setups, ms);
}
