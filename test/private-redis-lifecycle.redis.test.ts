// The private Redis (queues/private-redis.ts) when several processes meet it at awkward moments:
// starting at once on a fresh folder, a starter killed before its server answered, a second
// Ctrl-C, a hang-up. Whatever happens, one folder has at most one redis-server (two would append to
// the same AOF, each with data the other's clients never see), and none is left behind by a
// process that was told to stop. The servers of a folder are found by their working folder
// (/proc/<pid>/cwd: redis-server moves to its `dir`), so these run on Linux only.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { freePort } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { killServersIn, serversIn, spawnPrivateRedisStarter } from './support/private-redis.js';
import { resolveRedis } from '../queues/private-redis.js';
import { singleRedis } from '../queues/connection.js';
import { alive } from './support/pids.js';

const linux = process.platform === 'linux' && existsSync('/proc/self/cwd');
const quiet = { info: () => undefined, warn: () => undefined };
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

const settingsFor = (dir: string, serverBin?: string) => ({
  ...singleRedis('redis://127.0.0.1:6379'),
  local: { probe: null, dir, serverBin },
});

describe(
  'the private Redis of one folder, met by several processes',
  { skip: linux ? false : 'Linux only (/proc)' },
  () => {
    let dir: string;
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'callsync-redis-lifecycle-'));
    });
    after(async () => {
      for (const name of await readdir(dir).catch(() => [] as string[])) await killServersIn(join(dir, name));
      await rm(dir, { recursive: true, force: true });
    });

    test('starts at once on a fresh folder share one server and one password', async () => {
      // Before, each made a password of its own before the start lock: the one holding the lock
      // started a server with its password, the others could not log in to it and started their own.
      for (let round = 0; round < 5; round++) {
        const redisDir = join(dir, `fresh-${round}`);
        const resolved = await Promise.all([1, 2, 3, 4].map(() => resolveRedis(settingsFor(redisDir), { log: quiet })));
        try {
          const password = (await readFile(join(redisDir, 'password'), 'utf8')).trim();
          assert.deepEqual(
            resolved.map((r) => [r.where, r.settings.password]),
            resolved.map(() => [resolved[0]!.where, password]),
            `round ${round}: one server, the password in the file`,
          );
          assert.equal(resolved.filter((r) => r.started).length, 1, `round ${round}: one of them started it`);
          assert.equal((await serversIn(redisDir)).length, 1, `round ${round}: one redis-server on the folder`);
          assert.deepEqual(
            (await readdir(redisDir)).filter((n) => n.startsWith('password')),
            ['password'],
            'no password file of a process left beside it',
          );
        } finally {
          for (const r of resolved) await r.release();
          await killServersIn(redisDir);
        }
      }
    });

    test('a starter killed before its server answered: the next process waits for that server, not a second one beside it', async () => {
      const redisDir = join(dir, 'killed-starter');
      // A redis-server that takes a moment to come up, as one reading a long AOF does.
      const slow = join(dir, 'slow-redis-server');
      await writeFile(slow, `#!/bin/sh\nsleep 1.5\nexec redis-server "$@"\n`, { mode: 0o755 });
      const starter = spawnPrivateRedisStarter(redisDir, slow);
      try {
        // Its server is spawned (and sleeping) once the start lock is taken and redis.out is opened.
        await waitFor(() => existsSync(join(redisDir, 'redis.out')) || null, {
          timeoutMs: 20_000,
          what: 'the starter to spawn its server',
        });
        await new Promise((ok) => setTimeout(ok, 200));
        starter.kill('SIGKILL');
        await new Promise((ok) => starter.once('exit', ok));
        const r = await resolveRedis(settingsFor(redisDir, slow), { log: quiet });
        try {
          assert.equal(r.started, false, 'the server the killed process started is used');
          const servers = await serversIn(redisDir);
          assert.equal(servers.length, 1, `one redis-server on the folder, not ${servers.length}`);
          assert.match(r.where, new RegExp(`pid ${servers[0]}\\)$`));
        } finally {
          await r.release();
        }
        assert.deepEqual(await serversIn(redisDir), [], 'the last user stopped it');
      } finally {
        if (starter.exitCode === null) starter.kill('SIGKILL');
        await killServersIn(redisDir);
      }
    });
  },
);

describe(
  '`callsync start` told to stop by a second signal or a hang-up leaves no private Redis running',
  { skip: linux ? false : 'Linux only (/proc)' },
  () => {
    let dir: string;
    let env: NodeJS.ProcessEnv;
    const children: CallsyncProcess[] = [];
    before(async () => {
      dir = await mkdtemp(join(tmpdir(), 'callsync-redis-signals-'));
      env = {
        REDIS_URL: '',
        REDIS_LOCAL_PROBE: `127.0.0.1:${await freePort()}`,
        ARCHIVE_DIR: join(dir, 'archive'),
        SPOOL_DIR: join(dir, 'spool'),
        QUEUE_PREFIX: uniquePrefix('signals'),
        PORT: '0',
        OPS_PORT: 'off',
        LOG_LEVEL: 'info',
      };
    });
    after(async () => {
      for (const child of children) if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
      for (const name of await readdir(dir).catch(() => [] as string[])) await killServersIn(join(dir, name, 'redis'));
      await rm(dir, { recursive: true, force: true });
    });

    /** A `callsync start` with a data folder of its own, once it said "callsync started"; and its server's pid. */
    async function started(name: string): Promise<{ child: CallsyncProcess; server: number; redisDir: string }> {
      const child = startCallsyncProcess({ ...env, DATA_DIR: join(dir, name) });
      children.push(child);
      await waitFor(() => child.lines.find((l) => l.msg === 'callsync started') ?? null, {
        timeoutMs: 30_000,
        what: 'callsync started',
      });
      const redisDir = join(dir, name, 'redis');
      const server = (JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number }).pid;
      assert.ok(alive(server));
      return { child, server, redisDir };
    }

    test('Ctrl-C twice: exits 1 without waiting, and stops the private Redis it was the last user of', async () => {
      const { child, server, redisDir } = await started('twice');
      // The second signal arrives while the first's shutdown is under way.
      let second = false;
      createInterface({ input: child.proc.stdout! }).on('line', (line) => {
        if (!second && line.includes('shutting down')) {
          second = true;
          child.proc.kill('SIGINT');
        }
      });
      child.proc.kill('SIGINT');
      assert.equal(await bounded(child.exit, 30_000, 'callsync to exit', child), 1);
      assert.ok(child.lines.some((l) => l.msg === 'second signal: exiting without waiting'));
      // Before: the second signal exited at once and the redis-server ran on, with no callsync left.
      await waitFor(() => !alive(server) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
      assert.deepEqual(await serversIn(redisDir), []);
    });

    test('SIGHUP (the terminal closed): a graceful stop, exit 0, the private Redis stopped', async () => {
      const { child, server, redisDir } = await started('hangup');
      child.proc.kill('SIGHUP');
      // Before: killed by the signal (exit code null, signal SIGHUP), the redis-server left running.
      assert.equal(await bounded(child.exit, 30_000, 'callsync to exit', child), 0);
      assert.ok(child.lines.some((l) => l.msg === 'stopped'));
      await waitFor(() => !alive(server) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
      assert.deepEqual(await serversIn(redisDir), []);
    });

    test(
      'the terminal `npm start` runs in goes away: the shutdown is not cut short by its log lines (EIO), the private Redis stopped',
      { skip: spawnSync('script', ['--version']).status === 0 ? false : 'needs script (util-linux) for a terminal' },
      async () => {
        const dataDir = join(dir, 'terminal');
        const redisDir = join(dataDir, 'redis');
        const command = `exec ${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} start`;
        // A terminal of its own (a pseudo-terminal that `script` holds); killing `script` hangs it up.
        const terminal = spawn('script', ['-qfec', command, '/dev/null'], {
          cwd: dir,
          env: { ...process.env, ...env, DATA_DIR: dataDir },
          stdio: ['ignore', 'pipe', 'ignore'],
        });
        let output = '';
        terminal.stdout!.on('data', (d: Buffer) => (output += d.toString()));
        try {
          await waitFor(() => output.includes('"msg":"callsync started"') || null, {
            timeoutMs: 30_000,
            what: 'callsync started in the terminal',
          });
          const server = (JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number }).pid;
          const [callsync] = (await readdir(join(redisDir, 'users'))).map(Number);
          assert.ok(callsync && alive(callsync) && alive(server));
          terminal.kill('SIGKILL');
          // Before: SIGHUP ended it at once; handled, its first log line then hit the closed
          // terminal (EIO), and that error ended it in the middle of the shutdown.
          await waitFor(() => !alive(callsync) || null, { timeoutMs: 30_000, what: 'callsync to end' });
          await waitFor(() => !alive(server) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
          assert.ok(!existsSync(join(redisDir, 'server.json')), 'stopped by the last user, not left to die');
        } finally {
          if (terminal.exitCode === null) terminal.kill('SIGKILL');
        }
      },
    );
  },
);

describe('a DATA_DIR the private Redis cannot use: one line naming its folder', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-redis-folder-'));
    env = {
      ...process.env,
      REDIS_URL: '',
      REDIS_LOCAL_PROBE: `127.0.0.1:${await freePort()}`,
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      PORT: '0',
      OPS_PORT: 'off',
    };
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** `command` run to its end: its exit code and stderr. */
  const ended = (command: string, args: string[], childEnv: NodeJS.ProcessEnv) =>
    new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const child = spawn(command, args, { env: childEnv, stdio: ['ignore', 'ignore', 'pipe'] });
      let stderr = '';
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      child.once('exit', (code) => resolve({ code, stderr }));
    });

  test('DATA_DIR under a file: exit 1, the folder named', async () => {
    await writeFile(join(dir, 'a-file'), '');
    const r = await ended(process.execPath, [BIN, 'start'], { ...env, DATA_DIR: join(dir, 'a-file') });
    assert.equal(r.code, 1, r.stderr);
    assert.equal(
      r.stderr,
      `callsync start: start failed: the private Redis' folder ${join(dir, 'a-file', 'redis')} (DATA_DIR/redis): ENOTDIR: not a directory, mkdir '${join(dir, 'a-file', 'redis')}'\n`,
    );
  });

  // A start that fails after spawning redis-server, at the write of server.json (the last page of a
  // full disk; here a folder in the file's place): the server it spawned was left running, named
  // nowhere, and each new attempt added one more on the same folder.
  test(
    'server.json cannot be written after redis-server was spawned: exit 1, the folder named, no redis-server left running',
    { skip: linux ? false : 'finds the folder’s redis-servers through /proc' },
    async () => {
      const data = join(dir, 'no-server-file');
      const redisDir = join(data, 'redis');
      await mkdir(join(redisDir, 'server.json'), { recursive: true });
      try {
        const r = await bounded(
          ended(process.execPath, [BIN, 'start'], { ...env, DATA_DIR: data }),
          60_000,
          'callsync start to exit',
        );
        assert.equal(r.code, 1, r.stderr);
        assert.match(
          r.stderr,
          new RegExp(
            `^callsync start: start failed: the private Redis' folder ${redisDir} \\(DATA_DIR/redis\\): EISDIR`,
          ),
        );
        await waitFor(async () => (await serversIn(redisDir)).length === 0 || null, {
          timeoutMs: 3000,
          what: 'no redis-server left running in the folder',
          explain: async () => `still running: ${(await serversIn(redisDir)).join(', ')}`,
        });
      } finally {
        await killServersIn(redisDir);
      }
    },
  );

  test(
    'DATA_DIR on a read-only file system: start exits 1 and check-config 2, both naming the read-only folder (not ENOENT)',
    {
      skip:
        spawnSync('unshare', ['--mount', 'true']).status === 0
          ? false
          : 'unshare --mount is not permitted here (needs root)',
    },
    async () => {
      // Node's recursive mkdir said `ENOENT: no such file or directory, mkdir …` for a parent on a
      // read-only file system: the reader looked for a missing folder.
      const ro = join(dir, 'ro');
      await mkdir(ro, { recursive: true });
      const data = join(ro, 'data');
      const line = `the private Redis' folder ${join(data, 'redis')} (DATA_DIR/redis): cannot be created: ${ro} is on a read-only file system (EROFS)`;
      const inReadOnly = (command: string) =>
        `mount -t tmpfs -o ro tmpfs ${JSON.stringify(ro)} && exec ${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} ${command}`;
      const started = await ended('unshare', ['--mount', 'sh', '-c', inReadOnly('start')], { ...env, DATA_DIR: data });
      assert.equal(started.code, 1, started.stderr);
      assert.equal(started.stderr, `callsync start: start failed: ${line}\n`);
      // check-config lists it as a problem of the configuration (exit 2), not as a failure (exit 1).
      const out = spawnSync('unshare', ['--mount', 'sh', '-c', inReadOnly('check-config')], {
        env: { ...env, DATA_DIR: data },
        encoding: 'utf8',
      });
      assert.equal(out.status, 2, out.stdout + out.stderr);
      assert.equal(out.stdout.split('\n')[0], `problem: ${line}`, out.stdout + out.stderr);
    },
  );

  test(
    'a private Redis running, DATA_DIR made read-only afterwards: calls, call and check-config still read, saying they are no user of it',
    {
      skip:
        spawnSync('unshare', ['--mount', 'true']).status === 0
          ? false
          : 'unshare --mount is not permitted here (needs root)',
    },
    async () => {
      // Before: each failed writing its user file (`EROFS: read-only file system, open …/users/<pid>`).
      const data = join(dir, 'ro-after');
      const redisDir = join(data, 'redis');
      // This process starts it and uses it, as a running `callsync start` would.
      const used = await resolveRedis(settingsFor(redisDir), { log: quiet });
      try {
        const server = JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number };
        // DATA_DIR read-only for the command only (a bind mount of its own in a mount namespace: root
        // ignores file modes), the server outside still writing its folder.
        const q = JSON.stringify(data);
        const inReadOnly = (command: string) =>
          `mount --bind ${q} ${q} && mount -o remount,bind,ro ${q} && exec ${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} ${command}`;
        const run = (command: string) =>
          spawnSync('unshare', ['--mount', 'sh', '-c', inReadOnly(command)], {
            env: { ...env, DATA_DIR: data },
            encoding: 'utf8',
            timeout: 60_000,
          });
        const note = `callsync: note: ${join(redisDir, 'users')} is not writable (EROFS): this command uses the private Redis without registering as its user`;
        const calls = run('calls --since 1h');
        assert.equal(calls.status, 0, calls.stdout + calls.stderr);
        assert.equal(calls.stderr, `${note}\n`);
        const call = run('call ro-nothing-1');
        // Looked up in Redis: none by that id (exit 1, as anywhere).
        assert.equal(call.status, 1, call.stdout + call.stderr);
        assert.ok(call.stderr.startsWith(`${note}\nno call found for "ro-nothing-1" `), call.stderr);
        const check = run('check-config');
        assert.equal(check.status, 0, check.stdout + check.stderr);
        assert.equal(check.stderr, `${note}\n`, 'said once, though it looks for Redis twice');
        assert.match(check.stdout, /^redis in use: private .*: answers$/m);
        // Not users, they left nothing to clean up, and their end did not stop the server under its user.
        assert.ok(alive(server.pid), 'the private Redis still runs for its user');
        assert.deepEqual(await readdir(join(redisDir, 'users')), [String(process.pid)]);
      } finally {
        await used.release();
      }
    },
  );

  test(
    'DATA_DIR on a full disk: exit 1, the folder named (the error alone named no path)',
    {
      skip:
        spawnSync('unshare', ['--mount', 'true']).status === 0
          ? false
          : 'unshare --mount is not permitted here (needs root)',
    },
    async () => {
      const disk = join(dir, 'disk');
      // A small file system of its own (a mount namespace), filled up before callsync starts.
      const script = `set -e
mkdir -p ${JSON.stringify(disk)}
mount -t tmpfs -o size=64k tmpfs ${JSON.stringify(disk)}
dd if=/dev/zero of=${JSON.stringify(join(disk, 'fill'))} bs=1k count=128 2>/dev/null || true
mkdir -p ${JSON.stringify(join(disk, 'data', 'redis'))}
exec ${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} start`;
      const r = await ended('unshare', ['--mount', 'sh', '-c', script], { ...env, DATA_DIR: join(disk, 'data') });
      assert.equal(r.code, 1, r.stderr);
      assert.equal(
        r.stderr,
        `callsync start: start failed: the private Redis' folder ${join(disk, 'data', 'redis')} (DATA_DIR/redis): ENOSPC: no space left on device, write\n`,
      );
    },
  );

  // The disk full at the start lock (its pid did not fit): the empty lock was left behind, and the
  // next start, once space was freed, waited 15 s for it in silence (an empty lock names no holder
  // to find dead).
  test(
    'DATA_DIR full at the start lock: exit 1, and no start.lock left for the next start to wait out',
    {
      skip:
        spawnSync('unshare', ['--mount', 'true']).status === 0
          ? false
          : 'unshare --mount is not permitted here (needs root)',
    },
    async () => {
      const disk = join(dir, 'disk-lock');
      const redisDir = join(disk, 'data', 'redis');
      // One free page: the password takes it, the lock's pid finds none.
      const script = `mkdir -p ${JSON.stringify(disk)}
mount -t tmpfs -o size=256k tmpfs ${JSON.stringify(disk)} || exit 9
dd if=/dev/zero of=${JSON.stringify(join(disk, 'fill'))} bs=4k count=63 2>/dev/null
mkdir -p ${JSON.stringify(redisDir)}
${JSON.stringify(process.execPath)} ${JSON.stringify(BIN)} start
code=$?
echo "left: $(ls ${JSON.stringify(redisDir)} | tr '\\n' ' ')" >&2
exit $code`;
      const r = await bounded(
        ended('unshare', ['--mount', 'sh', '-c', script], { ...env, DATA_DIR: join(disk, 'data') }),
        60_000,
        'callsync start to exit',
      );
      assert.equal(r.code, 1, r.stderr);
      assert.match(r.stderr, /ENOSPC: no space left on device, write\n/);
      const left = /^left: (.*)$/m.exec(r.stderr)?.[1] ?? '';
      assert.match(left, /password/, r.stderr);
      assert.doesNotMatch(left, /start\.lock/, r.stderr);
    },
  );
});
