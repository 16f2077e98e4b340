// The telephony API's newest OAuth refresh token, kept in Redis so that a restart (or another
// process) refreshes with it rather than with the environment's token, which an identity server that
// rotates refresh tokens has revoked by then. Stored beside the hash of the environment's token it
// descends from: when the operator puts a new token into the environment, that one wins. The token
// is stored encrypted (AES-256-GCM under a key derived from the environment's refresh token, which
// a Redis dump alone does not hold; not from the client secret, so rotating that keeps the chain)
// and never logged.
import { createCipheriv, createDecipheriv, createHash, randomBytes } from 'node:crypto';
import type { Cluster, Redis } from 'ioredis';

/** What the stored token belongs to: the OAuth settings of the environment. */
export interface RefreshTokenOrigin {
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  /** The environment's refresh token (TELEPHONY_OAUTH_REFRESH_TOKEN). */
  refreshToken: string;
}

const sha256 = (text: string): Buffer => createHash('sha256').update(text).digest();

export class RedisRefreshTokenStore {
  private readonly origin: string;
  private readonly key: Buffer;

  constructor(
    private readonly redis: Redis | Cluster,
    /** queues/keys.ts telephonyOAuthKey(). */
    private readonly redisKey: string,
    origin: RefreshTokenOrigin,
  ) {
    this.origin = sha256(
      `callsync oauth origin\n${origin.tokenUrl}\n${origin.clientId}\n${origin.refreshToken}`,
    ).toString('hex');
    this.key = sha256(`callsync oauth refresh token\n${origin.clientId}\n${origin.refreshToken}`);
  }

  /** The token saved last from the environment's current token; null when none or the environment's token changed. */
  async load(): Promise<string | null> {
    const [origin, sealed] = await this.redis.hmget(this.redisKey, 'origin', 'token');
    if (origin !== this.origin || !sealed) return null;
    try {
      const raw = Buffer.from(sealed, 'base64');
      const decipher = createDecipheriv('aes-256-gcm', this.key, raw.subarray(0, 12));
      decipher.setAuthTag(raw.subarray(12, 28));
      return Buffer.concat([decipher.update(raw.subarray(28)), decipher.final()]).toString('utf8');
    } catch {
      // Not sealed by these settings (altered, or another writer): the environment's token is the one to use.
      return null;
    }
  }

  async save(refreshToken: string): Promise<void> {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.key, iv);
    const body = Buffer.concat([cipher.update(refreshToken, 'utf8'), cipher.final()]);
    const sealed = Buffer.concat([iv, cipher.getAuthTag(), body]).toString('base64');
    await this.redis.hset(this.redisKey, { origin: this.origin, token: sealed, savedAt: new Date().toISOString() });
  }
}

/** The client options with a store of the rotated refresh token when they use the OAuth refresh grant. */
export function withRefreshTokenStore<T extends { auth: { kind: string } }>(
  options: T,
  redis: Redis | Cluster,
  redisKey: string,
): T & { refreshTokenStore?: RedisRefreshTokenStore } {
  const auth = options.auth as { kind: string } & Partial<RefreshTokenOrigin>;
  if (auth.kind !== 'oauth' || !auth.refreshToken) return options;
  const origin: RefreshTokenOrigin = {
    tokenUrl: auth.tokenUrl ?? '',
    clientId: auth.clientId ?? '',
    clientSecret: auth.clientSecret ?? '',
    refreshToken: auth.refreshToken,
  };
  return { ...options, refreshTokenStore: new RedisRefreshTokenStore(redis, redisKey, origin) };
}
