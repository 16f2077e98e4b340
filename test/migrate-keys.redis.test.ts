// `callsync migrate-keys`: an old deployment's state (one-slot keys) copied into the layout of this
// configuration. Single Redis to single Redis under another prefix for most cases, and a real 3+3
// Redis Cluster with a plain QUEUE_PREFIX (the spread layout) as the target — from a single Redis,
// and from the same cluster's `{hash-tag}` prefix. Real Redis everywhere, no mocks.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue, UnrecoverableError, Worker } from 'bullmq';
import { Cluster, Redis } from 'ioredis';
import { InboundLog, inboundSeenPrefix } from '../queues/inbound.js';
import { redisKeys } from '../queues/keys.js';
import { storedPrivacyKey } from '../queues/privacy-key.js';
import { randomBytes } from 'node:crypto';
import { loadConfig } from '../src/config/index.js';
import { runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { cursorKey } from '../queues/poller-state.js';
import { startRedisCluster, type TestCluster } from './support/redis-cluster.js';
import { scanKeys } from '../queues/scan.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

async function cli(argv: string[], env: NodeJS.ProcessEnv) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { env, out: (l) => out.push(l), err: (l) => err.push(l) };
  const code = await runCli(argv, io);
  return { code, out: out.join('\n'), err: err.join('\n'), all: `${out.join('\n')}\n${err.join('\n')}` };
}

// Dedupe hashes whose first 8 hex digits put them in shards 1 and 6 of 8 (and 0 of 1).
const H1 = `00000001${'ab'.repeat(28)}`;
const H6 = `00000006${'cd'.repeat(28)}`;
const NUMBERS = ['+4915100000001', '+4915100000002', '+4915100000003'];
const COOLDOWN_NUMBER = '+4917699999999';
const BACKFILL = '2026-10-01T00:00:00.000Z|2026-10-02T00:00:00.000Z|*';
/** Every value seeded: none may appear in the command's output. */
const SECRETS = [
  'crm-record-7731',
  'cursor-pos-4711',
  'first-id-h1',
  'first-id-h6',
  'sms-cooldown-value',
  'endpoint-sent-value',
  ...NUMBERS,
  COOLDOWN_NUMBER,
];

/** An old deployment's long-lived state under the one-slot prefix `p`. */
async function seedState(redis: Redis | Cluster, p: string): Promise<void> {
  await redis.set(`${p}:state:crm:rec:aaa`, 'crm-record-7731');
  await redis.set(`${p}:state:crm:pending:bbb`, '2026-11-22T10:00:00.000Z', 'PX', 600_000);
  await redis.set(`${p}:state:crm:lock:ccc`, 'job-1 abc', 'PX', 60_000);
  await redis.set(`${p}:state:sms:cooldown:${COOLDOWN_NUMBER}`, 'sms-cooldown-value', 'PX', 3_600_000);
  await redis.set(`${p}:state:hooks:endpoint:erp:sent:x1`, 'endpoint-sent-value', 'PX', 7 * 24 * 3_600_000);
  await redis.sadd(`${p}:optout`, ...NUMBERS);
  await redis.set(`${p}:state:poller:cursor:chan-1`, 'cursor-pos-4711');
  await redis.set(`${p}:state:poller:lock:chan-1`, 'poller-instance', 'PX', 30_000);
  // What the poller last reported (`callsync poller`): not copied, the new pollers write their own.
  await redis.set(`${p}:state:poller:status:chan-1`, '{"state":"polling"}', 'PX', 30_000);
  await redis.hset(`${p}:backfill:${BACKFILL}`, 'offset', '300');
  await redis.set(`${p}:replay:crm:replay-${'e'.repeat(16)}`, '1', 'EX', 180 * 24 * 3600);
  await redis.set(`${p}:inbound-seen:${H1}`, 'first-id-h1', 'PX', 3_600_000);
  await redis.set(`${p}:inbound-seen:${H6}`, 'first-id-h6', 'PX', 7_200_000);
  // Push assembly of a finished call (not open): not copied.
  await redis.hset(`${p}:push:call-9`, 'hangup', '{}');
  await redis.set(`${p}:layout`, '1');
}

/** Keys (names only) under `pattern` on every master. */
async function keysMatching(redis: Redis | Cluster, pattern: string): Promise<string[]> {
  return (await scanKeys(redis, pattern)).sort();
}

function assertNoValues(text: string): void {
  for (const secret of SECRETS) assert.ok(!text.includes(secret), `the output shows a value: ${secret}`);
}

function assertTtl(actual: number, expected: number): void {
  assert.ok(actual > expected - 15_000 && actual <= expected, `PTTL ${actual}, expected about ${expected}`);
}

describe('migrate-keys: the OAuth refresh token goes along, the live fingerprints stay', () => {
  const redis = new Redis(REDIS_URL);
  const plain = uniquePrefix('mig-oauth');
  const from = `{${plain}}`;
  const env = { REDIS_URL, QUEUE_PREFIX: plain };
  after(async () => {
    await cleanupPrefix(from);
    await cleanupPrefix(plain);
    redis.disconnect();
  });

  test('copied to where this layout keeps it; the fingerprints are named as not copied', async () => {
    await redis.hset(`${from}:telephony:oauth-refresh`, {
      origin: 'o'.repeat(64),
      token: 'sealed-token-value',
      savedAt: '2026-11-26T10:00:00.000Z',
    });
    await redis.hset(
      `${from}:config-fingerprints`,
      'host:1:abc',
      JSON.stringify({ fingerprint: 'f'.repeat(64), until: Date.now() + 30_000 }),
    );
    const run = await cli(['migrate-keys', '--from-url', REDIS_URL], env);
    assert.equal(run.code, 0, run.all);
    assert.match(run.out, /^OAuth refresh token\s+1\s+1\s+0/m);
    assert.match(run.out, /not copied: .*the live processes' configuration fingerprints/);
    assert.doesNotMatch(run.all, /sealed-token-value|other key/);
    const target = redisKeys(loadConfig(env).redis).telephonyOAuthKey();
    assert.equal(target, `${plain}:telephony:oauth-refresh`);
    assert.equal(await redis.hget(target, 'token'), 'sealed-token-value');
    assert.equal(await redis.exists(`${plain}:config-fingerprints`), 0);
  });
});

describe('migrate-keys: the generated privacy HMAC key goes along', () => {
  const redis = new Redis(REDIS_URL);
  const plain = uniquePrefix('mig-pkey');
  const from = `{${plain}}`;
  const env = { REDIS_URL, QUEUE_PREFIX: plain };
  after(async () => {
    await cleanupPrefix(from);
    await cleanupPrefix(plain);
    redis.disconnect();
  });

  test('copied where this layout keeps it, so the copied markers still match; its value is not printed', async () => {
    const value = randomBytes(32).toString('base64');
    await redis.set(`${from}:privacy-key`, value);
    const run = await cli(['migrate-keys', '--from-url', REDIS_URL], env);
    assert.equal(run.code, 0, run.all);
    assert.match(run.out, /^privacy HMAC key\s+1\s+1\s+0/m);
    assert.ok(!run.all.includes(value), 'the key is printed');
    const keys = redisKeys(loadConfig(env).redis);
    assert.equal(keys.privacyKey(), `${plain}:privacy-key`);
    assert.equal(await redis.get(keys.privacyKey()), value);
    // What every process of the new deployment uses: the copied key, not a new one.
    assert.deepEqual(await storedPrivacyKey(redis, keys), Buffer.from(value, 'base64'));
  });
});

describe('migrate-keys, single Redis to single Redis under another prefix', () => {
  const redis = new Redis(REDIS_URL);
  const plain = uniquePrefix('mig');
  const from = `{${plain}}`;
  const env = { REDIS_URL, QUEUE_PREFIX: plain };
  const keys = redisKeys(loadConfig(env).redis);

  after(async () => {
    await cleanupPrefix(from);
    await cleanupPrefix(plain);
    redis.disconnect();
  });

  test('usage: a source is required, one of them; --help', async () => {
    const none = await cli(['migrate-keys'], env);
    assert.equal(none.code, 2);
    assert.match(none.err, /--from-url or --from-cluster-nodes is required/);
    assert.match(none.err, /\nsee callsync migrate-keys --help$/);
    const both = await cli(['migrate-keys', '--from-url', REDIS_URL, '--from-cluster-nodes', '127.0.0.1:7000'], env);
    assert.equal(both.code, 2);
    assert.match(both.err, /give one of them/);
    const plainOnCluster = await cli(
      ['migrate-keys', '--from-cluster-nodes', '127.0.0.1:7000', '--from-prefix', 'callsync'],
      env,
    );
    assert.equal(plainOnCluster.code, 2);
    assert.match(plainOnCluster.err, /not a \{hash-tag\}/);
    const same = await cli(['migrate-keys', '--from-url', REDIS_URL, '--from-prefix', plain], env);
    assert.equal(same.code, 2);
    assert.match(same.err, /source and target are the same keys/);
    const h = await cli(['migrate-keys', '--help'], env);
    assert.equal(h.code, 0);
    assert.match(h.out, /^Usage: callsync migrate-keys/);
    assert.match((await cli(['--help'], env)).out, /^ {2}migrate-keys /m);
  });

  test('nothing under either prefix: says so and names --from-prefix', async () => {
    const r = await cli(['migrate-keys', '--from-url', REDIS_URL, '--dry-run'], env);
    assert.equal(r.code, 2);
    assert.match(r.err, /no callsync keys under "\{test-mig-[0-9a-f]+\}"/);
    assert.match(r.err, /--from-prefix/);
  });

  test('dry run counts and writes nothing; the copy keeps types and TTLs, leaves locks, push and layout; values never printed', async () => {
    await seedState(redis, from);

    const dry = await cli(['migrate-keys', '--from-url', REDIS_URL, '--dry-run'], env);
    assert.equal(dry.code, 0, dry.all);
    // The source prefix is found: `{P}` for a target `P`.
    assert.match(dry.out, new RegExp(`prefix "\\{${plain}\\}" \\(one slot; found there`));
    assert.match(dry.out, /^sink crm\s+2\s+2\s+0/m);
    assert.match(dry.out, /^inbound dedupe keys\s+2\s+2\s+0/m);
    assert.match(
      dry.out,
      /dry run: 10 key\(s\) would be copied, 0 the target has already would be kept; nothing written/,
    );
    assert.deepEqual(await keysMatching(redis, `${plain}:*`), [], 'a dry run writes nothing');
    assertNoValues(dry.all);

    const run = await cli(['migrate-keys', '--from-url', REDIS_URL], env);
    assert.equal(run.code, 0, run.all);
    assertNoValues(run.all);
    assert.match(run.out, /copied 10 key\(s\); kept 0/);
    assert.match(run.out, /not copied: .*2 lock\(s\)/);
    assert.match(run.out, /not copied: .*1 poller state record\(s\)/);

    // Where this layout keeps each (one slot under the new prefix), via the key functions and literally.
    assert.equal(keys.layout, 'one-slot');
    assert.equal(await redis.get(`${keys.sinkState('crm')}rec:aaa`), 'crm-record-7731');
    assert.equal(await redis.get(`${plain}:state:crm:rec:aaa`), 'crm-record-7731');
    assert.equal(await redis.pttl(`${plain}:state:crm:rec:aaa`), -1);
    assertTtl(await redis.pttl(`${plain}:state:crm:pending:bbb`), 600_000);
    assert.equal(await redis.get(`${plain}:state:sms:cooldown:${COOLDOWN_NUMBER}`), 'sms-cooldown-value');
    assertTtl(await redis.pttl(`${plain}:state:sms:cooldown:${COOLDOWN_NUMBER}`), 3_600_000);
    assert.equal(await redis.get(`${plain}:state:hooks:endpoint:erp:sent:x1`), 'endpoint-sent-value');
    assert.equal(await redis.type(`${plain}:optout`), 'set');
    assert.deepEqual((await redis.smembers(`${plain}:optout`)).sort(), NUMBERS);
    assert.equal(await redis.pttl(`${plain}:optout`), -1);
    assert.equal(await redis.get(cursorKey(keys, 'chan-1')), 'cursor-pos-4711');
    assert.deepEqual(await redis.hgetall(`${plain}:backfill:${BACKFILL}`), { offset: '300' });
    assert.equal(await redis.get(`${plain}:replay:crm:replay-${'e'.repeat(16)}`), '1');
    assert.equal(await redis.get(`${inboundSeenPrefix(keys.inboundShard(keys.shardOf(H1)))}${H1}`), 'first-id-h1');
    assertTtl(await redis.pttl(`${plain}:inbound-seen:${H6}`), 7_200_000);
    // Left behind: locks, push assembly, the recorded layout; the source is only read.
    assert.equal(
      await redis.exists(
        `${plain}:state:crm:lock:ccc`,
        `${plain}:state:poller:lock:chan-1`,
        `${plain}:state:poller:status:chan-1`,
        `${plain}:push:call-9`,
        `${plain}:layout`,
      ),
      0,
    );
    assert.equal(await redis.get(`${from}:state:crm:rec:aaa`), 'crm-record-7731');
    assert.equal((await keysMatching(redis, `${plain}:*`)).length, 10);

    // A resend within the window is still a duplicate in the target's inbound log.
    const [outcome] = await new InboundLog(redis, keys).append([{ dedupeId: H1, id: 'resend', call: '{}' }], 60_000);
    assert.deepEqual(outcome, { stored: false, firstId: 'first-id-h1' });

    // Second run: what the target has is kept (it is the newer value), the opt-out list merged.
    await redis.set(`${plain}:state:crm:rec:aaa`, 'newer-in-target');
    await redis.sadd(`${from}:optout`, '+4915100000004');
    await redis.set(`${from}:state:crm:rec:ddd`, 'added-later');
    const again = await cli(['migrate-keys', '--from-url', REDIS_URL], env);
    assert.equal(again.code, 0, again.all);
    assert.match(again.out, /copied 1 key\(s\); kept 10 the target had already/);
    assert.match(
      again.out,
      /^opt-out list\s+1\s+0\s+1\s+merged into the target's: 1 member\(s\) added, 3 there already/m,
    );
    assert.equal(await redis.get(`${plain}:state:crm:rec:aaa`), 'newer-in-target');
    assert.equal(await redis.get(`${plain}:state:crm:rec:ddd`), 'added-later');
    assert.equal(await redis.scard(`${plain}:optout`), 4);
    assert.ok(
      !again.all.includes('+4915100000004') &&
        !again.all.includes('newer-in-target') &&
        !again.all.includes('added-later'),
    );
  });
});

describe('migrate-keys refuses while the source has undelivered work', () => {
  const redis = new Redis(REDIS_URL);
  const plain = uniquePrefix('migw');
  const from = `{${plain}}`;
  const env = { REDIS_URL, QUEUE_PREFIX: plain };
  const args = ['migrate-keys', '--from-url', REDIS_URL, '--from-prefix', from];
  const queue = new Queue('sink-crm', { connection: redis, prefix: from });
  const dead = new Queue('sink-sms', { connection: redis, prefix: from });

  after(async () => {
    await queue.close();
    await dead.close();
    await cleanupPrefix(from);
    await cleanupPrefix(plain);
    redis.disconnect();
  });

  test('an entry in the inbound log, a waiting job: refused, nothing written; --force copies and names what stays', async () => {
    await redis.sadd(`${from}:optout`, NUMBERS[0]!);
    await redis.xadd(`${from}:inbound-log`, '*', 'id', 'a', 'call', '{}');

    const log = await cli(args, env);
    assert.equal(log.code, 1, log.all);
    assert.match(log.err, /the source still has undelivered work:\n {2}inbound log: 1 call\(s\) not yet fanned out/);
    assert.match(log.err, /--force/);
    assert.deepEqual(await keysMatching(redis, `${plain}:*`), []);

    await redis.del(`${from}:inbound-log`);
    await queue.add('sink.deliver', { n: 1 });
    await queue.add('sink.deliver', { n: 2 }, { delay: 3_600_000 });
    // A dead letter in another queue: stays behind, listed, no refusal by itself.
    const workerConnection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    const worker = new Worker(
      'sink-sms',
      async () => {
        throw new UnrecoverableError('permanent');
      },
      { connection: workerConnection, prefix: from },
    );
    await dead.add('sink.deliver', { n: 3 });
    await waitFor(async () => (await dead.getFailedCount()) === 1, { what: 'a dead letter' });
    await worker.close();
    workerConnection.disconnect();

    const jobs = await cli(args, env);
    assert.equal(jobs.code, 1, jobs.all);
    assert.match(jobs.err, /sink-crm: 1 waiting, 1 delayed/);
    assert.doesNotMatch(jobs.err, /sink-sms: \d+ waiting/);
    assert.deepEqual(await keysMatching(redis, `${plain}:*`), []);

    await redis.zadd(`${from}:push:open`, Date.now() + 3_600_000, 'call-open');
    const forced = await cli([...args, '--force'], env);
    assert.equal(forced.code, 0, forced.all);
    assert.match(
      forced.err,
      /--force: this undelivered work stays behind in the source:\n {2}sink-crm: 1 waiting, 1 delayed/,
    );
    assert.match(forced.err, /sink-sms: 1 dead letter\(s\)/);
    assert.match(forced.err, /callsync dlq retry/);
    assert.match(forced.out, /not copied: 2 queue\(s\)/);
    assert.equal(await redis.sismember(`${plain}:optout`, NUMBERS[0]!), 1);
    assert.match(forced.err, /push: 1 call\(s\) being assembled/);
    // No queue key went over, nor the Push assembly.
    assert.deepEqual(await keysMatching(redis, `${plain}:sink-*`), []);
    assert.deepEqual(await keysMatching(redis, `${plain}:push:*`), []);

    // Dead letters and open Push calls alone do not refuse: they are listed.
    await queue.drain(true);
    const drained = await cli(args, env);
    assert.equal(drained.code, 0, drained.all);
    assert.doesNotMatch(drained.err, /undelivered/);
    assert.match(drained.err, /staying behind in the source \(not moved\):\n {2}sink-sms: 1 dead letter\(s\)/);
    assert.match(drained.out, /copied 0 key\(s\); kept 1/);
  });
});

describe('migrate-keys into the spread layout of a real Redis Cluster', () => {
  let cluster: TestCluster;
  let client: Cluster;
  const single = new Redis(REDIS_URL);
  const oldPrefix = `{${uniquePrefix('migc')}}`;

  before(async () => {
    cluster = await startRedisCluster();
    client = new Cluster(cluster.seeds.split(',').map((s) => ({ host: '127.0.0.1', port: Number(s.split(':')[1]) })));
  });
  after(async () => {
    client?.disconnect();
    await cluster?.destroy();
    await cleanupPrefix(oldPrefix);
    single.disconnect();
  });

  const clusterEnv = (prefix: string) => ({
    REDIS_URL: 'redis://127.0.0.1:1',
    REDIS_CLUSTER_NODES: cluster.seeds,
    QUEUE_PREFIX: prefix,
  });

  test('from a single Redis: every key under its area hash tag, dedupe keys in their shard, on the cluster', async () => {
    await seedState(single, oldPrefix);
    const env = clusterEnv('callsync');
    const keys = redisKeys(loadConfig(env).redis);
    assert.equal(keys.layout, 'spread');
    assert.equal(keys.inboundShards, 8);

    const run = await cli(['migrate-keys', '--from-url', REDIS_URL, '--from-prefix', oldPrefix], env);
    assert.equal(run.code, 0, run.all);
    assertNoValues(run.all);
    assert.match(run.out, /target: cluster .* prefix "callsync" \(spread, 8 inbound shards\)/);
    assert.match(run.out, /copied 10 key\(s\)/);

    // Literal names of the spread layout: a copy to the old names (or the one-slot names) fails here.
    assert.equal(await client.get('{callsync:sink-crm}:state:rec:aaa'), 'crm-record-7731');
    assertTtl(await client.pttl('{callsync:sink-crm}:state:pending:bbb'), 600_000);
    assert.equal(await client.get(`{callsync:sink-sms}:state:cooldown:${COOLDOWN_NUMBER}`), 'sms-cooldown-value');
    assert.equal(await client.get('{callsync:sink-hooks}:state:endpoint:erp:sent:x1'), 'endpoint-sent-value');
    assert.deepEqual((await client.smembers('{callsync:optout}:optout')).sort(), NUMBERS);
    assert.equal(await client.pttl('{callsync:optout}:optout'), -1);
    assert.equal(await client.get('{callsync:poller:chan-1}:state:poller:cursor:chan-1'), 'cursor-pos-4711');
    assert.equal(cursorKey(keys, 'chan-1'), '{callsync:poller:chan-1}:state:poller:cursor:chan-1');
    assert.deepEqual(await client.hgetall(`{callsync:backfill}:backfill:${BACKFILL}`), { offset: '300' });
    assert.equal(await client.get('{callsync:inbound-1}:inbound-seen:' + H1), 'first-id-h1');
    assert.equal(await client.get('{callsync:inbound-6}:inbound-seen:' + H6), 'first-id-h6');
    assertTtl(await client.pttl('{callsync:inbound-6}:inbound-seen:' + H6), 7_200_000);
    for (const absent of [
      '{callsync:sink-crm}:state:lock:ccc',
      'callsync:state:crm:rec:aaa',
      `${oldPrefix}:state:crm:rec:aaa`,
      'callsync:inbound-seen:' + H1,
      '{callsync}:inbound-seen:' + H1,
    ]) {
      assert.equal(await client.exists(absent), 0, absent);
    }
    // The two dedupe keys' shards are different slots; a resend finds its key in its shard.
    const log = new InboundLog(client, keys);
    const outcomes = await log.append(
      [
        { dedupeId: H1, id: 'r1', call: '{}' },
        { dedupeId: H6, id: 'r6', call: '{}' },
      ],
      60_000,
    );
    assert.deepEqual(outcomes, [
      { stored: false, firstId: 'first-id-h1' },
      { stored: false, firstId: 'first-id-h6' },
    ]);
    assert.equal(await log.length(), 0, 'nothing appended: both are duplicates');

    const again = await cli(['migrate-keys', '--from-url', REDIS_URL, '--from-prefix', oldPrefix], env);
    assert.equal(again.code, 0, again.all);
    assert.match(again.out, /copied 0 key\(s\); kept 10/);
  });

  test('the same cluster, {hash-tag} prefix to the plain one: the source prefix is found, keys move to their areas', async () => {
    await seedState(client, '{cs2}');
    const env = clusterEnv('cs2');
    const dry = await cli(['migrate-keys', '--from-cluster-nodes', cluster.seeds, '--dry-run'], env);
    assert.equal(dry.code, 0, dry.all);
    assert.match(dry.out, /source: cluster .* prefix "\{cs2\}" \(one slot; found there/);
    assert.equal(await client.exists('{cs2:sink-crm}:state:rec:aaa'), 0);

    const run = await cli(['migrate-keys', '--from-cluster-nodes', cluster.seeds], env);
    assert.equal(run.code, 0, run.all);
    assertNoValues(run.all);
    assert.equal(await client.get('{cs2:sink-crm}:state:rec:aaa'), 'crm-record-7731');
    assert.equal(await client.get('{cs2:inbound-1}:inbound-seen:' + H1), 'first-id-h1');
    assert.deepEqual((await client.smembers('{cs2:optout}:optout')).sort(), NUMBERS);
    assert.equal(await client.get('{cs2}:state:crm:rec:aaa'), 'crm-record-7731', 'the source stays');
    // The areas are spread: the copied keys are on more than one master.
    const masters = new Set(
      await Promise.all(
        [
          '{cs2:sink-crm}:state:rec:aaa',
          '{cs2:sink-sms}:state:x',
          '{cs2:sink-hooks}:state:x',
          '{cs2:inbound-1}:x',
          '{cs2:inbound-6}:x',
          '{cs2:optout}:optout',
        ].map(async (k) => (await cluster.nodesOfKey(k)).master.port),
      ),
    );
    assert.ok(masters.size > 1, `on ${masters.size} master(s)`);
  });
});
