// Where callsync's keys live in Redis: the one place that turns QUEUE_PREFIX into key prefixes.
//
// Two layouts (docs/operations.md "Scaling out"):
// - one slot: every key starts with QUEUE_PREFIX. On a single Redis or behind Sentinel slots do not
//   matter; on a Redis Cluster a `{hash-tag}` QUEUE_PREFIX (e.g. `{callsync}`) puts every key in one
//   slot, so one master holds everything (the layout before key spreading; it still works).
// - spread (a Redis Cluster with a QUEUE_PREFIX without `{…}`): each area has its own hash tag
//   `{QUEUE_PREFIX:area}`, so the areas land on different masters: each queue (`{callsync:sink-archive}`,
//   with its sink's state beside it), each shard of the inbound log (`{callsync:inbound-3}`, with its
//   dedupe keys), each polled channel (`{callsync:poller:<channel>}`: lock, cursor and state record), the push
//   assembly, the opt-out list, the backfill cursors. BullMQ's rule holds: every key of one queue
//   is in one slot, and every multi-key script touches one area only.
import type { RedisSettings } from './connection.js';
import { sinkQueueName } from './registry.js';
import { keySlot } from '../src/redis-slot.js';

// The slot of a key is computed in src/redis-slot.ts (the sink state's scripts need it too, below the queues).
export { keySlot };

export type KeyLayout = 'one-slot' | 'spread';

/** The layout these settings give: spread on a Redis Cluster whose QUEUE_PREFIX has no `{hash-tag}`. */
function keyLayout(settings: Pick<RedisSettings, 'clusterNodes' | 'prefix'>): KeyLayout {
  return settings.clusterNodes.length > 0 && !/[{}]/.test(settings.prefix) ? 'spread' : 'one-slot';
}

/** INBOUND_SHARDS when it is not set: 1 (one stream) on a single Redis, 8 on a spread cluster. */
function defaultInboundShards(layout: KeyLayout): number {
  return layout === 'spread' ? 8 : 1;
}

/** The most shards INBOUND_SHARDS may ask for (each is a stream, a consumer loop and a blocking connection per worker process). */
export const MAX_INBOUND_SHARDS = 64;

export class RedisKeys {
  readonly layout: KeyLayout;

  constructor(
    /** QUEUE_PREFIX. */
    readonly prefix: string,
    layout: KeyLayout,
    /** Streams of the inbound log (INBOUND_SHARDS). */
    readonly inboundShards: number,
  ) {
    this.layout = layout;
  }

  /** What every key of `area` starts with: QUEUE_PREFIX (one slot), or the area's own hash tag (spread). */
  area(area: string): string {
    return this.layout === 'spread' ? `{${this.prefix}:${area}}` : this.prefix;
  }

  /** The BullMQ prefix of a queue (its keys are `<prefix>:<queue>:…`). */
  queuePrefix(queueName: string): string {
    return this.area(queueName);
  }

  /** Prefix of a sink's state (CRM record ids, sent markers, revision locks): beside the sink's queue. */
  sinkState(sinkName: string): string {
    return this.layout === 'spread'
      ? `${this.area(sinkQueueName(sinkName))}:state:`
      : `${this.prefix}:state:${sinkName}:`;
  }

  /** Prefix of callsync's own state of `area` (a polled channel, …), next to nothing else of it. */
  state(area: string): string {
    return `${this.area(area)}:state:`;
  }

  /**
   * The prefix the keys of inbound shard `index` are built from (queues/inbound.ts adds
   * `:inbound-log`, `:inbound-seen:<hash>`, `:inbound-parked`). Shard 0 of the one-slot layout is
   * the single log of before sharding, so a deployment that raises INBOUND_SHARDS keeps its log.
   */
  inboundShard(index: number): string {
    if (this.layout === 'spread') return this.area(`inbound-${index}`);
    return index === 0 ? this.prefix : `${this.prefix}:inbound-${index}`;
  }

  /** The shard of a call: from its dedupe hash (hex), so a resend finds its dedupe key in the same slot. */
  shardOf(dedupeHash: string): number {
    if (this.inboundShards <= 1) return 0;
    const n = Number.parseInt(dedupeHash.slice(0, 8), 16);
    return (Number.isFinite(n) ? n : 0) % this.inboundShards;
  }

  /** The same keys with another shard count (reading the shards an earlier INBOUND_SHARDS left). */
  withShards(inboundShards: number): RedisKeys {
    return new RedisKeys(this.prefix, this.layout, inboundShards);
  }

  /**
   * The timeline of one call (queues/timeline.ts), by its call hash: under the call's own hash tag
   * `{QUEUE_PREFIX:call:<hash>}` on a spread cluster, so calls spread over the masters.
   */
  callTimeline(callHash: string): string {
    return this.layout === 'spread'
      ? `{${this.prefix}:call:${callHash}}:timeline`
      : `${this.prefix}:call:${callHash}:timeline`;
  }

  /** Where the layout of the inbound log (the shard count last used) is recorded. */
  layoutKey(): string {
    return `${this.area('layout')}:layout`;
  }

  /** The telephony API's newest OAuth refresh token (a hash; src/state/refresh-token.ts). */
  telephonyOAuthKey(): string {
    return `${this.area('telephony')}:telephony:oauth-refresh`;
  }

  /**
   * The generated key of the keyed hashes that name phone numbers (queues/privacy-key.ts; used
   * when PRIVACY_HMAC_SECRET is not set): one key, in its own slot on a spread cluster.
   */
  privacyKey(): string {
    return `${this.area('privacy')}:privacy-key`;
  }

  /** The routing-configuration fingerprints of the live processes (a hash; src/state/config-fingerprint.ts). */
  configFingerprintsKey(): string {
    return `${this.area('fingerprints')}:config-fingerprints`;
  }
}

/** Keys given as a QUEUE_PREFIX alone stand for the one-slot layout with one inbound stream (tests, tools). */
export function asKeys(keys: RedisKeys | string): RedisKeys {
  return typeof keys === 'string' ? new RedisKeys(keys, 'one-slot', 1) : keys;
}

/** The keys of these settings (QUEUE_PREFIX, the connection mode, INBOUND_SHARDS). */
export function redisKeys(settings: Pick<RedisSettings, 'clusterNodes' | 'prefix' | 'inboundShards'>): RedisKeys {
  const layout = keyLayout(settings);
  return new RedisKeys(settings.prefix, layout, settings.inboundShards ?? defaultInboundShards(layout));
}
