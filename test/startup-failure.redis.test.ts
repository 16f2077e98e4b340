// A start that fails half-way closes what it had opened: the worker role's queues and workers, the
// fan-out and the Redis connections are all closed when the ingress cannot listen, so the process
// ends by itself instead of hanging on open sockets (real Redis, a real taken port).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { singleRedis } from '../queues/connection.js';
import { redisKeys } from '../queues/keys.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { sampleCall } from './support/calls.js';
import { bounded, startCallsyncProcess } from './support/callsync-process.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { freePort, startPrivateRedis } from './support/redis-server.js';

const CHILD = fileURLToPath(new URL('./support/failed-start-process.ts', import.meta.url));

test('a start that fails at listen closes every connection it opened: the process exits by itself', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as AddressInfo).port;
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
      env: { ...process.env, TAKEN_PORT: String(port) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    // Generous: tsx start-up plus BullMQ's bounded waits; a process that keeps a socket open never ends.
    const exited = await new Promise<number | null | 'hung'>((resolve) => {
      const timer = setTimeout(() => resolve('hung'), 30_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    if (exited === 'hung') child.kill('SIGKILL');
    assert.match(out, /start failed: .*EADDRINUSE/, out);
    assert.equal(
      exited,
      0,
      `the process should end by itself once the failed start closed everything; it ${exited === 'hung' ? 'hung' : `exited ${exited}`}\n${out}`,
    );
  } finally {
    blocker.close();
  }
});

// `callsync start` as a real process (bin/callsync.js from the source): a start that cannot work
// ends by itself, with one line on stderr and no stack trace — exit 2 for a configuration problem,
// 1 for anything else — so that a container restarts instead of hanging.
describe('callsync start exits when it cannot start', () => {
  const BIN = fileURLToPath(new URL('../bin/callsync.js', import.meta.url));
  const prefix = uniquePrefix('startfail');
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-startfail-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
    await cleanupPrefix(prefix);
  });

  /** Runs `callsync start`; resolves with its exit code and output, or 'hung' after a generous bound. */
  async function start(
    env: Record<string, string>,
  ): Promise<{ code: number | null | 'hung'; stderr: string; stdout: string }> {
    const child = spawn(process.execPath, [BIN, 'start'], {
      env: {
        ...process.env,
        CALLSYNC_FROM_SOURCE: '1',
        REDIS_URL,
        QUEUE_PREFIX: prefix,
        HOST: '127.0.0.1',
        PORT: '0',
        ARCHIVE_DIR: join(dir, 'archive'),
        SPOOL_ENABLED: 'false',
        LOG_LEVEL: 'warn',
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // Not a timing assertion: a process that hangs never ends, one that works ends in a few seconds.
    const code = await new Promise<number | null | 'hung'>((resolve) => {
      const timer = setTimeout(() => resolve('hung'), 20_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    if (code === 'hung') child.kill('SIGKILL');
    return { code, stderr, stdout };
  }

  function assertOneLine(stderr: string, pattern: RegExp): void {
    const lines = stderr.split('\n').filter((l) => l.trim() !== '');
    assert.equal(lines.length, 1, `exactly one line on stderr:\n${stderr}`);
    assert.match(lines[0]!, pattern);
    assert.doesNotMatch(stderr, /^\s+at /m, 'no stack trace');
  }

  async function configFile(name: string, yaml: string): Promise<string> {
    const file = join(dir, name);
    await writeFile(file, yaml);
    return file;
  }

  test('a hubspot sink without a token: exit 2, the problem named', async () => {
    const file = await configFile('hubspot.yaml', 'sinks:\n  crm: { type: hubspot }\nroutes:\n  - to: crm\n');
    const r = await start({ CALLSYNC_CONFIG: file });
    assert.equal(r.code, 2, `exit code; stderr:\n${r.stderr}`);
    assertOneLine(
      r.stderr,
      /^callsync start: invalid configuration \(1 problem\): sinks\.crm \(hubspot\): no access token: set HUBSPOT_ACCESS_TOKEN/,
    );
  });

  test('a hubspot token with a space inside: exit 2 before listening, the sink named (not exit 1 after)', async () => {
    const file = await configFile('hubspot-spaced.yaml', 'sinks:\n  crm: { type: hubspot }\nroutes:\n  - to: crm\n');
    const r = await start({ CALLSYNC_CONFIG: file, HUBSPOT_ACCESS_TOKEN: 'pat-na1 abc' });
    assert.equal(r.code, 2, `exit code; stderr:\n${r.stderr}`);
    assertOneLine(
      r.stderr,
      /^callsync start: invalid configuration \(1 problem\): sinks\.crm \(hubspot\): the access token \(HUBSPOT_ACCESS_TOKEN\) contains spaces, line breaks or non-ASCII characters; copy it again$/,
    );
    assert.doesNotMatch(r.stdout, /listening/);
  });

  test('a Redis that refuses the password, or wants one: exit 2, the cause named, the password not echoed', async () => {
    // Before: "callsync started", then WRONGPASS for every command until stopped, and /readyz said
    // only "Redis not reached since start".
    const locked = await startPrivateRedis({ appendonly: false });
    try {
      const admin = new Redis(locked.url);
      await admin.config('SET', 'requirepass', 'the-right-one');
      admin.disconnect();
      const where = locked.url.replace('redis://', '');
      const wrong = await start({ REDIS_URL: `redis://:wr0ng-s3cr3t@${where}` });
      assert.equal(wrong.code, 2, `exit code; stderr:\n${wrong.stderr}`);
      assertOneLine(
        wrong.stderr,
        /^callsync start: Redis at redis:\/\/:\*\*\*@127\.0\.0\.1:\d+\/? refused the password \(WRONGPASS\): check REDIS_URL or REDIS_PASSWORD$/,
      );
      assert.doesNotMatch(wrong.stderr + wrong.stdout, /s3cr3t/);
      assert.doesNotMatch(wrong.stdout, /callsync started/);
      const none = await start({ REDIS_URL: locked.url });
      assert.equal(none.code, 2, `exit code; stderr:\n${none.stderr}`);
      assertOneLine(
        none.stderr,
        /^callsync start: Redis at redis:\/\/127\.0\.0\.1:\d+\/? wants a password \(NOAUTH\): set it in REDIS_URL or REDIS_PASSWORD$/,
      );
    } finally {
      await locked.destroy();
    }
  });

  test('a REDIS_URL whose password has an unescaped "/": exit 2 naming REDIS_URL, the password not echoed (not exit 1 "Invalid URL")', async () => {
    const r = await start({ REDIS_URL: 'redis://:pass/word-s3cr3t@127.0.0.1:6379' });
    assert.equal(r.code, 2, `exit code; stderr:\n${r.stderr}`);
    assertOneLine(r.stderr, /^callsync start: invalid configuration \(1 problem\): REDIS_URL: not a valid URL/);
    assert.doesNotMatch(r.stderr + r.stdout, /s3cr3t/);
  });

  test('an sms sink without TELEPHONY_API_URL: exit 2, every problem on the one line', async () => {
    const file = await configFile(
      'sms.yaml',
      'sinks:\n  texts: { type: sms, message: "Sorry we missed you" }\nroutes:\n  - { when: { direction: inbound }, to: texts }\n',
    );
    const r = await start({ CALLSYNC_CONFIG: file, TELEPHONY_SMS_ID: 's0' });
    assert.equal(r.code, 2, `exit code; stderr:\n${r.stderr}`);
    assertOneLine(
      r.stderr,
      /^callsync start: invalid configuration \(2 problems\): .*sinks\.texts \(sms\): needs the platform API to send: set TELEPHONY_API_URL.*; routes\[0\]\.when\.direction: "inbound" — use in or out/,
    );
  });

  /**
   * A call waiting in the inbound log, as an earlier ingress left it; `left()` tells whether it is
   * still there, untouched: no fan-out read it (its delivery count stays 0).
   */
  async function waitingCall(callId: string): Promise<{ left(): Promise<boolean>; close(): void }> {
    const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    const keys = redisKeys(singleRedis(REDIS_URL, prefix));
    const inbound = new InboundLog(redis, keys);
    await new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 }).accept(sampleCall(callId));
    const before = await inbound.length();
    return {
      async left() {
        const pending = await inbound.pending().catch(() => 0);
        return (await inbound.length()) === before && pending === 0;
      },
      close: () => redis.disconnect(),
    };
  }

  // A start that fails on a taken port fails before any worker takes a job: a job taken and then
  // dropped by the failed start would wait out its lock, and an SMS in flight would be dead-lettered
  // as "outcome unknown" (before, the workers ran — and fanned out — until the ops server failed).
  test('the ops port of a worker taken: exit 1 before any worker starts; a call waiting in the log stays for the next start', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const call = await waitingCall('startfail-ops-port');
    try {
      const r = await start({
        CALLSYNC_ROLE: 'worker',
        OPS_PORT: String((blocker.address() as AddressInfo).port),
        LOG_LEVEL: 'info',
      });
      assert.equal(r.code, 1, `exit code; stderr:\n${r.stderr}`);
      // The setting to change is named (before: only Node's "listen EADDRINUSE: … 127.0.0.1:N").
      assertOneLine(
        r.stderr,
        /^callsync start: start failed: OPS_PORT=\d+ is taken: another process listens there \(stop it, or set OPS_PORT to a free port\) \(listen EADDRINUSE: address already in use 127\.0\.0\.1:\d+\)$/,
      );
      assert.doesNotMatch(r.stdout, /workers started/, 'no worker started');
      assert.ok(await call.left(), 'the waiting call was not read by a fan-out');
    } finally {
      call.close();
      blocker.close();
    }
  });

  test('every role, the ingress port taken: exit 1 before any worker starts', async () => {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const call = await waitingCall('startfail-ingress-port');
    try {
      const r = await start({ PORT: String((blocker.address() as AddressInfo).port), LOG_LEVEL: 'info' });
      assert.equal(r.code, 1, `exit code; stderr:\n${r.stderr}`);
      assertOneLine(
        r.stderr,
        /^callsync start: start failed: PORT=\d+ is taken: .*set PORT to a free port.*EADDRINUSE/,
      );
      assert.doesNotMatch(r.stdout, /workers started/, 'no worker started');
      assert.ok(await call.left(), 'the waiting call was not read by a fan-out');
    } finally {
      call.close();
      blocker.close();
    }
  });

  test('HOST an address this machine does not have: exit 1, HOST named', async () => {
    // 192.0.2.1: TEST-NET-1 (RFC 5737), never a local address.
    const r = await start({ HOST: '192.0.2.1', CALLSYNC_ROLE: 'ingress' });
    assert.equal(r.code, 1, `exit code; stderr:\n${r.stderr}`);
    assertOneLine(
      r.stderr,
      /^callsync start: start failed: HOST=192\.0\.2\.1 is no address of this machine \(0\.0\.0\.0 listens on all\) \(listen EADDRNOTAVAIL: .*\)$/,
    );
  });
});

// The ops port is bound before the roles start (a taken port fails the start early): until they
// run, its /readyz must not say ready — a load balancer or an orchestrator would route to, or
// count on, a worker that is not there yet.
test('the ops server answers /readyz 503 "starting" until the roles run', async () => {
  const opsPort = await freePort();
  const child = startCallsyncProcess({
    CALLSYNC_FROM_SOURCE: '1',
    CALLSYNC_ROLE: 'worker',
    OPS_PORT: String(opsPort),
    HOST: '127.0.0.1',
    // Nothing listens here: the start waits its bounded time for Redis, which keeps it "starting" a while.
    REDIS_URL: 'redis://127.0.0.1:1',
    QUEUE_PREFIX: uniquePrefix('starting'),
    ARCHIVE_DIR: join(tmpdir(), 'callsync-starting-archive'),
    LOG_LEVEL: 'info',
  });
  try {
    const readyz = async () => {
      const res = await fetch(`http://127.0.0.1:${opsPort}/readyz`).catch(() => null);
      return res ? { status: res.status, body: (await res.json()) as { errors?: { detail: string }[] } } : null;
    };
    const starting = await waitFor(
      async () => {
        const r = await readyz();
        return r && !child.lines.some((l) => l.msg === 'callsync started') ? r : null;
      },
      { timeoutMs: 30_000, intervalMs: 20, what: '/readyz while callsync starts' },
    );
    assert.equal(starting.status, 503);
    assert.equal(starting.body.errors?.[0]?.detail, 'starting');
    await waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
      timeoutMs: 30_000,
      what: 'callsync started',
    });
    const after = await readyz();
    assert.equal(after?.status, 503, 'Redis is still away');
    assert.notEqual(after?.body.errors?.[0]?.detail, 'starting');
  } finally {
    child.proc.kill('SIGTERM');
    await bounded(child.exit, 60_000, 'the process to exit', child);
  }
});

// A REDIS_URL that nothing answers: the start goes on (an outage at start is the spool's), but says
// so at once, naming REDIS_URL and why, before anything else waits on it. Before: only BullMQ's and
// ioredis' raw errors, then "Redis not ready at start" lines 2 s apart, none naming the setting.
describe('a REDIS_URL nothing answers: one line at once names REDIS_URL and the cause; the start goes on', () => {
  const unreached = async (redisUrl: string, cause: RegExp) => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-unreached-'));
    const child = startCallsyncProcess({
      CALLSYNC_FROM_SOURCE: '1',
      CALLSYNC_ROLE: 'all',
      PORT: '0',
      OPS_PORT: 'off',
      HOST: '127.0.0.1',
      REDIS_URL: redisUrl,
      QUEUE_PREFIX: uniquePrefix('unreached'),
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      DATA_DIR: dir,
      LOG_LEVEL: 'info',
    });
    try {
      const line = await waitFor(
        () => child.lines.find((l) => String(l.msg).startsWith('Redis not reached at start')),
        {
          timeoutMs: 60_000,
          what: 'the line saying Redis is not reached',
        },
      );
      assert.equal(line.level, 50, 'an error: nothing is processed until it answers');
      assert.match(String(line.msg), /^Redis not reached at start: redis:\/\/127\.0\.0\.1:\d+\/? \(REDIS_URL\): /);
      assert.match(String(line.msg), cause);
      assert.match(String(line.msg), /starting anyway: the ingress spools webhooks \(or answers 503\)/);
      // Said first: before the ingress listens and before any wait for Redis gives up.
      const at = child.lines.indexOf(line);
      assert.ok(
        !child.lines.slice(0, at).some((l) => l.msg === 'ingress listening' || /^Redis not ready/.test(String(l.msg))),
        JSON.stringify(child.lines.slice(0, at + 1)),
      );
      await waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
        timeoutMs: 60_000,
        what: 'callsync started (the start goes on)',
      });
      child.proc.kill('SIGTERM');
      assert.equal(await bounded(child.exit, 30_000, 'callsync start to exit on SIGTERM', child), 0);
    } finally {
      child.proc.kill('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    }
  };

  test('refused: "connection refused (ECONNREFUSED)"', async () => {
    await unreached('redis://127.0.0.1:1', /: connection refused \(ECONNREFUSED\);/);
  });

  test('a server that takes the connection and never answers: "no answer within 2 s"', async () => {
    const sockets: import('node:net').Socket[] = [];
    const silent = createServer((socket) => void sockets.push(socket));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
      await unreached(`redis://127.0.0.1:${(silent.address() as AddressInfo).port}`, /: no answer within 2 s;/);
    } finally {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });
});

// A REDIS_URL that nothing answers (a typo, Redis not up yet) and a Ctrl-C: the process stopped
// after about 8 s (the fan-out waited out its blocking read's time and 2 s more for a connection
// that was never there, the configuration fingerprint 1 s for a delete that could not be sent).
// Now the shutdown gives up on what cannot answer at once: about 2 s, the BullMQ handles' set-up wait.
test('every role, Redis never reached: SIGTERM stops the started process within seconds, exit 0', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-away-stop-'));
  const child = startCallsyncProcess({
    CALLSYNC_FROM_SOURCE: '1',
    CALLSYNC_ROLE: 'all',
    PORT: '0',
    OPS_PORT: '0',
    HOST: '127.0.0.1',
    REDIS_URL: 'redis://127.0.0.1:1',
    QUEUE_PREFIX: uniquePrefix('away-stop'),
    ARCHIVE_DIR: join(dir, 'archive'),
    SPOOL_DIR: join(dir, 'spool'),
    DATA_DIR: dir,
    LOG_LEVEL: 'info',
  });
  try {
    await waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
      timeoutMs: 60_000,
      what: 'callsync started',
    });
    child.proc.kill('SIGTERM');
    const code = await bounded(child.exit, 5_000, 'callsync start to exit on SIGTERM with Redis away', child);
    assert.equal(code, 0);
    assert.ok(child.lines.some((l) => l.msg === 'stopped'));
  } finally {
    child.proc.kill('SIGKILL');
    await rm(dir, { recursive: true, force: true });
  }
});
