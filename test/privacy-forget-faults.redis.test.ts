// `callsync forget` under faults, with real processes and a private redis-server: the command killed
// with SIGKILL at several points of its run (after a job, a stream rewrite, a key, an archive
// object) — a second run finishes and a full scan finds nothing of the number; Redis stopped midway
// — the command says what it erased and what is left, and a rerun finishes; a call of the number
// accepted while it runs — reported, so the officer reruns.
// The scan: every key of the private Redis (SCAN, its value read by type — stream entries too — and
// its DUMP), every file under the test's folder (archive, DATA_DIR, spool).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { sinkQueueName } from '../queues/registry.js';
import { sampleCall, webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { forgetCommand } from '../src/cli/forget.js';
import { CliFailure } from '../src/cli/redis.js';
import { loadConfig } from '../src/config/index.js';

const A = '+491701234567';
const B = '+491761234599';
const ROOT = new URL('..', import.meta.url).pathname;
const BIN = join(ROOT, 'bin/callsync.js');
const KILLER = join(ROOT, 'test/support/forget-kill-process.ts');
const DRAINER = join(ROOT, 'test/support/spool-drain-process.ts');

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], env: Record<string, string>): Promise<Ended> {
  const child = spawn(process.execPath, ['--import', 'tsx', ...args], {
    cwd: ROOT,
    env: { ...process.env, CALLSYNC_FROM_SOURCE: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  return new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal, stdout, stderr })));
}

async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true }).catch(() => []))
    if (entry.isFile()) out.push(join(entry.parentPath, entry.name));
  return out;
}

describe('forget under faults', () => {
  let redis: PrivateRedis;
  let conn: Redis;
  let dir: string;
  let env: Record<string, string>;
  let cs: TestCallsync;

  before(async () => {
    redis = await startPrivateRedis({ appendfsync: 'always' });
    conn = new Redis(redis.url, { maxRetriesPerRequest: 0, retryStrategy: () => 200 });
    conn.on('error', () => undefined);
    dir = await mkdtemp(join(tmpdir(), 'forget-faults-'));
    await mkdir(join(dir, 'data'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  archive:\n    type: archive\n    dir: ${join(dir, 'archive')}\nroutes:\n  - to: [archive]\n`,
    );
    env = testEnv(uniquePrefix('forgetfault'), {
      REDIS_URL: redis.url,
      CALLSYNC_CONFIG: configPath,
      DATA_DIR: join(dir, 'data'),
      SPOOL_ENABLED: 'false',
      PHONE_DEFAULT_REGION: 'DE',
    });
    cs = await startTestCallsync(env);
  });
  after(async () => {
    await cs?.stop();
    conn?.disconnect();
    await redis?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Posts a call from `from` and waits until the archive holds its record. */
  async function call(callId: string, from: string): Promise<void> {
    const res = await postJson(
      `${cs.url}/webhooks/ai-agent/agent-1`,
      webhookPayload(callId, (p) => (p.call.from = from)),
    );
    assert.equal(res.status, 202);
    await waitFor(
      async () => {
        for (const f of await filesUnder(join(dir, 'archive')))
          if (f.endsWith('.json') && (await readFile(f, 'utf8')).includes(`"${callId}"`)) return true;
        return null;
      },
      { what: `${callId} archived` },
    );
  }

  /** Every key of the private Redis (its value by type, stream entries too, and its DUMP) and every file under the test's folder. */
  async function everything(): Promise<{ where: string; text: string }[]> {
    const out: { where: string; text: string }[] = [];
    let cursor = '0';
    do {
      const [next, keys] = await conn.scan(cursor, 'COUNT', 1000);
      cursor = next;
      for (const key of keys) {
        const type = await conn.type(key);
        const value =
          type === 'string'
            ? await conn.get(key)
            : type === 'hash'
              ? await conn.hgetall(key)
              : type === 'list'
                ? await conn.lrange(key, 0, -1)
                : type === 'set'
                  ? await conn.smembers(key)
                  : type === 'zset'
                    ? await conn.zrange(key, 0, -1)
                    : type === 'stream'
                      ? await conn.xrange(key, '-', '+')
                      : null;
        const dump = (await conn.dumpBuffer(key)) ?? Buffer.alloc(0);
        out.push({ where: `redis ${key}`, text: `${key}\n${JSON.stringify(value)}\n${dump.toString('latin1')}` });
      }
    } while (cursor !== '0');
    for (const file of await filesUnder(dir))
      out.push({ where: `file ${file}`, text: `${file}\n${await readFile(file, 'latin1')}` });
    return out;
  }

  /** What the scan finds of the number A (its digits in any key, value or file) or of the call ids given. */
  async function tracesOf(needles: string[]): Promise<string[]> {
    return (await everything()).filter(({ text }) => needles.some((n) => text.includes(n))).map(({ where }) => where);
  }
  const numberNeedles = ['1701234567', '170 1234567', '170-1234567'];

  for (const at of ['job:1', 'stream:1', 'key:1', 'key:4', 'archive:1', 'archive:2']) {
    test(`killed after ${at}: a second run finishes, nothing of the number is left, the other caller's data is whole`, async () => {
      const tag = at.replace(':', '');
      const ids = [`fk-${tag}-a1`, `fk-${tag}-a2`];
      for (const id of ids) await call(id, A);
      await call(`fk-${tag}-b`, B);
      const otherBefore = (await tracesOf([`fk-${tag}-b`])).sort();
      assert.ok(
        otherBefore.some((w) => w.startsWith('file ')),
        'the other caller is archived',
      );

      const killed = await run([KILLER, A], { ...env, FORGET_KILL_AT: at });
      assert.equal(killed.signal, 'SIGKILL', `forget was killed at ${at} (exit ${killed.code}): ${killed.stderr}`);

      const again = await run([BIN, 'forget', A], env);
      assert.equal(again.code, 0, again.stderr + again.stdout);
      const dry = await run([BIN, 'forget', A, '--dry-run', '--json'], env);
      assert.equal(dry.code, 0, dry.stderr);
      const receipt = JSON.parse(dry.stdout) as { stores: Record<string, number> };
      assert.deepEqual(receipt.stores, {}, `forget --dry-run after the second run: ${dry.stdout}`);

      assert.deepEqual(await tracesOf([...numberNeedles, ...ids]), [], 'the scan finds nothing of the number');
      assert.deepEqual((await tracesOf([`fk-${tag}-b`])).sort(), otherBefore, "the other caller's data is whole");
    });
  }

  test('Redis stopped midway: a clear failure saying what was erased and what is left; a rerun finishes', async () => {
    const ids = ['fr-a1', 'fr-a2'];
    for (const id of ids) await call(id, A);
    const out: string[] = [];
    const err: string[] = [];
    let stopped = false;
    await assert.rejects(
      forgetCommand([A], { env, out: (l) => out.push(l), err: (l) => err.push(l) }, () => loadConfig(env), {
        onStep: async (step) => {
          if (step === 'key' && !stopped) {
            stopped = true;
            await redis.stop();
          }
        },
      }),
      (e: unknown) => {
        assert.ok(e instanceof CliFailure, String(e));
        assert.match(e.message, /Redis/, e.message);
        assert.match(e.message, /left/, e.message);
        assert.match(e.message, /run forget again/, e.message);
        return true;
      },
    );
    assert.ok(stopped, 'Redis was stopped during the run');
    assert.match(out[0] ?? '', /^erased: /, `the receipt of what was erased: ${out.join('\n')}`);
    assert.ok(
      out.some((l) => /jobs \(completed\)\s+\d+/.test(l)),
      out.join('\n'),
    );

    await redis.start();
    const again = await run([BIN, 'forget', A], env);
    assert.equal(again.code, 0, again.stderr + again.stdout);
    assert.deepEqual(await tracesOf([...numberNeedles, ...ids]), [], 'the scan finds nothing of the number');
  });

  test('a call of the number accepted while forget runs is reported (exit 1: run again); the rerun erases it', async () => {
    await call('fl-a1', A);
    const out: string[] = [];
    let posted = false;
    await assert.rejects(
      forgetCommand([A], { env, out: (l) => out.push(l), err: () => undefined }, () => loadConfig(env), {
        // After the last Redis pass, while the archive is erased: the caller calls again.
        onStep: async (step) => {
          if (step !== 'archive' || posted) return;
          posted = true;
          const res = await postJson(
            `${cs.url}/webhooks/ai-agent/agent-1`,
            webhookPayload('fl-a2', (p) => (p.call.from = A)),
          );
          assert.equal(res.status, 202, 'accepted: in the inbound log');
        },
      }),
      (e: unknown) => {
        assert.ok(e instanceof CliFailure, String(e));
        assert.match(e.message, /while forget ran/, e.message);
        assert.match(e.message, /run forget again/, e.message);
        return true;
      },
    );
    assert.ok(posted);
    assert.match(out[0] ?? '', /^erased: /, out.join('\n'));
    await waitFor(
      async () => {
        for (const f of await filesUnder(join(dir, 'archive'))) if (f.includes('fl-a2')) return true;
        return null;
      },
      { what: 'the late call archived' },
    );
    const again = await run([BIN, 'forget', A], env);
    assert.equal(again.code, 0, again.stderr + again.stdout);
    assert.deepEqual(await tracesOf([...numberNeedles, 'fl-a1', 'fl-a2']), [], 'the scan finds nothing of the number');
  });

  /** A spool line as the ingress writes it (src/ingress/spool.ts), of a call from `from`. */
  const spoolLine = (id: string, from: string) =>
    JSON.stringify({
      v: 1,
      id,
      at: '2026-11-26T10:00:00Z',
      call: sampleCall(id, { patch: (p) => (p.call.from = from) }),
    });

  test('killed while rewriting the spool, an ingress draining it before the rerun: nothing of either caller is left once both are forgotten', async () => {
    const spoolDir = loadConfig(env).spool.dir;
    await mkdir(spoolDir, { recursive: true });
    const line = spoolLine;
    await writeFile(join(spoolDir, '0000000000000001.jsonl'), `${line('fs-a1', A)}\n${line('fs-b1', B)}\n`);

    const killed = await run([KILLER, A], { ...env, FORGET_KILL_AT: 'spool:1' });
    assert.equal(
      killed.signal,
      'SIGKILL',
      `forget was killed in the spool step (exit ${killed.code}): ${killed.stderr}`,
    );
    // An ingress starts on the folder before the next forget and drains the segment into Redis.
    const drain = await run([DRAINER], { ...env, SPOOL_DIR: spoolDir });
    assert.equal(drain.code, 0, drain.stderr + drain.stdout);
    await waitFor(
      async () => {
        const names = (await filesUnder(join(dir, 'archive'))).join('\n');
        return names.includes('fs-a1') && names.includes('fs-b1') ? true : null;
      },
      { what: 'the drained calls archived' },
    );
    const again = await run([BIN, 'forget', A], env);
    assert.equal(again.code, 0, again.stderr + again.stdout);
    // Later the other caller is forgotten too: nothing of theirs may stay in the spool folder.
    const other = await run([BIN, 'forget', B], env);
    assert.equal(other.code, 0, other.stderr + other.stdout);
    const files = await filesUnder(spoolDir);
    const left = [];
    for (const f of files) if (/1701234567|1761234599|fs-a1|fs-b1/.test(await readFile(f, 'utf8'))) left.push(f);
    assert.deepEqual(left, [], 'the spool folder holds nothing of either caller');
  });

  test('a call of the number spooled while forget runs (its ingress without Redis) is reported, not left to reach Redis after "done"', async () => {
    await call('fp-a1', A);
    const spoolDir = loadConfig(env).spool.dir;
    await mkdir(spoolDir, { recursive: true });
    let spooled = false;
    await assert.rejects(
      forgetCommand([A], { env, out: () => undefined, err: () => undefined }, () => loadConfig(env), {
        onStep: async (step) => {
          if (step !== 'archive' || spooled) return;
          spooled = true;
          await writeFile(join(spoolDir, '0000000000000007.jsonl'), `${spoolLine('fp-a2', A)}\n`);
        },
      }),
      (e: unknown) => {
        assert.ok(e instanceof CliFailure, String(e));
        assert.match(e.message, /1 in the spool/, e.message);
        return true;
      },
    );
    const again = await run([BIN, 'forget', A], env);
    assert.equal(again.code, 0, again.stderr + again.stdout);
    assert.deepEqual(await tracesOf([...numberNeedles, 'fp-a1', 'fp-a2']), [], 'the scan finds nothing of the number');
  });

  test('killed right after the number lookup went, for calls whose jobs and archive objects are gone: a rerun leaves nothing', async () => {
    // Sixteen calls, so that timelines and call-id lookups are still there when the number's lookup
    // goes (in SCAN's order, which the erasure followed, it came after all 32 about once in 33 runs).
    const ids = Array.from({ length: 16 }, (_, i) => `ft-a${i}`);
    for (const id of ids) await call(id, A);
    // Retention took the jobs and the archive: the timeline's number lookup is what names the calls.
    const queue = new Queue(sinkQueueName('archive'), { connection: conn, prefix: env.QUEUE_PREFIX });
    await queue.obliterate({ force: true });
    await queue.close();
    for (const f of await filesUnder(join(dir, 'archive'))) if (ids.some((id) => f.includes(id))) await rm(f);

    const killed = await run([KILLER, A], { ...env, FORGET_KILL_AT: 'lookup-gone' });
    assert.equal(killed.signal, 'SIGKILL', `forget was killed (exit ${killed.code}): ${killed.stderr}`);
    const again = await run([BIN, 'forget', A], env);
    assert.equal(again.code, 0, again.stderr + again.stdout);
    assert.deepEqual(await tracesOf([...numberNeedles, ...ids]), [], 'the scan finds nothing');
  });

  test(
    'Redis frozen midway (SIGSTOP: answers nothing, closes nothing): forget stops with the receipt instead of hanging',
    { timeout: 60_000 },
    async () => {
      const ids = ['fz-a1', 'fz-a2'];
      for (const id of ids) await call(id, A);
      const out: string[] = [];
      let frozen = false;
      try {
        await assert.rejects(
          forgetCommand([A], { env, out: (l) => out.push(l), err: () => undefined }, () => loadConfig(env), {
            commandTimeoutMs: 2000,
            onStep: (step) => {
              if (step === 'key' && !frozen) {
                frozen = true;
                process.kill(redis.pid, 'SIGSTOP');
              }
            },
          }),
          (e: unknown) => {
            assert.ok(e instanceof CliFailure, String(e));
            assert.match(e.message, /Redis stopped answering midway/, e.message);
            return true;
          },
        );
      } finally {
        if (frozen) process.kill(redis.pid, 'SIGCONT');
      }
      assert.match(out[0] ?? '', /^erased: /, out.join('\n'));
      const again = await run([BIN, 'forget', A], env);
      assert.equal(again.code, 0, again.stderr + again.stdout);
      assert.deepEqual(await tracesOf([...numberNeedles, ...ids]), [], 'the scan finds nothing of the number');
    },
  );
});
