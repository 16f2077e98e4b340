// Retention per store (issue 25): with retentions of minutes, old completed jobs, dead letters,
// parked entries and folder-archive objects are gone after a sweep and new ones stay; the oldest
// item per store is a metric; the worker role's sweeper runs on its own (a retention of a second);
// and ARCHIVE_RETENTION_DAYS for S3 is a bucket lifecycle rule that `callsync retention apply` sets
// and `check-config` reports — against a small S3 lifecycle fake, since s3rver answers
// NotImplemented to lifecycle requests (which `retention apply` then reports, exit 1). The age of
// an S3 archive's oldest object is measured against s3rver. The sweeps run on the shared Redis, or
// with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys (queues and inbound shards on
// several masters), with TEST_REDIS_SENTINEL=1 behind Sentinel.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { DeleteObjectsCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import type { RedisClient } from '../queues/connection.js';
import type { RedisKeys } from '../queues/keys.js';
import { loadConfig } from '../src/config/index.js';
import { runCli } from '../src/cli/index.js';
import { registry } from '../src/metrics.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { startRetentionSweeper } from '../workers/retention-sweeper.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { REDIS_URL, testRedis, uniquePrefix, waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';

const MINUTES = 2;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('retention per store', () => {
  let prefix: string;
  let k: RedisKeys;
  const hookSecret = `whsec_${randomBytes(32).toString('base64')}`;
  let refuser: FakeWebhookReceiver;
  let cs: TestCallsync;
  let dir: string;
  let env: Record<string, string>;
  let conn: RedisClient;

  before(async () => {
    refuser = await new FakeWebhookReceiver(hookSecret).start();
    refuser.answer = () => ({ status: 422, body: { message: 'refused' } });
    dir = await mkdtemp(join(tmpdir(), 'retention-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  local:\n    type: archive\n    dir: ${join(dir, 'archive')}\n  hooks:\n    type: webhook\n    endpoints: [{ name: broken, url: "${refuser.url}" }]\nroutes:\n  - to: [local, hooks]\n`,
    );
    const target = await testRedis();
    prefix = await target.prefix('retention', [sinkQueueName('local'), sinkQueueName('hooks', 'broken')]);
    k = target.keys(prefix);
    env = testEnv(prefix, {
      ...target.env(),
      CALLSYNC_CONFIG: configPath,
      CRM_WEBHOOK_SECRET: hookSecret,
      SPOOL_ENABLED: 'false',
      ARCHIVE_RETENTION_DAYS: '1',
      COMPLETED_JOB_RETENTION_SECONDS: String(MINUTES * 60),
      FAILED_JOB_RETENTION_SECONDS: String(MINUTES * 60),
    });
    cs = await startTestCallsync(env);
    conn = target.connect();
  });
  after(async () => {
    conn?.disconnect();
    await cs?.stop();
    await refuser?.stop();
    if (prefix) await (await testRedis()).cleanup(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  const queue = (name: string, endpoint?: string) =>
    new Queue(sinkQueueName(name, endpoint), {
      connection: conn,
      prefix: k.queuePrefix(sinkQueueName(name, endpoint)),
    });
  const ids = async (q: Queue, state: 'completed' | 'failed') =>
    (await q.getJobs([state])).map((j) => (j.data as { call: { callId: string } }).call.callId).sort();

  async function deliver(callIds: string[]): Promise<void> {
    for (const id of callIds)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    const [local, broken] = [queue('local'), queue('hooks', 'broken')];
    try {
      await waitFor(
        async () =>
          (await ids(local, 'completed')).filter((i) => callIds.includes(i)).length === callIds.length &&
          (await ids(broken, 'failed')).filter((i) => callIds.includes(i)).length === callIds.length,
        {
          what: 'archived and dead-lettered',
          timeoutMs: 30_000,
        },
      );
    } finally {
      await Promise.all([local.close(), broken.close()]);
    }
  }

  test(`a sweep with retentions of ${MINUTES} minutes (jobs, dead letters, parked) and a day (folder archive): old items gone, new ones stay`, async () => {
    const parked = `${k.inboundShard(0)}:inbound-parked`;
    await conn.xadd(parked, '*', 'entry', '0-1', 'reason', 'old', 'call', '{"old":true}');
    await deliver(['old-1', 'old-2']);
    // The old archive objects were written three days ago.
    const root = join(dir, 'archive');
    const oldFiles = (await readdir(root, { recursive: true })).filter((n) => /\/old-\d-/.test(n));
    assert.equal(oldFiles.length, 6);
    const threeDaysAgo = new Date(Date.now() - 3 * 24 * 3600_000);
    for (const f of oldFiles) await utimes(join(root, f), threeDaysAgo, threeDaysAgo);
    await sleep(1500);
    const newStart = Date.now();
    await conn.xadd(parked, '*', 'entry', '0-2', 'reason', 'new', 'call', '{"old":false}');
    await deliver(['new-1']);

    // The sweep measures ages as if it ran MINUTES minutes after the new calls came in, less a second:
    // the old ones are past the retention, the new ones are not.
    const now = newStart + MINUTES * 60_000 - 1000;
    const oldJobIds = new Set<string>();
    for (const [q, state] of [
      [queue('local'), 'completed'],
      [queue('hooks', 'broken'), 'failed'],
    ] as const) {
      for (const j of await q.getJobs([state]))
        if ((j.data as { call: { callId: string } }).call.callId.startsWith('old-')) oldJobIds.add(j.id!);
      await q.close();
    }
    assert.equal(oldJobIds.size, 2, "the old calls' job ids (the call hash, the same in both queues)");
    const result = await sweepRetention(loadConfig(env), conn, pino({ level: 'silent' }), now);
    const { queue_events: events, ...removed } = result.removed;
    assert.deepEqual(removed, { completed_jobs: 2, dead_letters: 2, parked: 1, archive: 6 });
    // The queues' event streams: the old calls' events (a dead letter's reason among them) are gone
    // with their jobs; before, they stayed until 10,000 newer events pushed them out.
    assert.ok(events !== undefined && events > 0, JSON.stringify(result.removed));
    const cut = now - MINUTES * 60_000;
    for (const name of [sinkQueueName('local'), sinkQueueName('hooks', 'broken')]) {
      const stream = (await conn.xrange(`${k.queuePrefix(name)}:${name}:events`, '-', '+')) as [string, string[]][];
      assert.ok(stream.length > 0, `${name}: the new call's events stay`);
      for (const [id, fields] of stream) {
        assert.ok(Number(id.split('-')[0]) >= cut, `${name}: an event from before the cut: ${id}`);
        const jobId = fields[fields.indexOf('jobId') + 1];
        assert.ok(!oldJobIds.has(jobId!), `${name}: an old call's event: ${fields.join(' ')}`);
      }
    }
    const [local, broken] = [queue('local'), queue('hooks', 'broken')];
    try {
      assert.deepEqual(await ids(local, 'completed'), ['new-1']);
      assert.deepEqual(await ids(broken, 'failed'), ['new-1']);
    } finally {
      await Promise.all([local.close(), broken.close()]);
    }
    assert.deepEqual(
      (await conn.xrange(parked, '-', '+')).map(([, f]) => f[3]),
      ['new'],
    );
    const left = (await readdir(root, { recursive: true })).filter((n) => n.endsWith('.json') || n.endsWith('.txt'));
    assert.ok(left.length === 3 && left.every((n) => n.includes('/new-1-')), left.join(', '));

    // The oldest item per store, as a metric.
    for (const store of [
      'completed_jobs',
      'dead_letters',
      'queue_events',
      'parked',
      'archive',
      'inbound_log',
      'timelines',
    ])
      assert.ok(result.oldestSeconds[store as 'archive'] !== undefined, store);
    // The timelines' oldest: the old calls, received at least MINUTES minutes before `now`.
    assert.ok(result.oldestSeconds.timelines! >= MINUTES * 60, String(result.oldestSeconds.timelines));
    assert.ok(result.oldestSeconds.completed_jobs! < MINUTES * 60 && result.oldestSeconds.completed_jobs! > 0);
    const text = await registry.getSingleMetricAsString('callsync_retention_oldest_seconds');
    assert.match(text, /callsync_retention_oldest_seconds\{store="dead_letters"\} \d+/);
    assert.match(
      await registry.getSingleMetricAsString('callsync_retention_removed_total'),
      /callsync_retention_removed_total\{store="archive"\} [1-9]/,
    );
  });

  test('the worker role sweeper removes what passed a retention of a second, on its own', async () => {
    await deliver(['quick-1']);
    const config = loadConfig({ ...env, COMPLETED_JOB_RETENTION_SECONDS: '1', RETENTION_SWEEP_INTERVAL_SECONDS: '1' });
    await conn.del(`${k.area('retention')}:retention:sweep`);
    const sweeper = startRetentionSweeper(config, conn, pino({ level: 'silent' }), 10)!;
    const local = queue('local');
    try {
      await waitFor(async () => !(await ids(local, 'completed')).includes('quick-1') || null, {
        what: 'the sweeper removed the completed job',
        timeoutMs: 15_000,
      });
    } finally {
      await local.close();
      await sweeper.close();
    }
  });

  test('a lowered CALL_TIMELINE_TTL_DAYS reaches the timelines kept already: past it they go, with their lookups', async () => {
    await deliver(['ttl-old', 'ttl-new']);
    const calls = k.area('calls');
    const hashOf = async (callId: string) => (await conn.zrange(`${calls}:calls:id:${callId}`, 0, -1))[0]!;
    const [old, fresh] = [await hashOf('ttl-old'), await hashOf('ttl-new')];
    const log = pino({ level: 'silent' });
    // The timelines were written under the default (30 days).
    await sweepRetention(loadConfig(env), conn, log);
    assert.ok((await conn.pttl(k.callTimeline(old))) > 29 * 24 * 3600_000);
    // The last event of ttl-old is made 3 days old; the setting is lowered to 2 days.
    const threeDaysAgo = Date.now() - 3 * 24 * 3600_000;
    const entries = await conn.lrange(k.callTimeline(old), 0, -1);
    await conn.del(k.callTimeline(old));
    await conn.rpush(
      k.callTimeline(old),
      ...entries.map((e) => JSON.stringify({ ...(JSON.parse(e) as object), at: threeDaysAgo })),
    );
    await conn.pexpire(k.callTimeline(old), 30 * 24 * 3600_000);
    await conn.zadd(`${calls}:calls:id:ttl-old`, threeDaysAgo, old);
    await conn.zadd(`${calls}:calls:recent`, threeDaysAgo, old);

    // Before: nothing changed until the call's next event (never, for a call that is over).
    const result = await sweepRetention(loadConfig({ ...env, CALL_TIMELINE_TTL_DAYS: '2' }), conn, log);
    assert.ok((result.removed.timelines ?? 0) >= 1, JSON.stringify(result.removed));
    assert.equal(await conn.exists(k.callTimeline(old)), 0, 'the timeline past 2 days is gone');
    assert.deepEqual(await conn.zrange(`${calls}:calls:id:ttl-old`, 0, -1), [], 'and its lookups');
    assert.equal(await conn.zscore(`${calls}:calls:recent`, old), null);
    const left = await conn.pttl(k.callTimeline(fresh));
    assert.ok(left > 0 && left <= 2 * 24 * 3600_000, `the fresh timeline expires within 2 days: ${left} ms`);
    assert.ok((await conn.zscore(`${calls}:calls:id:ttl-new`, fresh)) !== null, 'its lookups stay');
    // Raised again: nothing is scanned or extended (the next writes set the longer expiry).
    const again = await sweepRetention(loadConfig(env), conn, log);
    assert.equal(again.removed.timelines, undefined);
    assert.ok((await conn.pttl(k.callTimeline(fresh))) <= 2 * 24 * 3600_000);
  });
});

/** A small S3 on loopback that keeps one lifecycle configuration per bucket (GET/PUT/?lifecycle), as S3 documents it. */
async function startLifecycleS3(): Promise<{ url: string; configs: Map<string, string>; close(): Promise<void> }> {
  const configs = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://x');
      const bucket = url.pathname.split('/')[1] ?? '';
      if (!url.searchParams.has('lifecycle')) {
        res
          .writeHead(501, { 'content-type': 'application/xml' })
          .end('<Error><Code>NotImplemented</Code><Message>only lifecycle</Message></Error>');
        return;
      }
      if (req.method === 'PUT') {
        configs.set(bucket, Buffer.concat(chunks).toString('utf8'));
        res.writeHead(200).end();
      } else if (req.method === 'GET' && configs.has(bucket)) {
        res.writeHead(200, { 'content-type': 'application/xml' }).end(configs.get(bucket));
      } else {
        res
          .writeHead(404, { 'content-type': 'application/xml' })
          .end(
            '<Error><Code>NoSuchLifecycleConfiguration</Code><Message>The lifecycle configuration does not exist</Message></Error>',
          );
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    configs,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

describe('ARCHIVE_RETENTION_DAYS on S3: a lifecycle rule', () => {
  let fake: Awaited<ReturnType<typeof startLifecycleS3>>;
  let s3: TestS3;
  before(async () => {
    [fake, s3] = await Promise.all([startLifecycleS3(), startS3()]);
  });
  after(async () => {
    await Promise.all([fake?.close(), s3?.destroy()]);
  });

  const envFor = (endpoint: string, extra: Record<string, string> = {}) =>
    testEnv(uniquePrefix('lifecycle'), {
      ARCHIVE_S3_BUCKET: 'calls',
      ARCHIVE_S3_PREFIX: 'callsync/',
      S3_ENDPOINT: endpoint,
      S3_FORCE_PATH_STYLE: 'true',
      AWS_ACCESS_KEY_ID: 'S3RVER',
      AWS_SECRET_ACCESS_KEY: 'S3RVER',
      ...extra,
    });
  const run = async (args: string[], env: Record<string, string>) => {
    const lines: string[] = [];
    const code = await runCli(args, { env, out: (l) => lines.push(l), err: (l) => lines.push(l) });
    return { code, text: lines.join('\n') };
  };

  test("retention apply sets the rule on the prefix, keeps the bucket's other rules; check-config says whether it is in place", async () => {
    const env = envFor(fake.url, { ARCHIVE_RETENTION_DAYS: '30' });
    // The bucket has a rule of its own already.
    fake.configs.set(
      'calls',
      '<LifecycleConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Rule><ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>7</Days></Expiration></Rule></LifecycleConfiguration>',
    );
    const before = await run(['check-config'], env);
    assert.equal(before.code, 0);
    assert.match(
      before.text,
      /retention: archive "archive" \(s3:\/\/calls\/callsync\/\): no lifecycle rule: run callsync retention apply/,
    );

    const applied = await run(['retention', 'apply'], env);
    assert.equal(applied.code, 0, applied.text);
    assert.match(applied.text, /lifecycle rule callsync-archive-retention set: objects expire after 30 days/);
    const xml = fake.configs.get('calls')!;
    assert.match(xml, /<ID>logs<\/ID>/, 'the other rule is kept');
    assert.match(xml, /<ID>callsync-archive-retention<\/ID>/);
    assert.match(xml, /<Prefix>callsync\/<\/Prefix>/);
    assert.match(xml, /<Expiration><Days>30<\/Days><\/Expiration>/);
    assert.match(
      xml,
      /<NoncurrentVersionExpiration><NoncurrentDays>1<\/NoncurrentDays><\/NoncurrentVersionExpiration>/,
    );

    const afterApply = await run(['check-config'], env);
    assert.match(afterApply.text, /lifecycle rule callsync-archive-retention in place, objects expire after 30 days/);
    // Another retention: check-config says the rule differs; apply replaces it (one rule of callsync's).
    const env60 = { ...env, ARCHIVE_RETENTION_DAYS: '60' };
    assert.match(
      (await run(['check-config'], env60)).text,
      /expires after 30 days, ARCHIVE_RETENTION_DAYS is 60: run callsync retention apply/,
    );
    assert.equal((await run(['retention', 'apply'], env60)).code, 0);
    assert.equal(fake.configs.get('calls')!.split('<ID>callsync-archive-retention</ID>').length, 2);
    assert.match((await run(['check-config'], env60)).text, /in place, objects expire after 60 days/);
  });

  test("the oldest S3 archive object's age: the oldest day's oldest object, under the archive's prefix only", async () => {
    const env = envFor(s3.endpoint, { ARCHIVE_S3_BUCKET: s3.bucket, ARCHIVE_S3_PREFIX: 'oldest/' });
    const log = pino({ level: 'silent' });
    const conn = new Redis(REDIS_URL);
    const now = Date.now();
    const daysAgo = (d: number) => new Date(now - d * 24 * 3600_000);
    try {
      // Empty: 0, as for the other stores.
      let result = await sweepRetention(loadConfig(env), conn, log, now);
      assert.equal(result.oldestSeconds.archive_s3, 0);

      // Keys are filed by the call's day; LastModified is when each was written.
      const objects: [string, Date][] = [
        ['oldest/transcripts/2026/01/05/a-1.json', daysAgo(10)],
        ['oldest/transcripts/2026/01/05/a-2.json', daysAgo(3)],
        ['oldest/transcripts/2026/03/01/b-1.json', daysAgo(1)],
        ['oldest/recordings/2026/02/01/c-1-recording-0.mp3', daysAgo(5)],
        // Another prefix of the bucket is not the archive's.
        ['elsewhere/transcripts/2020/01/01/x.json', daysAgo(100)],
      ];
      for (const [key] of objects)
        await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: key, Body: '{}' }));
      for (const [key, at] of objects) await s3.setLastModified(key, at);

      result = await sweepRetention(loadConfig(env), conn, log, now);
      const tenDays = 10 * 24 * 3600;
      // LastModified has whole seconds.
      assert.ok(Math.abs(result.oldestSeconds.archive_s3! - tenDays) <= 2, String(result.oldestSeconds.archive_s3));
      assert.match(
        await registry.getSingleMetricAsString('callsync_retention_oldest_seconds'),
        new RegExp(`callsync_retention_oldest_seconds\\{store="archive_s3"\\} ${result.oldestSeconds.archive_s3}\\b`),
      );

      // The lifecycle rule expired the oldest day: the next day's oldest object (recordings, 5 days) counts.
      await s3.client.send(
        new DeleteObjectsCommand({
          Bucket: s3.bucket,
          Delete: { Objects: [{ Key: objects[0]![0] }, { Key: objects[1]![0] }] },
        }),
      );
      result = await sweepRetention(loadConfig(env), conn, log, now);
      assert.ok(
        Math.abs(result.oldestSeconds.archive_s3! - 5 * 24 * 3600) <= 2,
        String(result.oldestSeconds.archive_s3),
      );
    } finally {
      conn.disconnect();
    }
  });

  test('s3rver does not implement lifecycle: apply says so (exit 1), check-config says it cannot read it', async () => {
    const env = envFor(s3.endpoint, { ARCHIVE_S3_BUCKET: s3.bucket, ARCHIVE_RETENTION_DAYS: '30' });
    const applied = await run(['retention', 'apply'], env);
    assert.equal(applied.code, 1);
    assert.match(applied.text, /cannot read the bucket's lifecycle configuration: NotImplemented/);
    assert.match((await run(['check-config'], env)).text, /cannot read the lifecycle configuration: NotImplemented/);
    assert.equal(
      (await run(['retention', 'apply'], { ...env, ARCHIVE_RETENTION_DAYS: '' })).code,
      1,
      'nothing to apply without ARCHIVE_RETENTION_DAYS',
    );
  });
});
