// Redis full (maxmemory reached, `noeviction`): every write answers OOM. The ingress treats that as
// "Redis cannot take the event": with the spool on it answers 202 `spooled: true` once the event is
// fsync'd to disk, and the spool drains into the inbound log when Redis takes writes again; with the
// spool off it answers 503 + Retry-After. Nothing acknowledged is lost either way (private Redis).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';

describe('Redis out of memory at the ingress', () => {
  let redis: PrivateRedis;
  let admin: Redis;
  before(async () => {
    redis = await startPrivateRedis({ appendonly: false });
    admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  });
  after(async () => {
    await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
    admin.disconnect();
    await redis.destroy();
  });

  test('spool on: 202 spooled while Redis answers OOM; drained into the log once memory is back', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-spool-oom-'));
    let cs: TestCallsync | undefined;
    try {
      cs = await startTestCallsync({
        REDIS_URL: redis.url,
        QUEUE_PREFIX: uniquePrefix('oom-in'),
        CALLSYNC_ROLE: 'ingress',
        SPOOL_ENABLED: 'true',
        SPOOL_DIR: dir,
      });
      await admin.config('SET', 'maxmemory', '1');
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) {
        const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(`oom-${i}`));
        assert.equal(res.status, 202, JSON.stringify(res.body));
        assert.equal(res.body.spooled, true, 'acknowledged from the spool, not from Redis');
        ids.push(res.body.id as string);
      }
      const log = new InboundLog(admin, cs.prefix);
      assert.equal(await log.length().catch(() => 0), 0, 'nothing reached Redis while it was full');
      await admin.config('SET', 'maxmemory', '0');
      await waitFor(async () => (await log.length()) === 3, {
        timeoutMs: 20_000,
        what: 'the spooled calls drained into the inbound log',
      });
      assert.deepEqual(
        (await log.entries()).map((e) => e.id),
        ids,
        'drained in acknowledged order, under the ids acknowledged',
      );
    } finally {
      await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
      await cs?.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('spool off: 503 with Retry-After while Redis answers OOM, nothing acknowledged', async () => {
    let cs: TestCallsync | undefined;
    try {
      cs = await startTestCallsync({
        REDIS_URL: redis.url,
        QUEUE_PREFIX: uniquePrefix('oom-off'),
        CALLSYNC_ROLE: 'ingress',
        SPOOL_ENABLED: 'false',
      });
      await admin.config('SET', 'maxmemory', '1');
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('oom-off'));
      assert.equal(res.status, 503);
      assert.ok(res.headers.get('retry-after'));
      assert.equal(res.body.errors[0].status, 503);
    } finally {
      await admin.config('SET', 'maxmemory', '0').catch(() => undefined);
      await cs?.stop();
    }
  });
});
