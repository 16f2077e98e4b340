// A command that cannot use its Redis says why in its one line — refused, no such host, the password
// refused or missing — rather than ioredis' "Connection is closed." for every cause; never the password.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { freePort, startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix } from './support/redis.js';
import { cli } from './support/cli.js';

const env = { QUEUE_PREFIX: uniquePrefix('cli-redis-failures') };

describe('a Redis a command cannot use: the cause in one line', () => {
  let locked: PrivateRedis;
  before(async () => {
    locked = await startPrivateRedis({ appendonly: false });
    const admin = new Redis(locked.url);
    await admin.config('SET', 'requirepass', 'the-right-one');
    admin.disconnect();
  });
  after(async () => {
    await locked.destroy();
  });

  test(
    'no sentinel answering: said within seconds (before: the command hung for ever)',
    { timeout: 60_000 },
    async () => {
      const port = await freePort();
      const r = await cli(['calls', '--since', '2h'], {
        ...env,
        REDIS_SENTINELS: `127.0.0.1:${port}`,
        REDIS_SENTINEL_NAME: 'mymaster',
      });
      assert.equal(r.code, 1);
      assert.equal(
        r.err,
        `callsync calls: cannot reach Redis at sentinel 127.0.0.1:${port} master "mymaster": no sentinel answers (REDIS_SENTINELS)`,
      );
    },
  );

  test('nothing listening: connection refused', async () => {
    const port = await freePort();
    const r = await cli(['calls', '--since', '2h'], { ...env, REDIS_URL: `redis://127.0.0.1:${port}` });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `callsync calls: cannot reach Redis at redis://127.0.0.1:${port}: connection refused (ECONNREFUSED)`,
    );
  });

  test('call, calls and refused read their options first: a wrong one is its usage error (exit 2), not the Redis failure', async () => {
    const port = await freePort();
    const down = { ...env, REDIS_URL: `redis://127.0.0.1:${port}` };
    for (const [argv, line] of [
      [
        ['calls', '--since', 'soon'],
        'callsync calls: --since must be a duration (30m, 2h, 7d) or an ISO time, got "soon"',
      ],
      [['calls', '--since', '2h', '--status', 'lost'], /^callsync calls: --status must be one of /],
      [['calls', '--since', '2h', '--number', 'nonsense'], /^callsync calls: --number must be one phone number /],
      [['refused', '--since', '2h', '--until', '3h'], /^callsync refused: --until is before since/],
      [['call', '0211', '6355340', 'x'], /^callsync call: unexpected argument "x"/],
      [['call', '+4912'], /^callsync call: not a valid phone number/],
    ] as const) {
      const r = await cli([...argv], down);
      assert.equal(r.code, 2, `${argv.join(' ')}: ${r.err}`);
      const first = r.err.split('\n')[0]!;
      if (typeof line === 'string') assert.equal(first, line);
      else assert.match(first, line);
      assert.doesNotMatch(r.err, /cannot reach Redis/);
    }
    // Options that are right: then the Redis failure, as before.
    const r = await cli(['calls', '--since', '2h', '--number', '0211 6355340'], down);
    assert.equal(r.code, 1);
    assert.match(r.err, /cannot reach Redis/);
  });

  test('a host name that does not resolve: named, with the lookup error', async () => {
    const r = await cli(['calls', '--since', '2h'], { ...env, REDIS_URL: 'redis://nosuchhost.invalid:6379' });
    assert.equal(r.code, 1);
    // Without a resolver to ask (a sandbox), the lookup fails with EAI_AGAIN instead.
    assert.match(
      r.err,
      /^callsync calls: cannot reach Redis at redis:\/\/nosuchhost\.invalid:6379: host "nosuchhost\.invalid" (not found \(ENOTFOUND\)|could not be looked up .*\(EAI_AGAIN\))$/,
    );
  });

  test('a wrong password: Redis refused it, which variable to check; the password never printed', async () => {
    const url = `redis://:wrong-secret@127.0.0.1:${locked.port}`;
    const r = await cli(['calls', '--since', '2h'], { ...env, REDIS_URL: url });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `callsync calls: Redis at redis://:***@127.0.0.1:${locked.port} refused the password (WRONGPASS): check REDIS_URL or REDIS_PASSWORD`,
    );
    const check = await cli(['check-config'], { ...env, REDIS_URL: url });
    assert.equal(check.code, 2);
    assert.match(
      check.out,
      /^problem: Redis \(configured, redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\) refused the password \(WRONGPASS\): check REDIS_URL or REDIS_PASSWORD$/m,
    );
    assert.doesNotMatch(r.out + r.err + check.out + check.err, /wrong-secret/);
  });

  test('no password where one is needed: NOAUTH', async () => {
    const r = await cli(['opt-out', 'list'], { ...env, REDIS_URL: locked.url });
    assert.equal(r.code, 1);
    assert.equal(
      r.err,
      `callsync opt-out: Redis at ${locked.url} wants a password (NOAUTH): set it in REDIS_URL or REDIS_PASSWORD`,
    );
  });

  test('check-config: an unreachable Redis is a problem with its cause', async () => {
    const port = await freePort();
    const r = await cli(['check-config'], { ...env, REDIS_URL: `redis://127.0.0.1:${port}` });
    assert.equal(r.code, 2);
    assert.match(
      r.out,
      new RegExp(
        `^problem: Redis unreachable \\(configured, redis://127\\.0\\.0\\.1:${port}\\): connection refused \\(ECONNREFUSED\\)$`,
        'm',
      ),
    );
  });
});
