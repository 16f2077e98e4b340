// The one key of the keyed hashes (HMAC-SHA-256) that name phone numbers in Redis: the timeline's
// number index (queues/timeline.ts), the notification ledger's "never twice" markers and the SMS
// cooldowns (src/sinks/notify), the CRM sinks' memory of the contacts and persons they created
// (src/sinks/crm/number-memory.ts), a forgotten number on the opt-out list (src/privacy/forget.ts).
//
// PRIVACY_HMAC_SECRET when it is set (the same value in every process). Else a key generated once
// (32 random bytes) and kept in Redis (`RedisKeys.privacyKey()`): whichever process needs it first
// creates it with SET NX, and every process reads back the one that won — so no number is stored
// in clear, with or without configuration. docs/privacy.md, "The keyed hash", has the trade-off
// (a key kept in Redis is erased with Redis; a configured one must be the same everywhere).
import { randomBytes } from 'node:crypto';
import type { RedisClient } from './connection.js';
import { asKeys, type RedisKeys } from './keys.js';

/** Length of a generated key, in bytes. */
/** @internal Exported for its tests only (test/privacy-key.redis.test.ts). */
export const PRIVACY_KEY_BYTES = 32;

/** Where the HMAC key comes from: resolved once per source, then known. */
export interface HmacKeySource {
  /** The key (configured, or the one in Redis, created by the first that asks). Rejects on a Redis error (the next call tries again). */
  get(): Promise<Buffer>;
  /** The key once known (synchronously), else undefined. */
  readonly known: Buffer | undefined;
}

/** A configured key: PRIVACY_HMAC_SECRET's UTF-8 bytes. */
export function configuredKey(secret: string): HmacKeySource {
  const key = Buffer.from(secret, 'utf8');
  return { get: () => Promise.resolve(key), known: key };
}

/** The key kept in Redis, created if it is not there yet (SET NX, then read back: every process ends with the same one).  *
 * @internal Exported for its tests only (test/privacy-key.redis.test.ts, test/privacy-forget.redis.test.ts).
 */
export async function storedPrivacyKey(redis: RedisClient, keys: RedisKeys | string): Promise<Buffer> {
  const name = asKeys(keys).privacyKey();
  await redis.set(name, randomBytes(PRIVACY_KEY_BYTES).toString('base64'), 'NX');
  const stored = await redis.get(name);
  if (stored === null)
    throw new Error(
      'the privacy HMAC key vanished from Redis right after it was written (is an eviction policy other than noeviction set?)',
    );
  const key = Buffer.from(stored, 'base64');
  if (key.length !== PRIVACY_KEY_BYTES)
    throw new Error(
      `the privacy HMAC key in Redis is not ${PRIVACY_KEY_BYTES} bytes of base64; delete it only knowing what that forgets (docs/privacy.md)`,
    );
  return key;
}

/** The key of the keyed hashes: PRIVACY_HMAC_SECRET when set (non-empty), else the one kept in Redis. */
export class PrivacyKey implements HmacKeySource {
  private pending: Promise<Buffer> | undefined;
  known: Buffer | undefined;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: RedisKeys | string,
    /** PRIVACY_HMAC_SECRET, if set. */
    secret?: string,
  ) {
    if (secret !== undefined && secret !== '') this.known = Buffer.from(secret, 'utf8');
  }

  get(): Promise<Buffer> {
    if (this.known) return Promise.resolve(this.known);
    this.pending ??= storedPrivacyKey(this.redis, this.keys).then(
      (key) => (this.known = key),
      (err: unknown) => {
        this.pending = undefined;
        throw err;
      },
    );
    return this.pending;
  }
}
