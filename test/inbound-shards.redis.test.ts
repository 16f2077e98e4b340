// INBOUND_SHARDS on one Redis: the inbound log as several streams (queues/inbound.ts, queues/keys.ts).
// Every acknowledged call reaches its sink whichever shard it went to, a resend is a duplicate (its
// dedupe key is in its own shard), and lowering INBOUND_SHARDS strands nothing: the fan-out keeps
// reading the shards that still hold entries until they are empty.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { InboundLog, inboundStreamKey } from '../queues/inbound.js';
import { RedisKeys } from '../queues/keys.js';
import { sinkQueueName } from '../queues/registry.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

/** How many entries were ever appended to a stream (XINFO STREAM's entries-added, Redis >= 7). */
async function entriesAdded(redis: Redis, key: string): Promise<number> {
  const info = (await redis.xinfo('STREAM', key)) as unknown[];
  return Number(info[info.indexOf('entries-added') + 1]);
}

const call = (id: string) => normalizeWebhook(webhookPayload(id), { agentId: 'agent-1', receivedAt: new Date() });

test('INBOUND_SHARDS=4 on one Redis: calls spread over four streams, resends stay duplicates, every call reaches its sink', async () => {
  const cs = await startTestCallsync({ INBOUND_SHARDS: '4', ARCHIVE_DIR: '/tmp/callsync-shards-archive' });
  const redis = new Redis(REDIS_URL);
  try {
    const ids = Array.from({ length: 60 }, (_, i) => `shard-${i}`);
    for (const id of ids)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    for (const id of ids.slice(0, 15)) {
      const again = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
      assert.equal(again.body.duplicate, true, `${id}: a duplicate, found in its own shard`);
    }
    const keys = new RedisKeys(cs.prefix, 'one-slot', 4);
    // Each shard's stream got entries (XINFO's entries-added counts what was fanned out and deleted too).
    const added = await Promise.all(
      [0, 1, 2, 3].map((i) => entriesAdded(redis, inboundStreamKey(keys.inboundShard(i)))),
    );
    assert.equal(
      added.reduce((a, b) => a + b, 0),
      ids.length,
      `entries added per shard: ${added.join(', ')}`,
    );
    assert.ok(
      added.every((n) => n > 0),
      `every shard took calls: ${added.join(', ')}`,
    );
    const archive = new Queue(sinkQueueName('archive'), { connection: redis, prefix: cs.prefix });
    await waitFor(async () => (await archive.getCompletedCount()) === ids.length, {
      what: 'every call archived',
      timeoutMs: 30_000,
    });
    assert.equal(await new InboundLog(redis, keys).length(), 0, 'every shard fanned out');
    await archive.close();
  } finally {
    redis.disconnect();
    await cs.stop();
  }
});

test('INBOUND_SHARDS lowered from 4 to 1: entries left in shards 1–3 are still fanned out, then the record follows', async () => {
  const prefix = uniquePrefix('shrink');
  const redis = new Redis(REDIS_URL);
  try {
    // A deployment with 4 shards acknowledged calls, then stopped before they were fanned out.
    const before = new RedisKeys(prefix, 'one-slot', 4);
    await redis.set(before.layoutKey(), '4');
    const acceptor = new InboundAcceptor(new InboundLog(redis, before), { dedupeWindowMs: 60_000, timeoutMs: 2000 });
    const ids = Array.from({ length: 24 }, (_, i) => `left-${i}`);
    for (const id of ids) assert.equal((await acceptor.accept(call(id))).duplicate, false);
    const perShard = await Promise.all(new InboundLog(redis, before).shards.map((s) => s.length()));
    assert.ok(
      perShard.slice(1).some((n) => n > 0),
      `entries beyond shard 0: ${perShard.join(', ')}`,
    );

    // It starts again with INBOUND_SHARDS=1.
    const cs = await startTestCallsync({
      QUEUE_PREFIX: prefix,
      INBOUND_SHARDS: '1',
      ARCHIVE_DIR: '/tmp/callsync-shards-archive',
    });
    try {
      assert.ok(
        cs.logs.some(
          (l) =>
            l.msg === 'INBOUND_SHARDS was larger before: the fan-out also reads the shards that still hold entries',
        ),
      );
      const archive = new Queue(sinkQueueName('archive'), { connection: redis, prefix });
      await waitFor(async () => (await archive.getCompletedCount()) === ids.length, {
        what: 'the calls of every old shard archived',
        timeoutMs: 30_000,
      });
      assert.equal(await new InboundLog(redis, before).length(), 0);
      await archive.close();
    } finally {
      await cs.stop();
    }
    // The next start finds the old shards empty and records the new count.
    const again = await startTestCallsync({
      QUEUE_PREFIX: prefix,
      INBOUND_SHARDS: '1',
      ARCHIVE_DIR: '/tmp/callsync-shards-archive',
    });
    try {
      assert.equal(await redis.get(before.layoutKey()), '1');
      assert.ok(!again.logs.some((l) => String(l.msg).startsWith('INBOUND_SHARDS was larger before')));
    } finally {
      await again.stop();
    }
  } finally {
    await cleanupPrefix(prefix);
    redis.disconnect();
  }
});
