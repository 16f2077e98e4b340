// Numbers that must never get an SMS, kept in one Redis set (`<prefix>:optout`) that every SMS
// sink consults and the CLI edits. The numbers are stored in E.164.
import type { Cluster, Redis } from 'ioredis';
import type { CountryCode } from 'libphonenumber-js';
import { readNumber } from '../../model/number-words.js';
import { parseE164 } from './phone.js';
import { recipientHash } from './ledger.js';
import { configuredKey, type HmacKeySource } from '../../../queues/privacy-key.js';

/** What an SMS sink needs of the opt-out list. */
export interface OptOutLookup {
  has(number: string): Promise<boolean>;
  /**
   * The set and the members that mean `number` is opted out, for a test inside the SMS sink's claim
   * script (the same round trip as its ledger marker). Absent: only `has`.
   */
  probe?(number: string): Promise<{ key: string; members: string[] }>;
}

export class OptOutList implements OptOutLookup {
  readonly key: string;
  private readonly secret: HmacKeySource | undefined;

  /** `keyPrefix`: where the set lives (`RedisKeys.area("optout")`: QUEUE_PREFIX, or its own slot on a spread cluster). */
  constructor(
    private readonly redis: Redis | Cluster,
    keyPrefix: string,
    /** The privacy key (queues/privacy-key.ts): a number `callsync forget` erased is on the list as its `recipientHash` only. */
    secret?: string | HmacKeySource,
  ) {
    this.key = `${keyPrefix}:optout`;
    this.secret = typeof secret === 'string' ? (secret === '' ? undefined : configuredKey(secret)) : secret;
  }

  /**
   * E.164 form of a number: international (`+4915112345678`), or national (`0151 12345678`) read in
   * `region` when given (PHONE_DEFAULT_REGION). Throws on anything that is not a valid number.
   */
  static normalize(number: string, region?: CountryCode): string {
    return readNumber(number, region);
  }

  /** Adds numbers; returns how many were not on the list yet. */
  async add(...numbers: string[]): Promise<number> {
    const normalized = numbers.map((n) => OptOutList.normalize(n));
    return normalized.length === 0 ? 0 : this.redis.sadd(this.key, ...normalized);
  }

  /** Removes numbers; returns how many were on the list. */
  async remove(...numbers: string[]): Promise<number> {
    const normalized = numbers.map((n) => OptOutList.normalize(n));
    return normalized.length === 0 ? 0 : this.redis.srem(this.key, ...normalized);
  }

  /** Every number on the list, sorted. */
  async list(): Promise<string[]> {
    return (await this.redis.smembers(this.key)).sort();
  }

  async probe(number: string): Promise<{ key: string; members: string[] }> {
    const e164 = parseE164(number);
    if (e164 === undefined) return { key: this.key, members: [] };
    return {
      key: this.key,
      members: this.secret === undefined ? [e164] : [e164, recipientHash(await this.secret.get(), e164)],
    };
  }

  async has(number: string): Promise<boolean> {
    const e164 = parseE164(number);
    if (e164 === undefined) return false;
    if ((await this.redis.sismember(this.key, e164)) === 1) return true;
    return (
      this.secret !== undefined &&
      (await this.redis.sismember(this.key, recipientHash(await this.secret.get(), e164))) === 1
    );
  }

  /**
   * `callsync forget`: the number stays opted out, as its `recipientHash` only (needs the privacy key).
   * True when it was on the list in clear.
   */
  async keepHashedOnly(e164: string): Promise<boolean> {
    if (this.secret === undefined) throw new Error('no privacy key given');
    if ((await this.redis.sismember(this.key, e164)) !== 1) return false;
    await this.redis.sadd(this.key, recipientHash(await this.secret.get(), e164));
    await this.redis.srem(this.key, e164);
    return true;
  }
}
