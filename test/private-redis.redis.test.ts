// A fresh machine: no Redis configured and none answering at the local probe address. With
// redis-server on PATH, `callsync start` starts a private Redis (DATA_DIR/redis), archives a
// webhook through it, a second process and the CLI share it, the last process to stop stops it,
// and its data survives a restart (AOF). Without redis-server: exit 2 in one line naming how to
// get one. check-config says which Redis it would use. "Nothing answers at 127.0.0.1:6379" is made
// true with REDIS_LOCAL_PROBE (a real setting: where callsync looks for a running Redis) pointed at
// a free port: the shared test Redis on 6379 keeps running beside.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { webhookPayload } from './support/calls.js';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { freePort, startPrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { resolveRedis } from '../queues/private-redis.js';
import { singleRedis } from '../queues/connection.js';
import { alive } from './support/pids.js';

const run = promisify(execFile);
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

async function archivedJson(dir: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      if (e.isDirectory()) await walk(join(d, e.name));
      else if (e.name.endsWith('.json')) out.push(join(d, e.name));
    }
  };
  await walk(dir);
  return out;
}

/** The first reply line of one inline command on a raw connection (no client library, no AUTH). */
async function rawReply(port: number, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1', () => socket.write(`${command}\r\n`));
    socket.setTimeout(3000, () => socket.destroy(new Error('no reply')));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString('latin1').split('\r\n')[0]!);
    });
    socket.once('error', reject);
  });
}

/** Until the process logged `callsync started` (its signal handlers are set from then on). */
async function started(child: CallsyncProcess): Promise<void> {
  await waitFor(() => child.lines.find((l) => l.msg === 'callsync started') ?? null, {
    timeoutMs: 30_000,
    what: 'callsync started',
  });
}

async function stop(child: CallsyncProcess): Promise<number | null> {
  if (child.proc.exitCode !== null) return child.proc.exitCode;
  child.proc.kill('SIGTERM');
  return bounded(child.exit, 30_000, 'callsync to stop', child);
}

describe('no Redis configured, none on the probe address, redis-server on PATH', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const children: CallsyncProcess[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-private-redis-'));
    env = {
      // Unset (blank): nothing configured. The probe address: a free port nothing listens on.
      REDIS_URL: '',
      REDIS_LOCAL_PROBE: `127.0.0.1:${await freePort()}`,
      DATA_DIR: join(dir, 'data'),
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      QUEUE_PREFIX: uniquePrefix('private'),
      PORT: '0',
      OPS_PORT: 'off',
      WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
      LOG_LEVEL: 'info',
    };
  });

  after(async () => {
    for (const child of children) if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
    // A server left by a failed assertion: stopped by its pid (this test started it).
    const server = await readFile(join(dir, 'data', 'redis', 'server.json'), 'utf8').then(
      (t) => JSON.parse(t) as { pid: number },
      () => null,
    );
    if (server && alive(server.pid)) process.kill(server.pid, 'SIGKILL');
    await rm(dir, { recursive: true, force: true });
  });

  const start = (extra: NodeJS.ProcessEnv = {}) => {
    const child = startCallsyncProcess({ ...env, ...extra });
    children.push(child);
    return child;
  };
  const cli = (args: string[]) =>
    run(process.execPath, [BIN, ...args], { env: { ...process.env, ...env }, timeout: 30_000 });

  test('starts a private Redis, archives a webhook; a second process and the CLI share it; the last to stop stops it; data survives a restart', async () => {
    const redisDir = join(dir, 'data', 'redis');
    const first = start();
    const url = await bounded(first.url, 30_000, 'the first process to listen', first);
    await started(first);
    const startedLine = first.lines.find((l) =>
      String(l.msg).startsWith('no Redis configured or answering locally: started a private Redis'),
    );
    assert.ok(startedLine, 'one line says a private Redis was started');
    assert.ok(
      !JSON.stringify(first.lines).includes(await readFile(join(redisDir, 'password'), 'utf8').then((p) => p.trim())),
      'the password is never logged',
    );
    const server = JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number; port: number };
    assert.ok(alive(server.pid));
    const password = (await readFile(join(redisDir, 'password'), 'utf8')).trim();
    assert.match(password, /^[0-9a-f]{48}$/);

    // Loopback only, with a password, AOF everysec, noeviction.
    const admin = new Redis({ host: '127.0.0.1', port: server.port, password, maxRetriesPerRequest: 1 });
    try {
      const pairs = (await admin.call(
        'CONFIG',
        'GET',
        'bind',
        'appendonly',
        'appendfsync',
        'maxmemory-policy',
        'dir',
      )) as string[];
      const conf: Record<string, string> = {};
      for (let i = 0; i + 1 < pairs.length; i += 2) conf[pairs[i]!] = pairs[i + 1]!;
      assert.match(conf.bind!, /^127\.0\.0\.1\b/);
      assert.equal(conf.appendonly, 'yes');
      assert.equal(conf.appendfsync, 'everysec');
      assert.equal(conf['maxmemory-policy'], 'noeviction');
      assert.equal(conf.dir, redisDir);
    } finally {
      admin.disconnect();
    }
    assert.match(await rawReply(server.port, 'GET x'), /^-NOAUTH/, 'nothing without the password');

    // A webhook is archived through it.
    const res = await fetch(`${url}/webhooks/ai-agent/agent-1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(webhookPayload('private-1')),
    });
    assert.equal(res.status, 202, await res.text());
    const files = await waitFor(
      async () => ((await archivedJson(join(dir, 'archive'))).length > 0 ? archivedJson(join(dir, 'archive')) : null),
      { timeoutMs: 20_000, what: 'the archived call' },
    );
    assert.match(files[0]!, /private-1/);

    // A second process (a worker) shares it: no second server, same pid and port.
    const second = start({ CALLSYNC_ROLE: 'worker', PORT: '0' });
    await started(second);
    assert.ok(
      second.lines.some((l) => String(l.msg).includes('sharing the private Redis another callsync process started')),
      'the second process says it shares',
    );
    assert.ok(!second.lines.some((l) => String(l.msg).includes('started a private Redis')));
    assert.deepEqual(JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')), server);

    // The CLI shares it too, and check-config says which Redis it is.
    const check = await cli(['check-config']);
    assert.match(
      check.stdout,
      new RegExp(
        `redis in use: private ${redisDir.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')} \\(127\\.0\\.0\\.1:${server.port}, pid ${server.pid}\\): answers`,
      ),
    );
    // The `redis:` line names that one too, not the probe address or 127.0.0.1:6379 (nothing configured).
    assert.match(
      check.stdout,
      new RegExp(
        `^redis: +redis://127\\.0\\.0\\.1:${server.port} \\(none configured: the private Redis in .*\\) +prefix "`,
        'm',
      ),
    );
    assert.doesNotMatch(check.stdout, /^redis: .*:6379/m);
    const asJson = JSON.parse((await cli(['check-config', '--json'])).stdout) as {
      redis: { url: string; where: string };
    };
    assert.equal(asJson.redis.url, `redis://127.0.0.1:${server.port}`);
    assert.match(asJson.redis.where, /none configured: the private Redis in /);
    const dlq = await cli(['dlq', 'list']);
    assert.doesNotMatch(dlq.stderr, /cannot reach|no Redis/);

    // The starter stops while the worker still uses it: the server keeps running.
    assert.equal(await stop(first), 0);
    assert.ok(alive(server.pid), 'still used by the second process: not stopped');
    // The last user stops: the server stops with it.
    assert.equal(await stop(second), 0);
    await waitFor(() => !alive(server.pid) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
    assert.ok(!existsSync(join(redisDir, 'server.json')), 'its pid/port file is removed');

    // Started again: a new server on the same folder has the data (AOF).
    const third = start();
    const url3 = await bounded(third.url, 30_000, 'the restarted process to listen', third);
    await started(third);
    const again = JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number; port: number };
    assert.notEqual(again.pid, server.pid);
    const reader = new Redis({ host: '127.0.0.1', port: again.port, password, maxRetriesPerRequest: 1 });
    try {
      const keys = await reader.keys(`${env.QUEUE_PREFIX}*`);
      assert.ok(keys.length > 0, 'the keys written before the restart are there');
    } finally {
      reader.disconnect();
    }
    // The same call again is a duplicate: the dedupe key survived.
    const dup = await fetch(`${url3}/webhooks/ai-agent/agent-1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(webhookPayload('private-1')),
    });
    assert.equal(dup.status, 202);
    assert.equal(((await dup.json()) as { duplicate: boolean }).duplicate, true);
    assert.equal(await stop(third), 0);
    await waitFor(() => !alive(again.pid) || null, { timeoutMs: 10_000, what: 'the private Redis to stop again' });
  });

  test('a SIGTERM while it starts (after the private Redis, before "callsync started") stops it cleanly and stops the private Redis', async () => {
    const redisDir = join(dir, 'data', 'redis');
    const child = start();
    // Signalled the moment the private Redis' line arrives (a log poll would miss the window on a
    // fast machine: the roles start within a few hundred milliseconds).
    let startOverWhenSignalled: boolean | undefined;
    let serverPid: number | undefined;
    createInterface({ input: child.proc.stdout! }).on('line', (line) => {
      if (startOverWhenSignalled !== undefined || !line.includes('no Redis configured or answering locally: started'))
        return;
      startOverWhenSignalled = child.lines.some((l) => l.msg === 'callsync started');
      child.proc.kill('SIGTERM');
      serverPid = (JSON.parse(readFileSync(join(redisDir, 'server.json'), 'utf8')) as { pid: number }).pid;
    });
    try {
      // Before: no handler yet, the signal's default action ended the process (exit by signal) and
      // left the redis-server it had just started running.
      assert.equal(await bounded(child.exit, 30_000, 'callsync to stop', child), 0);
      assert.equal(startOverWhenSignalled, false, 'signalled before the start was over');
      assert.ok(serverPid !== undefined, 'the private Redis was running when signalled');
      await waitFor(() => !alive(serverPid!) || null, { timeoutMs: 10_000, what: 'the private Redis to stop' });
    } finally {
      if (child.proc.exitCode === null) {
        child.proc.kill('SIGTERM');
        await bounded(child.exit, 30_000, 'callsync to stop after the test', child).catch(() => undefined);
      }
    }
  });

  // Some other program's Redis with a password on the probe address (a system Redis with
  // requirepass): before, callsync took it, every command failed NOAUTH, and it ran on answering
  // 503 (or spooling) for ever. Now it is passed over with a line saying why and how to use it.
  test('a Redis that asks for a password at the probe address: not used, a private Redis instead, and a line says so', async () => {
    const other = await startPrivateRedis({ appendonly: false });
    const admin = new Redis(other.url, { maxRetriesPerRequest: 1 });
    try {
      await admin.call('CONFIG', 'SET', 'requirepass', 'someone-elses-secret');
      admin.disconnect();
      const probe = { REDIS_LOCAL_PROBE: `127.0.0.1:${other.port}` };
      const child = start(probe);
      const url = await bounded(child.url, 30_000, 'callsync to listen', child);
      await started(child);
      const warned = child.lines.find((l) => String(l.msg).includes('asks for a password'));
      assert.ok(warned, JSON.stringify(child.lines.map((l) => l.msg)));
      assert.equal(
        warned.msg,
        `no Redis configured (REDIS_URL unset): the Redis at 127.0.0.1:${other.port} asks for a password, so callsync does not use it (a private Redis instead); to use it, set REDIS_URL with its password`,
      );
      assert.ok(child.lines.some((l) => String(l.msg).startsWith('no Redis configured or answering locally: started')));
      const res = await fetch(`${url}/webhooks/ai-agent/agent-1`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(webhookPayload('password-probe-1')),
      });
      assert.equal(res.status, 202, await res.text());
      await waitFor(
        async () => (await archivedJson(join(dir, 'archive'))).some((f) => f.includes('password-probe-1')) || null,
        { timeoutMs: 20_000, what: 'the call archived through the private Redis' },
      );
      // A command finds the same private Redis.
      const check = await run(process.execPath, [BIN, 'check-config'], {
        env: { ...process.env, ...env, ...probe },
        timeout: 30_000,
      });
      assert.match(check.stdout, /redis in use: private /);
      assert.equal(await stop(child), 0);
    } finally {
      admin.disconnect();
      await other.destroy();
    }
  });

  test('check-config without a running Redis: the private one is named (not running, started by `callsync start`)', async () => {
    const check = await cli(['check-config']);
    assert.match(check.stdout, /^configuration OK/);
    assert.match(check.stdout, /redis in use: private, not running \(`callsync start` starts it in /);
    assert.match(check.stdout, /^redis: +none configured: the private Redis in .*, not running +prefix "/m);
    // Where each sink comes from: here the local archive, an environment shortcut (ARCHIVE_DIR).
    assert.match(check.stdout, /^sinks \(1\): from the config file: none; from environment shortcuts: archive$/m);
  });
});

describe('no Redis configured, none answering, no redis-server', () => {
  let dir: string;
  let env: NodeJS.ProcessEnv;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-no-redis-'));
    // A PATH with node only: redis-server is not on it.
    await symlink(process.execPath, join(dir, 'node'));
    env = {
      ...process.env,
      PATH: dir,
      REDIS_URL: '',
      REDIS_LOCAL_PROBE: `127.0.0.1:${await freePort()}`,
      DATA_DIR: join(dir, 'data'),
      SPOOL_DIR: join(dir, 'spool'),
      ARCHIVE_DIR: join(dir, 'archive'),
    };
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  // It exits at once (no retry loop waiting for a Redis that will not come); the bound is generous
  // because a loaded CI machine takes seconds just to start node: speed is not what this asserts.
  test('`callsync start` exits 2 at once with one line naming how to get Redis', async () => {
    const child = startCallsyncProcess(env);
    const code = await bounded(child.exit, 30_000, 'callsync to exit', child).finally(() => {
      if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
    });
    assert.equal(code, 2);
    const lines = child.stderr.filter((l) => l.trim() !== '');
    assert.equal(lines.length, 1, lines.join('\n'));
    assert.match(
      lines[0]!,
      /^callsync start: no Redis: REDIS_URL is unset, nothing answers at 127\.0\.0\.1:\d+ and redis-server is not on PATH; /,
    );
    for (const way of ['apt install redis-server', 'brew install redis', 'docker run', 'redis:7', 'REDIS_URL'])
      assert.ok(lines[0]!.includes(way), way);
  });

  test('check-config reports it as a problem (exit 2)', async () => {
    await assert.rejects(
      run(process.execPath, [BIN, 'check-config'], { env, timeout: 30_000 }),
      (err: { code: number; stdout: string }) => {
        assert.equal(err.code, 2);
        assert.match(err.stdout, /^problem: no Redis: .*apt install redis-server/);
        assert.doesNotMatch(err.stdout, /configuration OK/);
        return true;
      },
    );
  });
});

describe('a private Redis that does not start: the one line says why, from this start only', () => {
  let dir: string;
  const log = { info: () => undefined, warn: () => undefined };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-redis-fails-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  /** A stand-in redis-server (REDIS_SERVER_BIN) running `body`; `$1` is the redis.conf it is given. */
  async function standIn(name: string, body: string): Promise<string> {
    const file = join(dir, name);
    await writeFile(file, `#!/bin/sh\n${body}\n`, { mode: 0o755 });
    return file;
  }

  /** The private Redis of a fresh folder whose redis.log has an earlier run's clean shutdown. */
  async function resolveWith(serverBin: string): Promise<unknown> {
    const redisDir = await mkdtemp(join(dir, 'data-'));
    await writeFile(
      join(redisDir, 'redis.log'),
      '7:M 01 Jan 2025 10:00:00.000 # User requested shutdown...\n7:M 01 Jan 2025 10:00:00.100 # Redis is now ready to exit, bye bye...\n',
    );
    const settings = { ...singleRedis('redis://127.0.0.1:6379'), local: { probe: null, dir: redisDir, serverBin } };
    return resolveRedis(settings, { log }).then(
      async (r) => {
        await r.release();
        assert.fail('expected the start to fail');
      },
      (err: Error) => err.message,
    );
  }

  test("a config file redis-server refuses on stderr: its reason, not the log's earlier lines", async () => {
    const bin = await standIn(
      'refuses-config',
      `printf '\\n*** FATAL CONFIG FILE ERROR (Redis 7.0.15) ***\\n' >&2
printf "Reading the configuration file, at line 2\\n>>> 'bind \\"127.0.0.1 -::1\\"'\\nInvalid bind address\\n" >&2
exit 1`,
    );
    const message = await resolveWith(bin);
    assert.match(
      String(message),
      /^the private Redis \(.*refuses-config\) did not start in .* \(exited with code 1\): \*\*\* FATAL CONFIG FILE ERROR \(Redis 7\.0\.15\) \*\*\* Reading the configuration file, at line 2 >>> 'bind "127\.0\.0\.1 -::1"' Invalid bind address$/,
    );
    assert.doesNotMatch(String(message), /bye bye|shutdown/);
  });

  test('a start that fails after opening its log: the lines this start wrote, and only those', async () => {
    const bin = await standIn(
      'fails-listening',
      `log=$(sed -n 's/^logfile "\\(.*\\)"$/\\1/p' "$1")
echo '9:M 02 Jan 2025 11:00:00.000 # Warning: Could not create server TCP listening socket 127.0.0.1:1: bind: Address already in use' >> "$log"
echo '9:M 02 Jan 2025 11:00:00.001 # Failed listening on port 1 (tcp), aborting.' >> "$log"
exit 1`,
    );
    const message = String(await resolveWith(bin));
    assert.match(
      message,
      /\(exited with code 1\): .*Address already in use .*Failed listening on port 1 \(tcp\), aborting\.$/,
    );
    assert.doesNotMatch(message, /bye bye|shutdown/);
  });

  test('a long stderr: the line keeps its end (the reason), bounded', async () => {
    const bin = await standIn(
      'chatty',
      `i=0; while [ $i -lt 2000 ]; do echo "noise line $i" >&2; i=$((i+1)); done; echo 'the real reason' >&2; exit 3`,
    );
    const message = String(await resolveWith(bin));
    assert.match(message, /\(exited with code 3\): ….*noise line 1999 the real reason$/);
    assert.ok(message.length < 1000, `bounded: ${message.length} characters`);
  });
});

describe('a private Redis that starts: nothing of it keeps the process that started it alive', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-redis-detached-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('a process that started it (and never released it) ends on its own; the server keeps running', async () => {
    const redisDir = join(dir, 'redis');
    // The private Redis started as callsync does; the process then has nothing left to do.
    const script = `
      import { resolveRedis } from ${JSON.stringify(new URL('../queues/private-redis.ts', import.meta.url).pathname)};
      const r = await resolveRedis(
        { url: 'redis://127.0.0.1:6379', clusterNodes: [], sentinels: [], tls: false, prefix: 'x', local: { probe: null, dir: ${JSON.stringify(redisDir)} } },
        { log: { info: () => {}, warn: () => {} } },
      );
      console.log(r.where);
    `;
    const started = Date.now();
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 30_000,
    });
    assert.match(stdout, /^private .* \(127\.0\.0\.1:\d+, pid \d+\)$/m);
    assert.ok(Date.now() - started < 20_000);
    const server = JSON.parse(await readFile(join(redisDir, 'server.json'), 'utf8')) as { pid: number; port: number };
    try {
      assert.ok(alive(server.pid), 'the server outlives the process that started it');
      assert.equal(await rawReply(server.port, 'PING'), '-NOAUTH Authentication required.');
    } finally {
      process.kill(server.pid, 'SIGKILL');
    }
  });
});

describe("the private Redis' folder is its user's only", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-redis-mode-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('a folder that existed already (mkdir -p data/redis, umask 022) is made 0700: the AOF holds every call', async () => {
    const redisDir = join(dir, 'data', 'redis');
    const umask = process.umask(0o022);
    try {
      await mkdir(redisDir, { recursive: true });
      assert.equal((await stat(redisDir)).mode & 0o777, 0o755);
      const settings = { ...singleRedis('redis://127.0.0.1:6379'), local: { probe: null, dir: redisDir } };
      const r = await resolveRedis(settings, { log: { info: () => undefined, warn: () => undefined } });
      try {
        const modes = async (names: string[]) =>
          Object.fromEntries(
            await Promise.all(
              names.map(async (n) => [n, ((await stat(join(redisDir, n))).mode & 0o777).toString(8)] as const),
            ),
          );
        // The append-only files Redis writes (0644 by its own umask) are reached through the folder only.
        assert.deepEqual(await modes(['.', 'password', 'redis.conf']), {
          '.': '700',
          password: '600',
          'redis.conf': '600',
        });
      } finally {
        await r.release();
      }
    } finally {
      process.umask(umask);
    }
  });
});
