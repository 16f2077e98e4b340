// A small durable key/value memory in Redis, namespaced per sink (CRM record ids, "already sent" markers).
import type { Cluster, Redis } from 'ioredis';

export interface KeyValueStore {
  get(key: string): Promise<string | null>;
  /** Sets the value; `ttlMs` makes it expire. */
  set(key: string, value: string, ttlMs?: number): Promise<void>;
  /** Sets the value only when the key does not exist; true when it was set. */
  setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean>;
  delete(key: string): Promise<void>;
  /** Deletes the key only while it holds `value` (releasing a lock that may have passed to another holder); true when deleted. */
  deleteIfEquals(key: string, value: string): Promise<boolean>;
  /** A store whose keys live under `namespace` inside this one. */
  scoped(namespace: string): KeyValueStore;
}

const DELETE_IF_EQUALS = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

export class RedisKeyValueStore implements KeyValueStore {
  constructor(
    private readonly redis: Redis | Cluster,
    /** Full key prefix, e.g. `callsync:state:hubspot:` (keeps a `{hash-tag}` of the queue prefix). */
    private readonly prefix: string,
  ) {}

  async get(key: string): Promise<string | null> {
    return this.redis.get(this.prefix + key);
  }

  async set(key: string, value: string, ttlMs?: number): Promise<void> {
    if (ttlMs !== undefined) await this.redis.set(this.prefix + key, value, 'PX', Math.max(1, Math.round(ttlMs)));
    else await this.redis.set(this.prefix + key, value);
  }

  async setIfAbsent(key: string, value: string, ttlMs?: number): Promise<boolean> {
    const result =
      ttlMs !== undefined
        ? await this.redis.set(this.prefix + key, value, 'PX', Math.max(1, Math.round(ttlMs)), 'NX')
        : await this.redis.set(this.prefix + key, value, 'NX');
    return result === 'OK';
  }

  async delete(key: string): Promise<void> {
    await this.redis.del(this.prefix + key);
  }

  async deleteIfEquals(key: string, value: string): Promise<boolean> {
    const deleted = await this.redis.eval(DELETE_IF_EQUALS, 1, this.prefix + key, value);
    return Number(deleted) === 1;
  }

  scoped(namespace: string): KeyValueStore {
    return new RedisKeyValueStore(this.redis, `${this.prefix}${namespace}:`);
  }
}
