// A rotated OAuth refresh token outlives the process: stored in Redis (sealed, never logged), used
// after a restart and by the other processes, while the environment's token it descends from is
// unchanged; a new token in the environment wins. Against a fake token endpoint that rotates the
// refresh token at every refresh and revokes the one before.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { TelephonyApiError } from '../src/telephony/errors.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { RedisRefreshTokenStore, withRefreshTokenStore } from '../src/state/refresh-token.js';
import { redisKeys } from '../queues/keys.js';
import { startTestCallsync } from './support/callsync.js';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const fast = { retries: 0, timeoutMs: 2000 };
const CLIENT = { clientId: 'client-1', clientSecret: 'client-secret-1' };

describe('OAuth refresh token kept in Redis', () => {
  let api: FakeTelephony;
  let redis: Redis;
  const prefix = uniquePrefix('oauth');
  const key = redisKeys({ prefix, clusterNodes: [] }).telephonyOAuthKey();

  before(async () => {
    api = await FakeTelephony.start({
      basic: null,
      oauth: { ...CLIENT, refreshToken: 'env-refresh-1', accessTokenTtlSec: 600, rotateRefreshToken: true },
    });
    api.addEvents('ch1', [channelEvent({ eventId: 'e1' })]);
    redis = new Redis(REDIS_URL);
  });
  after(async () => {
    await api.close();
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  const envOptions = (refreshToken: string) => ({
    baseUrl: api.url,
    auth: { kind: 'oauth' as const, tokenUrl: api.tokenUrl, ...CLIENT, refreshToken },
    ...fast,
  });

  it('a restart refreshes with the rotated token, not the revoked one of the environment; the stored token is sealed', async () => {
    const first = createTelephonyClient(withRefreshTokenStore(envOptions('env-refresh-1'), redis, key));
    await first.readChannelEvents('ch1', undefined, 5);
    const rotated = api.currentRefreshToken!;
    assert.notEqual(rotated, 'env-refresh-1', "the server rotated the token (and revoked the environment's)");
    const stored = await redis.hgetall(key);
    assert.ok(stored.token && stored.origin, 'stored in Redis');
    assert.ok(
      !JSON.stringify(stored).includes(rotated) && !JSON.stringify(stored).includes('env-refresh-1'),
      'no token in clear text in Redis',
    );

    // The restart: a new client from the same environment, with a store of its own over the same key.
    const restarted = createTelephonyClient(withRefreshTokenStore(envOptions('env-refresh-1'), redis, key));
    const page = await restarted.readChannelEvents('ch1', undefined, 5);
    assert.equal(page.events.length, 1);
    assert.notEqual(api.currentRefreshToken, rotated, 'rotated again, and stored again');
    assert.equal(
      await new RedisRefreshTokenStore(redis, key, {
        tokenUrl: api.tokenUrl,
        ...CLIENT,
        refreshToken: 'env-refresh-1',
      }).load(),
      api.currentRefreshToken,
    );

    // Without the store the environment's token is revoked by now: what happened before.
    const err = await createTelephonyClient(envOptions('env-refresh-1'))
      .readChannelEvents('ch1', undefined, 5)
      .catch((e: unknown) => e);
    assert.ok(
      err instanceof TelephonyApiError && err.kind === 'auth' && /invalid_grant/.test(err.message),
      String(err),
    );
  });

  it('another process that rotated the token meanwhile: the rejected one in memory gives way to the stored one', async () => {
    const a = createTelephonyClient(withRefreshTokenStore(envOptions('env-refresh-1'), redis, key));
    const b = createTelephonyClient(withRefreshTokenStore(envOptions('env-refresh-1'), redis, key));
    await a.readChannelEvents('ch1', undefined, 5);
    await b.readChannelEvents('ch1', undefined, 5);
    api.revokeAccessTokens();
    // Each needs a new access token; whichever refreshes second holds a revoked refresh token in memory.
    await a.readChannelEvents('ch1', undefined, 5);
    await b.readChannelEvents('ch1', undefined, 5);
    await a.readChannelEvents('ch1', undefined, 5);
    assert.equal(
      api.requests.filter((r) => r.path.endsWith('/events') && r.status !== 200 && r.status !== 401).length,
      0,
    );
  });

  it('a new refresh token in the environment wins over the stored one of the old', async () => {
    api.reauthorize('env-refresh-2');
    const client = createTelephonyClient(withRefreshTokenStore(envOptions('env-refresh-2'), redis, key));
    const page = await client.readChannelEvents('ch1', undefined, 5);
    assert.equal(page.events.length, 1);
    assert.equal(
      await new RedisRefreshTokenStore(redis, key, {
        tokenUrl: api.tokenUrl,
        ...CLIENT,
        refreshToken: 'env-refresh-1',
      }).load(),
      null,
      "the old environment's token is no longer offered",
    );
    // A rotated client secret keeps the chain: the seal comes from the environment's refresh token.
    assert.equal(
      await new RedisRefreshTokenStore(redis, key, {
        tokenUrl: api.tokenUrl,
        clientId: CLIENT.clientId,
        clientSecret: 'rotated-secret',
        refreshToken: 'env-refresh-2',
      }).load(),
      api.currentRefreshToken,
    );
    // A value that does not open with these settings is not used.
    await redis.hset(key, 'token', Buffer.from('x'.repeat(40)).toString('base64'));
    assert.equal(
      await new RedisRefreshTokenStore(redis, key, {
        tokenUrl: api.tokenUrl,
        ...CLIENT,
        refreshToken: 'env-refresh-2',
      }).load(),
      null,
    );
  });

  it('callsync itself: the poller polls on after a restart, its log names no token', async () => {
    api.reauthorize('env-refresh-3');
    const env = {
      QUEUE_PREFIX: uniquePrefix('oauth-cs'),
      CALLSYNC_ROLE: 'poller',
      POLL_CHANNEL_IDS: 'ch1',
      POLL_INTERVAL_MS: '100',
      TELEPHONY_API_URL: api.url,
      TELEPHONY_OAUTH_TOKEN_URL: api.tokenUrl,
      TELEPHONY_OAUTH_CLIENT_ID: CLIENT.clientId,
      TELEPHONY_OAUTH_CLIENT_SECRET: CLIENT.clientSecret,
      TELEPHONY_OAUTH_REFRESH_TOKEN: 'env-refresh-3',
    };
    const served = () => api.inboxRequests('ch1').filter((r) => r.status === 200).length;
    const logs: string[] = [];
    const tokens: string[] = ['env-refresh-3', CLIENT.clientSecret];
    const before = served();
    const first = await startTestCallsync(env);
    try {
      await waitFor(() => served() > before, { timeoutMs: 20_000, what: 'the poller read the inbox' });
      tokens.push(api.currentRefreshToken!);
    } finally {
      await first.close();
      logs.push(...first.logs.map((l) => JSON.stringify(l)));
    }
    const refreshes = api.tokenRefreshes;
    const afterFirst = served();
    const second = await startTestCallsync(env);
    try {
      await waitFor(() => served() > afterFirst, { timeoutMs: 20_000, what: 'the restarted poller read the inbox' });
      assert.equal(api.tokenRefreshes, refreshes + 1);
      tokens.push(api.currentRefreshToken!);
    } finally {
      await second.stop();
      logs.push(...second.logs.map((l) => JSON.stringify(l)));
    }
    const text = logs.join('\n');
    assert.doesNotMatch(text, /rejected the credentials/);
    for (const t of tokens) assert.ok(!text.includes(t), 'no token or secret in the log');
  });
});
