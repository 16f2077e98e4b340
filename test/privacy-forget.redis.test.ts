// `callsync forget`, proven on every store at once (issue 25): calls of three numbers run through
// every sink a test can set up — archive on S3 (s3rver) and in a folder, HubSpot, Pipedrive, the
// signed webhook (one endpoint accepting, one refusing: a dead letter per call), SMS through the
// platform API, e-mail through SMTP — and two calls wait in an ingress spool. Then one number is
// forgotten with the real command line, and every Redis key (SCAN, DUMP and its value by type), every
// archive object (name and body), the spool folder and the captured logs of every process are
// searched for that number in every format and for a sentence of its transcript: nothing is found,
// while every other number's data is all still there. On a private Redis, so SCAN sees every key;
// with TEST_REDIS_CLUSTER=1 on the file's own Redis Cluster (spread keys: the queues, inbound shards
// and the sinks' state on different masters), with TEST_REDIS_SENTINEL=1 on the file's own master
// and replica behind a sentinel — there every data node, replicas included, is searched.
// Nothing sets PRIVACY_HMAC_SECRET: the keyed hashes use the key kept in Redis, and forget needs no
// configuration. "Never twice" markers an earlier version wrote in clear are seeded: forget rewrites
// A's to the keyed hash and leaves B's.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { GetObjectCommand } from '@aws-sdk/client-s3';
import { sinkQueueName } from '../queues/registry.js';
import type { RedisClient } from '../queues/connection.js';
import { redisKeys, type RedisKeys } from '../queues/keys.js';
import { callHash, callKey } from '../src/model/call.js';
import { runCli } from '../src/cli/index.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import { recipientHash } from '../src/sinks/notify/ledger.js';
import { PrivacyKey, storedPrivacyKey } from '../queues/privacy-key.js';
import { parsePhoneNumberFromString } from 'libphonenumber-js/max';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { TEST_TOPOLOGY, testRedis, uniquePrefix, waitFor } from './support/redis.js';
import { startS3, type TestS3, S3_ARCHIVE_SINK_YAML } from './support/s3.js';
import { TestSmtpServer } from './support/smtp.js';

/** The caller to forget, and two others. */
const A = '+491701234567';
const B = '+491761234599';
const C = '+4915112345678';
const A_SENTENCE = 'Zanzibar the cat ate my blue invoice on Tuesday.';
const B_SENTENCE = 'The parcel for Mrs Oakridge arrived broken.';
const AGENT = 'agent-1';
const QUEUES = ['archive', 'local', 'hubspot', 'pipedrive', 'hooks.ok', 'hooks.broken', 'sms', 'mail'];

function call(
  callId: string,
  options: { from?: string; to?: string; direction?: 'in' | 'out'; sentence: string },
): Record<string, any> {
  return webhookPayload(callId, (p) => {
    if (options.from) p.call.from = options.from;
    if (options.to) p.call.to = options.to;
    if (options.direction) p.call.direction = options.direction;
    p.assist.transcription.content = `Caller: ${options.sentence}\nCallee: I see.`;
    p.assist.transcription.chunks[0].content = options.sentence;
  });
}

/** A's calls: in every format the platform might send the number, in and out. */
const A_CALLS = [
  call('fa-1', { from: A, sentence: A_SENTENCE }),
  call('fa-2', { from: '0049 170 1234567', sentence: A_SENTENCE }),
  call('fa-3', { from: '+4921155550100', to: A, direction: 'out', sentence: A_SENTENCE }),
];
const B_CALLS = [call('fb-1', { from: B, sentence: B_SENTENCE }), call('fb-2', { from: B, sentence: B_SENTENCE })];
const C_CALLS = [call('fc-1', { from: C, sentence: 'Just checking the opening hours.' })];

/** A number in every format a sender or a person may write it (the test's own list, not the product's). */
function numberForms(e164: string): string[] {
  const p = parsePhoneNumberFromString(e164)!;
  const digits = `${p.countryCallingCode}${p.nationalNumber}`;
  return [
    p.number,
    `00${digits}`,
    digits,
    p.formatNational(),
    p.formatNational().replace(/\D/g, ''),
    p.formatInternational(),
    String(p.nationalNumber),
  ];
}

/** Where `needle` occurs in `haystack`, for the message. */
function hits(haystack: string, needles: readonly string[]): string[] {
  return needles.filter((n) => haystack.includes(n));
}

/** The Redis of the proof: a private one, or the file's cluster or Sentinel set-up (every node of it the file's own). */
interface ProofRedis {
  /** What names it for a callsync (REDIS_URL, or REDIS_CLUSTER_NODES / REDIS_SENTINELS). */
  env: Record<string, string>;
  keys: RedisKeys;
  connect(): RedisClient;
  /** Ports of every data node: the one Redis, or every master and replica. */
  dataPorts(): Promise<number[]>;
  destroy(): Promise<void>;
}

async function proofRedis(): Promise<{ prefix: string; redis: ProofRedis }> {
  if (TEST_TOPOLOGY === 'single') {
    const prefix = uniquePrefix('forget');
    const own = await startPrivateRedis();
    return {
      prefix,
      redis: {
        env: { REDIS_URL: own.url },
        keys: redisKeys({ clusterNodes: [], prefix }),
        connect: () => new Redis(own.url),
        dataPorts: async () => [Number(new URL(own.url).port)],
        destroy: () => own.destroy(),
      },
    };
  }
  const target = await testRedis();
  assert.ok(target.cluster ?? target.sentinel, 'the proof runs on a cluster or Sentinel set-up of its own');
  const queues = QUEUES.map((q) => sinkQueueName(q.split('.')[0]!, q.split('.')[1]));
  const prefix = await target.prefix('forget', queues);
  return {
    prefix,
    redis: {
      env: target.env(),
      keys: target.keys(prefix),
      connect: () => target.connect(),
      dataPorts: async () =>
        target.cluster
          ? target.cluster.nodes.map((n) => n.port)
          : [target.sentinel!.master.port, target.sentinel!.replica.port],
      // The cluster or Sentinel set-up goes after the file (test/support/redis.ts).
      destroy: async () => undefined,
    },
  };
}

describe('callsync forget <number>: nothing of the number is left anywhere, everything else stays', () => {
  let prefix: string;
  let target: ProofRedis;
  let k: RedisKeys;
  const hookSecret = `whsec_${randomBytes(32).toString('base64')}`;
  let spoolRedis: PrivateRedis;
  let s3: TestS3;
  let hubspot: FakeHubSpot;
  let pipedrive: FakePipedrive;
  let receiver: FakeWebhookReceiver;
  let refuser: FakeWebhookReceiver;
  let api: FakeTelephony;
  let smtp: TestSmtpServer;
  let cs: TestCallsync;
  let dir: string;
  let env: Record<string, string>;
  const spoolLogs: Record<string, unknown>[] = [];
  /** Logs of the instances stopped along the way. */
  const earlierLogs: Record<string, unknown>[] = [];
  const cliOutput: string[] = [];
  /** Every form of A's number (the national significant number alone too), and a sentence of A's transcript. */
  const aForms = [...numberForms(A), A_SENTENCE];
  /** In Redis also the number's plain SHA-256 (as the CRM sinks' contact memory names it): a guessable hash is the number. */
  const aRedisForms = [...aForms, createHash('sha256').update(A).digest('hex').slice(0, 32)];

  before(async () => {
    ({ prefix, redis: target } = await proofRedis());
    k = target.keys;
    [spoolRedis, s3, hubspot, pipedrive, receiver, refuser, api, smtp] = await Promise.all([
      startPrivateRedis(),
      startS3(),
      new FakeHubSpot().start(),
      new FakePipedrive().start(),
      new FakeWebhookReceiver(hookSecret).start(),
      new FakeWebhookReceiver(hookSecret).start(),
      FakeTelephony.start(),
      TestSmtpServer.start(),
    ]);
    refuser.answer = () => ({ status: 422, body: { message: 'refused' } });
    dir = await mkdtemp(join(tmpdir(), 'forget-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
${S3_ARCHIVE_SINK_YAML}  local:
    type: archive
    dir: ${join(dir, 'archive')}
  hubspot:
    type: hubspot
    apiUrl: ${hubspot.url}
    createContacts: true
    rateLimit: { max: 1000, durationMs: 1000 }
  pipedrive:
    type: pipedrive
    apiUrl: ${pipedrive.url}
    createPerson: true
    rateLimit: { max: 1000, durationMs: 1000 }
  hooks:
    type: webhook
    endpoints:
      - { name: ok, url: "${receiver.url}" }
      - { name: broken, url: "${refuser.url}" }
  sms:
    type: sms
    smsId: s0
    to: caller
    message: "Thanks for calling. Agreed: {{summary}}"
  mail:
    type: email
    from: calls@example.com
    to: [team@example.com]
    subject: "Call from {{caller}}"
routes:
  - to: [archive, local, hubspot, pipedrive, hooks, sms, mail]
`,
    );
    env = testEnv(prefix, {
      ...s3.env,
      ...target.env,
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      PIPEDRIVE_API_TOKEN: pipedrive.token,
      CRM_WEBHOOK_SECRET: hookSecret,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      SMTP_URL: smtp.url,
      SPOOL_DIR: join(dir, 'spool'),
      LOG_LEVEL: 'debug',
    });
    // This instance's ingress does not spool: the spool folder is the other ingress's (below). No
    // process is given PRIVACY_HMAC_SECRET: the keyed hashes use the key kept in Redis.
    cs = await startTestCallsync({ ...env, SPOOL_ENABLED: 'false' });
  });

  after(async () => {
    await cs?.stop();
    await Promise.all([
      target?.destroy(),
      spoolRedis?.destroy(),
      s3?.destroy(),
      hubspot?.stop(),
      pipedrive?.stop(),
      receiver?.stop(),
      refuser?.stop(),
      api?.close(),
      smtp?.close(),
    ]);
    await rm(dir, { recursive: true, force: true });
  });

  /**
   * Every key of every data node (masters and replicas, each once the writes so far reached its
   * replicas: WAIT), with its DUMP and its value by type.
   */
  async function everyRedisValue(): Promise<{ key: string; text: string }[]> {
    const out: { key: string; text: string }[] = [];
    const nodes = (await target.dataPorts()).map((port) => new Redis({ host: '127.0.0.1', port, lazyConnect: true }));
    try {
      for (const node of nodes) {
        await node.connect();
        const replicas = Number(/connected_slaves:(\d+)/.exec(await node.info('replication'))?.[1] ?? 0);
        if (replicas > 0) await node.call('WAIT', String(replicas), '5000');
      }
      for (const node of nodes) {
        // A cluster replica answers for its master's slots only after READONLY.
        if (TEST_TOPOLOGY === 'cluster') await node.call('READONLY');
        for (const v of await nodeValues(node)) out.push({ key: `${node.options.port}:${v.key}`, text: v.text });
      }
    } finally {
      for (const node of nodes) node.disconnect();
    }
    return out;
  }

  async function nodeValues(conn: Redis): Promise<{ key: string; text: string }[]> {
    const out: { key: string; text: string }[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await conn.scan(cursor, 'COUNT', 1000);
      cursor = next;
      for (const key of keys) {
        const type = await conn.type(key);
        const dump = (await conn.dumpBuffer(key)) ?? Buffer.alloc(0);
        let value: unknown = null;
        if (type === 'string') value = await conn.get(key);
        else if (type === 'hash') value = await conn.hgetall(key);
        else if (type === 'list') value = await conn.lrange(key, 0, -1);
        else if (type === 'set') value = await conn.smembers(key);
        else if (type === 'zset') value = await conn.zrange(key, 0, -1, 'WITHSCORES');
        else if (type === 'stream') value = await conn.xrange(key, '-', '+');
        out.push({ key, text: `${key}\n${dump.toString('latin1')}\n${JSON.stringify(value)}` });
      }
    } while (cursor !== '0');
    return out;
  }

  async function everyArchiveObject(): Promise<{ key: string; text: string }[]> {
    const out: { key: string; text: string }[] = [];
    for (const key of await s3.list('')) {
      const res = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }));
      out.push({ key: `s3:${key}`, text: `${key}\n${await res.Body!.transformToString('latin1')}` });
    }
    const root = join(dir, 'archive');
    for (const entry of await readdir(root, { recursive: true, withFileTypes: true }).catch(() => [])) {
      if (!entry.isFile()) continue;
      const path = join(entry.parentPath, entry.name);
      out.push({ key: `file:${path}`, text: `${path}\n${(await readFile(path)).toString('latin1')}` });
    }
    return out;
  }

  async function spoolFiles(): Promise<{ key: string; text: string }[]> {
    const root = join(dir, 'spool');
    const out: { key: string; text: string }[] = [];
    for (const entry of await readdir(root, { recursive: true, withFileTypes: true }).catch(() => [])) {
      if (!entry.isFile()) continue;
      const path = join(entry.parentPath, entry.name);
      out.push({ key: path, text: `${path}\n${await readFile(path, 'utf8')}` });
    }
    return out;
  }

  test('forget A: every store searched, nothing of A found; B and C intact', async () => {
    // 1. Every call through every sink.
    const all = [...A_CALLS, ...B_CALLS, ...C_CALLS];
    for (const payload of all)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, payload)).status, 202);
    const queues = QUEUES.map((q) => {
      const [sink, endpoint] = q.split('.');
      const name = sinkQueueName(sink!, endpoint);
      return new Queue(name, { connection: cs.redis.worker, prefix: k.queuePrefix(name) });
    });
    try {
      await waitFor(
        async () => {
          const counts = await Promise.all(queues.map((q) => q.getJobCounts('completed', 'failed')));
          return counts.every((c) => (c.completed ?? 0) + (c.failed ?? 0) === all.length);
        },
        { what: 'every call done or dead-lettered in every sink queue', timeoutMs: 120_000 },
      );
      const broken = queues[QUEUES.indexOf('hooks.broken')]!;
      assert.equal((await broken.getJobCounts('failed')).failed, all.length, 'a dead letter per call');
    } finally {
      await Promise.all(queues.map((q) => q.close()));
    }
    assert.ok(
      api.sms.some((s) => s.recipient === A),
      'A got an SMS',
    );
    assert.ok(hubspot.calls.size >= all.length && pipedrive.callLogs.length >= all.length, 'both CRMs have every call');

    // 2. Two calls wait in the spool of an ingress whose Redis went away (and that then stopped).
    // Its own single Redis (not the cluster's or the sentinel's), which then goes away.
    const { REDIS_CLUSTER_NODES: _n, REDIS_SENTINELS: _s, REDIS_SENTINEL_NAME: _m, ...spoolEnv } = env;
    const spooler = await startTestCallsync({
      ...spoolEnv,
      REDIS_URL: spoolRedis.url,
      CALLSYNC_ROLE: 'ingress',
      SPOOL_ENABLED: 'true',
    });
    try {
      await spoolRedis.stop();
      for (const payload of [
        call('fa-spooled', { from: A, sentence: A_SENTENCE }),
        call('fb-spooled', { from: B, sentence: B_SENTENCE }),
      ]) {
        const res = await postJson(`${spooler.url}/webhooks/ai-agent/${AGENT}`, payload);
        assert.equal(res.body.spooled, true, JSON.stringify(res.body));
      }
    } finally {
      await spooler.close();
      spoolLogs.push(...spooler.logs);
    }
    const spooledBefore = (await spoolFiles()).map((f) => f.text).join('\n');
    assert.ok(spooledBefore.includes(A) && spooledBefore.includes(B), 'both spooled calls on disk');

    // 3. An entry of each of A and B parked (kept neither as sink jobs nor as a dead letter).
    const parking = target.connect();
    try {
      for (const [id, payload] of [
        ['fa-parked', call('fa-parked', { from: A, sentence: A_SENTENCE })],
        ['fb-parked', call('fb-parked', { from: B, sentence: B_SENTENCE })],
      ] as const) {
        const record = {
          key: callKey('ai-agent', AGENT, id),
          callId: id,
          from: payload.call.from,
          transcript: { content: payload.assist.transcription.content },
          startedAt: '2026-04-08T10:00:00.000Z',
        };
        await parking.xadd(
          `${k.inboundShard(0)}:inbound-parked`,
          '*',
          'entry',
          '0-1',
          'reason',
          'test',
          'id',
          `${id}-x`,
          'call',
          JSON.stringify(record),
        );
      }
    } finally {
      parking.disconnect();
    }

    // The "never twice" markers of fa-1 and fb-1 as an earlier version wrote them: the number in clear.
    const seeding = target.connect();
    try {
      const key = await storedPrivacyKey(seeding, k);
      for (const [id, number] of [
        ['fa-1', A],
        ['fb-1', B],
      ] as const) {
        const marker = `${k.sinkState('sms')}sent:${callHash(callKey('ai-agent', AGENT, id))}:`;
        assert.equal(
          await seeding.rename(`${marker}${recipientHash(key, number)}`, `${marker}${number}`),
          'OK',
          `the hashed marker of ${id}`,
        );
      }
    } finally {
      seeding.disconnect();
    }
    earlierLogs.push(...cs.logs);
    await cs.close();
    cs = await startTestCallsync({ ...env, SPOOL_ENABLED: 'false' });

    // Before: A is everywhere (the search below can find it).
    const conn = target.connect();
    try {
      const redisBefore = (await everyRedisValue()).map((v) => v.text).join('\n');
      assert.ok(hits(redisBefore, aForms).length > 0 && redisBefore.includes(A_SENTENCE), 'A in Redis before');
      const archiveBefore = (await everyArchiveObject()).map((v) => v.text).join('\n');
      assert.ok(archiveBefore.includes(A_SENTENCE), 'A in the archives before');

      assert.ok(
        redisBefore.includes(`:sent:${callHash(callKey('ai-agent', AGENT, 'fa-1'))}:${A}`),
        'a ledger marker names A in clear',
      );

      // The CRMs' contact and person memory names A by its keyed hash only; an earlier version's by
      // its plain SHA-256 is seeded (it lives a day): forget erases it too.
      const keyed = recipientHash(await storedPrivacyKey(conn, k), A);
      assert.ok(redisBefore.includes(`:contact:${keyed}`), "the CRM's contact memory names A by its keyed hash");
      assert.ok(!redisBefore.includes(aRedisForms.at(-1)!), 'no key names A by its plain SHA-256');
      assert.equal(
        await conn.set(`${k.sinkState('hubspot')}contact:${aRedisForms.at(-1)!}`, '901', 'PX', 86_400_000),
        'OK',
      );
      const io = { env, out: (l: string) => cliOutput.push(l), err: (l: string) => cliOutput.push(l) };
      // A asks for no more SMS (before asking to be forgotten).
      assert.equal(await runCli(['opt-out', 'add', A], io), 0);
      assert.ok((await conn.smembers(`${k.area('optout')}:optout`)).includes(A));

      // A dry run counts and changes nothing.
      cliOutput.length = 0;
      assert.equal(await runCli(['forget', A, '--dry-run', '--crm', '--json'], io), 0);
      const dry = JSON.parse(cliOutput.find((l) => l.startsWith('{"target"'))!) as {
        calls: number;
        dryRun: boolean;
        stores: Record<string, number>;
      };
      assert.equal(dry.dryRun, true);
      assert.equal(dry.calls, 5);
      assert.ok(
        (dry.stores['crm records (hubspot)'] ?? 0) > 0 && (dry.stores['archive objects (S3)'] ?? 0) > 0,
        JSON.stringify(dry.stores),
      );
      assert.equal(
        (await everyRedisValue())
          .map((v) => v.text)
          .join('\n')
          .includes(A_SENTENCE),
        true,
        'the dry run erased nothing',
      );
      assert.equal(hubspot.calls.size, all.length);

      // A CRM that refuses the deletion stops forget before anything is erased (exit 1, which sink).
      cliOutput.length = 0;
      assert.equal(
        await runCli(['forget', A, '--crm'], { ...io, env: { ...env, HUBSPOT_ACCESS_TOKEN: 'wrong-token' } }),
        1,
      );
      assert.match(cliOutput.join('\n'), /--crm: sink "hubspot" could not delete a call record/);
      assert.ok(
        (await spoolFiles()).some((f) => f.text.includes(A_SENTENCE)) &&
          (await everyArchiveObject()).some((o) => o.text.includes(A_SENTENCE)),
        'nothing erased',
      );
      assert.equal(hubspot.calls.size, all.length);

      // 4. Forget A, with the command line, given in national format.
      cliOutput.length = 0;
      const code = await runCli(['forget', '0170 1234567', '--crm', '--json'], io);
      assert.equal(code, 0, cliOutput.join('\n'));

      // 5. Nothing of A anywhere.
      const leftInRedis = (await everyRedisValue()).filter((v) => hits(v.text, aRedisForms).length > 0);
      assert.deepEqual(
        leftInRedis.map((v) => `${v.key}: ${hits(v.text, aRedisForms).join(', ')}`),
        [],
        'no Redis key holds A',
      );
      const leftInArchive = (await everyArchiveObject()).filter((v) => hits(v.text, aForms).length > 0);
      assert.deepEqual(
        leftInArchive.map((v) => v.key),
        [],
        'no archive object holds A',
      );
      const leftInSpool = (await spoolFiles()).filter((v) => hits(v.text, aForms).length > 0);
      assert.deepEqual(
        leftInSpool.map((v) => v.key),
        [],
        'no spool file holds A',
      );
      const logs = [...earlierLogs, ...cs.logs, ...spoolLogs].map((l) => JSON.stringify(l)).concat(cliOutput);
      assert.ok(cs.logs.length > 0 && spoolLogs.length > 0, 'logs were captured');
      assert.deepEqual(
        logs.filter((l) => hits(l, aForms).length > 0),
        [],
        'no log line holds A',
      );
      assert.deepEqual(
        [...hubspot.calls.values()].filter(
          (c) => JSON.stringify(c).includes('fa-') || hits(JSON.stringify(c), aForms).length > 0,
        ).length,
        0,
        'HubSpot: no call record of A',
      );
      assert.deepEqual(
        pipedrive.callLogs.filter((l) => hits(JSON.stringify(l), aForms).length > 0).length,
        0,
        'Pipedrive: no call log of A',
      );

      // The receipt: counts per store.
      const receipt = JSON.parse(cliOutput.find((l) => l.startsWith('{"target"'))!) as {
        calls: number;
        stores: Record<string, number>;
      };
      assert.equal(receipt.calls, 5, 'three calls in Redis and the archives, one in the spool, one parked');
      assert.ok(
        await new OptOutList(conn, k.area('optout'), new PrivacyKey(conn, k)).has(A),
        'A is still opted out (as a keyed hash)',
      );
      const generated = await storedPrivacyKey(conn, k);
      const faMarker = `${k.sinkState('sms')}sent:${callHash(callKey('ai-agent', AGENT, 'fa-1'))}:${recipientHash(generated, A)}`;
      assert.equal(
        JSON.parse((await conn.get(faMarker)) ?? '{}').state,
        'sent',
        "fa-1's marker in clear is now its keyed hash (never twice still holds)",
      );
      for (const store of [
        'opt-out list (kept as keyed hash)',
        'spool lines',
        'dead letters',
        'archive objects (S3)',
        'archive objects (folder)',
        'crm records (hubspot)',
        'crm records (pipedrive)',
        'dedupe keys',
        'notification ledger (kept as keyed hash)',
      ]) {
        assert.ok((receipt.stores[store] ?? 0) > 0, `receipt counts ${store}: ${JSON.stringify(receipt.stores)}`);
      }
      const audit = cliOutput
        .map((l) => (l.startsWith('{') ? (JSON.parse(l) as Record<string, unknown>) : null))
        .find((l) => l?.audit === 'forget');
      assert.ok(audit, 'an audit line');

      // 6. B and C intact.
      const redisAfter = (await everyRedisValue()).map((v) => v.text).join('\n');
      assert.ok(redisAfter.includes(B_SENTENCE), "B's jobs are in Redis");
      for (const q of QUEUES) {
        const [sink, endpoint] = q.split('.');
        const name = sinkQueueName(sink!, endpoint);
        const queue = new Queue(name, { connection: conn, prefix: k.queuePrefix(name) });
        try {
          for (const id of ['fb-1', 'fb-2', 'fc-1']) {
            const job = await queue.getJob(callHash(callKey('ai-agent', AGENT, id)));
            assert.ok(job, `${q}: the job of ${id} is still there`);
          }
          for (const id of ['fa-1', 'fa-2', 'fa-3'])
            assert.equal(
              await queue.getJob(callHash(callKey('ai-agent', AGENT, id))),
              undefined,
              `${q}: no job of ${id}`,
            );
        } finally {
          await queue.close();
        }
      }
      const archiveAfter = await everyArchiveObject();
      for (const id of ['fb-1', 'fb-2', 'fc-1']) {
        assert.equal(
          archiveAfter.filter((o) => o.key.startsWith('s3:') && o.key.includes(`/${id}-`)).length,
          3,
          `S3 keeps ${id}`,
        );
        assert.equal(
          archiveAfter.filter((o) => o.key.startsWith('file:') && o.key.includes(`/${id}-`)).length,
          3,
          `the folder keeps ${id}`,
        );
      }
      const spoolAfter = (await spoolFiles()).map((f) => f.text).join('\n');
      assert.ok(spoolAfter.includes(B_SENTENCE), "B's spooled call is still in the spool");
      assert.deepEqual(
        (await conn.xrange(`${k.inboundShard(0)}:inbound-parked`, '-', '+')).map(([, f]) => f[f.indexOf('id') + 1]),
        ['fb-parked-x'],
        "B's parked entry stays",
      );
      assert.ok(
        redisAfter.includes(`:sent:${callHash(callKey('ai-agent', AGENT, 'fb-1'))}:${B}`),
        "B's ledger marker stays as it was",
      );
      assert.equal(
        [...hubspot.calls.values()].length,
        B_CALLS.length + C_CALLS.length,
        'HubSpot keeps the calls of B and C',
      );
      assert.equal(pipedrive.callLogs.length, B_CALLS.length + C_CALLS.length, 'Pipedrive keeps the calls of B and C');

      // 7. Idempotent: again, nothing to erase.
      cliOutput.length = 0;
      assert.equal(await runCli(['forget', A, '--json'], io), 0);
      const again = JSON.parse(cliOutput.find((l) => l.startsWith('{"target"'))!) as {
        calls: number;
        stores: Record<string, number>;
      };
      assert.deepEqual({ calls: again.calls, stores: again.stores }, { calls: 0, stores: {} });

      // One call by its call id: fb-2 goes, fb-1 (the same number) stays.
      cliOutput.length = 0;
      assert.equal(await runCli(['forget', 'fb-2', '--crm', '--json'], io), 0, cliOutput.join('\n'));
      const byId = JSON.parse(cliOutput.find((l) => l.startsWith('{"target"'))!) as { target: string; calls: number };
      assert.deepEqual([byId.target, byId.calls], ['call', 1]);
      const archiveNow = await everyArchiveObject();
      assert.equal(archiveNow.filter((o) => o.key.includes('/fb-2-')).length, 0, 'no archive object of fb-2');
      assert.equal(archiveNow.filter((o) => o.key.includes('/fb-1-')).length, 6, 'fb-1 stays in both archives');
      const hooks = new Queue(sinkQueueName('hooks', 'ok'), {
        connection: conn,
        prefix: k.queuePrefix(sinkQueueName('hooks', 'ok')),
      });
      try {
        assert.equal(await hooks.getJob(callHash(callKey('ai-agent', AGENT, 'fb-2'))), undefined);
        assert.ok(await hooks.getJob(callHash(callKey('ai-agent', AGENT, 'fb-1'))));
      } finally {
        await hooks.close();
      }
      assert.equal(hubspot.calls.size, B_CALLS.length + C_CALLS.length - 1, "fb-2's HubSpot call deleted");

      // 8. "Never twice" survives as a keyed hash: the platform resending A's call does not text A again.
      const smsToA = api.sms.filter((s) => s.recipient === A).length;
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, A_CALLS[0])).status, 202);
      const sms = new Queue(sinkQueueName('sms'), { connection: conn, prefix: k.queuePrefix(sinkQueueName('sms')) });
      try {
        const id = callHash(callKey('ai-agent', AGENT, 'fa-1'));
        await waitFor(async () => (await sms.getJob(id))?.isCompleted(), {
          what: 'the resent call at the SMS sink',
          timeoutMs: 30_000,
        });
        const job = (await sms.getJob(id))!;
        assert.match(String((job.returnvalue as { reason?: string }).reason), /already sent|opted out/);
      } finally {
        await sms.close();
      }
      assert.equal(api.sms.filter((s) => s.recipient === A).length, smsToA, 'no second SMS to A');
    } finally {
      conn.disconnect();
    }
  });
});
