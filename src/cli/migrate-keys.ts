// `callsync migrate-keys`: copies callsync's long-lived state from an old deployment whose keys are
// in the one-slot layout (a single Redis, or a Redis Cluster with a `{hash-tag}` QUEUE_PREFIX) into
// the layout of this configuration (queues/keys.ts) — typically the spread layout of a cluster with
// a plain QUEUE_PREFIX. docs/operations.md, "Moving to the spread layout".
//
// Copied: every sink's state, the poller cursors, the opt-out list, the backfill cursors and the
// replay/backfill markers, the OAuth refresh token, the generated privacy HMAC key, the inbound
// dedupe keys (each into the shard its hash has in the target, so a resend within the window is
// still a duplicate); each with its remaining TTL and its type.
// Not copied: queues (work, dead letters, job history), the inbound log, Push assemblies in
// progress, locks, the recorded shard count. The source is only read. Calls not yet delivered (in
// the inbound log, or jobs waiting, active or delayed) make it refuse unless --force.
//
// Never overwrites: a key the target already has is kept as it is (after the switch the target's
// value is the newer one), except the opt-out list, a set, which is merged: a number opted out on
// either side stays opted out. So a second run copies nothing twice. Values — phone numbers in the
// opt-out list and in cooldown keys, CRM ids — are never printed, nor key names: counts only.
import { Queue } from 'bullmq';
import { Cluster } from 'ioredis';
import { describeRedis, type RedisClient, type RedisNode, type RedisSettings } from '../../queues/connection.js';
import { inboundSeenPrefix } from '../../queues/inbound.js';
import { RedisKeys, redisKeys } from '../../queues/keys.js';
import { cursorKey } from '../../queues/poller-state.js';
import type { Config } from '../config/index.js';
import { globEscape, queuesInRedis, scanKeys } from '../../queues/scan.js';
import { table, UsageError, type CliIo } from './io.js';
import { queuedMarkerKey } from './sink-queue.js';
import { sourceTypes } from '../sources/registry.js';

export interface MigrateSourceOptions {
  /** --from-url: the old deployment's single Redis (or its current master). */
  fromUrl?: string;
  /** --from-cluster-nodes: `host:port,…` of the old deployment's cluster. */
  fromClusterNodes?: string;
  /** --from-prefix: the old QUEUE_PREFIX; undefined: found in the source (`sourceCandidates`). */
  fromPrefix?: string;
}

export interface MigrateOptions {
  fromPrefix?: string;
  dryRun: boolean;
  force: boolean;
}

const SINK_NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

/** A Redis Cluster hash tag: a "{" with a "}" after it and something between (as the config reads it). */
function hasHashTag(prefix: string): boolean {
  const open = prefix.indexOf('{');
  return open !== -1 && prefix.indexOf('}', open + 1) > open + 1;
}

function parseNodes(text: string): RedisNode[] {
  const entries = text
    .split(',')
    .map((e) => e.trim())
    .filter(Boolean);
  if (entries.length === 0) throw new UsageError('--from-cluster-nodes: expected host:port,…');
  return entries.map((entry) => {
    const m = /^(?:\[([^\]]+)\]|([^:\s]+)):(\d{1,5})$/.exec(entry);
    const port = m ? Number(m[3]) : NaN;
    if (!m || port < 1 || port > 65535) throw new UsageError(`--from-cluster-nodes: "${entry}" is not host:port`);
    return { host: (m[1] ?? m[2])!, port };
  });
}

/**
 * Where the old deployment's Redis is: `--from-url` (its password, else REDIS_PASSWORD; TLS with
 * `rediss://`), or `--from-cluster-nodes` (REDIS_PASSWORD and REDIS_TLS of this environment, as for
 * the same cluster under another prefix). The prefix is checked, not yet chosen.
 */
export function sourceSettings(config: Config, options: MigrateSourceOptions): RedisSettings {
  const { fromUrl, fromClusterNodes, fromPrefix } = options;
  if (fromUrl === undefined && fromClusterNodes === undefined)
    throw new UsageError("--from-url or --from-cluster-nodes is required: where the old deployment's Redis is");
  if (fromUrl !== undefined && fromClusterNodes !== undefined)
    throw new UsageError('--from-url and --from-cluster-nodes: give one of them');
  if (fromPrefix !== undefined && (fromPrefix === '' || /\s/.test(fromPrefix)))
    throw new UsageError('--from-prefix: expected a prefix without spaces');
  if (fromClusterNodes !== undefined) {
    if (fromPrefix !== undefined && !hasHashTag(fromPrefix)) {
      throw new UsageError(
        `--from-prefix: "${fromPrefix}" on a cluster is not a {hash-tag}: its keys are spread already (or were never valid there); the source must be the one-slot layout, e.g. "{${fromPrefix.replace(/[{}]/g, '')}}"`,
      );
    }
    return {
      url: config.redis.url,
      clusterNodes: parseNodes(fromClusterNodes),
      sentinels: [],
      ...(config.redis.password !== undefined ? { password: config.redis.password } : {}),
      tls: config.redis.tls,
      prefix: fromPrefix ?? '',
    };
  }
  let url: URL;
  try {
    url = new URL(fromUrl!);
  } catch {
    throw new UsageError('--from-url: expected redis://host:port or rediss://… (TLS)');
  }
  if (!/^rediss?:$/.test(url.protocol))
    throw new UsageError('--from-url: expected redis://host:port or rediss://… (TLS)');
  return {
    url: fromUrl!,
    clusterNodes: [],
    sentinels: [],
    ...(url.password === '' && config.redis.password !== undefined ? { password: config.redis.password } : {}),
    tls: url.protocol === 'rediss:',
    prefix: fromPrefix ?? '',
  };
}

/** The prefixes an old deployment of this target most likely used: `{P}` (the compose file's) and `P`, P the target's prefix without braces. */
function sourceCandidates(target: RedisKeys, source: RedisSettings, sameRedis: boolean): string[] {
  const plain = target.prefix.replace(/[{}]/g, '');
  const candidates = [`{${plain}}`, plain].filter((p, i, all) => all.indexOf(p) === i);
  return candidates.filter((p) => {
    // On a cluster only a {hash-tag} prefix is the one-slot layout.
    if (source.clusterNodes.length > 0 && !hasHashTag(p)) return false;
    // The target's own keys are not a source.
    return !(sameRedis && target.layout === 'one-slot' && p === target.prefix);
  });
}

// ---------------------------------------------------------------------------------------------
// What each key of the source is

/** A key to copy: the area it is counted in and its name in the target. */
interface CopyKey {
  kind: 'copy';
  area: string;
  source: string;
  target: string;
}

type LeftKind =
  'lock' | 'poller-state' | 'queue' | 'inbound-log' | 'parked' | 'source' | 'layout' | 'fingerprints' | 'other';

interface LeftKey {
  kind: LeftKind;
  source: string;
  /** The source type whose state it is (kind `source`). */
  sourceType?: string;
}

const AREA = {
  optOut: 'opt-out list',
  poller: 'poller cursors',
  backfill: 'backfill cursors',
  markers: 'replay/backfill markers',
  dedupe: 'inbound dedupe keys',
  oauth: 'OAuth refresh token',
  privacyKey: 'privacy HMAC key',
  sink: (name: string) => `sink ${name}`,
} as const;

/** A lock in a sink's state (`lock:<hash>` of the revisions, `newperson-lock:<hash>` of Pipedrive, any scoped one). */
function isLock(subKey: string): boolean {
  return /(^|:)([\w-]*-)?lock:/.test(subKey);
}

/** Where `key` of the one-slot source under `from` goes in `target`, or why it stays. */
function classify(key: string, from: string, queues: ReadonlySet<string>, target: RedisKeys): CopyKey | LeftKey {
  const rest = key.slice(from.length + 1);
  const copy = (area: string, to: string): CopyKey => ({ kind: 'copy', area, source: key, target: to });
  const left = (kind: LeftKind): LeftKey => ({ kind, source: key });
  if (rest === 'optout') return copy(AREA.optOut, `${target.area('optout')}:optout`);
  let m = /^state:poller:cursor:(.+)$/s.exec(rest);
  if (m) return copy(AREA.poller, cursorKey(target, m[1]!));
  if (rest.startsWith('state:poller:lock:')) return left('lock');
  // What a poller last reported (queues/poller-state.ts): the new pollers write their own.
  if (rest.startsWith('state:poller:status:')) return left('poller-state');
  m = /^state:([^:]+):(.+)$/s.exec(rest);
  if (m && SINK_NAME.test(m[1]!))
    return isLock(m[2]!) ? left('lock') : copy(AREA.sink(m[1]!), `${target.sinkState(m[1]!)}${m[2]}`);
  // A backfill's cursor: `backfill:<from>|<to>|<sink or *>` (cli/backfill.ts backfillCursorKey).
  m = /^backfill:([^|]*\|[^|]*\|.*)$/s.exec(rest);
  if (m) return copy(AREA.backfill, `${target.area('backfill')}:backfill:${m[1]}`);
  // A call queued to a sink by backfill --sink or replay (cli/sink-queue.ts): `<origin>:<sink>:<origin>-<job id>`.
  m = /^(backfill|replay):([^:]+):((?:backfill|replay)-.+)$/s.exec(rest);
  if (m && SINK_NAME.test(m[2]!) && m[3]!.startsWith(`${m[1]}-`))
    return copy(AREA.markers, queuedMarkerKey(target.prefix, m[1]!, m[2]!, m[3]!));
  // Dedupe keys of shard 0 (`inbound-seen:<hash>`) or of shard i (`inbound-<i>:inbound-seen:<hash>`).
  m = /^(?:inbound-\d+:)?inbound-seen:(.+)$/s.exec(rest);
  if (m) return copy(AREA.dedupe, `${inboundSeenPrefix(target.inboundShard(target.shardOf(m[1]!)))}${m[1]}`);
  if (/^(?:inbound-\d+:)?inbound-log$/.test(rest)) return left('inbound-log');
  if (/^(?:inbound-\d+:)?inbound-parked$/.test(rest)) return left('parked');
  // A source's state (the Push API's call assembly), `<prefix>:<source name>:…`: not copied.
  for (const type of sourceTypes.values())
    if (type.stateLabel && rest.startsWith(`${type.name}:`)) return { ...left('source'), sourceType: type.name };
  if (rest === 'layout') return left('layout');
  // The telephony API's rotated refresh token (src/state/refresh-token.ts): without it the new deployment starts from the environment's, maybe revoked.
  if (rest === 'telephony:oauth-refresh') return copy(AREA.oauth, target.telephonyOAuthKey());
  // The generated key of the keyed hashes (queues/privacy-key.ts): without it the copied "never twice"
  // markers and SMS cooldowns no longer match their numbers, and forget cannot find them.
  if (rest === 'privacy-key') return copy(AREA.privacyKey, target.privacyKey());
  // Which configuration the live processes run: theirs, not the new deployment's.
  if (rest === 'config-fingerprints') return left('fingerprints');
  const colon = rest.indexOf(':');
  if (colon > 0 && queues.has(rest.slice(0, colon))) return left('queue');
  return left('other');
}

// ---------------------------------------------------------------------------------------------
// Undelivered work in the source

interface SourceWork {
  /** Lines naming undelivered work (refused without --force). */
  undelivered: string[];
  /** Lines naming what stays behind anyway (dead letters, parked entries, Push calls being assembled). */
  behind: string[];
  /** Completed jobs (history), all queues. */
  history: number;
}

const UNDELIVERED_STATES = ['wait', 'active', 'delayed', 'prioritized', 'waiting-children'] as const;

async function sourceWork(source: RedisClient, from: string, queues: string[], left: LeftKey[]): Promise<SourceWork> {
  const work: SourceWork = { undelivered: [], behind: [], history: 0 };
  let logEntries = 0;
  let parked = 0;
  for (const key of left) {
    if (key.kind === 'inbound-log') logEntries += await source.xlen(key.source);
    if (key.kind === 'parked') parked += await source.xlen(key.source);
  }
  if (logEntries > 0) work.undelivered.push(`inbound log: ${logEntries} call(s) not yet fanned out to the sink queues`);
  const handles = queues.map((name) => new Queue(name, { connection: source, prefix: from }));
  for (const q of handles) q.on('error', () => undefined);
  try {
    for (const queue of handles) {
      const counts = await queue.getJobCounts(...UNDELIVERED_STATES, 'failed', 'completed');
      const waiting = UNDELIVERED_STATES.filter((s) => (counts[s] ?? 0) > 0).map(
        (s) => `${counts[s]} ${s === 'wait' ? 'waiting' : s}`,
      );
      if (waiting.length > 0) work.undelivered.push(`${queue.name}: ${waiting.join(', ')}`);
      if ((counts.failed ?? 0) > 0) work.behind.push(`${queue.name}: ${counts.failed} dead letter(s)`);
      work.history += counts.completed ?? 0;
    }
  } finally {
    await Promise.all(handles.map((q) => q.close().catch(() => undefined)));
  }
  // Not a refusal: with the ingress stopped their hangup can only reach the new deployment, so
  // waiting would mean PUSH_CALL_TIMEOUT_SECONDS (6 h by default) of workers closing them as unknown.
  for (const type of sourceTypes.values()) {
    const line = await type.leftBehind?.(source, from);
    if (line) work.behind.push(line);
  }
  if (parked > 0)
    work.behind.push(
      `inbound-parked: ${parked} parked entr${parked === 1 ? 'y' : 'ies'} (docs/operations.md, runbook)`,
    );
  return work;
}

// ---------------------------------------------------------------------------------------------
// Copying

interface AreaCount {
  keys: number;
  copied: number;
  kept: number;
  /** Sets merged into an existing target set: members added / members already there. */
  membersAdded: number;
  membersThere: number;
}

type Outcome =
  | { result: 'copied' }
  | { result: 'kept' }
  | { result: 'vanished' }
  | { result: 'merged'; added: number; there: number }
  | { result: 'unsupported'; type: string };

/** Members or fields per command (Redis takes many; this keeps each request small). */
const CHUNK = 1000;
/** Keys copied at a time. */
const BATCH = 200;

/** A scratch key in the slot of `key` (a hash is filled there, then renamed only if `key` is absent). */
function scratchKey(key: string): string {
  if (hasHashTag(key)) return `${key}:migrating`;
  // The whole key as the tag: the slot of the key itself.
  if (!/[{}]/.test(key)) return `{${key}}:migrating`;
  return `${key}:migrating`;
}

async function copyKey(source: RedisClient, target: RedisClient, key: CopyKey, dryRun: boolean): Promise<Outcome> {
  const [type, pttl] = await Promise.all([source.type(key.source), source.pttl(key.source)]);
  if (type === 'none' || pttl === -2) return { result: 'vanished' };
  if (type !== 'string' && type !== 'set' && type !== 'hash') return { result: 'unsupported', type };
  const ttl = pttl > 0 ? pttl : null;
  if (dryRun) {
    const exists = (await target.exists(key.target)) === 1;
    if (!exists) return { result: 'copied' };
    if (type !== 'set') return { result: 'kept' };
    const members = await source.smembersBuffer(key.source);
    let there = 0;
    for (let i = 0; i < members.length; i += CHUNK) {
      const flags = await Promise.all(members.slice(i, i + CHUNK).map((m) => target.sismember(key.target, m)));
      there += flags.filter((f) => f === 1).length;
    }
    return { result: 'merged', added: members.length - there, there };
  }
  if (type === 'string') {
    const value = await source.getBuffer(key.source);
    if (value === null) return { result: 'vanished' };
    const ok =
      ttl !== null ? await target.set(key.target, value, 'PX', ttl, 'NX') : await target.set(key.target, value, 'NX');
    return { result: ok === 'OK' ? 'copied' : 'kept' };
  }
  if (type === 'set') {
    // Merged: a number opted out on either side stays opted out.
    const members = await source.smembersBuffer(key.source);
    if (members.length === 0) return { result: 'vanished' };
    const existed = (await target.exists(key.target)) === 1;
    let added = 0;
    for (let i = 0; i < members.length; i += CHUNK)
      added += await target.sadd(key.target, ...members.slice(i, i + CHUNK));
    if (!existed) {
      if (ttl !== null) await target.pexpire(key.target, ttl);
      return { result: 'copied' };
    }
    return { result: 'merged', added, there: members.length - added };
  }
  const hash = await source.hgetallBuffer(key.source);
  const fields = Object.entries(hash);
  if (fields.length === 0) return { result: 'vanished' };
  if ((await target.exists(key.target)) === 1) return { result: 'kept' };
  // Filled beside the target key, then renamed only if the target key is still absent (never a half-copied hash).
  const scratch = scratchKey(key.target);
  await target.del(scratch);
  for (let i = 0; i < fields.length; i += CHUNK)
    await target.hset(scratch, Object.fromEntries(fields.slice(i, i + CHUNK)));
  if (ttl !== null) await target.pexpire(scratch, ttl);
  const renamed = await target.renamenx(scratch, key.target);
  if (renamed === 0) await target.del(scratch);
  return { result: renamed === 1 ? 'copied' : 'kept' };
}

// ---------------------------------------------------------------------------------------------
// The command

function describeKeys(keys: RedisKeys): string {
  return keys.layout === 'spread'
    ? `spread, ${keys.inboundShards} inbound shard${keys.inboundShards === 1 ? '' : 's'}`
    : `one slot, ${keys.inboundShards} inbound stream${keys.inboundShards === 1 ? '' : 's'}`;
}

/** True when some key under `prefix` is one of callsync's (its opt-out list, state, dedupe keys, inbound log or a queue). */
async function holdsCallsync(source: RedisClient, prefix: string): Promise<boolean> {
  const nodes = source instanceof Cluster ? source.nodes('master') : [source];
  const marker =
    /^(optout$|layout$|state:|inbound-seen:|inbound-log$|inbound-\d+:|backfill:|telephony:oauth-refresh$|privacy-key$|[^:]+:meta$)/;
  for (const node of nodes) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${globEscape(prefix)}:*`, 'COUNT', 1000);
      cursor = next;
      if (keys.some((k) => marker.test(k.slice(prefix.length + 1)))) return true;
    } while (cursor !== '0');
  }
  return false;
}

export async function migrateKeys(
  config: Config,
  target: RedisClient,
  source: RedisClient,
  from: RedisSettings,
  options: MigrateOptions,
  io: CliIo,
): Promise<number> {
  const keys = redisKeys(config.redis);
  const sameRedis = describeRedis(from) === describeRedis(config.redis);
  let prefix = options.fromPrefix;
  let found = '';
  if (prefix === undefined) {
    const candidates = sourceCandidates(keys, from, sameRedis);
    const holding: string[] = [];
    for (const c of candidates) if (await holdsCallsync(source, c)) holding.push(c);
    if (holding.length !== 1) {
      const names = candidates.map((c) => `"${c}"`).join(' or ');
      throw new UsageError(
        holding.length === 0
          ? `no callsync keys under ${names || 'a prefix this target could have had'} at ${describeRedis(from)}: name the old QUEUE_PREFIX with --from-prefix`
          : `callsync keys under both ${names} at ${describeRedis(from)}: name the old QUEUE_PREFIX with --from-prefix`,
      );
    }
    prefix = holding[0]!;
    found = '; found there, --from-prefix names another';
  }
  if (sameRedis && keys.layout === 'one-slot' && prefix === keys.prefix)
    throw new UsageError(
      `source and target are the same keys (prefix "${prefix}" at ${describeRedis(from)}): nothing to move`,
    );
  if (sameRedis && keys.prefix.startsWith(`${prefix}:`))
    throw new UsageError(
      `the target prefix "${keys.prefix}" lies inside the source prefix "${prefix}": choose another QUEUE_PREFIX`,
    );
  const sourceKeys = new RedisKeys(prefix, 'one-slot', 1);
  io.out(`source: ${describeRedis(from)} prefix "${prefix}" (one slot${found})`);
  io.out(`target: ${describeRedis(config.redis)} prefix "${keys.prefix}" (${describeKeys(keys)})`);

  const queues = await queuesInRedis(source, sourceKeys);
  const queueSet = new Set(queues);
  const toCopy: CopyKey[] = [];
  const left: LeftKey[] = [];
  for (const key of await scanKeys(source, `${globEscape(prefix)}:*`)) {
    const c = classify(key, prefix, queueSet, keys);
    if (c.kind === 'copy') toCopy.push(c);
    else left.push(c);
  }

  const work = await sourceWork(source, prefix, queues, left);
  if (work.undelivered.length > 0) {
    if (!options.force) {
      io.err('the source still has undelivered work:');
      for (const line of work.undelivered) io.err(`  ${line}`);
      io.err(
        'stop the ingress and let the workers drain it (docs/operations.md "Moving to the spread layout"), or add --force to copy the state anyway and leave that work behind',
      );
      return 1;
    }
    io.err('--force: this undelivered work stays behind in the source:');
    for (const line of work.undelivered) io.err(`  ${line}`);
  }
  if (work.behind.length > 0) {
    io.err('staying behind in the source (not moved):');
    for (const line of work.behind) io.err(`  ${line}`);
    if (work.behind.some((l) => l.includes('dead letter'))) {
      io.err(
        '  retry dead letters before the switch (callsync dlq retry with the old settings, while the old workers run), or after it with the old settings and one worker started with them',
      );
    }
  }

  const counts = new Map<string, AreaCount>();
  const unsupported = new Map<string, number>();
  let vanished = 0;
  for (let i = 0; i < toCopy.length; i += BATCH) {
    const batch = toCopy.slice(i, i + BATCH);
    const outcomes = await Promise.all(batch.map((k) => copyKey(source, target, k, options.dryRun)));
    batch.forEach((k, n) => {
      const outcome = outcomes[n]!;
      if (outcome.result === 'vanished') return void vanished++;
      if (outcome.result === 'unsupported') {
        const label = `${outcome.type} in ${k.area}`;
        unsupported.set(label, (unsupported.get(label) ?? 0) + 1);
        return;
      }
      const c = counts.get(k.area) ?? { keys: 0, copied: 0, kept: 0, membersAdded: 0, membersThere: 0 };
      counts.set(k.area, c);
      c.keys++;
      if (outcome.result === 'copied') c.copied++;
      else if (outcome.result === 'kept') c.kept++;
      else {
        c.kept++;
        c.membersAdded += outcome.added;
        c.membersThere += outcome.there;
      }
    });
  }

  const order = [AREA.dedupe, AREA.optOut, AREA.poller, AREA.backfill, AREA.markers];
  const areas = [...counts.keys()].sort((a, b) => {
    const ia = order.indexOf(a as (typeof order)[number]);
    const ib = order.indexOf(b as (typeof order)[number]);
    return ia !== ib ? (ia === -1 ? -1 : ib === -1 ? 1 : ia - ib) : a.localeCompare(b);
  });
  const configured = new Set(Object.keys(config.sinks));
  const rows = areas.map((area) => {
    const c = counts.get(area)!;
    const notes: string[] = [];
    if (area.startsWith('sink ') && !configured.has(area.slice(5))) notes.push('no such sink in this configuration');
    if (c.membersAdded + c.membersThere > 0)
      notes.push(
        `merged into the target's: ${c.membersAdded} member(s) ${options.dryRun ? 'to add' : 'added'}, ${c.membersThere} there already`,
      );
    return [area, String(c.keys), String(c.copied), String(c.kept), notes.join('; ')];
  });
  if (rows.length === 0) io.out('no state to copy in the source');
  else
    for (const line of table([
      ['AREA', 'KEYS', options.dryRun ? 'TO COPY' : 'COPIED', 'IN TARGET ALREADY (KEPT)', ''],
      ...rows,
    ]))
      io.out(line);

  const byKind = (kind: LeftKind) => left.filter((k) => k.kind === kind).length;
  const notCopied = [
    queues.length > 0
      ? `${queues.length} queue(s) (${byKind('queue')} keys: jobs, dead letters, ${work.history} completed job(s) of history)`
      : '',
    byKind('inbound-log') > 0 ? 'the inbound log' : '',
    byKind('parked') > 0 ? 'the parked entries' : '',
    ...[...sourceTypes.values()].map((t) => {
      const n = left.filter((k) => k.kind === 'source' && k.sourceType === t.name).length;
      return n > 0 ? `${n} ${t.stateLabel} key(s)` : '';
    }),
    byKind('lock') > 0 ? `${byKind('lock')} lock(s)` : '',
    byKind('poller-state') > 0 ? `${byKind('poller-state')} poller state record(s)` : '',
    byKind('fingerprints') > 0 ? "the live processes' configuration fingerprints" : '',
    byKind('other') > 0 ? `${byKind('other')} other key(s) under "${prefix}:" callsync does not know` : '',
  ].filter(Boolean);
  if (notCopied.length > 0) io.out(`not copied: ${notCopied.join(', ')}`);
  if (vanished > 0) io.out(`${vanished} key(s) expired while copying`);

  const total = [...counts.values()].reduce((n, c) => n + c.copied, 0);
  const kept = [...counts.values()].reduce((n, c) => n + c.kept, 0);
  io.out(
    options.dryRun
      ? `dry run: ${total} key(s) would be copied, ${kept} the target has already would be kept; nothing written`
      : `copied ${total} key(s); kept ${kept} the target had already (never overwritten; the opt-out list is merged)`,
  );
  if (unsupported.size > 0) {
    io.err(
      `not copied, of a type migrate-keys does not copy (strings, sets and hashes only): ${[...unsupported].map(([label, n]) => `${n} ${label}`).join(', ')}`,
    );
    return 1;
  }
  return 0;
}
