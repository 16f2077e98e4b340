// Each worker process says in Redis, under its QUEUE_PREFIX, which routing configuration it runs
// (src/config/fingerprint.ts), renewed by a heartbeat and dropped when it stops or goes silent.
// A process that sees another live one with a different fingerprint says so once in its log and
// in /readyz: the two route the same calls differently (one sends to a sink the other does not).
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';
import type { Logger } from '../log.js';

export interface FingerprintEntry {
  /** Process id: `<host>:<pid>:<random>`. */
  id: string;
  fingerprint: string;
  role: string;
  host: string;
  pid: number;
  startedAt: string;
  /** Epoch ms after which the entry is stale (its process missed its heartbeats). */
  until: number;
}

/** The entries of processes still alive; stale ones are removed on the way. */
export async function liveFingerprints(
  redis: Redis | Cluster,
  key: string,
  now = Date.now(),
): Promise<FingerprintEntry[]> {
  const all = await redis.hgetall(key);
  const live: FingerprintEntry[] = [];
  const stale: string[] = [];
  for (const [id, text] of Object.entries(all)) {
    let entry: FingerprintEntry | null = null;
    try {
      entry = { ...(JSON.parse(text) as Omit<FingerprintEntry, 'id'>), id };
    } catch {
      // not ours: removed like a stale one
    }
    if (entry && typeof entry.fingerprint === 'string' && typeof entry.until === 'number' && entry.until > now)
      live.push(entry);
    else stale.push(id);
  }
  if (stale.length > 0) await redis.hdel(key, ...stale);
  return live.sort((a, b) => a.id.localeCompare(b.id));
}

/** A short form of a fingerprint for people: its first 12 hex digits. */
export const shortFingerprint = (fingerprint: string): string => fingerprint.slice(0, 12);

export interface FingerprintHeartbeatOptions {
  fingerprint: string;
  role: string;
  log: Logger;
  /** How often the entry is renewed and the others read. Default 10 s. */
  intervalMs?: number;
  /** An entry not renewed for this long is stale. Default 3 × intervalMs. */
  ttlMs?: number;
  now?: () => number;
}

export class FingerprintHeartbeat {
  readonly id = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  private readonly startedAt = new Date().toISOString();
  private readonly intervalMs: number;
  private readonly ttlMs: number;
  private readonly now: () => number;
  private timer: NodeJS.Timeout | null = null;
  private beating = false;
  private differing: FingerprintEntry[] = [];
  /** Other fingerprints already logged (logged again once they went away and came back). */
  private logged = new Set<string>();

  constructor(
    private readonly redis: Redis | Cluster,
    /** queues/keys.ts configFingerprintsKey(). */
    private readonly key: string,
    private readonly options: FingerprintHeartbeatOptions,
  ) {
    this.intervalMs = options.intervalMs ?? 10_000;
    this.ttlMs = options.ttlMs ?? 3 * this.intervalMs;
    this.now = options.now ?? Date.now;
  }

  /**
   * Writes the entry and compares at once (waiting at most a second for it: a start while Redis is
   * away goes on, the beat finishes when Redis is back), then every intervalMs.
   */
  async start(): Promise<void> {
    const first = this.beatOnce();
    this.timer = setInterval(() => void this.beatOnce(), this.intervalMs);
    this.timer.unref();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([first, new Promise<void>((resolve) => (timer = setTimeout(resolve, 1000)))]);
    clearTimeout(timer);
  }

  /** A beat, unless one is still waiting for Redis; failures are retried by the next. */
  private async beatOnce(): Promise<void> {
    if (this.beating) return;
    this.beating = true;
    try {
      await this.beat();
    } catch {
      // Redis away or refusing: the next beat tries again; the entry goes stale meanwhile.
    } finally {
      this.beating = false;
    }
  }

  async beat(): Promise<void> {
    const now = this.now();
    const entry: Omit<FingerprintEntry, 'id'> = {
      fingerprint: this.options.fingerprint,
      role: this.options.role,
      host: hostname(),
      pid: process.pid,
      startedAt: this.startedAt,
      until: now + this.ttlMs,
    };
    await this.redis.hset(this.key, this.id, JSON.stringify(entry));
    await this.redis.pexpire(this.key, this.ttlMs * 2);
    const others = (await liveFingerprints(this.redis, this.key, now)).filter((e) => e.id !== this.id);
    this.differing = others.filter((e) => e.fingerprint !== this.options.fingerprint);
    const seen = new Set(this.differing.map((e) => e.fingerprint));
    for (const e of this.differing) {
      if (this.logged.has(e.fingerprint)) continue;
      this.logged.add(e.fingerprint);
      this.options.log.warn(
        {
          fingerprint: shortFingerprint(this.options.fingerprint),
          other: shortFingerprint(e.fingerprint),
          otherProcess: e.id,
          otherRole: e.role,
        },
        'another live process on this QUEUE_PREFIX routes with a different configuration (sinks or routes): the same calls go to different sinks depending on which process fans them out',
      );
    }
    for (const f of this.logged) if (!seen.has(f)) this.logged.delete(f);
  }

  /** For /readyz: one line per other configuration seen live, empty when all agree. */
  warnings(): string[] {
    const byFingerprint = new Map<string, FingerprintEntry[]>();
    for (const e of this.differing) byFingerprint.set(e.fingerprint, [...(byFingerprint.get(e.fingerprint) ?? []), e]);
    return [...byFingerprint].map(
      ([fingerprint, entries]) =>
        `configuration ${shortFingerprint(this.options.fingerprint)} differs from ${shortFingerprint(fingerprint)} of ${entries.length} other live process${entries.length === 1 ? '' : 'es'} on this QUEUE_PREFIX (${entries.map((e) => e.id).join(', ')})`,
    );
  }

  /** Stops the heartbeat and removes the entry (waiting at most a second: Redis may be away, the entry then goes stale). */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    // Redis away: the delete would only wait in the offline queue (the entry ages out unrenewed).
    if (this.redis.status !== 'ready') return;
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = new Promise<void>((resolve) => (timer = setTimeout(resolve, 1000)));
    await Promise.race([this.redis.hdel(this.key, this.id).catch(() => undefined), gaveUp]);
    clearTimeout(timer);
  }
}
