// The environment, parsed once through zod. Every variable callsync reads is named here, with its default.
import { z } from 'zod';

const csv = z
  .string()
  .optional()
  .transform((v) => (v ?? '').split(',').map((s) => s.trim()).filter((s) => s.length > 0));

const int = (def: number, min = 0) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return def;
      const n = Number(v);
      if (!Number.isInteger(n) || n < min) {
        ctx.addIssue({ code: 'custom', message: `expected a whole number >= ${min}, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

/** A whole number >= min, or undefined when unset or empty (the default is decided elsewhere). */
const optionalInt = (min = 0) =>
  z
    .string()
    .optional()
    .transform((v, ctx): number | undefined => {
      if (v === undefined || v.trim() === '') return undefined;
      const n = Number(v);
      if (!Number.isInteger(n) || n < min) {
        ctx.addIssue({ code: 'custom', message: `expected a whole number >= ${min}, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

const bool = (def: boolean) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return def;
      const s = v.trim().toLowerCase();
      if (['1', 'true', 'yes', 'on'].includes(s)) return true;
      if (['0', 'false', 'no', 'off'].includes(s)) return false;
      ctx.addIssue({ code: 'custom', message: `expected true or false, got "${v}"` });
      return z.NEVER;
    });

/** true / false, or undefined when unset or empty (the default is decided at start-up). */
const optionalBool = z
  .string()
  .optional()
  .transform((v, ctx): boolean | undefined => {
    if (v === undefined || v.trim() === '') return undefined;
    const s = v.trim().toLowerCase();
    if (['1', 'true', 'yes', 'on'].includes(s)) return true;
    if (['0', 'false', 'no', 'off'].includes(s)) return false;
    ctx.addIssue({ code: 'custom', message: `expected true or false, got "${v}"` });
    return z.NEVER;
  });

const optionalString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

/** The platform's documented webhook source addresses (spec section 5). */
export const PLATFORM_WEBHOOK_IPS = ['217.116.118.254', '212.9.46.32'];

export const envSchema = z.object({
  /** Which roles this process runs: ingress, worker, poller or all. Default all. */
  CALLSYNC_ROLE: z.enum(['ingress', 'worker', 'poller', 'all']).default('all'),
  PORT: int(3000),
  /** Listen address. Default 0.0.0.0 (the allow list guards the webhook). */
  HOST: z.string().default('0.0.0.0'),
  REDIS_URL: z.string().default('redis://127.0.0.1:6379'),
  /** Prefix of every Redis key. Use a `{hash-tag}` (e.g. `{callsync}`) on Redis Cluster. */
  QUEUE_PREFIX: z
    .string()
    .default('callsync')
    .refine((v) => v.length > 0 && !v.includes(' '), 'expected a non-empty prefix without spaces'),
  CALLSYNC_CONFIG: optionalString,
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),

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
  /** Largest accepted webhook body in bytes. Default 16 MiB (a long call's transcript fits). */
  WEBHOOK_BODY_LIMIT: int(16 * 1024 * 1024, 1),
  /**
   * Deepest nesting of arrays and objects in a webhook body (the body is level 1). Default 64; at
   * most 1000, as deeper JSON overflows the stack of the serializers downstream.
   */
  WEBHOOK_MAX_DEPTH: int(64, 1).refine((n) => n <= 1000, 'expected at most 1000 (deeper JSON overflows the serializers downstream)'),
  /** Most elements of one array, or keys of one object, in a webhook body. Default 100000. */
  WEBHOOK_MAX_ENTRIES: int(100_000, 1),
  /** Most values (containers included) in a whole webhook body. Default 1000000. */
  WEBHOOK_MAX_VALUES: int(1_000_000, 1),
  /** The same call delivered again within this many seconds is a duplicate. Default 24 h. */
  DEDUPE_WINDOW_SECONDS: int(24 * 3600, 1),
  /** How long the ingress waits for Redis before answering 503. Default 1500 ms. */
  ENQUEUE_TIMEOUT_MS: int(1500, 1),
  /**
   * Acknowledge webhooks into a local fsync'd spool while Redis is unreachable, drained into the
   * queue in order when it returns (docs/reliability.md). Default: on when SPOOL_DIR is writable.
   */
  SPOOL_ENABLED: optionalBool,
  /** Folder of the ingress spool (one subfolder per QUEUE_PREFIX; one ingress process per folder). Default ./data/spool. */
  SPOOL_DIR: z.string().default('./data/spool'),
  /** Beyond this many bytes spooled, the ingress answers 503 again. Default 1 GiB. */
  SPOOL_MAX_BYTES: int(1024 * 1024 * 1024, 1),
  /** The spool refuses events (503, not ready) when its filesystem would keep less than this many bytes free. Default 16 MiB. */
  SPOOL_MIN_FREE_BYTES: int(16 * 1024 * 1024),

  ARCHIVE_S3_BUCKET: optionalString,
  ARCHIVE_S3_PREFIX: optionalString,
  ARCHIVE_S3_SSE: z.enum(['AES256', 'aws:kms', 'aws:kms:dsse']).optional(),
  ARCHIVE_S3_KMS_KEY_ID: optionalString,
  S3_ENDPOINT: optionalString,
  S3_FORCE_PATH_STYLE: bool(false),
  AWS_REGION: z.string().default('us-east-1'),
  ARCHIVE_DIR: z.string().default('./data/archive'),

  JOB_ATTEMPTS: int(12, 1),
  JOB_BACKOFF_MS: int(1000, 1),
  JOB_MAX_BACKOFF_MS: int(15 * 60_000, 1),
  WORKER_CONCURRENCY: int(8, 1),
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
      const n = Number(v);
      if (!Number.isInteger(n) || n < 0 || n > 65535) {
        ctx.addIssue({ code: 'custom', message: `expected a port number or "off", got "${v}"` });
        return z.NEVER;
      }
      return n;
    }),
  /** Listen address of the ops server. Default: HOST. */
  OPS_HOST: optionalString,
  /** Dashboard (/admin/queues) user for basic auth. Default `admin`. */
  ADMIN_USERNAME: z.string().default('admin'),
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
      if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.pathname !== '/' || url.search || url.hash || url.username) {
        ctx.addIssue({ code: 'custom', message: `expected origins like https://ops.example.com (scheme, host, optional port; no path), got "${value}"` });
        return z.NEVER;
      }
      origins.push(url.origin);
    }
    return origins;
  }),
  /** Bearer token required by /metrics. Default: none (Prometheus scrapes without credentials). */
  METRICS_TOKEN: optionalString,
});

export type Env = z.infer<typeof envSchema>;
