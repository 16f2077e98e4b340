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

const SECRET_KEY = /secret|token|password|passphrase|api[-_]?key|authorization|credential|signing|cookie/i;
/** Options whose values are all sent as credentials (e.g. the signed webhook's custom headers): names kept, values hidden. */
const SECRET_MAPS = new Set(['headers']);
/** Values that are secrets whatever their key: signing secrets, tokens with a known prefix, `Bearer …`. */
const SECRET_VALUE = /^(whsec_|pat-|sk_|xox[abp]-|ghp_|glpat-)|^bearer\s/i;

/** A sink's options with anything secret-looking replaced: secret keys, header values, secret values, URL passwords. */
export function redactOptions(value: unknown, key = ''): unknown {
  if (key && SECRET_KEY.test(key)) return '[redacted]';
  if (typeof value === 'string') {
    if (SECRET_VALUE.test(value.trim())) return '[redacted]';
    return /^[a-z][a-z0-9+.-]*:\/\/[^/\s]*@/i.test(value) ? redactUrl(value) : value;
  }
  if (Array.isArray(value)) return value.map((v) => redactOptions(v));
  if (value !== null && typeof value === 'object') {
    if (SECRET_MAPS.has(key)) return Object.fromEntries(Object.keys(value).map((k) => [k, '[redacted]']));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactOptions(v, k)]));
  }
  return value;
}

/** `redis://user:secret@host` -> `redis://user:***@host`. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    // A credential without a user name (`https://token@host`) is the user part.
    else if (u.username) u.username = '***';
    return u.toString();
  } catch {
    return url;
  }
}

function describeCondition(c: Condition): string {
  const parts = Object.entries(c).map(([k, v]) => `${k}=${Array.isArray(v) ? v.join('|') : String(v)}`);
  return parts.length === 0 ? 'every call' : parts.join(' and ');
}

export function describeRoute(route: ParsedRoute): string {
  const when = route.when.map(describeCondition);
  const condition = when.length === 1 ? when[0] : when.map((w) => `(${w})`).join(' or ');
  return `${condition} -> ${route.to.join(', ')}`;
}

/** The key layout in a line: where a queue's keys, the inbound log and a channel's lock live. */
function describeLayout(keys: RedisKeys): string {
  const shards = `${keys.inboundShards} inbound stream${keys.inboundShards === 1 ? '' : 's'}`;
  if (keys.layout === 'spread') return `spread over the cluster's masters: ${shards} (${keys.inboundShard(0)}…), each queue in its own slot (e.g. ${keys.queuePrefix('sink-archive')})`;
  return `one slot under "${keys.prefix}", ${shards}`;
}

export function describeConfig(config: Config): string[] {
  const env = config.env;
  const lines: string[] = [];
  const roles = config.role === 'all' ? 'ingress, worker, poller' : config.role;
  lines.push(`role:        ${config.role} (${roles})`);
  lines.push(`redis:       ${describeRedis(config.redis)}${config.redis.password !== undefined ? ' (password set)' : ''}  prefix "${config.redis.prefix}"`);
  const keys = redisKeys(config.redis);
  lines.push(`keys:        ${describeLayout(keys)}`);
  lines.push(`config file: ${env.CALLSYNC_CONFIG ?? '(none: sinks from environment shortcuts)'}`);
  if (config.role === 'ingress' || config.role === 'all') {
    const ips = config.webhook.allowedIps === '*' ? 'any address' : config.webhook.allowedIps.join(', ');
    lines.push(`ingress:     http://${config.http.host}:${config.http.port}/webhooks/ai-agent  (from ${ips}; auth ${config.webhook.authHeader ? `header ${config.webhook.authHeader}` : 'none'})`);
    const proxies = config.webhook.trustedProxies ?? [];
    const hops = config.webhook.trustProxyHops;
    lines.push(`proxies:     ${proxies.length === 0 ? 'none trusted (X-Forwarded-For ignored)' : `X-Forwarded-For read from ${proxies.join(', ')}${hops === undefined ? '' : ` (at most ${hops} hop${hops === 1 ? '' : 's'})`}`}`);
  }
  const port = opsPort(config);
  lines.push(`ops server:  ${port === null ? 'none (the ingress port serves /metrics and /admin/queues)' : `http://${env.OPS_HOST ?? config.http.host}:${port}`}`);
  const dashboard = env.ADMIN_PASSWORD || env.ADMIN_TOKEN;
  lines.push(`dashboard:   ${dashboard ? `/admin/queues (${[env.ADMIN_PASSWORD ? `basic auth as ${env.ADMIN_USERNAME}` : '', env.ADMIN_TOKEN ? 'bearer token' : ''].filter(Boolean).join(', ')})` : 'off (set ADMIN_PASSWORD or ADMIN_TOKEN)'}`);
  lines.push(`metrics:     /metrics (${env.METRICS_TOKEN ? 'bearer token' : 'no credentials'})`);
  lines.push(`retries:     ${config.retry.attempts} attempts, backoff ${config.retry.backoffMs} ms doubling up to ${config.retry.maxBackoffMs} ms`);
  for (const sink of Object.values(config.sinks)) {
    if (sink.retry?.schedule) lines.push(`             sink ${sink.name}: ${sink.retry.attempts} attempts, after ${describeSchedule(sink.retry.schedule)}`);
  }
  lines.push(`queues:      ${queueNames(config).join(', ')}`);
  lines.push('');
  const sinks = Object.values(config.sinks);
  const named = (origin: string) => sinks.filter((x) => x.origin === origin).map((x) => x.name).join(', ') || 'none';
  lines.push(`sinks (${sinks.length}): from the config file: ${named('file')}; from environment shortcuts: ${named('env')}`);
  if (sinks.length === 0) lines.push('  (none: calls are accepted and fanned out to nothing)');
  lines.push(...table(sinks.map((s) => [s.name, s.type, `from ${s.origin}`, JSON.stringify(redactOptions(s.options))])).map((l) => `  ${l}`));
  lines.push('');
  lines.push(`routes (${config.routes.length}):`);
  if (config.routes.length === 0) lines.push('  (none)');
  config.routes.forEach((r, i) => lines.push(`  ${r.name ?? `#${i + 1}`}: ${describeRoute(r)}`));
  for (const name of Object.keys(config.sinks)) {
    if (!config.routes.some((r) => r.to.includes(name))) lines.push(`  note: no route sends calls to sink "${name}"`);
  }
  if (config.warnings.length > 0) {
    lines.push('');
    lines.push('warnings:');
    for (const w of config.warnings) lines.push(`  - ${w}`);
  }
  return lines;
}

export function printConfig(config: Config, io: CliIo, json: boolean, reach?: RedisReach): void {
  if (json) {
    io.out(
      JSON.stringify(
        {
          role: config.role,
          redis: { mode: redisMode(config.redis), url: redactUrl(config.redis.url), where: describeRedis(config.redis), prefix: config.redis.prefix, layout: redisKeys(config.redis).layout, inboundShards: redisKeys(config.redis).inboundShards, ...(reach ? { reached: reach } : {}) },
          opsPort: opsPort(config),
          queues: queueNames(config),
          sinks: Object.values(config.sinks).map((s) => ({ ...s, options: redactOptions(s.options) })),
          routes: config.routes,
          warnings: config.warnings,
        },
        null,
        2,
      ),
    );
    return;
  }
  io.out(reach?.problem ? `problem: ${reach.problem}` : 'configuration OK');
  io.out('');
  for (const line of describeConfig(config)) io.out(line);
  if (reach) io.out(`redis in use: ${reach.where}`);
}
