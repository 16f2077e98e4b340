// `callsync calls --sink NAME`: an unknown sink is a usage error naming the known ones, as dlq's
// --queue answers an unknown queue — not "no calls match". Known: this configuration's sinks and
// those with a queue in Redis (a sink taken out, whose calls still show), endpoints as `sink.endpoint`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { redisKeys } from '../queues/keys.js';
import { loadConfig } from '../src/config/index.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { cli } from './support/cli.js';

const prefix = uniquePrefix('cli-calls-sink');
const env = { QUEUE_PREFIX: prefix, ARCHIVE_DIR: '/tmp/callsync-never-written' };

describe('calls --sink: an unknown sink is a usage error', () => {
  let redis: Redis;
  before(async () => {
    redis = new Redis(REDIS_URL);
    const keys = redisKeys(loadConfig({ REDIS_URL, ...env }).redis);
    // Queues of sinks another configuration has (one taken out here): a job each, as they keep.
    for (const name of ['sink-old', 'sink-hook.erp']) {
      const queue = new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) });
      await queue.add('deliver', {});
      await queue.close();
    }
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('a sink nobody knows: exit 2, the known ones named', async () => {
    const r = await cli(['calls', '--since', '2h', '--sink', 'nope'], env);
    assert.equal(r.code, 2);
    assert.match(
      r.err,
      /^callsync calls: unknown sink "nope" \(known: (archive|old|hook\.erp)(, (archive|old|hook\.erp)){2}\)$/m,
    );
    assert.doesNotMatch(r.out, /no calls match/);
  });

  test('a configured sink, one found in Redis and an endpoint of one: looked up', async () => {
    for (const sink of ['archive', 'old', 'hook.erp']) {
      const r = await cli(['calls', '--since', '2h', '--sink', sink], env);
      assert.equal(r.code, 0, `${sink}: ${r.err}`);
      assert.equal(r.out, 'no calls match', sink);
    }
  });
});
