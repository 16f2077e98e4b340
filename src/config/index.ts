// Configuration: the environment and the optional YAML file (CALLSYNC_CONFIG), parsed once into one
// typed object. Every bad key is reported together, with what was expected.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { routeSchema, type ParsedRoute } from '../routing/types.js';
import { sinkTypes } from '../sinks/registry.js';
import type { RetryPolicy } from '../../queues/registry.js';
import type { AckReplicas } from '../../queues/inbound.js';
import type { LocalRedisSettings, RedisNode, RedisSettings } from '../../queues/connection.js';
import { MAX_INBOUND_SHARDS } from '../../queues/keys.js';
import { oneOf } from '../env-values.js';
import { rememberSecrets } from '../redact.js';
import { secretValues } from './redact.js';
import { currentEnvSchema, type Env } from './env.js';
import type { TelephonyClientOptions } from '../telephony/client.js';
import {
  ingressSection,
  opsSection,
  pollSection,
  privacySection,
  retentionSection,
  sourcesSection,
  retrySection,
  sinkSettingsSection,
  spoolSection,
  telephonySection,
  timelineSection,
  workerSection,
  type HttpSection,
  type OpsSection,
  type PollerSettings,
  type PrivacySection,
  type RetentionSection,
  type Role,
  type SectionReport,
  type SpoolSection,
  type TimelineSection,
  type WebhookSection,
  type WorkerSection,
} from './sections.js';
import { archiveDir, type ArchiveSettings } from '../sinks/archive/index.js';
import type { SinkSettings } from '../sinks/types.js';

export type { PollerSettings } from './sections.js';

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

/** The configuration: one typed section per part, each built by one function (./sections.ts). */
export interface Config {
  role: Role;
  /** CALLSYNC_CONFIG: the config file, if one was given. */
  configFile: string | undefined;
  /** LOG_LEVEL. */
  logLevel: Env['LOG_LEVEL'];
  http: HttpSection;
  redis: RedisSettings;
  /** ACK_REPLICAS: replicas that must confirm each appended batch before its 202s (0: none). */
  ack: AckReplicas;
  webhook: WebhookSection;
  ops: OpsSection;
  spool: SpoolSection;
  retention: RetentionSection;
  timeline: TimelineSection;
  privacy: PrivacySection;
  /** Each source type's settings, by its name (src/sources/registry.ts; `push`: src/sources/push.ts `PushSettings`). */
  sources: Readonly<Record<string, unknown>>;
  retry: RetryPolicy;
  worker: WorkerSection;
  /** The platform's REST API client settings (TELEPHONY_*), null when TELEPHONY_API_URL is unset. */
  telephony: TelephonyClientOptions | null;
  poll: PollerSettings;
  /**
   * Each sink type's section by its type (`archive`, `hubspot`, …): the parsed values of the
   * variables its `env` declares, handed to its sinks as `SinkDeps.settings`.
   */
  sinkSettings: Readonly<Record<string, SinkSettings>>;
  sinks: Record<string, SinkConfig>;
  routes: ParsedRoute[];
  warnings: string[];
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'ConfigError';
  }

  /** Every problem on one line (what `callsync start` writes to stderr before it exits 2). */
  get oneLine(): string {
    const n = this.problems.length;
    return `invalid configuration (${n} problem${n === 1 ? '' : 's'}): ${this.problems.map((p) => p.replace(/\s*\n\s*/g, ' ')).join('; ')}`;
  }
}

/** What loadConfig warns of when no route reaches an archive sink (README and test/config.test.ts quote it). */
const NO_ARCHIVE_WARNING =
  'no route sends calls to an archive sink: calls are not archived (add a sink of type archive and a route to it, or set ARCHIVE_S3_BUCKET)';

// `poller`: its state (`<prefix>:state:poller:…` in the one-slot layout) would share the keys of the
// channel poller's locks and cursors.
const sinkNameSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9_-]{0,62}$/i, 'sink names are letters, digits, - and _')
  .refine(
    (name) => name !== 'poller',
    'the sink name "poller" is reserved (the channel poller keeps its state under it): choose another',
  );

/** The top-level keys of the config file. */
const FILE_KEYS = ['sinks', 'routes', 'retry'] as const;

const retrySchema = z.strictObject({
  attempts: z.number().int().min(1).optional(),
  backoffMs: z.number().int().min(1).optional(),
  maxBackoffMs: z.number().int().min(1).optional(),
});

interface ConfigFile {
  sinks: Record<string, unknown>;
  routes: unknown[];
  retry?: z.infer<typeof retrySchema>;
}

/** Replaces `${NAME}` and `${NAME:-default}` in every string value; unknown names are reported. */
function interpolate(value: unknown, env: NodeJS.ProcessEnv, path: string, problems: string[]): unknown {
  if (typeof value === 'string') {
    return value.replace(
      /\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g,
      (match, name: string | undefined, def: string | undefined) => {
        if (match === '$$') return '$';
        const v = env[name!];
        if (v !== undefined && v !== '') return v;
        if (def !== undefined) return def;
        problems.push(`${path}: environment variable ${name} is not set`);
        return '';
      },
    );
  }
  if (Array.isArray(value)) return value.map((v, i) => interpolate(v, env, `${path}[${i}]`, problems));
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [k, interpolate(v, env, path ? `${path}.${k}` : k, problems)]),
    );
  }
  return value;
}

type Segment = PropertyKey;

/** `['routes', 0, 'when', 'direction']` → `routes[0].when.direction`. */
function formatPath(path: readonly Segment[]): string {
  let out = '';
  for (const seg of path) {
    if (typeof seg === 'number') out += `[${seg}]`;
    else out += out === '' ? String(seg) : `.${String(seg)}`;
  }
  return out || '(root)';
}

const kindOf = (v: unknown): string =>
  v === null ? 'null' : Array.isArray(v) ? 'a list' : typeof v === 'object' ? 'a mapping' : typeof v;
const isPrimitive = (v: unknown) => v === null || (typeof v !== 'object' && typeof v !== 'function');

/** A union branch that failed only because the value is of the other branch's kind (one value vs a list). */
function wrongKind(issues: readonly z.core.$ZodIssue[]): boolean {
  return issues.every(
    (i) => i.path.length === 0 && (i.code === 'invalid_type' || (i.code === 'invalid_value' && !isPrimitive(i.input))),
  );
}

/**
 * zod's issues as configuration problems: the path in the file's or environment's terms, what was
 * given (for values from a fixed set) and what is expected (`"inbound" — use in or out`). Values that
 * could be secrets are never echoed: only enum values and the kind of a value of the wrong type.
 */
function describeIssues(issues: readonly z.core.$ZodIssue[], base: readonly Segment[] = []): string[] {
  return issues.flatMap((issue) => {
    const path = [...base, ...issue.path];
    switch (issue.code) {
      case 'invalid_union': {
        const branches = issue.errors.filter((b) => !wrongKind(b));
        if (branches.length === 1) return describeIssues(branches[0]!, path);
        const expected = [
          ...new Set(
            issue.errors.flatMap((b) =>
              b.filter((i) => i.code === 'invalid_type').map((i) => (i as z.core.$ZodIssueInvalidType).expected),
            ),
          ),
        ];
        return [
          `${formatPath(path)}: ${expected.length > 0 ? `expected ${oneOf(expected)}, got ${kindOf(issue.input)}` : issue.message}`,
        ];
      }
      case 'invalid_value':
        return [
          `${formatPath(path)}: ${isPrimitive(issue.input) && issue.input !== undefined ? `${JSON.stringify(issue.input)} — ` : ''}use ${oneOf(issue.values)}`,
        ];
      case 'unrecognized_keys':
        return issue.keys.map((k) => `${formatPath([...path, k])}: unknown key`);
      case 'invalid_type':
        return [
          `${formatPath(path)}: ${issue.input === undefined ? `missing (expected ${issue.expected})` : `expected ${issue.expected}, got ${kindOf(issue.input)}`}`,
        ];
      default:
        return [`${formatPath(path)}: ${issue.message}`];
    }
  });
}

export interface LoadOptions {
  /** Reads the config file; tests may hand in contents directly. */
  readFile?: (path: string) => string;
}

const isMapping = (v: unknown): v is Record<string, unknown> =>
  v !== null && typeof v === 'object' && !Array.isArray(v);

/** Reads the config file part by part, so that one bad part does not hide the problems of the others. */
function readConfigFile(
  configPath: string,
  processEnv: NodeJS.ProcessEnv,
  options: LoadOptions,
  problems: string[],
): ConfigFile {
  const file: ConfigFile = { sinks: {}, routes: [] };
  let text: string;
  try {
    text = (options.readFile ?? ((p) => readFileSync(p, 'utf8')))(configPath);
  } catch (err) {
    problems.push(`CALLSYNC_CONFIG: cannot read ${configPath}: ${(err as Error).message}`);
    return file;
  }
  let doc: unknown;
  try {
    doc = parseYaml(text) ?? {};
  } catch (err) {
    // The parser's message quotes the offending lines after its first: left out, as that line may
    // hold a secret written in the file (`accessToken: pat-…: x`). Line and column say where.
    const first = ((err as Error).message.split('\n')[0] ?? '').replace(/:\s*$/, '');
    problems.push(`${configPath}: not valid YAML: ${first}`);
    return file;
  }
  doc = interpolate(doc, processEnv, '', problems);
  if (!isMapping(doc)) {
    problems.push(`${configPath}: expected a mapping with ${FILE_KEYS.join(', ')}, got ${kindOf(doc)}`);
    return file;
  }
  for (const key of Object.keys(doc)) {
    if (!(FILE_KEYS as readonly string[]).includes(key))
      problems.push(`${key}: unknown key — the config file has ${FILE_KEYS.join(', ')}`);
  }
  if (doc.sinks !== undefined && doc.sinks !== null) {
    if (isMapping(doc.sinks)) file.sinks = doc.sinks;
    else problems.push(`sinks: expected a mapping of sink name → options, got ${kindOf(doc.sinks)}`);
  }
  if (doc.routes !== undefined && doc.routes !== null) {
    if (Array.isArray(doc.routes)) file.routes = doc.routes;
    else problems.push(`routes: expected a list of routes (- when: … to: …), got ${kindOf(doc.routes)}`);
  }
  if (doc.retry !== undefined) {
    const retry = retrySchema.safeParse(doc.retry, { reportInput: true });
    if (retry.success) file.retry = retry.data;
    else problems.push(...describeIssues(retry.error.issues, ['retry']));
  }
  return file;
}

/**
 * An archive sink of the config file reads the variables its environment shortcut reads (README's
 * "archive" rows) for what the file leaves out: S3_ENDPOINT, S3_FORCE_PATH_STYLE, AWS_REGION, and
 * the other half of a credential pair. Credentials the file names neither of are left to the AWS
 * SDK's default chain, which reads AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY itself (and
 * AWS_SESSION_TOKEN, which a static pair would drop). A folder sink without `dir` takes ARCHIVE_DIR,
 * else DATA_DIR/archive.
 */
function withArchiveEnv(options: Record<string, unknown>, env: ArchiveSettings): Record<string, unknown> {
  if (options.bucket === undefined) return options.dir === undefined ? { ...options, dir: archiveDir(env) } : options;
  const out = { ...options };
  if (out.region === undefined && env.AWS_REGION) out.region = env.AWS_REGION;
  if (out.endpoint === undefined && env.S3_ENDPOINT) out.endpoint = env.S3_ENDPOINT;
  if (out.forcePathStyle === undefined && env.S3_FORCE_PATH_STYLE) out.forcePathStyle = true;
  if (out.accessKeyId !== undefined && out.secretAccessKey === undefined && env.AWS_SECRET_ACCESS_KEY)
    out.secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
  if (out.secretAccessKey !== undefined && out.accessKeyId === undefined && env.AWS_ACCESS_KEY_ID)
    out.accessKeyId = env.AWS_ACCESS_KEY_ID;
  return out;
}

/** Where a Redis is looked for when none is configured (REDIS_LOCAL_PROBE's default). */
const DEFAULT_REDIS_URL = 'redis://127.0.0.1:6379';

/** `host:port` entries of REDIS_CLUSTER_NODES / REDIS_SENTINELS (IPv6 as `[::1]:7000`). */
function parseNodes(variable: string, entries: string[], problems: string[]): RedisNode[] {
  const nodes: RedisNode[] = [];
  for (const entry of entries) {
    const m = /^(?:\[([^\]]+)\]|([^:\s]+)):(\d{1,5})$/.exec(entry);
    const port = m ? Number(m[3]) : NaN;
    if (!m || port < 1 || port > 65535) problems.push(`${variable}: "${entry}" is not host:port`);
    else nodes.push({ host: (m[1] ?? m[2])!, port });
  }
  return nodes;
}

/**
 * The Redis settings: one Redis (REDIS_URL), a Redis Cluster (REDIS_CLUSTER_NODES) or Sentinel
 * (REDIS_SENTINELS + REDIS_SENTINEL_NAME), with REDIS_PASSWORD and TLS, QUEUE_PREFIX and
 * INBOUND_SHARDS. On a cluster every key of one BullMQ queue must be in one hash slot: a prefix
 * without braces spreads the keys by area (queues/keys.ts), a `{hash-tag}` one keeps them in one slot.
 */
function redisSettings(env: Env, problems: string[], warnings: string[]): RedisSettings {
  const clusterNodes = parseNodes('REDIS_CLUSTER_NODES', env.REDIS_CLUSTER_NODES, problems);
  const sentinels = parseNodes('REDIS_SENTINELS', env.REDIS_SENTINELS, problems);
  if (env.REDIS_CLUSTER_NODES.length > 0 && env.REDIS_SENTINELS.length > 0)
    problems.push(
      'REDIS_CLUSTER_NODES: set together with REDIS_SENTINELS; a Redis Cluster does not use Sentinel: set one of them',
    );
  if (env.REDIS_SENTINELS.length > 0 && env.REDIS_SENTINEL_NAME === undefined)
    problems.push(
      "REDIS_SENTINEL_NAME: required with REDIS_SENTINELS (the master's name in the sentinels' configuration)",
    );
  if (env.REDIS_SENTINEL_NAME !== undefined && env.REDIS_SENTINELS.length === 0)
    problems.push('REDIS_SENTINEL_NAME: set without REDIS_SENTINELS');
  const cluster = env.REDIS_CLUSTER_NODES.length > 0;
  const braces = /[{}]/.test(env.QUEUE_PREFIX);
  const plain = env.QUEUE_PREFIX.replace(/[{}]/g, '');
  if (cluster && braces && !hasHashTag(env.QUEUE_PREFIX)) {
    problems.push(
      `QUEUE_PREFIX: "${env.QUEUE_PREFIX}" has braces but no {hash-tag} Redis Cluster would use (a "{" with a "}" after it and something between): use "${plain}" to spread the keys over the masters, or "{${plain}}" to keep them in one slot`,
    );
  } else if (cluster && braces) {
    warnings.push(
      `QUEUE_PREFIX: "${env.QUEUE_PREFIX}" is a {hash-tag}: every key is in one slot, so one master of the cluster holds them all (availability, not throughput); "${plain}" spreads them — a change of layout: drain first (docs/operations.md "Moving to the spread layout")`,
    );
    if ((env.INBOUND_SHARDS ?? 1) > 1)
      warnings.push(
        `INBOUND_SHARDS=${env.INBOUND_SHARDS}: with a {hash-tag} QUEUE_PREFIX every shard is in the same slot, on the same master: no gain`,
      );
  }
  if (env.INBOUND_SHARDS !== undefined && env.INBOUND_SHARDS > MAX_INBOUND_SHARDS)
    problems.push(
      `INBOUND_SHARDS: ${env.INBOUND_SHARDS} is more than ${MAX_INBOUND_SHARDS} (each shard is a stream, a fan-out loop and a blocking connection per worker process)`,
    );
  const url = env.REDIS_URL ?? DEFAULT_REDIS_URL;
  const urlTls = url.startsWith('rediss://');
  if (env.REDIS_TLS === false && urlTls && clusterNodes.length === 0 && sentinels.length === 0)
    problems.push('REDIS_TLS: off, but REDIS_URL is rediss:// (TLS); use redis:// or leave REDIS_TLS unset');
  const configured =
    env.REDIS_URL !== undefined || env.REDIS_CLUSTER_NODES.length > 0 || env.REDIS_SENTINELS.length > 0;
  let probe: RedisNode | null = null;
  if (env.REDIS_LOCAL_PROBE !== 'off')
    probe = parseNodes('REDIS_LOCAL_PROBE', [env.REDIS_LOCAL_PROBE], problems)[0] ?? null;
  const local: LocalRedisSettings | undefined = configured
    ? undefined
    : {
        probe,
        dir: join(env.DATA_DIR, 'redis'),
        ...(env.REDIS_SERVER_BIN !== undefined ? { serverBin: env.REDIS_SERVER_BIN } : {}),
      };
  return {
    url:
      probe && !configured ? `redis://${probe.host.includes(':') ? `[${probe.host}]` : probe.host}:${probe.port}` : url,
    ...(local ? { local } : {}),
    clusterNodes,
    sentinels,
    ...(env.REDIS_SENTINEL_NAME !== undefined ? { sentinelName: env.REDIS_SENTINEL_NAME } : {}),
    ...(env.REDIS_PASSWORD !== undefined ? { password: env.REDIS_PASSWORD } : {}),
    tls: env.REDIS_TLS ?? urlTls,
    prefix: env.QUEUE_PREFIX,
    ...(env.INBOUND_SHARDS !== undefined ? { inboundShards: env.INBOUND_SHARDS } : {}),
  };
}

/** A Redis Cluster hash tag: the first "{" with a "}" after it and at least one character between. */
function hasHashTag(prefix: string): boolean {
  const open = prefix.indexOf('{');
  return open !== -1 && prefix.indexOf('}', open + 1) > open + 1;
}

interface SinksAndRoutes {
  sinks: Record<string, SinkConfig>;
  routes: ParsedRoute[];
}

interface SinkContext {
  /** Each sink type's settings (sinkSettingsSection). */
  settings: Readonly<Record<string, SinkSettings>>;
  telephonyConfigured: boolean;
  problems: string[];
  out: SinksAndRoutes;
  declared: Set<string>;
}

/** One sink: its name, its type, its options checked by its type, then what it needs to start. */
function addSink(ctx: SinkContext, name: string, raw: unknown, origin: SinkConfig['origin'], where: string): void {
  const { problems } = ctx;
  ctx.declared.add(name);
  const nameOk = sinkNameSchema.safeParse(name);
  if (!nameOk.success) problems.push(`${where}: ${nameOk.error.issues[0]?.message}`);
  if (!isMapping(raw)) {
    problems.push(`${where}: expected the sink's options (type: …), got ${kindOf(raw)}`);
    return;
  }
  const known = oneOf([...sinkTypes.keys()]);
  if (typeof raw.type !== 'string') {
    problems.push(`${where}.type: missing — use ${known}`);
    return;
  }
  const type = sinkTypes.get(raw.type);
  if (!type) {
    problems.push(`${where}.type: unknown sink type "${raw.type}" — use ${known}`);
    return;
  }
  const { type: _type, ...given } = raw;
  const settings = ctx.settings[type.type] ?? {};
  const rest = origin === 'file' && raw.type === 'archive' ? withArchiveEnv(given, settings as ArchiveSettings) : given;
  const check = (options: unknown) => {
    for (const problem of type.check?.(options, settings, { telephony: ctx.telephonyConfigured }) ?? [])
      problems.push(`${where} (${raw.type}): ${problem}`);
  };
  const parsed = type.options.safeParse(rest, { reportInput: true });
  if (!parsed.success) {
    problems.push(...describeIssues(parsed.error.issues, [where]));
    // The sink's other problems too (its credentials, …): checked with the bad options left out.
    const bad = new Set(
      parsed.error.issues.flatMap((i) =>
        i.path.length > 0 ? [String(i.path[0])] : i.code === 'unrecognized_keys' ? i.keys : [],
      ),
    );
    const partial = type.options.safeParse(Object.fromEntries(Object.entries(rest).filter(([k]) => !bad.has(k))));
    if (partial.success) check(partial.data);
    return;
  }
  check(parsed.data);
  const endpoints = type.endpoints?.(parsed.data);
  ctx.out.sinks[name] = { name, type: raw.type, options: parsed.data, origin, ...(endpoints ? { endpoints } : {}) };
}

/** The config file's routes; each route's targets, to be checked once every sink is known. */
function fileRoutes(file: ConfigFile, out: SinksAndRoutes, problems: string[]): { i: number; to: string[] }[] {
  const targets: { i: number; to: string[] }[] = [];
  file.routes.forEach((raw, i) => {
    const parsed = routeSchema.safeParse(raw, { reportInput: true });
    if (!parsed.success) {
      problems.push(...describeIssues(parsed.error.issues, [`routes[${i}]`]));
      // Its targets are checked all the same: an unknown sink shows in this pass, not the next.
      const to = isMapping(raw) ? [raw.to].flat().filter((n): n is string => typeof n === 'string' && n !== '') : [];
      if (to.length > 0) targets.push({ i, to });
      return;
    }
    out.routes.push(parsed.data);
    targets.push({ i, to: parsed.data.to });
  });
  return targets;
}

/**
 * Sinks and routes: the file's, then environment shortcuts for names the file does not define. A
 * shortcut is left out when the file defines a sink of its name or of its type: that sink reads the
 * same variables (e.g. its token), and a second sink would write every call twice.
 */
function sinksSection(
  env: Env,
  settings: Readonly<Record<string, SinkSettings>>,
  file: ConfigFile,
  telephonyConfigured: boolean,
  report: SectionReport,
): SinksAndRoutes {
  const ctx: SinkContext = {
    settings,
    telephonyConfigured,
    problems: report.problems,
    out: { sinks: {}, routes: [] },
    declared: new Set(),
  };
  for (const [name, raw] of Object.entries(file.sinks)) addSink(ctx, name, raw, 'file', `sinks.${name}`);
  const targets = fileRoutes(file, ctx.out, report.problems);
  const fileTypes = new Set(Object.values(file.sinks).map((raw) => (isMapping(raw) ? raw.type : undefined)));
  for (const type of sinkTypes.values()) {
    if (fileTypes.has(type.type)) continue;
    const shortcut = type.fromEnv?.(settings[type.type] ?? {}, { configFile: env.CALLSYNC_CONFIG !== undefined });
    if (!shortcut) continue;
    for (const [name, raw] of Object.entries(shortcut.sinks)) {
      if (file.sinks[name] !== undefined) continue;
      addSink(ctx, name, raw, 'env', `environment shortcut for sink "${name}"`);
      for (const route of shortcut.routes) {
        const parsed = routeSchema.safeParse(route);
        if (parsed.success && parsed.data.to.includes(name)) ctx.out.routes.push(parsed.data);
      }
    }
  }
  const { declared } = ctx;
  for (const { i, to } of targets) {
    for (const name of to)
      if (!declared.has(name))
        report.problems.push(
          `routes[${i}].to: no sink named "${name}"${declared.size > 0 ? ` — use ${oneOf([...declared])}` : ''}`,
        );
  }
  // With a config file the file lists every sink: no implicit local archive (transcripts are personal
  // data; they go nowhere the file does not name). Say so when nothing archives calls.
  const archives = new Set(
    Object.values(ctx.out.sinks)
      .filter((s) => s.type === 'archive')
      .map((s) => s.name),
  );
  if (!ctx.out.routes.some((r) => r.to.some((name) => archives.has(name)))) report.warnings.push(NO_ARCHIVE_WARNING);
  return ctx.out;
}

/**
 * The longest delay a Node timer takes: 2^31 - 1 ms (24.8 days). A longer one fires after 1 ms, so
 * e.g. RETENTION_SWEEP_INTERVAL_SECONDS=3600000 (an hour written in ms) swept — sent Redis a SET — in
 * a loop, and a SHUTDOWN_GRACE_MS that long gave no grace at all.
 */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Durations Redis keeps a key for (PEXPIRE, SET PX): 100 years, far below where Redis refuses the TTL. */
const MAX_TTL_DAYS = 36_500;

/**
 * The upper bound of a duration variable, or undefined: every `…_MS` is a timer's delay (at most
 * MAX_TIMER_MS); the seconds and days below are a timer's or a Redis TTL's.
 */
function durationLimit(name: string): { max: number; unit: string; why: string } | undefined {
  const timer = 'the longest delay a timer can wait (24.8 days)';
  const ttl = 'a Redis key is kept for at most 100 years here';
  if (name.endsWith('_MS')) return { max: MAX_TIMER_MS, unit: 'ms', why: timer };
  if (name === 'RETENTION_SWEEP_INTERVAL_SECONDS')
    return { max: Math.floor(MAX_TIMER_MS / 1000), unit: 'seconds', why: timer };
  if (name === 'DEDUPE_WINDOW_SECONDS') return { max: MAX_TTL_DAYS * 86_400, unit: 'seconds', why: ttl };
  if (name === 'CALL_TIMELINE_TTL_DAYS') return { max: MAX_TTL_DAYS, unit: 'days', why: ttl };
  return undefined;
}

/** Durations beyond what their timer or Redis TTL can hold (a value in the wrong unit, most often). */
function checkDurations(env: Env, problems: string[], badKeys: Set<string>): void {
  for (const [name, value] of Object.entries(env)) {
    const limit = durationLimit(name);
    if (limit === undefined || typeof value !== 'number' || value <= limit.max) continue;
    problems.push(
      `${name}: ${value} is more than ${limit.max} ${limit.unit}, ${limit.why} (the value is in ${limit.unit})`,
    );
    badKeys.add(name);
  }
}

/** The environment through the one schema; bad variables are reported and left at their defaults. */
function parseEnv(processEnv: NodeJS.ProcessEnv, problems: string[]): { env: Env; badKeys: Set<string> } {
  const envSchema = currentEnvSchema();
  const parsed = envSchema.safeParse(processEnv, { reportInput: true });
  if (parsed.success) {
    const badKeys = new Set<string>();
    checkDurations(parsed.data, problems, badKeys);
    return { env: parsed.data, badKeys };
  }
  problems.push(...describeIssues(parsed.error.issues));
  // Keep checking the rest (the config file too) with the bad variables left at their defaults.
  const badKeys = new Set(parsed.error.issues.map((i) => String(i.path[0])));
  const env = envSchema.parse(Object.fromEntries(Object.entries(processEnv).filter(([k]) => !badKeys.has(k))));
  checkDurations(env, problems, badKeys);
  return { env, badKeys };
}

/** The shortest PRIVACY_HMAC_SECRET not warned about (characters). */
const MIN_PRIVACY_SECRET = 16;

export function loadConfig(processEnv: NodeJS.ProcessEnv = process.env, options: LoadOptions = {}): Config {
  const report: SectionReport = { problems: [], warnings: [], badKeys: new Set() };
  const { env, badKeys } = parseEnv(processEnv, report.problems);
  report.badKeys = badKeys;
  const telephony = telephonySection(env, report);
  const telephonyConfigured = env.TELEPHONY_API_URL !== undefined || badKeys.has('TELEPHONY_API_URL');
  const configPath = env.CALLSYNC_CONFIG;
  const file = configPath
    ? readConfigFile(configPath, processEnv, options, report.problems)
    : { sinks: {}, routes: [] as unknown[] };
  const sinkSettings = sinkSettingsSection(env);
  const { sinks, routes } = sinksSection(env, sinkSettings, file, telephonyConfigured, report);
  const ingress = ingressSection(env, report);
  const sources = sourcesSection(env, report);
  const poll = pollSection(env, telephonyConfigured, report);
  const redis = redisSettings(env, report.problems, report.warnings);
  const privacy = privacySection(env);
  if (privacy.hmacSecret !== undefined && privacy.hmacSecret.length < MIN_PRIVACY_SECRET)
    report.warnings.push(
      `PRIVACY_HMAC_SECRET is shorter than ${MIN_PRIVACY_SECRET} characters: so short a key can be found by trying keys against one known number, and with it the number behind every hash in Redis. Use a random one, e.g. \`openssl rand -base64 32\` (a new key forgets which calls were texted and the calls' number index)`,
    );
  if (report.problems.length > 0) throw new ConfigError(report.problems);

  // No remote's text quotes them back into a log line or a dead letter (redactRemoteText).
  rememberSecrets(
    secretValues(
      processEnv,
      Object.values(sinks).map((sink) => sink.options),
    ),
  );
  const retry = retrySection(env, file.retry);
  for (const sink of Object.values(sinks)) {
    const own = sinkTypes.get(sink.type)?.retry?.(sink.options, retry);
    if (own) sink.retry = own;
  }
  return {
    role: env.CALLSYNC_ROLE,
    configFile: configPath,
    logLevel: env.LOG_LEVEL,
    ...ingress,
    redis,
    ops: opsSection(env),
    spool: spoolSection(env),
    retention: retentionSection(env),
    timeline: timelineSection(env),
    privacy,
    sources,
    retry,
    worker: workerSection(env),
    telephony,
    poll,
    sinkSettings,
    sinks,
    routes,
    warnings: report.warnings,
  };
}
