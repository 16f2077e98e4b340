// Configuration: the environment and the optional YAML file (CALLSYNC_CONFIG), parsed once into one
// typed object. Every bad key is reported together, with what was expected.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { routeSchema, type ParsedRoute } from '../routing/types.js';
import { sinkTypes } from '../sinks/registry.js';
import type { RetryPolicy } from '../../queues/registry.js';
import { envSchema, PLATFORM_WEBHOOK_IPS, type Env } from './env.js';
import { TelephonyConfigError, telephonyOptionsFromEnv, type TelephonyClientOptions } from '../telephony/client.js';

export type Role = Env['CALLSYNC_ROLE'];

export interface SinkConfig {
  name: string;
  type: string;
  options: unknown;
  /** Where it came from: the config file or an environment shortcut. */
  origin: 'file' | 'env';
  /** Its endpoints when each has a queue of its own (`sink-<name>.<endpoint>`, the signed webhook's). */
  endpoints?: string[];
  /** Its own retry policy (the signed webhook's `retry`); absent: `Config.retry`. */
  retry?: RetryPolicy;
}

export interface Config {
  env: Env;
  /** The environment as given, for sinks that read their secrets from it. */
  processEnv: NodeJS.ProcessEnv;
  role: Role;
  http: {
    port: number;
    host: string;
    /** Longest time to receive a whole request (WEBHOOK_REQUEST_TIMEOUT_MS). */
    requestTimeoutMs: number;
    /** Longest time to receive a request's headers (HTTP_HEADERS_TIMEOUT_MS). */
    headersTimeoutMs: number;
    /** Connections held open at once (HTTP_MAX_CONNECTIONS). */
    maxConnections: number;
  };
  redis: { url: string; prefix: string };
  webhook: {
    /** `'*'` allows any source (a warning is logged at start). */
    allowedIps: string[] | '*';
    /** Proxies whose X-Forwarded-For is read (TRUSTED_PROXIES); none: the header is ignored. */
    trustedProxies?: string[];
    /** At most this many trusted proxies are stepped through; undefined: all of them. */
    trustProxyHops?: number;
    authHeader: string | undefined;
    authTokens: string[];
    bodyLimitBytes: number;
    /** Shape limits of a webhook body (src/ingress/middleware/json-limits.ts); defaults there. */
    jsonLimits?: { maxDepth?: number; maxEntries?: number; maxValues?: number };
    dedupeWindowMs: number;
    enqueueTimeoutMs: number;
  };
  retry: RetryPolicy;
  worker: {
    concurrency: number;
    stalledIntervalMs: number;
    lockDurationMs: number;
    maxStalledCount: number;
    shutdownGraceMs: number;
  };
  /** The platform's REST API client settings (TELEPHONY_*), null when TELEPHONY_API_URL is unset. */
  telephony: TelephonyClientOptions | null;
  poll: PollerSettings;
  sinks: Record<string, SinkConfig>;
  routes: ParsedRoute[];
  /** Raw sections of the config file that other modules read (e.g. `poller`, `templates`). */
  file: Record<string, unknown>;
  warnings: string[];
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

export function pollerSettings(env: Pick<Env, 'POLL_CHANNEL_IDS' | 'POLL_INTERVAL_MS' | 'POLL_PAGE_SIZE' | 'POLL_MAX_BACKOFF_MS' | 'POLL_LOCK_TTL_MS'>): PollerSettings {
  return {
    channelIds: env.POLL_CHANNEL_IDS,
    intervalMs: env.POLL_INTERVAL_MS,
    pageSize: env.POLL_PAGE_SIZE,
    maxBackoffMs: env.POLL_MAX_BACKOFF_MS,
    lockTtlMs: env.POLL_LOCK_TTL_MS,
  };
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }
}

const sinkNameSchema = z.string().regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i, 'sink names are letters, digits, - and _');

const fileSchema = z.looseObject({
  sinks: z.record(z.string(), z.looseObject({ type: z.string() })).default({}),
  routes: z.array(z.unknown()).default([]),
  retry: z
    .strictObject({
      attempts: z.number().int().min(1).optional(),
      backoffMs: z.number().int().min(1).optional(),
      maxBackoffMs: z.number().int().min(1).optional(),
    })
    .optional(),
});

/** Replaces `${NAME}` and `${NAME:-default}` in every string value; unknown names are reported. */
export function interpolate(value: unknown, env: NodeJS.ProcessEnv, path: string, problems: string[]): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (match, name: string | undefined, def: string | undefined) => {
      if (match === '$$') return '$';
      const v = env[name!];
      if (v !== undefined && v !== '') return v;
      if (def !== undefined) return def;
      problems.push(`${path}: environment variable ${name} is not set`);
      return '';
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, env, `${path}[${i}]`, problems));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, interpolate(v, env, path ? `${path}.${k}` : k, problems)]));
  }
  return value;
}

function issuesOf(error: z.ZodError, base: string): string[] {
  return error.issues.map((i) => {
    const path = [base, ...i.path.map(String)].filter((s) => s !== '').join('.');
    return `${path || '(root)'}: ${i.message}`;
  });
}

function validateIpList(variable: string, list: string[], problems: string[]): void {
  for (const entry of list) {
    const [addr, bits, ...rest] = entry.split('/');
    const family = isIP(addr ?? '');
    const maxBits = family === 6 ? 128 : 32;
    const bitsOk = bits === undefined || (/^\d+$/.test(bits) && Number(bits) <= maxBits);
    if (family === 0 || !bitsOk || rest.length > 0) problems.push(`${variable}: "${entry}" is not an IP address or CIDR`);
  }
}

const ipList = (value: string | undefined) => (value ?? '').split(',').map((s) => s.trim()).filter(Boolean);

export interface LoadOptions {
  /** Reads the config file; tests may hand in contents directly. */
  readFile?: (path: string) => string;
}

export function loadConfig(processEnv: NodeJS.ProcessEnv = process.env, options: LoadOptions = {}): Config {
  const problems: string[] = [];
  const warnings: string[] = [];
  const parsedEnv = envSchema.safeParse(processEnv);
  if (!parsedEnv.success) problems.push(...issuesOf(parsedEnv.error, ''));
  // Keep checking the rest (the config file too) with the bad variables left at their defaults.
  const badKeys = new Set(parsedEnv.success ? [] : parsedEnv.error.issues.map((i) => String(i.path[0])));
  const env = parsedEnv.success
    ? parsedEnv.data
    : envSchema.parse(Object.fromEntries(Object.entries(processEnv).filter(([k]) => !badKeys.has(k))));

  // The config file (optional).
  let file: z.infer<typeof fileSchema> = { sinks: {}, routes: [] };
  const configPath = env.CALLSYNC_CONFIG;
  if (configPath) {
    let text: string | undefined;
    try {
      text = (options.readFile ?? ((p) => readFileSync(p, 'utf8')))(configPath);
    } catch (err) {
      problems.push(`CALLSYNC_CONFIG: cannot read ${configPath}: ${(err as Error).message}`);
    }
    if (text !== undefined) {
      let doc: unknown;
      try {
        doc = parseYaml(text) ?? {};
      } catch (err) {
        problems.push(`${configPath}: not valid YAML: ${(err as Error).message}`);
      }
      if (doc !== undefined) {
        const interpolated = interpolate(doc, processEnv, '', problems);
        const parsed = fileSchema.safeParse(interpolated);
        if (parsed.success) file = parsed.data;
        else problems.push(...issuesOf(parsed.error, ''));
      }
    }
  }

  // Sinks from the file, then environment shortcuts for names the file does not define.
  const sinks: Record<string, SinkConfig> = {};
  const routes: ParsedRoute[] = [];
  const addSink = (name: string, raw: { type: string } & Record<string, unknown>, origin: SinkConfig['origin'], where: string) => {
    const nameOk = sinkNameSchema.safeParse(name);
    if (!nameOk.success) problems.push(`${where}: ${nameOk.error.issues[0]?.message}`);
    const type = sinkTypes.get(raw.type);
    if (!type) {
      problems.push(`${where}.type: unknown sink type "${raw.type}" (known: ${[...sinkTypes.keys()].join(', ')})`);
      return;
    }
    const { type: _type, ...rest } = raw;
    const parsed = type.options.safeParse(rest);
    if (!parsed.success) {
      problems.push(...issuesOf(parsed.error, where));
      return;
    }
    const endpoints = type.endpoints?.(parsed.data);
    sinks[name] = { name, type: raw.type, options: parsed.data, origin, ...(endpoints ? { endpoints } : {}) };
  };
  for (const [name, raw] of Object.entries(file.sinks)) addSink(name, raw, 'file', `sinks.${name}`);
  file.routes.forEach((raw, i) => {
    const parsed = routeSchema.safeParse(raw);
    if (parsed.success) routes.push(parsed.data);
    else problems.push(...issuesOf(parsed.error, `routes[${i}]`));
  });

  for (const type of sinkTypes.values()) {
    const shortcut = type.fromEnv?.(processEnv, { configFile: configPath !== undefined });
    if (!shortcut) continue;
    for (const [name, raw] of Object.entries(shortcut.sinks)) {
      if (file.sinks[name]) continue;
      addSink(name, raw, 'env', `environment shortcut for sink "${name}"`);
      for (const route of shortcut.routes) {
        const parsed = routeSchema.safeParse(route);
        if (parsed.success && parsed.data.to.includes(name)) routes.push(parsed.data);
      }
    }
  }

  routes.forEach((route, i) => {
    for (const name of route.to) if (!sinks[name]) problems.push(`routes[${i}].to: no sink named "${name}"`);
  });

  let allowedIps: string[] | '*' = PLATFORM_WEBHOOK_IPS;
  if (env.WEBHOOK_ALLOWED_IPS !== undefined) {
    const list = ipList(env.WEBHOOK_ALLOWED_IPS);
    if (list.includes('*')) {
      allowedIps = '*';
      warnings.push('WEBHOOK_ALLOWED_IPS=*: the webhook accepts requests from any address');
    } else {
      validateIpList('WEBHOOK_ALLOWED_IPS', list, problems);
      allowedIps = list;
    }
  }
  const trustedProxies = ipList(env.TRUSTED_PROXIES);
  if (trustedProxies.includes('*')) problems.push('TRUSTED_PROXIES: "*" would believe X-Forwarded-For from anyone; list the proxies\' IPs or CIDRs');
  else validateIpList('TRUSTED_PROXIES', trustedProxies, problems);
  // Hops alone once meant "believe the header from whoever connects": a forged header got in.
  if ((env.TRUST_PROXY_HOPS ?? 0) > 0 && trustedProxies.length === 0)
    problems.push('TRUST_PROXY_HOPS: set without TRUSTED_PROXIES; X-Forwarded-For is read only from trusted proxies: set TRUSTED_PROXIES to the proxies\' IPs or CIDRs');
  if (env.HTTP_HEADERS_TIMEOUT_MS > env.WEBHOOK_REQUEST_TIMEOUT_MS && !badKeys.has('HTTP_HEADERS_TIMEOUT_MS') && !badKeys.has('WEBHOOK_REQUEST_TIMEOUT_MS'))
    problems.push(`HTTP_HEADERS_TIMEOUT_MS: ${env.HTTP_HEADERS_TIMEOUT_MS} is longer than WEBHOOK_REQUEST_TIMEOUT_MS (${env.WEBHOOK_REQUEST_TIMEOUT_MS}); the headers are part of the request`);
  if (env.WEBHOOK_AUTH_HEADER && env.WEBHOOK_AUTH_TOKENS.length === 0)
    problems.push('WEBHOOK_AUTH_TOKENS: required when WEBHOOK_AUTH_HEADER is set');
  if (!env.WEBHOOK_AUTH_HEADER && env.WEBHOOK_AUTH_TOKENS.length > 0)
    problems.push('WEBHOOK_AUTH_HEADER: required when WEBHOOK_AUTH_TOKENS is set');

  let telephony: TelephonyClientOptions | null = null;
  try {
    telephony = telephonyOptionsFromEnv(processEnv);
  } catch (err) {
    if (err instanceof TelephonyConfigError) problems.push(...err.problems);
    else throw err;
  }

  if (env.POLL_CHANNEL_IDS.length > 0 && telephony === null && !badKeys.has('TELEPHONY_API_URL'))
    problems.push('POLL_CHANNEL_IDS: polling channel events needs TELEPHONY_API_URL (and credentials)');

  if (problems.length > 0) throw new ConfigError(problems);

  const retry: RetryPolicy = {
    attempts: file.retry?.attempts ?? env.JOB_ATTEMPTS,
    backoffMs: file.retry?.backoffMs ?? env.JOB_BACKOFF_MS,
    maxBackoffMs: file.retry?.maxBackoffMs ?? env.JOB_MAX_BACKOFF_MS,
  };
  for (const sink of Object.values(sinks)) {
    const own = sinkTypes.get(sink.type)?.retry?.(sink.options, retry);
    if (own) sink.retry = own;
  }

  return {
    env,
    processEnv,
    role: env.CALLSYNC_ROLE,
    http: {
      port: env.PORT,
      host: env.HOST,
      requestTimeoutMs: env.WEBHOOK_REQUEST_TIMEOUT_MS,
      headersTimeoutMs: env.HTTP_HEADERS_TIMEOUT_MS,
      maxConnections: env.HTTP_MAX_CONNECTIONS,
    },
    redis: { url: env.REDIS_URL, prefix: env.QUEUE_PREFIX },
    webhook: {
      allowedIps,
      trustedProxies,
      trustProxyHops: env.TRUST_PROXY_HOPS,
      authHeader: env.WEBHOOK_AUTH_HEADER?.toLowerCase(),
      authTokens: env.WEBHOOK_AUTH_TOKENS,
      bodyLimitBytes: env.WEBHOOK_BODY_LIMIT,
      jsonLimits: { maxDepth: env.WEBHOOK_MAX_DEPTH, maxEntries: env.WEBHOOK_MAX_ENTRIES, maxValues: env.WEBHOOK_MAX_VALUES },
      dedupeWindowMs: env.DEDUPE_WINDOW_SECONDS * 1000,
      enqueueTimeoutMs: env.ENQUEUE_TIMEOUT_MS,
    },
    retry,
    worker: {
      concurrency: env.WORKER_CONCURRENCY,
      stalledIntervalMs: env.WORKER_STALLED_INTERVAL_MS,
      lockDurationMs: env.WORKER_LOCK_DURATION_MS,
      maxStalledCount: env.WORKER_MAX_STALLED_COUNT,
      shutdownGraceMs: env.SHUTDOWN_GRACE_MS,
    },
    telephony,
    poll: pollerSettings(env),
    sinks,
    routes,
    file,
    warnings,
  };
}
