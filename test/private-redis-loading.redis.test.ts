// A private Redis whose AOF takes longer than the start's 10 s to load (weeks of calls): redis-server
// answers `-LOADING` until it has read it all. Before, a start gave no sign of it and nothing bounded
// the wait on a server that accepted connections but never answered. Now a load in progress is
// waited for (up to 10 min), its progress logged; a server that says nothing for 10 s is given up,
// the line naming that limit.
//
// Real redis-servers, slowed the way Redis' own test suite slows loading: a REDIS_SERVER_BIN wrapper
// adds `--key-load-delay <µs>` (a sleep per key, or per command of an AOF, read). The AOF holds
// KEYS keys written through a first, ordinary start of the private Redis. These run on Linux only:
// a folder's redis-servers are found by their working folder (/proc/<pid>/cwd).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { bounded } from './support/callsync-process.js';
import { waitFor } from './support/redis.js';
import { killServersIn, serversIn, spawnPrivateRedisStarter } from './support/private-redis.js';
import { resolveRedis, type ResolvedRedis } from '../queues/private-redis.js';
import { singleRedis } from '../queues/connection.js';

const linux = process.platform === 'linux' && existsSync('/proc/self/cwd');
/** ~1.2 ms each with a delay of 1000 µs: a load of ~15 s, longer than the start's 10 s. */
const KEYS = 13_000;

interface Line {
  msg: string;
  obj: Record<string, unknown>;
}

function recorder() {
  const lines: Line[] = [];
  const add = (obj: object, msg: string) => lines.push({ msg, obj: obj as Record<string, unknown> });
  return { lines, log: { info: add, warn: add } };
}

/** What a server says to AUTH and PING on a raw connection (both replies, as they came). */
async function authPing(port: number, password: string): Promise<string> {
  return new Promise((resolve) => {
    let said = '';
    const socket = connect(port, '127.0.0.1', () => socket.write(`AUTH ${password}\r\nPING\r\n`));
    socket.setTimeout(3000, () => socket.destroy());
    socket.on('data', (data) => {
      said += data.toString('latin1');
      if (said.split('\r\n').length > 2) socket.destroy();
    });
    socket.once('error', () => undefined);
    socket.once('close', () => resolve(said));
  });
}

describe(
  'a private Redis whose data takes longer than 10 s to load',
  { skip: linux ? false : 'Linux only (/proc)' },
  () => {
    let dir: string;
    let redisDir: string;
    let password: string;
    /** redis-server reading its data ~1 ms per key (per AOF command): KEYS take ~15 s. */
    let slow: string;
    const settings = (serverBin: string) => ({
      ...singleRedis('redis://127.0.0.1:6379'),
      local: { probe: null, dir: redisDir, serverBin },
    });

    /** Its data is all there, through the settings callsync connects with. */
    async function assertData(r: ResolvedRedis): Promise<void> {
      const client = new Redis(r.settings.url!, { password: r.settings.password, maxRetriesPerRequest: 1 });
      try {
        assert.equal(await client.dbsize(), KEYS);
        assert.equal(await client.get(`call:${KEYS - 1}`), `v${KEYS - 1}`);
      } finally {
        client.disconnect();
      }
    }

    /** The lines saying how far the load is: at least one, bytes rising, never the password. */
    function assertProgress(lines: Line[]): void {
      const progress = lines.filter((l) => l.msg.startsWith('private Redis loading its data: '));
      assert.ok(progress.length >= 1, `a progress line, in: ${JSON.stringify(lines.map((l) => l.msg))}`);
      for (const line of progress) assert.match(line.msg, /^private Redis loading its data: [\d.]+ KB of [\d.]+ KB$/);
      const loaded = progress.map((l) => Number(l.obj.loadedBytes));
      assert.ok(
        loaded.every((n, i) => n > 0 && n <= Number(progress[i]!.obj.totalBytes) && (i === 0 || n > loaded[i - 1]!)),
        `bytes loaded rise: ${loaded.join(', ')}`,
      );
      assert.ok(!JSON.stringify(lines).includes(password), 'no password logged');
    }

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'callsync-redis-loading-'));
      redisDir = join(dir, 'redis');
      slow = join(dir, 'slow-redis-server');
      await writeFile(slow, `#!/bin/sh\nexec redis-server "$@" --key-load-delay 1000\n`, { mode: 0o755 });
      // The AOF: KEYS keys through an ordinary start; the last user's stop (SHUTDOWN) flushes it.
      const r = await resolveRedis(settings('redis-server'), { log: recorder().log });
      const client = new Redis(r.settings.url!, { password: r.settings.password });
      try {
        for (let from = 0; from < KEYS; from += 1000) {
          const batch = client.pipeline();
          for (let i = from; i < Math.min(KEYS, from + 1000); i++) batch.set(`call:${i}`, `v${i}`);
          await batch.exec();
        }
      } finally {
        client.disconnect();
        await r.release();
      }
      password = (await readFile(join(redisDir, 'password'), 'utf8')).trim();
    });

    after(async () => {
      await killServersIn(redisDir);
      await rm(dir, { recursive: true, force: true });
    });

    // Its load reads ~0.5 s per AOF command and answers between 1024 of them: it answers nothing,
    // or -LOADING once as its load begins (a connection waiting just then), and then nothing.
    test('a redis-server that says nothing (no answer, no progress): given up after 10 s, the line names that limit', async () => {
      const silent = join(dir, 'silent-redis-server');
      await writeFile(silent, `#!/bin/sh\nexec redis-server "$@" --key-load-delay 500000\n`, { mode: 0o755 });
      const since = Date.now();
      const message = await bounded(
        resolveRedis(settings(silent), { log: recorder().log }).then(
          async (r) => {
            await r.release();
            return 'started';
          },
          (err: Error) => err.message,
        ),
        30_000,
        'the start to give up (before, a server that accepted the connection and never answered was waited for forever)',
      ).catch(async (err: unknown) => {
        // The start still waiting then ends (and lets go of the start lock the next tests take).
        await killServersIn(redisDir);
        throw err;
      });
      const took = Date.now() - since;
      assert.match(
        message,
        /^the private Redis \(.*silent-redis-server\) did not start in .* \((no answer within 10 s|its load made no progress for 10 s \([^)]*\))\)/,
      );
      assert.ok(took >= 10_000 && took < 20_000, `given up after the 10 s limit: ${took} ms`);
      assert.deepEqual(await serversIn(redisDir), [], 'the server it started is ended');
      assert.ok(!existsSync(join(redisDir, 'server.json')));
    });

    test('a load of ~15 s is waited for, its progress logged; the data is there', async () => {
      const { lines, log } = recorder();
      const since = Date.now();
      const r = await bounded(resolveRedis(settings(slow), { log }), 60_000, 'the private Redis to load and start');
      const took = Date.now() - since;
      try {
        assert.equal(r.started, true);
        assert.ok(took > 10_000, `the load took longer than the 10 s a silent server gets: ${took} ms`);
        await assertData(r);
        assertProgress(lines);
        assert.ok(
          lines.some((l) => l.msg.startsWith('no Redis configured or answering locally: started a private Redis')),
        );
      } finally {
        await r.release();
      }
      assert.deepEqual(await serversIn(redisDir), [], 'the last user stopped it');
    });

    test('a server loading that another process started (its starter killed): waited for past 10 s, not ended', async () => {
      const starter = spawnPrivateRedisStarter(redisDir, slow);
      try {
        // Killed once its server is loading (it answers -LOADING between reads): ~14 s of load are left.
        const server = await waitFor(
          async () => {
            const named = await readFile(join(redisDir, 'server.json'), 'utf8').then(
              (t) => JSON.parse(t) as { pid: number; port: number },
              () => null,
            );
            return named && (await authPing(named.port, password)).includes('-LOADING') ? named : null;
          },
          { timeoutMs: 20_000, what: 'the server of the starter to be loading' },
        );
        starter.kill('SIGKILL');
        await new Promise((ok) => starter.once('exit', ok));
        const { lines, log } = recorder();
        const since = Date.now();
        const r = await bounded(resolveRedis(settings(slow), { log }), 60_000, 'the loading server to be shared');
        const took = Date.now() - since;
        try {
          assert.equal(r.started, false, 'the server the killed process started is used');
          assert.match(r.where, new RegExp(`pid ${server.pid}\\)$`));
          assert.ok(took > 10_000, `waited past the 10 s a silent server gets: ${took} ms`);
          assert.deepEqual(await serversIn(redisDir), [server.pid], 'one redis-server on the folder');
          await assertData(r);
          assertProgress(lines);
        } finally {
          await r.release();
        }
        assert.deepEqual(await serversIn(redisDir), [], 'the last user stopped it');
      } finally {
        if (starter.exitCode === null && starter.signalCode === null) starter.kill('SIGKILL');
      }
    });
  },
);
