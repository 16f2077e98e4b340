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
//
// A command (`callsync dlq list`) that meets such a load says how far it is on stderr; a SIGTERM
// or Ctrl-C to a `callsync start` waiting for one ends it within seconds (before, both waited the
// whole load: the command in silence, the start deaf to the signal).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { cli } from './support/cli.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { alive } from './support/pids.js';
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
    /**
     * Slower (~3×): for the tests that signal a start while it still waits, 5 s into its wait (its
     * progress line). A start on a loaded machine (three test lanes and more on 2 cores) took so
     * long that the ~15 s load was over first: no wait left to signal.
     */
    let slower: string;
    const settings = (serverBin: string) => ({
      ...singleRedis('redis://127.0.0.1:6379'),
      local: { probe: null, dir: redisDir, serverBin },
    });

    /** Its data is all there, through the settings callsync connects with. */
    async function assertData(r: ResolvedRedis): Promise<void> {
      const client = new Redis(r.settings.url!, { password: r.settings.password, maxRetriesPerRequest: 1 });
      try {
        // Its own keys: a command run on it (dlq list) adds a few of callsync's.
        assert.equal((await client.keys('call:*')).length, KEYS);
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

    /** The server `starter` started, once it is loading (it answers -LOADING between reads). */
    async function loadingServerOf(starter: ChildProcess): Promise<{ pid: number; port: number }> {
      return waitFor(
        async () => {
          const named = await readFile(join(redisDir, 'server.json'), 'utf8').then(
            (t) => JSON.parse(t) as { pid: number; port: number },
            () => null,
          );
          return named && (await authPing(named.port, password)).includes('-LOADING') ? named : null;
        },
        { timeoutMs: 20_000, what: `the server of the starter (pid ${starter.pid}) to be loading` },
      );
    }

    /** The environment of a `callsync` command or start using the slow private Redis in `dir`/redis. */
    const env = (serverBin = slow): NodeJS.ProcessEnv => ({
      REDIS_URL: '',
      REDIS_LOCAL_PROBE: 'off',
      REDIS_SERVER_BIN: serverBin,
      DATA_DIR: dir,
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      QUEUE_PREFIX: uniquePrefix('loading'),
      PORT: '0',
      OPS_PORT: 'off',
      LOG_LEVEL: 'info',
    });

    /** What process `pid` took in the folder is given back: the start lock (when it held it), its user file. */
    async function assertReleased(pid: number): Promise<void> {
      const holder = await readFile(join(redisDir, 'start.lock'), 'utf8').catch(() => null);
      assert.notEqual(holder?.trim(), String(pid), 'the start lock it held is given back');
      const users = await readdir(join(redisDir, 'users')).catch(() => [] as string[]);
      assert.ok(!users.includes(String(pid)), `its user file is removed: ${users.join(', ')}`);
    }

    /** Until `child` logs how far a load it waits for is (5 s into its wait). */
    async function progressLine(child: CallsyncProcess): Promise<void> {
      const what = 'a progress line of callsync start';
      const found = () => child.lines.find((l) => String(l.msg).startsWith('private Redis loading its data: ')) ?? null;
      await bounded(waitFor(found, { timeoutMs: 20_000, what }), 25_000, what, child);
    }

    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'callsync-redis-loading-'));
      redisDir = join(dir, 'redis');
      slow = join(dir, 'slow-redis-server');
      await writeFile(slow, `#!/bin/sh\nexec redis-server "$@" --key-load-delay 1000\n`, { mode: 0o755 });
      slower = join(dir, 'slower-redis-server');
      await writeFile(slower, `#!/bin/sh\nexec redis-server "$@" --key-load-delay 3000\n`, { mode: 0o755 });
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
        const server = await loadingServerOf(starter);
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

    test('a command meeting the load says how far it is on stderr while it waits, and nothing else of the wait', async () => {
      const starter = spawnPrivateRedisStarter(redisDir, slow);
      try {
        const server = await loadingServerOf(starter);
        starter.kill('SIGKILL');
        await new Promise((ok) => starter.once('exit', ok));
        const since = Date.now();
        // In this process, as `callsync dlq list` runs it (stderr through CliIo.err).
        const r = await bounded(cli(['dlq', 'list'], env()), 40_000, 'dlq list to wait for the load');
        const took = Date.now() - since;
        assert.equal(r.code, 0, r.err);
        assert.ok(took > 5_000, `it waited for the load: ${took} ms`);
        const lines = r.err.split('\n').filter((l) => l !== '');
        // Before: nothing at all on stderr for the whole load.
        assert.ok(lines.length >= 1, `a progress line on stderr: ${JSON.stringify(r.err)}`);
        for (const line of lines)
          assert.match(
            line,
            /^callsync: the private Redis is loading its data: [\d.]+ KB of [\d.]+ KB; waiting for it$/,
          );
        assert.ok(!r.err.includes(password) && !r.out.includes(password), 'no password printed');
        // The command was the last user: its connection's end stops the server.
        await waitFor(() => !alive(server.pid) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
      } finally {
        if (starter.exitCode === null && starter.signalCode === null) starter.kill('SIGKILL');
        await killServersIn(redisDir);
      }
    });

    test('SIGTERM while `callsync start` waits for the load it started: exits 0 within seconds, the server stopped, the folder free', async () => {
      const child = startCallsyncProcess(env(slower));
      try {
        await progressLine(child);
        const server = (JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number }).pid;
        const since = Date.now();
        child.proc.kill('SIGTERM');
        // Before: the signal was kept until the load was over (~10 s more here, minutes for weeks of calls).
        const code = await bounded(child.exit, 5_000, 'callsync start to exit on SIGTERM during the load', child);
        const took = Date.now() - since;
        assert.equal(code, 0, child.stderr.join('\n'));
        assert.ok(took < 5_000, `exited ${took} ms after SIGTERM`);
        // Its stdout may be read after its exit is heard.
        await waitFor(() => child.lines.find((l) => l.msg === 'stopped while waiting for the private Redis') ?? null, {
          timeoutMs: 2_000,
          what: 'the line saying why it stopped',
        });
        // It started the server and was its only user: the last user stops it.
        assert.ok(!alive(server), 'the server it started is stopped');
        assert.deepEqual(await serversIn(redisDir), []);
        assert.ok(!existsSync(join(redisDir, 'server.json')));
        await assertReleased(child.proc.pid!);
        assert.ok(!existsSync(join(redisDir, 'start.lock')), 'no start lock left');
        // A new start works: the data is all there.
        const r = await bounded(resolveRedis(settings('redis-server'), { log: recorder().log }), 30_000, 'a new start');
        try {
          assert.equal(r.started, true);
          await assertData(r);
        } finally {
          await r.release();
        }
      } finally {
        if (child.proc.exitCode === null && child.proc.signalCode === null) child.proc.kill('SIGKILL');
        await killServersIn(redisDir);
      }
    });

    test('SIGTERM while `callsync start` waits for a load another started: exits 0 within seconds, the server loads on for the next', async () => {
      const starter = spawnPrivateRedisStarter(redisDir, slower);
      let child: CallsyncProcess | undefined;
      try {
        const server = await loadingServerOf(starter);
        starter.kill('SIGKILL');
        await new Promise((ok) => starter.once('exit', ok));
        // Started once the server loads: it finds it through server.json and waits for it.
        const waiting = startCallsyncProcess(env(slower));
        child = waiting;
        await progressLine(waiting);
        const since = Date.now();
        waiting.proc.kill('SIGTERM');
        const code = await bounded(waiting.exit, 5_000, 'callsync start to exit on SIGTERM during the load', waiting);
        const took = Date.now() - since;
        assert.equal(code, 0, waiting.stderr.join('\n'));
        assert.ok(took < 5_000, `exited ${took} ms after SIGTERM`);
        await waitFor(
          () => waiting.lines.find((l) => l.msg === 'stopped while waiting for the private Redis') ?? null,
          {
            timeoutMs: 2_000,
            what: 'the line saying why it stopped',
          },
        );
        // Not this process' server: it loads on, found by the next process through server.json.
        assert.ok(alive(server.pid), 'the server another process started loads on');
        assert.deepEqual(await serversIn(redisDir), [server.pid]);
        await assertReleased(waiting.proc.pid!);
        const r = await bounded(
          resolveRedis(settings(slower), { log: recorder().log }),
          90_000,
          'the load to be shared',
        );
        try {
          assert.equal(r.started, false);
          assert.match(r.where, new RegExp(`pid ${server.pid}\\)$`));
          await assertData(r);
        } finally {
          await r.release();
        }
        assert.deepEqual(await serversIn(redisDir), [], 'the last user stopped it');
      } finally {
        if (starter.exitCode === null && starter.signalCode === null) starter.kill('SIGKILL');
        if (child && child.proc.exitCode === null && child.proc.signalCode === null) child.proc.kill('SIGKILL');
        await killServersIn(redisDir);
      }
    });
  },
);
