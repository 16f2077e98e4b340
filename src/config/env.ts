// The environment, parsed once through one zod schema: every variable callsync reads is declared
// here or, composed in, by the part that reads it — each sink type's `env` (src/sinks/registry.ts),
// each source type's (src/sources/registry.ts)
// and the platform API client's (src/telephony/client.ts). README's variable table is checked
// against this schema by test/config-docs.test.ts.
import { z } from 'zod';
import {
  decimal,
  envEnum,
  envInt,
  envList,
  envOptionalBool,
  envOptionalInt,
  envString,
  envStringOr,
  envUrl,
  shownUrl,
  type EnvShape,
} from '../env-values.js';
import { sinkEnv } from '../sinks/registry.js';
import { sourceEnv } from '../sources/registry.js';
import { telephonyEnv } from '../telephony/client.js';

const csv = envList;
const int = envInt;
const optionalInt = envOptionalInt;
const optionalBool = envOptionalBool;
const optionalString = envString;

/**
 * What is wrong with a REDIS_URL, or undefined. ioredis reads a URL it cannot parse as no URL at all
 * and a database that is no number as NaN: once `callsync start` failed with "Invalid URL" (exit 1)
 * and a bad database looked like an unreachable Redis.
 */
function redisUrlProblem(value: string): string | undefined {
  if (!/^rediss?:\/\//.test(value)) return 'expected redis://host:port or rediss://… (TLS)';
  if (!URL.canParse(value))
    return 'not a valid URL (a port from 1 to 65535; a password with /, #, ? or @ percent-encoded, or set in REDIS_PASSWORD)';
  const url = new URL(value);
  if (url.hostname === '') return 'expected redis://host:port or rediss://… (TLS): no host';
  if (url.port === '0') return 'a port from 1 to 65535 (0 is no port to connect to)';
  if (!/^\/?(\d+)?$/.test(url.pathname)) return 'the path is the database number (redis://host:6379/0)';
  if (url.search || url.hash) return 'expected redis://host:port[/database], without ? or #';
  return undefined;
}

/** The platform's documented webhook source addresses (spec section 5). */
export const PLATFORM_WEBHOOK_IPS = ['217.116.118.254', '212.9.46.32'];

const coreEnv = {
  /** Which roles this process runs: ingress, worker, poller or all. Default all. */
  CALLSYNC_ROLE: envEnum(['ingress', 'worker', 'poller', 'all'], 'all'),
  PORT: int(3000, 0, 65535),
  /** Listen address. Default 0.0.0.0 (the allow list guards the webhook). */
  HOST: envStringOr('0.0.0.0'),
  /**
   * The Redis, `redis://[user:password@]host:port` or `rediss://…` (TLS). Unset (and no cluster or
   * Sentinel): the Redis answering at REDIS_LOCAL_PROBE, else a private one in DATA_DIR/redis.
   */
  REDIS_URL: optionalString.superRefine((v, ctx) => {
    if (v === undefined) return;
    // Never echoed: it may hold the password.
    const problem = redisUrlProblem(v);
    if (problem) ctx.addIssue({ code: 'custom', message: problem });
  }),
  /** Where callsync looks for a local Redis when none is configured, `host:port` or `off`. Default 127.0.0.1:6379. */
  REDIS_LOCAL_PROBE: envStringOr('127.0.0.1:6379'),
  /** The redis-server callsync starts as its private Redis when none is configured or answering. Default: `redis-server` on PATH. */
  REDIS_SERVER_BIN: optionalString,
  /** Folder of callsync's local state; the private Redis keeps its data, password and pid/port file in DATA_DIR/redis. Default ./data. */
  DATA_DIR: envStringOr('./data'),
  /** Seed nodes of a Redis Cluster, `host:port,…` (any of its nodes; the rest are discovered). Set: REDIS_URL is not used. */
  REDIS_CLUSTER_NODES: csv,
  /** Sentinels, `host:port,…`, asked for the master named REDIS_SENTINEL_NAME. Set: REDIS_URL is not used. */
  REDIS_SENTINELS: csv,
  /** The master's name at the sentinels (needed with REDIS_SENTINELS). */
  REDIS_SENTINEL_NAME: optionalString,
  /** Redis password (managed Redis, ACL users' `requirepass`); wins over one in REDIS_URL, also sent to the sentinels. */
  REDIS_PASSWORD: optionalString,
  /** TLS to the cluster nodes and sentinels (a single Redis: `rediss://` in REDIS_URL). Default: on when REDIS_URL is `rediss://`. */
  REDIS_TLS: optionalBool,
  /**
   * Prefix of every Redis key. On a Redis Cluster a prefix without `{…}` spreads the keys over the
   * masters (each queue, inbound shard and channel its own `{QUEUE_PREFIX:…}` tag); a `{hash-tag}`
   * prefix keeps every key in one slot (the layout before spreading). Default callsync.
   */
  QUEUE_PREFIX: envStringOr('callsync').refine((v) => !/\s/.test(v), 'expected a prefix without spaces'),
  /**
   * Streams the inbound log is sharded into (a call's shard by the hash of its key; the fan-out
   * reads every shard). Default 1, or 8 on a Redis Cluster with spread keys. 1–64.
   */
  INBOUND_SHARDS: optionalInt(1),
  CALLSYNC_CONFIG: optionalString,
  LOG_LEVEL: envEnum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),

  WEBHOOK_ALLOWED_IPS: optionalString,
  /** Proxies (IPs and CIDRs, comma-separated) whose X-Forwarded-For is read. Default none: the header is ignored. */
  TRUSTED_PROXIES: optionalString,
  /** At most this many trusted proxies are stepped through in X-Forwarded-For. Default: all of them. Needs TRUSTED_PROXIES. */
  TRUST_PROXY_HOPS: optionalInt(0),
  WEBHOOK_AUTH_HEADER: optionalString,
  WEBHOOK_AUTH_TOKENS: csv,
  /** How long a client may take to send a whole request (headers and body). Default 30 s. */
  WEBHOOK_REQUEST_TIMEOUT_MS: int(30_000, 1),
  /** How long a client may take to send a request's headers (at most WEBHOOK_REQUEST_TIMEOUT_MS). Default 10 s. */
  HTTP_HEADERS_TIMEOUT_MS: int(10_000, 1),
  /** Connections the ingress holds open at once (idle keep-alive ones included); more are refused. Default 1000. */
  HTTP_MAX_CONNECTIONS: int(1000, 1),
  /**
   * Largest accepted webhook body in bytes. Default 8 MiB: the largest realistic call, 3 hours with
   * its chunks, is about 0.7 MB (docs/reliability.md §9), so this leaves a tenfold margin; the
   * ingress' body budget (8 MiB, sized for a 512 MB RSS bound) holds eleven such calls at once, and a
   * body of the full limit alone (docs/operations.md "Memory").
   */
  WEBHOOK_BODY_LIMIT: int(8 * 1024 * 1024, 1),
  /**
   * How long a webhook whose body does not fit in the body budget waits for room, in line, before it
   * is answered 503 (below WEBHOOK_REQUEST_TIMEOUT_MS). Default 2 s, or half the request timeout when
   * that is shorter; 0: refused at once.
   */
  WEBHOOK_BODY_WAIT_MS: optionalInt(0),
  /**
   * Deepest nesting of arrays and objects in a webhook body (the body is level 1). Default 64; at
   * most 1000, as deeper JSON overflows the stack of the serializers downstream.
   */
  WEBHOOK_MAX_DEPTH: int(64, 1).refine(
    (n) => n <= 1000,
    'expected at most 1000 (deeper JSON overflows the serializers downstream)',
  ),
  /** Most elements of one array, or keys of one object, in a webhook body. Default 100000. */
  WEBHOOK_MAX_ENTRIES: int(100_000, 1),
  /** Most values (containers included) in a whole webhook body. Default 1000000. */
  WEBHOOK_MAX_VALUES: int(1_000_000, 1),
  /** The same call delivered again within this many seconds is a duplicate. Default 24 h. */
  DEDUPE_WINDOW_SECONDS: int(24 * 3600, 1),
  /** How long the ingress waits for Redis before answering 503. Default 1500 ms. */
  ENQUEUE_TIMEOUT_MS: int(1500, 1),
  /**
   * Replicas that must have a batch of calls before any of it is acknowledged: after each append,
   * `WAIT ACK_REPLICAS ACK_REPLICAS_TIMEOUT_MS`; fewer in time -> 503 (or the spool). Default 0
   * (acknowledged once in the master's memory).
   */
  ACK_REPLICAS: int(0, 0),
  /** How long one batch waits for its replicas (below ENQUEUE_TIMEOUT_MS). Default 500 ms. */
  ACK_REPLICAS_TIMEOUT_MS: int(500, 1),
  /**
   * Acknowledge webhooks into a local fsync'd spool while Redis is unreachable, drained into the
   * queue in order when it returns (docs/reliability.md). Default: on when SPOOL_DIR is writable.
   */
  SPOOL_ENABLED: optionalBool,
  /** Folder of the ingress spool (one subfolder per QUEUE_PREFIX; one ingress process per folder). Default DATA_DIR/spool. */
  SPOOL_DIR: envString,
  /** Beyond this many bytes spooled, the ingress answers 503 again. Default 1 GiB. */
  SPOOL_MAX_BYTES: int(1024 * 1024 * 1024, 1),
  /** The spool refuses events (503, not ready) when its filesystem would keep less than this many bytes free. Default 16 MiB. */
  SPOOL_MIN_FREE_BYTES: int(16 * 1024 * 1024),

  JOB_ATTEMPTS: int(12, 1),
  /** Archive objects older than this many days are deleted (folder: the retention sweeper; S3: `callsync retention apply`). Unset: kept. */
  ARCHIVE_RETENTION_DAYS: optionalInt(1),
  /** Completed jobs (with their call data) older than this are removed by the retention sweeper. Default 1 day. */
  COMPLETED_JOB_RETENTION_SECONDS: int(24 * 3600, 1),
  /** Dead letters (failed jobs) and parked log entries older than this are removed by the retention sweeper. Default 14 days. */
  FAILED_JOB_RETENTION_SECONDS: int(14 * 24 * 3600, 1),
  /** How often the worker role's retention sweeper runs (one process per interval). 0: never. Default 1 h. */
  RETENTION_SWEEP_INTERVAL_SECONDS: int(3600, 0),
  JOB_BACKOFF_MS: int(1000, 1),
  JOB_MAX_BACKOFF_MS: int(15 * 60_000, 1),
  WORKER_CONCURRENCY: int(8, 1),
  /**
   * How far V8 lets a worker process' old generation grow past what survived its last full GC, in
   * percent (V8's `--heap-growing-percent`, set by `callsync start` when it runs the worker role).
   * Default 30: ~150 MB RSS at full speed instead of ~255 MB, for ~5–10 % more worker CPU per call
   * (docs/performance.md, rounds 9 and 11). 0: V8's own factor (up to 300 % on a machine where the
   * heap may reach 2 GB), or a `--heap-growing-percent` given to node.
   */
  WORKER_HEAP_GROWTH_PERCENT: int(30, 0),
  /** How often workers look for jobs whose worker died. Default 30 s. */
  WORKER_STALLED_INTERVAL_MS: int(30_000, 100),
  /** How long a job's lock lasts without renewal. Default 30 s. */
  WORKER_LOCK_DURATION_MS: int(30_000, 100),
  /** How often a job may be found stalled (its worker died) before it is dead-lettered. Default 5. */
  WORKER_MAX_STALLED_COUNT: int(5, 0),
  /** Channels whose events the poller reads, comma-separated. Empty: the poller role does nothing. */
  POLL_CHANNEL_IDS: csv.transform((ids) => [...new Set(ids)]),
  /** Wait after an empty or partial page. Default 5000 ms. */
  POLL_INTERVAL_MS: int(5000, 10),
  /** Events asked for per page (`limit`). Default 100. */
  POLL_PAGE_SIZE: int(100, 1),
  /** Longest wait between polls while the API keeps failing. Default 5 min. */
  POLL_MAX_BACKOFF_MS: int(5 * 60_000, 10),
  /** Lifetime of a channel's poller lock; a crashed poller's channel is taken over within it. Default 30 s. */
  POLL_LOCK_TTL_MS: int(30_000, 300),

  /** How long shutdown waits for active jobs. Default 25 s. */
  SHUTDOWN_GRACE_MS: int(25_000, 0),

  /**
   * Port of the small ops HTTP server (/healthz, /readyz, /metrics, /admin/queues). Default: 9464 for
   * the worker and poller roles; none for ingress and all, whose PORT serves these paths too.
   * `off` disables it; `0` picks a free port.
   */
  OPS_PORT: z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return undefined;
      if (v.trim().toLowerCase() === 'off') return 'off' as const;
      const n = decimal(v);
      if (!Number.isInteger(n) || n < 0 || n > 65535) {
        ctx.addIssue({ code: 'custom', message: `expected a port number or "off", got "${v}"` });
        return z.NEVER;
      }
      return n;
    }),
  /** Listen address of the ops server. Default: HOST. */
  OPS_HOST: optionalString,
  /** Dashboard (/admin/queues) user for basic auth. Default `admin`. */
  ADMIN_USERNAME: envStringOr('admin'),
  /** Dashboard password (basic auth). Without it and ADMIN_TOKEN the dashboard is off. */
  ADMIN_PASSWORD: optionalString,
  /** Dashboard bearer token (`Authorization: Bearer ...`), an alternative to the password. */
  ADMIN_TOKEN: optionalString,
  /**
   * Origins (`https://ops.example.com`, comma-separated) browsers reach the dashboard at; other
   * origins' state-changing requests are refused. Default: the request's own origin (the Host
   * header, or a proxy's X-Forwarded-Host / X-Forwarded-Proto). Set it when a proxy rewrites Host.
   */
  ADMIN_ORIGIN: csv.transform((values, ctx) => {
    const origins: string[] = [];
    for (const value of values) {
      const url = URL.canParse(value) ? new URL(value) : null;
      if (
        !url ||
        (url.protocol !== 'http:' && url.protocol !== 'https:') ||
        url.pathname !== '/' ||
        url.search ||
        url.hash ||
        url.username
      ) {
        ctx.addIssue({
          code: 'custom',
          message: `expected origins like https://ops.example.com (scheme, host, optional port; no path), got "${shownUrl(value)}"`,
        });
        return z.NEVER;
      }
      origins.push(url.origin);
    }
    return origins;
  }),
  /** Bearer token required by /metrics. Default: none (Prometheus scrapes without credentials). */
  METRICS_TOKEN: optionalString,
  /** Days a call's timeline (and its lookup entries) is kept after its last event ("Where is my call?"). Default 30. */
  CALL_TIMELINE_TTL_DAYS: int(30, 1),
  /** `off`: no call timelines are written (the Calls page, `callsync call(s)` and /api/calls then find nothing new). Default on. */
  CALL_TIMELINE: envEnum(['on', 'off'], 'on'),
  /** HubSpot account (portal) id: the Calls page links a HubSpot call or contact id to its record in HubSpot's web app. Default: ids stay plain text. */
  HUBSPOT_PORTAL_ID: envString.refine(
    (v) => v === undefined || /^\d+$/.test(v),
    'expected the HubSpot account id (digits)',
  ),
  /** Pipedrive company domain (`acme` of acme.pipedrive.com): the Calls page links a Pipedrive person or deal id to it. Default: ids stay plain text. */
  PIPEDRIVE_COMPANY_DOMAIN: envString.refine(
    (v) => v === undefined || /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/i.test(v),
    'expected the company domain, e.g. acme for acme.pipedrive.com',
  ),
  // The timeline's number index (`callsync calls --number`) is keyed with PRIVACY_HMAC_SECRET, the
  // one key of every keyed hash of a phone number (declared with the notification sinks,
  // src/sinks/notify/ledger.ts; unset: a key generated once and kept in Redis, queues/privacy-key.ts).
  /**
   * OTLP/HTTP endpoint for traces (`http://collector:4318`): set, callsync exports one trace per
   * call (src/telemetry.ts). Read by the OpenTelemetry SDK, with the other standard OTEL_* variables.
   */
  OTEL_EXPORTER_OTLP_ENDPOINT: envUrl,
  /** Read by bin/callsync.js only: `1` runs the TypeScript source even when dist/ exists. */
  CALLSYNC_FROM_SOURCE: envEnum(['0', '1']),
} satisfies EnvShape;

/** The one environment schema: callsync's own settings, the platform API client's, every sink and source type's. */
export const envSchema = z.object({ ...sinkEnv, ...sourceEnv(), ...telephonyEnv, ...coreEnv });

/** The schema with the source types registered since (src/sources/registry.ts `registerSourceType`), as loadConfig reads it. */
export function currentEnvSchema(): typeof envSchema {
  const sources = sourceEnv();
  return Object.keys(sources).every((name) => name in envSchema.shape)
    ? envSchema
    : z.object({ ...sinkEnv, ...sources, ...telephonyEnv, ...coreEnv });
}

/** The parsed environment: the core settings and the API client's typed; the sink types' by name. */
export type Env = z.output<z.ZodObject<typeof coreEnv & typeof telephonyEnv>> & Readonly<Record<string, unknown>>;

/**
 * Every variable name the schema declares.
 * @internal Exported for its tests only (test/config-docs.test.ts).
 */
export const envVariables = (): string[] => Object.keys(currentEnvSchema().shape).sort();
