// The typed sections of the configuration, each built from the parsed environment by one function
// with the cross-checks that belong to it (src/config/index.ts composes them in loadConfig).
//
// The rule: only src/config reads the environment. Everything else reads its section of `Config`
// (`config.ops`, `config.spool`, …); a sink type gets the parsed values of the variables its `env`
// declares (`config.sinkSettings[type]`, picked here), in its hooks and its sinks. Outside src/config, only bin/ (which runs before any
// configuration), src/log.ts's LOG_LEVEL fallback for loggers made before the configuration, and
// src/telemetry.ts (the OpenTelemetry SDK's own OTEL_* variables) read process.env.
import { join } from 'node:path';
import { isIP } from 'node:net';
import { PLATFORM_WEBHOOK_IPS, type Env } from './env.js';
import type { AckReplicas } from '../../queues/inbound.js';
import type { RetryPolicy } from '../../queues/registry.js';
import type { CountryCode } from 'libphonenumber-js';
import { privacyEnv } from '../sinks/notify/ledger.js';
import { regionEnv, resolveRegion } from '../sinks/region.js';
import { sinkTypes } from '../sinks/registry.js';
import type { SinkSettings } from '../sinks/types.js';
import type { EnvOf, EnvShape } from '../env-values.js';
import { sourceTypes } from '../sources/registry.js';
import { TelephonyConfigError, telephonyOptions, type TelephonyClientOptions } from '../telephony/client.js';

/** What a section builder reports into: problems fail the start, warnings are logged at start. */
export interface SectionReport {
  problems: string[];
  warnings: string[];
  /** Variables whose own value was bad (left at their defaults): cross-checks on them are skipped. */
  badKeys: ReadonlySet<string>;
}

export type Role = Env['CALLSYNC_ROLE'];

export interface HttpSection {
  port: number;
  host: string;
  /** Longest time to receive a whole request (WEBHOOK_REQUEST_TIMEOUT_MS). */
  requestTimeoutMs: number;
  /** Longest time to receive a request's headers (HTTP_HEADERS_TIMEOUT_MS). */
  headersTimeoutMs: number;
  /** Connections held open at once (HTTP_MAX_CONNECTIONS). */
  maxConnections: number;
}

/** How long a body that does not fit in the body budget waits for room by default (WEBHOOK_BODY_WAIT_MS): well within a sender's time limit. */
export const DEFAULT_BODY_WAIT_MS = 2000;

export interface WebhookSection {
  /** `'*'` allows any source (a warning is logged at start). */
  allowedIps: string[] | '*';
  /** Proxies whose X-Forwarded-For is read (TRUSTED_PROXIES); none: the header is ignored. */
  trustedProxies?: string[];
  /** At most this many trusted proxies are stepped through; undefined: all of them. */
  trustProxyHops?: number;
  authHeader: string | undefined;
  authTokens: string[];
  bodyLimitBytes: number;
  /** How long a body that does not fit in the body budget waits for room (WEBHOOK_BODY_WAIT_MS); default DEFAULT_BODY_WAIT_MS. */
  bodyWaitMs?: number;
  /** Shape limits of a webhook body (src/ingress/middleware/json-limits.ts); defaults there. */
  jsonLimits?: { maxDepth?: number; maxEntries?: number; maxValues?: number };
  dedupeWindowMs: number;
  enqueueTimeoutMs: number;
}

/** The ingress: its HTTP server, the webhook guards and the replicas each append waits for. */
export interface IngressSection {
  http: HttpSection;
  webhook: WebhookSection;
  /** ACK_REPLICAS: replicas that must confirm each appended batch before its 202s (0: none). */
  ack: AckReplicas;
}

function validateIpList(variable: string, list: string[], problems: string[]): void {
  for (const entry of list) {
    const [addr, bits, ...rest] = entry.split('/');
    const family = isIP(addr ?? '');
    const maxBits = family === 6 ? 128 : 32;
    const bitsOk = bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= maxBits);
    if (family === 0 || !bitsOk || rest.length > 0)
      problems.push(`${variable}: "${entry}" is not an IP address or CIDR`);
  }
}

const ipList = (value: string | undefined) =>
  (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);

function allowedIps(env: Env, report: SectionReport): string[] | '*' {
  if (env.WEBHOOK_ALLOWED_IPS === undefined) return PLATFORM_WEBHOOK_IPS;
  const list = ipList(env.WEBHOOK_ALLOWED_IPS);
  if (list.includes('*')) {
    report.warnings.push('WEBHOOK_ALLOWED_IPS=*: the webhook accepts requests from any address');
    return '*';
  }
  validateIpList('WEBHOOK_ALLOWED_IPS', list, report.problems);
  return list;
}

function trustedProxies(env: Env, { problems }: SectionReport): string[] {
  const proxies = ipList(env.TRUSTED_PROXIES);
  if (proxies.includes('*'))
    problems.push('TRUSTED_PROXIES: "*" would believe X-Forwarded-For from anyone; list the proxies\' IPs or CIDRs');
  else validateIpList('TRUSTED_PROXIES', proxies, problems);
  // Hops alone once meant "believe the header from whoever connects": a forged header got in.
  if ((env.TRUST_PROXY_HOPS ?? 0) > 0 && proxies.length === 0)
    problems.push(
      "TRUST_PROXY_HOPS: set without TRUSTED_PROXIES; X-Forwarded-For is read only from trusted proxies: set TRUSTED_PROXIES to the proxies' IPs or CIDRs",
    );
  return proxies;
}

function checkIngress(env: Env, { problems, badKeys }: SectionReport): void {
  if (
    env.HTTP_HEADERS_TIMEOUT_MS > env.WEBHOOK_REQUEST_TIMEOUT_MS &&
    !badKeys.has('HTTP_HEADERS_TIMEOUT_MS') &&
    !badKeys.has('WEBHOOK_REQUEST_TIMEOUT_MS')
  )
    problems.push(
      `HTTP_HEADERS_TIMEOUT_MS: ${env.HTTP_HEADERS_TIMEOUT_MS} is longer than WEBHOOK_REQUEST_TIMEOUT_MS (${env.WEBHOOK_REQUEST_TIMEOUT_MS}); the headers are part of the request`,
    );
  if (
    env.WEBHOOK_BODY_WAIT_MS !== undefined &&
    env.WEBHOOK_BODY_WAIT_MS >= env.WEBHOOK_REQUEST_TIMEOUT_MS &&
    !badKeys.has('WEBHOOK_BODY_WAIT_MS') &&
    !badKeys.has('WEBHOOK_REQUEST_TIMEOUT_MS')
  )
    problems.push(
      `WEBHOOK_BODY_WAIT_MS: ${env.WEBHOOK_BODY_WAIT_MS} must be below WEBHOOK_REQUEST_TIMEOUT_MS (${env.WEBHOOK_REQUEST_TIMEOUT_MS}): the wait is part of the request's time`,
    );
  if (env.WEBHOOK_AUTH_HEADER && env.WEBHOOK_AUTH_TOKENS.length === 0)
    problems.push('WEBHOOK_AUTH_TOKENS: required when WEBHOOK_AUTH_HEADER is set');
  if (!env.WEBHOOK_AUTH_HEADER && env.WEBHOOK_AUTH_TOKENS.length > 0)
    problems.push('WEBHOOK_AUTH_HEADER: required when WEBHOOK_AUTH_TOKENS is set');
  if (env.ACK_REPLICAS > 0 && env.ACK_REPLICAS_TIMEOUT_MS >= env.ENQUEUE_TIMEOUT_MS)
    problems.push(
      `ACK_REPLICAS_TIMEOUT_MS: ${env.ACK_REPLICAS_TIMEOUT_MS} must be below ENQUEUE_TIMEOUT_MS (${env.ENQUEUE_TIMEOUT_MS}): the append and its WAIT share that time`,
    );
}

export function ingressSection(env: Env, report: SectionReport): IngressSection {
  const allowed = allowedIps(env, report);
  const proxies = trustedProxies(env, report);
  checkIngress(env, report);
  return {
    http: {
      port: env.PORT,
      host: env.HOST,
      requestTimeoutMs: env.WEBHOOK_REQUEST_TIMEOUT_MS,
      headersTimeoutMs: env.HTTP_HEADERS_TIMEOUT_MS,
      maxConnections: env.HTTP_MAX_CONNECTIONS,
    },
    webhook: {
      allowedIps: allowed,
      trustedProxies: proxies,
      trustProxyHops: env.TRUST_PROXY_HOPS,
      authHeader: env.WEBHOOK_AUTH_HEADER?.toLowerCase(),
      authTokens: env.WEBHOOK_AUTH_TOKENS,
      bodyLimitBytes: env.WEBHOOK_BODY_LIMIT,
      bodyWaitMs:
        env.WEBHOOK_BODY_WAIT_MS ?? Math.min(DEFAULT_BODY_WAIT_MS, Math.floor(env.WEBHOOK_REQUEST_TIMEOUT_MS / 2)),
      jsonLimits: {
        maxDepth: env.WEBHOOK_MAX_DEPTH,
        maxEntries: env.WEBHOOK_MAX_ENTRIES,
        maxValues: env.WEBHOOK_MAX_VALUES,
      },
      dedupeWindowMs: env.DEDUPE_WINDOW_SECONDS * 1000,
      enqueueTimeoutMs: env.ENQUEUE_TIMEOUT_MS,
    },
    ack: { replicas: env.ACK_REPLICAS, timeoutMs: env.ACK_REPLICAS_TIMEOUT_MS },
  };
}

/** Port of the ops server of worker and poller processes unless OPS_PORT says otherwise. */
const DEFAULT_OPS_PORT = 9464;

/** The ops server (/healthz, /readyz, /metrics) and the dashboard's credentials. */
export interface OpsSection {
  /** Where the ops server listens (OPS_PORT, or 9464 for the worker and poller roles); null: none. */
  port: number | null;
  /** OPS_HOST, else HOST. */
  host: string;
  admin: {
    username: string;
    password: string | undefined;
    token: string | undefined;
    /** ADMIN_ORIGIN; empty: the request's own origin. */
    origins: string[];
  };
  /** Bearer token /metrics asks for (METRICS_TOKEN); undefined: none. */
  metricsToken: string | undefined;
  /** Where the Calls page links CRM ids (HUBSPOT_PORTAL_ID, PIPEDRIVE_COMPANY_DOMAIN); undefined: plain ids. */
  crmLinks: { hubspotPortalId: string | undefined; pipedriveCompanyDomain: string | undefined };
}

export function opsSection(env: Env): OpsSection {
  const byRole = env.CALLSYNC_ROLE === 'worker' || env.CALLSYNC_ROLE === 'poller' ? DEFAULT_OPS_PORT : null;
  return {
    port: env.OPS_PORT === 'off' ? null : (env.OPS_PORT ?? byRole),
    host: env.OPS_HOST ?? env.HOST,
    admin: {
      username: env.ADMIN_USERNAME,
      password: env.ADMIN_PASSWORD,
      token: env.ADMIN_TOKEN,
      origins: env.ADMIN_ORIGIN,
    },
    metricsToken: env.METRICS_TOKEN,
    crmLinks: { hubspotPortalId: env.HUBSPOT_PORTAL_ID, pipedriveCompanyDomain: env.PIPEDRIVE_COMPANY_DOMAIN },
  };
}

/** The ingress spool (docs/reliability.md). */
export interface SpoolSection {
  /** SPOOL_ENABLED; undefined: on when `dir` is writable. */
  enabled: boolean | undefined;
  /** The folder of this queue prefix: SPOOL_DIR/<prefix>, SPOOL_DIR by default DATA_DIR/spool (one spool per prefix). */
  dir: string;
  maxBytes: number;
  minFreeBytes: number;
}

export function spoolSection(env: Env): SpoolSection {
  return {
    enabled: env.SPOOL_ENABLED,
    dir: join(env.SPOOL_DIR ?? join(env.DATA_DIR, 'spool'), env.QUEUE_PREFIX.replace(/[^A-Za-z0-9._{}-]/g, '_')),
    maxBytes: env.SPOOL_MAX_BYTES,
    minFreeBytes: env.SPOOL_MIN_FREE_BYTES,
  };
}

/** How long what callsync keeps is kept (src/privacy/retention.ts), and the call timelines. */
export interface RetentionSection {
  /** ARCHIVE_RETENTION_DAYS; undefined: archive objects are kept. */
  archiveDays: number | undefined;
  completedMs: number;
  failedMs: number;
  /** RETENTION_SWEEP_INTERVAL_SECONDS in ms; 0: no sweeper. */
  sweepIntervalMs: number;
}

export function retentionSection(env: Env): RetentionSection {
  return {
    archiveDays: env.ARCHIVE_RETENTION_DAYS,
    completedMs: env.COMPLETED_JOB_RETENTION_SECONDS * 1000,
    failedMs: env.FAILED_JOB_RETENTION_SECONDS * 1000,
    sweepIntervalMs: env.RETENTION_SWEEP_INTERVAL_SECONDS * 1000,
  };
}

/** The call timelines ("Where is my call?"). */
export interface TimelineSection {
  /** CALL_TIMELINE: false when `off` (no timeline is written by this process). */
  enabled: boolean;
  ttlDays: number;
  /** PRIVACY_HMAC_SECRET, the key of the number index; undefined: the key kept in Redis (queues/privacy-key.ts). */
  privacySecret: string | undefined;
}

export const timelineSection = (env: Env): TimelineSection => ({
  enabled: env.CALL_TIMELINE !== 'off',
  ttlDays: env.CALL_TIMELINE_TTL_DAYS,
  privacySecret: pick(privacyEnv, env).PRIVACY_HMAC_SECRET,
});

export interface WorkerSection {
  concurrency: number;
  stalledIntervalMs: number;
  lockDurationMs: number;
  maxStalledCount: number;
  shutdownGraceMs: number;
  /** V8's old-generation growth for a process running the worker role (percent; 0: V8's own). */
  heapGrowthPercent: number;
}

export const workerSection = (env: Env): WorkerSection => ({
  concurrency: env.WORKER_CONCURRENCY,
  stalledIntervalMs: env.WORKER_STALLED_INTERVAL_MS,
  lockDurationMs: env.WORKER_LOCK_DURATION_MS,
  maxStalledCount: env.WORKER_MAX_STALLED_COUNT,
  shutdownGraceMs: env.SHUTDOWN_GRACE_MS,
  heapGrowthPercent: env.WORKER_HEAP_GROWTH_PERCENT,
});

/** The global retry policy: the config file's `retry`, else JOB_ATTEMPTS, JOB_BACKOFF_MS, JOB_MAX_BACKOFF_MS. */
export function retrySection(env: Env, file: Partial<RetryPolicy> | undefined): RetryPolicy {
  return {
    attempts: file?.attempts ?? env.JOB_ATTEMPTS,
    backoffMs: file?.backoffMs ?? env.JOB_BACKOFF_MS,
    maxBackoffMs: file?.maxBackoffMs ?? env.JOB_MAX_BACKOFF_MS,
  };
}

/** The platform's REST API client (TELEPHONY_*), null when TELEPHONY_API_URL is unset. */
export function telephonySection(env: Env, { problems }: SectionReport): TelephonyClientOptions | null {
  try {
    return telephonyOptions(env);
  } catch (err) {
    if (err instanceof TelephonyConfigError) problems.push(...err.problems);
    else throw err;
    return null;
  }
}

export interface PollerSettings {
  channelIds: string[];
  /** Default 5000 ms. */
  intervalMs: number;
  /** Default 100. */
  pageSize: number;
  /** Default 300 000 ms. */
  maxBackoffMs: number;
  /** Default 30 000 ms. Renewed every third; takeover after at most TTL + a third. */
  lockTtlMs: number;
}

/** The channel poller (POLL_*); it needs the platform API. */
export function pollSection(env: Env, telephonyConfigured: boolean, { problems }: SectionReport): PollerSettings {
  if (env.POLL_CHANNEL_IDS.length > 0 && !telephonyConfigured)
    problems.push('POLL_CHANNEL_IDS: polling channel events needs TELEPHONY_API_URL (and credentials)');
  return {
    channelIds: env.POLL_CHANNEL_IDS,
    intervalMs: env.POLL_INTERVAL_MS,
    pageSize: env.POLL_PAGE_SIZE,
    maxBackoffMs: env.POLL_MAX_BACKOFF_MS,
    lockTtlMs: env.POLL_LOCK_TTL_MS,
  };
}

/** Each source type's settings by its name (src/sources/registry.ts), checked by the type. */
export function sourcesSection(env: Env, report: SectionReport): Record<string, unknown> {
  return Object.fromEntries([...sourceTypes.values()].map((type) => [type.name, type.options(env, report)]));
}

/**
 * How numbers are named and read: the key of the HMAC (PRIVACY_HMAC_SECRET, declared by the
 * notification ledger) and the region of national numbers (PHONE_DEFAULT_REGION, src/sinks/region.ts).
 */
export interface PrivacySection {
  /** Undefined: not set (a random key kept in Redis). */
  hmacSecret: string | undefined;
  /** PHONE_DEFAULT_REGION, else DE: how `callsync opt-out`, `forget`, `call`, `/api/calls` and the Calls page read 0151 … */
  defaultRegion: CountryCode;
}

export const privacySection = (env: Env): PrivacySection => ({
  hmacSecret: pick(privacyEnv, env).PRIVACY_HMAC_SECRET,
  defaultRegion: resolveRegion(undefined, pick(regionEnv, env).PHONE_DEFAULT_REGION),
});

/**
 * The parsed values of the variables `shape` declares, typed by it: the one schema parsed `env`
 * (src/config/env.ts composes every part's shape into it), so each has its parsed value or default.
 */
function pick<S extends EnvShape>(shape: S, env: Env): EnvOf<S> {
  return Object.fromEntries(Object.keys(shape).map((name) => [name, env[name]])) as EnvOf<S>;
}

/**
 * Each sink type's section, by its type: the parsed values of the variables its `env` declares and
 * nothing else (src/sinks/types.ts `SinkSettings`). Its hooks (`check`, `fromEnv`) and its sinks
 * (`SinkDeps.settings`) get this, never the environment.
 */
export function sinkSettingsSection(env: Env): Readonly<Record<string, SinkSettings>> {
  return Object.fromEntries([...sinkTypes.values()].map((type) => [type.type, pick(type.env ?? {}, env)]));
}
