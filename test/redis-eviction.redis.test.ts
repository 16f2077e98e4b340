// A Redis that evicts keys when its memory is full (`maxmemory-policy allkeys-lru`, as managed Redis
// services often default to) loses accepted calls: an evicted job or inbound log entry is a call
// gone. Before, only BullMQ said so — a plain line on stderr per connection — and callsync's log,
// /readyz and check-config said nothing. Now `callsync start` logs it as an error, /readyz carries
// it as a warning for as long as the process runs, and check-config lists it. A real redis-server.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { bounded, startCallsyncProcess } from './support/callsync-process.js';
import { cli } from './support/cli.js';
import { freePort, startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';

describe('a Redis with an eviction policy', () => {
  let redis: PrivateRedis;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const policy = async (value: string) => {
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    try {
      await admin.call('CONFIG', 'SET', 'maxmemory-policy', value);
    } finally {
      admin.disconnect();
    }
  };

  before(async () => {
    redis = await startPrivateRedis({ appendonly: false });
    dir = await mkdtemp(join(tmpdir(), 'callsync-eviction-'));
    env = {
      REDIS_URL: redis.url,
      QUEUE_PREFIX: uniquePrefix('eviction'),
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      DATA_DIR: dir,
      HOST: '127.0.0.1',
      PORT: '0',
    };
  });
  after(async () => {
    await redis.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  const expected = (p: string) =>
    `the Redis at ${redis.url} evicts keys when its memory is full (maxmemory-policy ${p}): an evicted job or inbound log entry is an accepted call lost; set maxmemory-policy noeviction`;

  test('`callsync start` logs it as an error and /readyz carries it as a warning', async () => {
    await policy('allkeys-lru');
    const opsPort = await freePort();
    const child = startCallsyncProcess({
      ...env,
      CALLSYNC_ROLE: 'worker',
      OPS_PORT: String(opsPort),
      LOG_LEVEL: 'info',
    });
    try {
      await waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
        timeoutMs: 30_000,
        what: 'callsync started',
      });
      const logged = child.lines.find((l) => l.msg === expected('allkeys-lru'));
      assert.ok(logged, JSON.stringify(child.lines.map((l) => l.msg)));
      assert.equal(logged.level, 50);
      const readyz = await waitFor(
        async () => {
          const res = await fetch(`http://127.0.0.1:${opsPort}/readyz`);
          return res.status === 200 ? ((await res.json()) as { status: string; warnings?: string[] }) : null;
        },
        { what: '/readyz ready' },
      );
      assert.equal(readyz.status, 'ready');
      assert.ok(readyz.warnings?.includes(expected('allkeys-lru')), JSON.stringify(readyz));
    } finally {
      child.proc.kill('SIGTERM');
      await bounded(child.exit, 30_000, 'callsync to stop', child);
    }
  });

  test('check-config lists it under warnings (text and JSON); with noeviction it does not', async () => {
    await policy('volatile-lru');
    const text = await cli(['check-config'], env);
    assert.equal(text.code, 0, text.err);
    assert.match(text.out, /^configuration OK$/m);
    assert.ok(text.out.includes(`warnings:\n  - ${expected('volatile-lru')}`), text.out);
    const json = JSON.parse((await cli(['check-config', '--json'], env)).out) as { warnings: string[] };
    assert.ok(json.warnings.includes(expected('volatile-lru')));

    await policy('noeviction');
    const clean = await cli(['check-config'], env);
    assert.doesNotMatch(clean.out, /evicts keys/);
  });
});
