// `callsync check-config`: validates the environment and the config file, prints the effective
// setup (roles, endpoints, sinks, routes) without secrets, exits 2 on errors.
import type { Config } from '../config/index.js';
import type { Condition, ParsedRoute } from '../routing/types.js';
import { opsPort, queueNames } from '../ops/index.js';
import { describeSchedule } from '../sinks/retry.js';
import { table, type CliIo } from './io.js';
import type { RedisReach } from './redis.js';
import { describeRedis, redisMode } from '../../queues/connection.js';
import { redisKeys, type RedisKeys } from '../../queues/keys.js';
import { redactOptions, redactUrl } from '../config/redact.js';
import { routingFingerprint } from '../config/fingerprint.js';
import { liveFingerprints, shortFingerprint, type FingerprintEntry } from '../state/config-fingerprint.js';
import { strandedLine, strandedOf, unconfiguredQueues, type StrandedQueue } from '../ops/stranded-queues.js';
import type { RedisClient } from '../../queues/connection.js';

function describeCondition(c: Condition): string {
  const parts = Object.entries(c).map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('|') : String(v)}`);
  return parts.length === 0 ? 'every call' : parts.join(' and ');
}

function describeRoute(route: ParsedRoute): string {
  const when = route.when.map(describeCondition);
  const condition = when.length === 1 ? when[0] : when.map((w) => `(${w})`).join(' or ');
  return `${condition} -> ${route.to.join(', ')}`;
}

/** The key layout in a line: where a queue's keys, the inbound log and a channel's lock live. */
function describeLayout(keys: RedisKeys): string {
  const shards = `${keys.inboundShards} inbound stream${keys.inboundShards === 1 ? '' : 's'}`;
  if (keys.layout === 'spread')
    return `spread over the cluster's masters: ${shards} (${keys.inboundShard(0)}…), each queue in its own slot (e.g. ${keys.queuePrefix('sink-archive')})`;
  return `one slot under "${keys.prefix}", ${shards}`;
}

/**
 * The Redis of the `redis:` line: the configured one; with none configured (REDIS_URL & co. unset),
 * the one check-config found in use (the local one or the private one), not the probe address.
 */
function describeRedisInUse(config: Config, reach: RedisReach | undefined): string {
  const { local } = config.redis;
  if (!local) return describeRedis(config.redis);
  const probe = local.probe ? `${local.probe.host}:${local.probe.port}` : null;
  if (reach?.url && reach.origin === 'local') return `${reach.url} (none configured: the one answering at ${probe})`;
  if (reach?.url && reach.origin === 'private')
    return `${reach.url} (none configured: the private Redis in ${local.dir})`;
  if (reach?.origin === 'private') return `none configured: the private Redis in ${local.dir}, not running`;
  return `none configured: ${probe ? `the one answering at ${probe}, else ` : ''}a private Redis in ${local.dir}`;
}

/** The worker processes live on this prefix (their routing fingerprints), or why they could not be read. */
export type LiveProcesses =
  | {
      entries: FingerprintEntry[];
      /** Queues this configuration lacks whose jobs no process works (src/ops/stranded-queues.ts). */
      stranded?: StrandedQueue[];
    }
  | { unavailable: string };

export async function liveProcesses(config: Config, connect: () => Promise<RedisClient>): Promise<LiveProcesses> {
  let redis: RedisClient;
  try {
    redis = await connect();
  } catch (err) {
    return { unavailable: (err as Error).message };
  }
  try {
    const keys = redisKeys(config.redis);
    const entries = await liveFingerprints(redis, keys.configFingerprintsKey());
    const stranded = await strandedOf(redis, keys, await unconfiguredQueues(redis, keys, queueNames(config)));
    return { entries, stranded };
  } catch (err) {
    return { unavailable: (err as Error).message };
  } finally {
    redis.disconnect();
  }
}

/** A warning per queue whose sink this configuration lacks and whose jobs no process works. */
function strandedWarnings(live: LiveProcesses | undefined): string[] {
  return live && 'entries' in live ? (live.stranded ?? []).map(strandedLine) : [];
}

/** The fingerprint line, and how the live processes on the prefix compare (a warning when one differs). */
function describeFingerprint(config: Config, live: LiveProcesses | undefined): { lines: string[]; warnings: string[] } {
  const own = routingFingerprint(config);
  const lines = [`fingerprint: ${shortFingerprint(own)} (of the sinks and routes, without secrets)`];
  const warnings: string[] = [];
  if (live === undefined) return { lines, warnings };
  if ('unavailable' in live) {
    lines.push(`             live worker processes not checked: ${live.unavailable}`);
    return { lines, warnings };
  }
  const same = live.entries.filter((e) => e.fingerprint === own);
  const other = live.entries.filter((e) => e.fingerprint !== own);
  lines.push(
    `             live worker processes on this prefix: ${same.length} with this configuration, ${other.length} with another`,
  );
  for (const e of other) {
    lines.push(`             ${e.id} (${e.role}, since ${e.startedAt}): ${shortFingerprint(e.fingerprint)}`);
  }
  if (other.length > 0) {
    const fingerprints = [...new Set(other.map((e) => shortFingerprint(e.fingerprint)))];
    warnings.push(
      `${other.length} live worker process${other.length === 1 ? '' : 'es'} on this QUEUE_PREFIX route${other.length === 1 ? 's' : ''} with another configuration (${fingerprints.join(', ')}): the same calls would go to different sinks depending on which process fans them out`,
    );
  }
  return { lines, warnings };
}

/** @internal Exported for its tests only (test/config-redis.test.ts, test/config.test.ts …). */
export function describeConfig(config: Config, live?: LiveProcesses, reach?: RedisReach): string[] {
  const { admin } = config.ops;
  const lines: string[] = [];
  const roles = config.role === 'all' ? 'ingress, worker, poller' : config.role;
  lines.push(`role:        ${config.role} (${roles})`);
  lines.push(
    `redis:       ${describeRedisInUse(config, reach)}${config.redis.password !== undefined ? ' (password set)' : ''}  prefix "${config.redis.prefix}"`,
  );
  const keys = redisKeys(config.redis);
  lines.push(`keys:        ${describeLayout(keys)}`);
  lines.push(`config file: ${config.configFile ?? '(none: sinks from environment shortcuts)'}`);
  if (config.role === 'ingress' || config.role === 'all') {
    const ips = config.webhook.allowedIps === '*' ? 'any address' : config.webhook.allowedIps.join(', ');
    lines.push(
      `ingress:     http://${config.http.host}:${config.http.port}/webhooks/ai-agent  (from ${ips}; auth ${config.webhook.authHeader ? `header ${config.webhook.authHeader}` : 'none'})`,
    );
    const proxies = config.webhook.trustedProxies ?? [];
    const hops = config.webhook.trustProxyHops;
    lines.push(
      `proxies:     ${proxies.length === 0 ? 'none trusted (X-Forwarded-For ignored)' : `X-Forwarded-For read from ${proxies.join(', ')}${hops === undefined ? '' : ` (at most ${hops} hop${hops === 1 ? '' : 's'})`}`}`,
    );
  }
  const port = opsPort(config);
  lines.push(
    `ops server:  ${port === null ? 'none (the ingress port serves /metrics and /admin/queues)' : `http://${config.ops.host}:${port}`}`,
  );
  const dashboard = admin.password || admin.token;
  lines.push(
    `dashboard:   ${dashboard ? `/admin/queues (${[admin.password ? `basic auth as ${admin.username}` : '', admin.token ? 'bearer token' : ''].filter(Boolean).join(', ')})` : 'off (set ADMIN_PASSWORD or ADMIN_TOKEN)'}`,
  );
  lines.push(`metrics:     /metrics (${config.ops.metricsToken ? 'bearer token' : 'no credentials'})`);
  lines.push(
    `retries:     ${config.retry.attempts} attempts, backoff ${config.retry.backoffMs} ms doubling up to ${config.retry.maxBackoffMs} ms`,
  );
  for (const sink of Object.values(config.sinks)) {
    if (sink.retry?.schedule)
      lines.push(
        `             sink ${sink.name}: ${sink.retry.attempts} attempts, after ${describeSchedule(sink.retry.schedule)}`,
      );
  }
  lines.push(`queues:      ${queueNames(config).join(', ')}`);
  const fingerprint = describeFingerprint(config, live);
  lines.push(...fingerprint.lines);
  lines.push('');
  const sinks = Object.values(config.sinks);
  const named = (origin: string) =>
    sinks
      .filter((x) => x.origin === origin)
      .map((x) => x.name)
      .join(', ') || 'none';
  lines.push(
    `sinks (${sinks.length}): from the config file: ${named('file')}; from environment shortcuts: ${named('env')}`,
  );
  if (sinks.length === 0) lines.push('  (none: calls are accepted and fanned out to nothing)');
  lines.push(
    ...table(sinks.map((s) => [s.name, s.type, `from ${s.origin}`, JSON.stringify(redactOptions(s.options))])).map(
      (l) => `  ${l}`,
    ),
  );
  lines.push('');
  lines.push(`routes (${config.routes.length}):`);
  if (config.routes.length === 0) lines.push('  (none)');
  config.routes.forEach((r, i) => lines.push(`  ${r.name ?? `#${i + 1}`}: ${describeRoute(r)}`));
  for (const name of Object.keys(config.sinks)) {
    if (!config.routes.some((r) => r.to.includes(name))) lines.push(`  note: no route sends calls to sink "${name}"`);
  }
  const warnings = [...config.warnings, ...(reach?.warnings ?? []), ...fingerprint.warnings, ...strandedWarnings(live)];
  if (warnings.length > 0) {
    lines.push('');
    lines.push('warnings:');
    for (const w of warnings) lines.push(`  - ${w}`);
  }
  return lines;
}

export function printConfig(config: Config, io: CliIo, json: boolean, live?: LiveProcesses, reach?: RedisReach): void {
  if (json) {
    const fingerprint = describeFingerprint(config, live);
    io.out(
      JSON.stringify(
        {
          role: config.role,
          redis: {
            mode: redisMode(config.redis),
            url: config.redis.local ? (reach?.url ?? null) : redactUrl(config.redis.url),
            where: describeRedisInUse(config, reach),
            prefix: config.redis.prefix,
            layout: redisKeys(config.redis).layout,
            inboundShards: redisKeys(config.redis).inboundShards,
            ...(reach ? { reached: reach } : {}),
          },
          opsPort: opsPort(config),
          queues: queueNames(config),
          sinks: Object.values(config.sinks).map((s) => ({ ...s, options: redactOptions(s.options) })),
          routes: config.routes,
          fingerprint: routingFingerprint(config),
          ...(live === undefined
            ? {}
            : {
                liveProcesses:
                  'unavailable' in live
                    ? { unavailable: live.unavailable }
                    : live.entries.map((e) => ({
                        id: e.id,
                        role: e.role,
                        fingerprint: e.fingerprint,
                        startedAt: e.startedAt,
                      })),
              }),
          warnings: [
            ...config.warnings,
            ...(reach?.warnings ?? []),
            ...fingerprint.warnings,
            ...strandedWarnings(live),
          ],
        },
        null,
        2,
      ),
    );
    return;
  }
  io.out(reach?.problem ? `problem: ${reach.problem}` : 'configuration OK');
  io.out('');
  for (const line of describeConfig(config, live, reach)) io.out(line);
  if (reach) io.out(`redis in use: ${reach.where}`);
}
