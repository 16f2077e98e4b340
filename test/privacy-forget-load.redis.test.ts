// `callsync forget` while calls flow (issue 25): a load of 1,000 calls of other numbers — with calls of
// the forgotten number among them — arrives while forget runs; every other call reaches its sink,
// none lost, and a forget after the load leaves nothing of the number. And the stream rewrite
// forget uses instead of XDEL: the erased fields are gone from DUMP, the consumer group keeps its
// position and its pending entries.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { InboundLog } from '../queues/inbound.js';
import type { RedisClient } from '../queues/connection.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { eraseStreamEntries } from '../src/privacy/stream-erase.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { cleanupPrefix, testRedis, uniquePrefix, waitFor, type TestRedis } from './support/redis.js';

const A = '+491701234567';
const LOAD = 1000;
const A_AMONG = 20;

// On the shared Redis, or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys.
describe('forget while calls flow', () => {
  let target: TestRedis;
  let conn: RedisClient;
  before(async () => {
    target = await testRedis();
    conn = target.connect();
  });
  after(() => conn.disconnect());

  test('the stream rewrite: erased fields leave DUMP, the group keeps its position and pending entries', async () => {
    const key = `${uniquePrefix('stream')}:inbound-log`;
    try {
      const ids: string[] = [];
      for (let i = 0; i < 6; i++)
        ids.push((await conn.xadd(key, '*', 'call', `payload-${i}-${i === 1 ? 'SECRET-NUMBER' : 'other'}`))!);
      await conn.xgroup('CREATE', key, 'fanout', '0');
      // Consumer x took 0..2 (pending), y took 3 and acknowledged it; 4 and 5 were never delivered.
      await conn.xreadgroup('GROUP', 'fanout', 'x', 'COUNT', 3, 'STREAMS', key, '>');
      await conn.xreadgroup('GROUP', 'fanout', 'y', 'COUNT', 1, 'STREAMS', key, '>');
      await conn.xack(key, 'fanout', ids[3]!);
      await conn.xdel(key, ids[3]!);
      // XDEL alone: the fields are still in the stream's memory.
      await conn.xadd(key, '*', 'call', 'payload-6-SECRET-NUMBER');
      const six = (await conn.xrevrange(key, '+', '-', 'COUNT', 1))[0]![0];
      await conn.xdel(key, six);
      assert.ok(
        (await conn.dumpBuffer(key))!.toString('latin1').includes('SECRET-NUMBER'),
        'XDEL leaves the fields in DUMP',
      );

      assert.equal(await eraseStreamEntries(conn, key, [ids[1]!]), 1);
      assert.ok(
        !(await conn.dumpBuffer(key))!.toString('latin1').includes('SECRET-NUMBER'),
        'after the rewrite DUMP holds none of them',
      );
      assert.deepEqual(
        (await conn.xrange(key, '-', '+')).map(([id]) => id),
        [ids[0], ids[2], ids[4], ids[5]],
        'the other entries keep their ids',
      );
      const pending = (await conn.xpending(key, 'fanout', '-', '+', 10)) as [string, string, number, number][];
      assert.deepEqual(
        pending.map(([id, consumer]) => [id, consumer]),
        [
          [ids[0], 'x'],
          [ids[2], 'x'],
        ],
        'pending entries back with their consumer',
      );
      const next = (await conn.xreadgroup('GROUP', 'fanout', 'z', 'COUNT', 10, 'STREAMS', key, '>')) as [
        string,
        [string, string[]][],
      ][];
      assert.deepEqual(
        next[0]![1].map(([id]) => id),
        [ids[4], ids[5]],
        'the group goes on where it was: only the undelivered entries are new',
      );
      const added = await conn.xadd(key, '*', 'call', 'later');
      assert.ok(added! > six, 'new ids stay above every id the stream gave before');
    } finally {
      await conn.del(key);
    }
  });

  describe('a load of other calls', () => {
    const prefix = uniquePrefix('forgetload');
    /** The ingress takes the load all along; the workers stop for a while, so the inbound log holds calls (A's too) while forget runs. */
    let cs: TestCallsync;
    let worker: TestCallsync | null = null;
    let dir: string;
    let env: Record<string, string>;

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'forget-load-'));
      const configPath = join(dir, 'callsync.yaml');
      await writeFile(
        configPath,
        `sinks:\n  local:\n    type: archive\n    dir: ${join(dir, 'archive')}\nroutes:\n  - to: [local]\n`,
      );
      env = testEnv(prefix, {
        ...target.env(),
        CALLSYNC_CONFIG: configPath,
        SPOOL_ENABLED: 'false',
        PRIVACY_HMAC_SECRET: 'load-secret',
        SPOOL_DIR: join(dir, 'spool'),
      });
      cs = await startTestCallsync({ ...env, CALLSYNC_ROLE: 'ingress' });
      worker = await startTestCallsync({ ...env, CALLSYNC_ROLE: 'worker' });
    });
    after(async () => {
      await worker?.close();
      await cs?.stop();
      await cleanupPrefix(prefix);
      await rm(dir, { recursive: true, force: true });
    });

    test(`forget during ${LOAD} calls of other numbers (and ${A_AMONG} of the number): none of the others lost`, async () => {
      const post = (id: string, from: string) =>
        postJson(
          `${cs.url}/webhooks/ai-agent/agent-1`,
          webhookPayload(id, (p) => (p.call.from = from)),
        );
      // A's calls before the load.
      for (let i = 0; i < 5; i++) assert.equal((await post(`a-${i}`, A)).status, 202);
      const queue = new Queue(sinkQueueName('local'), {
        connection: conn,
        prefix: target.keys(prefix).queuePrefix(sinkQueueName('local')),
      });
      try {
        await waitFor(async () => (await queue.getJobCounts('completed')).completed === 5, {
          what: "A's calls archived",
          timeoutMs: 30_000,
        });
        const config = loadConfig(env);
        const log = pino({ level: 'silent' });
        const who = parseTarget(A, 'DE');

        // The load: other numbers (A's calls among them), 20 requests at a time, while forget runs.
        const others: string[] = [];
        const ids = Array.from({ length: LOAD + A_AMONG }, (_, i) =>
          i % Math.floor(LOAD / A_AMONG) === 7 && i / Math.floor(LOAD / A_AMONG) < A_AMONG ? `a-load-${i}` : `o-${i}`,
        );
        const started = Date.now();
        let next = 0;
        const sender = async () => {
          while (next < ids.length) {
            const id = ids[next++]!;
            const from = id.startsWith('a-') ? A : `+4915${String(100_000_000 + next).slice(1)}`;
            const res = await post(id, from);
            assert.equal(res.status, 202, JSON.stringify(res.body));
            if (!id.startsWith('a-')) others.push(id);
          }
        };
        const load = Promise.all(Array.from({ length: 20 }, sender));
        // The workers stop once the load is under way: the log fills (with A's calls among the others).
        await waitFor(() => next > 100 || null, { what: 'the load started' });
        await worker!.close();
        worker = null;
        await waitFor(() => next > 400 || null, { what: 'calls waiting in the log', timeoutMs: 60_000 });
        // Forget runs while the ingress keeps taking the load; then workers start again.
        const atStart = next;
        const during = await forget(config, conn, log, { target: who, dryRun: false, crm: false });
        const atEnd = next;
        assert.ok(atStart < ids.length, 'forget started before the load ended');
        assert.ok(
          (during.stores['inbound log'] ?? 0) > 0,
          `forget erased A's calls from the inbound log: ${JSON.stringify(during.stores)}`,
        );
        worker = await startTestCallsync({ ...env, CALLSYNC_ROLE: 'worker' });
        await load;
        const sent = Date.now() - started;
        assert.ok(during.calls >= 5, `the forget during the load found A's calls: ${JSON.stringify(during)}`);

        // Every other call reached the archive: none lost.
        await waitFor(
          async () => {
            const names = (await readdir(join(dir, 'archive'), { recursive: true })).filter((n) =>
              n.endsWith('.vcon.json'),
            );
            return others.every((id) => names.some((n) => n.includes(`/${id}-`))) || null;
          },
          { what: `all ${others.length} other calls archived`, timeoutMs: 120_000, intervalMs: 500 },
        );
        // A job writes its archive objects before it completes: the last ones may still be finishing.
        const counts = () => queue.getJobCounts('failed', 'waiting', 'active', 'delayed');
        await waitFor(async () => (await counts()).active === 0 || null, { what: 'the last archive jobs completed' });
        assert.deepEqual(await counts(), { failed: 0, waiting: 0, active: 0, delayed: 0 });
        assert.equal(others.length, LOAD);

        // After the load, once more: nothing of A is left in Redis or the archive.
        await waitFor(async () => (await new InboundLog(conn, target.keys(prefix)).length()) === 0 || null, {
          what: 'the log drained',
        });
        await forget(config, conn, log, { target: who, dryRun: false, crm: false });
        const left: string[] = [];
        for (const keys of (await target.keysByNode(prefix)).values()) {
          for (const key of keys)
            if ((await conn.dumpBuffer(key))?.toString('latin1').includes(A.slice(1))) left.push(key);
        }
        assert.deepEqual(left, [], 'no key holds A');
        const files = (await readdir(join(dir, 'archive'), { recursive: true })).filter((n) => n.includes('/a-'));
        assert.deepEqual(files, [], "no archive object of A's calls");
        // Measured, not asserted (no timing asserts in tests): how long the load took here.
        process.stdout.write(
          `# ${LOAD + A_AMONG} calls sent in ${sent} ms ; forget ran from call ${atStart} to call ${atEnd}\n`,
        );
      } finally {
        await queue.close();
      }
    });
  });
});
