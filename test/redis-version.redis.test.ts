// A Redis older than callsync needs (6.2: XPENDING with IDLE, SMISMEMBER, and the private Redis'
// optional bind address `-::1`) — what `apt install redis-server` gives on Ubuntu 22.04 and
// Debian 11 (6.0.16) — is refused at start in one line, exit 2, like no Redis at all: a redis-server
// that would be the private one (`redis-server --version`), and a Redis callsync connects to (INFO).
// check-config says the same. Before, the private start failed with redis-server's complaint about
// a bind address, and a connected 6.0 failed commands job by job.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { bounded, startCallsyncProcess } from './support/callsync-process.js';
import { freePort } from './support/redis-server.js';
import { uniquePrefix } from './support/redis.js';

const run = promisify(execFile);
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

let dir: string;
let env: NodeJS.ProcessEnv;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'callsync-redis-version-'));
  env = {
    REDIS_URL: '',
    REDIS_LOCAL_PROBE: `127.0.0.1:${await freePort()}`,
    DATA_DIR: join(dir, 'data'),
    ARCHIVE_DIR: join(dir, 'archive'),
    SPOOL_DIR: join(dir, 'spool'),
    QUEUE_PREFIX: uniquePrefix('version'),
    PORT: '0',
    OPS_PORT: 'off',
  };
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** `callsync start` with `extra`: its exit code and its stderr lines. */
async function start(extra: NodeJS.ProcessEnv): Promise<{ code: number | null; stderr: string[] }> {
  const child = startCallsyncProcess({ ...env, ...extra });
  const code = await bounded(child.exit, 30_000, 'callsync to exit', child).finally(() => {
    if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
  });
  return { code, stderr: child.stderr.filter((l) => l.trim() !== '') };
}

async function checkConfig(extra: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string }> {
  return run(process.execPath, [BIN, 'check-config'], {
    env: { ...process.env, ...env, ...extra },
    timeout: 30_000,
  }).then(
    ({ stdout }) => ({ code: 0, stdout }),
    (err: { code: number; stdout: string }) => ({ code: err.code, stdout: err.stdout }),
  );
}

describe('the redis-server that would be the private Redis is 6.0', () => {
  let bin: string;
  let marker: string;
  before(async () => {
    bin = join(dir, 'redis-server-6.0');
    marker = join(dir, 'started');
    // What Debian's 6.0.16 prints for --version; started with a config file, it leaves a mark.
    await writeFile(
      bin,
      `#!/bin/sh
if [ "$1" = --version ]; then echo 'Redis server v=6.0.16 sha=00000000:0 malloc=jemalloc-5.2.1 bits=64 build=a3fdef44459b3ad6'; exit 0; fi
touch ${JSON.stringify(marker)}
exit 1
`,
      { mode: 0o755 },
    );
  });

  test('`callsync start` exits 2 with one line saying so, and does not start it', async () => {
    const { code, stderr } = await start({ REDIS_SERVER_BIN: bin });
    assert.equal(code, 2, stderr.join('\n'));
    assert.equal(stderr.length, 1, stderr.join('\n'));
    assert.match(
      stderr[0]!,
      /^callsync start: no Redis: REDIS_URL is unset, nothing answers at 127\.0\.0\.1:\d+, and \S+redis-server-6\.0 is Redis 6\.0\.16 and callsync needs 6\.2 or newer; install a newer redis-server .*REDIS_URL/,
    );
    assert.ok(!existsSync(marker), 'the old redis-server was not started');
  });

  test('check-config reports it as the problem (exit 2)', async () => {
    const { code, stdout } = await checkConfig({ REDIS_SERVER_BIN: bin });
    assert.equal(code, 2, stdout);
    assert.match(
      stdout,
      /^problem: no usable redis-server: \S+redis-server-6\.0 is Redis 6\.0\.16 and callsync needs 6\.2/m,
    );
  });
});

describe('the Redis callsync connects to is 6.0', () => {
  let server: Server;
  let url: string;
  const sockets = new Set<Socket>();
  before(async () => {
    // Speaks enough RESP for a client to connect: INFO says 6.0.16, QUIT closes, anything else is OK.
    server = createServer((socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
      socket.on('error', () => undefined);
      let pending = '';
      socket.on('data', (data) => {
        pending += data.toString('latin1');
        for (;;) {
          const command = nextCommand(pending);
          if (!command) break;
          pending = pending.slice(command.length);
          const name = command.args[0]?.toUpperCase();
          if (name === 'INFO') {
            const info = '# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n# Persistence\r\nloading:0\r\n';
            socket.write(`$${Buffer.byteLength(info)}\r\n${info}\r\n`);
          } else if (name === 'PING') socket.write('+PONG\r\n');
          else if (name === 'QUIT') socket.end('+OK\r\n');
          else socket.write('+OK\r\n');
        }
      });
    });
    const port = await freePort();
    await new Promise<void>((ok) => server.listen(port, '127.0.0.1', ok));
    url = `redis://127.0.0.1:${port}`;
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((ok) => server.close(ok));
  });

  test('`callsync start` exits 2 with one line naming it and its version', async () => {
    const { code, stderr } = await start({ REDIS_URL: url });
    assert.equal(code, 2, stderr.join('\n'));
    assert.deepEqual(stderr, [
      `callsync start: the Redis at ${url} is 6.0.16 and callsync needs 6.2 or newer (XPENDING with IDLE, SMISMEMBER): upgrade it, or set REDIS_URL to another`,
    ]);
  });

  test('check-config reports it as the problem (exit 2)', async () => {
    const { code, stdout } = await checkConfig({ REDIS_URL: url });
    assert.equal(code, 2, stdout);
    assert.match(
      stdout,
      new RegExp(`^problem: the Redis at ${url.replace(/[.:/]/g, '\\$&')} is 6\\.0\\.16 and callsync needs 6\\.2`, 'm'),
    );
  });
});

/** The first whole RESP array command at the start of `text`: its arguments and its length; null when incomplete. */
function nextCommand(text: string): { args: string[]; length: number } | null {
  const header = /^\*(\d+)\r\n/.exec(text);
  if (!header) {
    // An inline command (a line of words).
    const end = text.indexOf('\r\n');
    return end < 0 ? null : { args: text.slice(0, end).split(' '), length: end + 2 };
  }
  let at = header[0].length;
  const args: string[] = [];
  for (let i = 0; i < Number(header[1]); i++) {
    const bulk = /^\$(\d+)\r\n/.exec(text.slice(at));
    if (!bulk) return null;
    const start = at + bulk[0].length;
    const end = start + Number(bulk[1]);
    if (text.length < end + 2) return null;
    args.push(text.slice(start, end));
    at = end + 2;
  }
  return { args, length: at };
}
