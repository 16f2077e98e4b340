// The Redis callsync uses when none is configured (REDIS_URL, REDIS_CLUSTER_NODES, REDIS_SENTINELS
// unset): the one answering at the local probe address (127.0.0.1:6379) if any, else a private
// redis-server this module starts in DATA_DIR/redis — loopback only, a generated password, AOF
// everysec, noeviction — and shares with every other callsync process of that folder.
//
// Lifetime: every process using the private Redis leaves a file named by its pid in `users/`; the
// last one to stop (its own file removed, no other user alive) shuts the server down. A process
// that dies without stopping (SIGKILL) leaves the server running; the next callsync process finds
// it through `server.json` and uses it (docs/operations.md "Redis on one machine"). A wait that is
// stopped (ResolveOptions.signal: a SIGTERM or Ctrl-C while a large AOF loads) goes by the same
// rule: its user file goes, and a server this process started is stopped when no other user is
// left; one it found (another's, or a dead starter's) loads on for the next process.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { constants, existsSync } from 'node:fs';
import {
  access,
  chmod,
  link,
  mkdir,
  open,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  stat,
  unlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { createServer, Socket } from 'node:net';
import { delimiter, join, resolve } from 'node:path';
import { Cluster, Redis } from 'ioredis';
import type { RedisNode, RedisSettings } from './connection.js';

/** Where the Redis in use came from: REDIS_URL & co., the probe address, or a private redis-server. */
export type RedisOrigin = 'configured' | 'local' | 'private';

export interface ResolvedRedis {
  /** Settings to connect with (no `local` part any more). */
  settings: RedisSettings;
  origin: RedisOrigin;
  /** One line for logs and check-config, never the password. */
  where: string;
  /** True when this process started the private Redis. */
  started: boolean;
  /** This process stops using it; the last user of a private Redis shuts it down. Idempotent. */
  release(): Promise<void>;
}

/** No Redis configured, none answering locally, and no redis-server to start: callsync exits 2 with this one line. */
export class NoRedisError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NoRedisError';
  }
}

/**
 * The wait for the private Redis was stopped (ResolveOptions.signal aborted: a SIGTERM or Ctrl-C
 * while it loads its data). What the wait had taken is given back before this is thrown.
 */
export class RedisWaitStopped extends Error {
  constructor(dir: string) {
    super(`the wait for the private Redis in ${dir} was stopped`);
    this.name = 'RedisWaitStopped';
  }
}

/** Throws RedisWaitStopped once `signal` is aborted. */
function stopIfAsked(signal: AbortSignal | undefined, dir: string): void {
  if (signal?.aborted) throw new RedisWaitStopped(dir);
}

/** `ms` of waiting, cut short by `signal` (RedisWaitStopped). */
async function pause(ms: number, signal: AbortSignal | undefined, dir: string): Promise<void> {
  stopIfAsked(signal, dir);
  await new Promise<void>((ok) => {
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      ok();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
  stopIfAsked(signal, dir);
}

/** How to get a Redis, in the one line callsync prints when it has none. */
const INSTALL_HINT =
  'install redis-server (`apt install redis-server`, `brew install redis`) so callsync starts its own, run one (`docker run -d -p 127.0.0.1:6379:6379 redis:7`), or set REDIS_URL to yours';

/**
 * The oldest Redis callsync runs on: XPENDING's IDLE (the fan-out takes over what a dead worker
 * left), SMISMEMBER (the notifications' opt-out) and the private Redis' optional bind address
 * `-::1` came with 6.2. Ubuntu 22.04 and Debian 11 still install 6.0.
 */
const NEEDED_REDIS = '6.2';

/** How to get a newer one, in the line callsync prints when a Redis is too old. */
const UPGRADE_HINT =
  "install a newer redis-server (Redis' own packages for Debian and Ubuntu at packages.redis.io, `brew install redis`) or point REDIS_SERVER_BIN at one, run one (`docker run -d -p 127.0.0.1:6379:6379 redis:7`), or set REDIS_URL to yours";

/** Whether a Redis version (`6.0.16`, INFO's redis_version) is older than NEEDED_REDIS; false when it is no version. */
function olderThanNeeded(version: string): boolean {
  const [major, minor] = NEEDED_REDIS.split('.').map(Number) as [number, number];
  const found = /^(\d+)\.(\d+)/.exec(version);
  if (!found) return false;
  const [hasMajor, hasMinor] = [Number(found[1]), Number(found[2])];
  return hasMajor < major || (hasMajor === major && hasMinor < minor);
}

/**
 * Why the Redis behind `client` (connected) cannot be callsync's, or null: older than NEEDED_REDIS
 * (INFO's redis_version). Its commands would fail call by call instead (the fan-out's recovery of a
 * dead worker's entries, every notification). An INFO refused (renamed by a managed Redis): not
 * known, null.
 */
export async function redisVersionProblem(
  client: { info(section: string): Promise<string> },
  where: string,
): Promise<string | null> {
  const info = await client.info('server').catch(() => null);
  const version = info === null ? undefined : /^redis_version:(\S+)/m.exec(info)?.[1];
  if (version === undefined || !olderThanNeeded(version)) return null;
  return `the Redis at ${where} is ${version} and callsync needs ${NEEDED_REDIS} or newer (XPENDING with IDLE, SMISMEMBER): upgrade it, or set REDIS_URL to another`;
}

/**
 * Why the Redis behind `client` may lose what callsync accepted, or null: it evicts keys when its
 * memory is full (`maxmemory-policy` other than `noeviction`, as managed Redis services often
 * default to) — an evicted job or inbound log entry is a call lost, an evicted marker one sent
 * twice. BullMQ only prints a plain line on stderr for each connection; callsync says it in its log,
 * /readyz and check-config. A cluster: each master is asked (INFO goes to one node), and those that
 * evict are named. Null too when INFO cannot be read.
 */
export async function redisEvictionProblem(
  client: { info(section: string): Promise<string> },
  where: string,
): Promise<string | null> {
  const policyOf = async (node: { info(section: string): Promise<string> }) => {
    const info = await node.info('memory').catch(() => null);
    return info === null ? undefined : /^maxmemory_policy:(\S+)/m.exec(info)?.[1];
  };
  const hint = 'an evicted job or inbound log entry is an accepted call lost; set maxmemory-policy noeviction';
  if (client instanceof Cluster) {
    const evicting: string[] = [];
    for (const node of client.nodes('master')) {
      const policy = await policyOf(node);
      if (policy !== undefined && policy !== 'noeviction')
        evicting.push(`${policy} on ${node.options.host ?? '?'}:${node.options.port ?? '?'}`);
    }
    if (evicting.length === 0) return null;
    return `the Redis at ${where} evicts keys when its memory is full (maxmemory-policy ${evicting.join(', ')}): ${hint}`;
  }
  const policy = await policyOf(client);
  if (policy === undefined || policy === 'noeviction') return null;
  return `the Redis at ${where} evicts keys when its memory is full (maxmemory-policy ${policy}): ${hint}`;
}

/**
 * Why the redis-server `bin` cannot be the private Redis, or null: it is older than callsync needs
 * (`redis-server --version` says `Redis server v=6.0.16 …`). Before, Redis 6.0 refused the
 * private config file's `-::1`, and the start failed with a line about a bind address.
 */
export async function serverBinProblem(bin: string): Promise<string | null> {
  const version = await new Promise<string | null>((ok) =>
    execFile(bin, ['--version'], { timeout: 5000 }, (err, stdout) =>
      ok(err ? null : (/\bv=(\d+\.\d+\.\d+)/.exec(stdout)?.[1] ?? null)),
    ),
  );
  if (version === null || !olderThanNeeded(version)) return null;
  return `${bin} is Redis ${version} and callsync needs ${NEEDED_REDIS} or newer; ${UPGRADE_HINT}`;
}

interface LogLike {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
}

const SERVER_FILE = 'server.json';
const PASSWORD_FILE = 'password';
const CONF_FILE = 'redis.conf';
const LOG_FILE = 'redis.log';
/** redis-server's stdout and stderr, rewritten at each start: where it says why a config file is refused. */
const OUTPUT_FILE = 'redis.out';
/** A failed start reads back at most this much of each (their ends), for its one line. */
const REASON_BYTES = 4096;
/** …and puts at most this much of it in that line (its end: the last thing said is the reason). */
const REASON_CHARS = 600;
const LOCK_FILE = 'start.lock';
const USERS_DIR = 'users';
/**
 * A start lock older than this was left by a process that died while starting: taken over. Its
 * holder touches it every third of this while it starts (a load of a large AOF takes minutes).
 */
const STALE_LOCK_MS = 15_000;
/**
 * A private Redis that says nothing for this long — no answer, or, while it loads its data, no
 * further progress — is given up (a server that started by someone else is then ended when it is
 * known to be this folder's; one this process started always is).
 */
const START_TIMEOUT_MS = 10_000;
/**
 * The longest a private Redis loading its data is waited for. redis-server reads its whole AOF
 * before it answers anything but AUTH and INFO (`-LOADING`): weeks of calls take longer than
 * START_TIMEOUT_MS, and were killed at every start. A load still under way after this is given up.
 */
const LOAD_TIMEOUT_MS = 10 * 60_000;
/** A load is logged this often (how far it is) while it is waited for. */
const LOAD_LOG_MS = 5_000;

interface ServerFile {
  pid: number;
  port: number;
}

/**
 * What answers a PING at `node` within `timeoutMs`: `redis` (PONG, or an error such as LOADING),
 * `password` (a Redis that asks for a password callsync was not given: NOAUTH), or null (nothing).
 */
async function probeLocal(node: RedisNode, timeoutMs = 500): Promise<'redis' | 'password' | null> {
  return new Promise((resolveAnswer) => {
    const socket = new Socket();
    let done = false;
    const finish = (answer: 'redis' | 'password' | null) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolveAnswer(answer);
    };
    const timer = setTimeout(() => finish(null), timeoutMs);
    socket.once('error', () => finish(null));
    socket.once('data', (data) => {
      const reply = data.toString('latin1');
      finish(/^-(NOAUTH|NOPERM|WRONGPASS)\b/.test(reply) ? 'password' : /^[+-]/.test(reply) ? 'redis' : null);
    });
    socket.connect(node.port, node.host, () => socket.write('PING\r\n'));
  });
}

/** The redis-server to start: REDIS_SERVER_BIN (a path, or a name on PATH), else the first `redis-server` on PATH; null when there is none. */
export async function findRedisServer(
  serverBin: string | undefined,
  path = process.env.PATH ?? '',
): Promise<string | null> {
  const executable = async (file: string) =>
    access(file, constants.X_OK).then(
      () => true,
      () => false,
    );
  // A path is taken as it is; a bare name (REDIS_SERVER_BIN=redis-server-7) is looked up on PATH.
  if (serverBin !== undefined && serverBin.includes('/')) return (await executable(serverBin)) ? serverBin : null;
  for (const dir of path.split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, serverBin ?? 'redis-server');
    if (await executable(file)) return file;
  }
  return null;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

async function readJson<T>(file: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

async function freeLoopbackPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', ok);
  });
  const address = server.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  await new Promise<void>((ok) => server.close(() => ok()));
  return port;
}

/** How far a private Redis loading its data is (INFO persistence; null: not said). */
interface Loading {
  loaded: number | null;
  total: number | null;
}

/** What the private Redis said: ready (PONG), loading its data (`-LOADING`), or nothing usable. */
type Answer = { state: 'ready' } | ({ state: 'loading' } & Loading) | { state: 'none' };

/** One command in RESP (the password may hold any character: never inline). */
const command = (...args: string[]): string =>
  `*${args.length}\r\n${args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')}`;

/** The first `count` replies in `buffer` (a status or error line as it is, a bulk string's text), or null while incomplete. */
function repliesIn(buffer: Buffer, count: number): string[] | null {
  const replies: string[] = [];
  let at = 0;
  while (replies.length < count) {
    const end = buffer.indexOf('\r\n', at);
    if (end < 0) return null;
    const line = buffer.toString('latin1', at, end);
    at = end + 2;
    const length = line.startsWith('$') ? Number(line.slice(1)) : NaN;
    if (!Number.isInteger(length) || length < 0) {
      replies.push(line);
      continue;
    }
    if (buffer.length < at + length + 2) return null;
    replies.push(buffer.toString('utf8', at, at + length));
    at += length + 2;
  }
  return replies;
}

const number = (info: string, field: string): number | null => {
  const found = new RegExp(`^${field}:(\\d+)`, 'm').exec(info);
  return found ? Number(found[1]) : null;
};

/**
 * The private Redis at `port` asked AUTH, PING and INFO persistence on a connection of its own,
 * within `timeoutMs`. A raw connection, not a client's: a client's ready check waited out a whole
 * load without a time limit (INFO's `loading:1`, retried), and a server that accepted the
 * connection and never answered was waited for forever.
 */
async function probePrivate(port: number, password: string, timeoutMs: number, signal?: AbortSignal): Promise<Answer> {
  return new Promise((resolveAnswer) => {
    const socket = new Socket();
    let done = false;
    let received = Buffer.alloc(0);
    const stop = () => finish({ state: 'none' });
    const finish = (answer: Answer) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', stop);
      socket.destroy();
      resolveAnswer(answer);
    };
    const timer = setTimeout(() => finish({ state: 'none' }), timeoutMs);
    // A stopped wait does not sit out a probe of up to 5 s.
    if (signal?.aborted) stop();
    else signal?.addEventListener('abort', stop, { once: true });
    socket.once('error', () => finish({ state: 'none' }));
    socket.once('close', () => finish({ state: 'none' }));
    socket.on('data', (data) => {
      received = Buffer.concat([received, data]);
      const replies = repliesIn(received, 3);
      if (replies === null) return;
      const [auth, ping, info] = replies as [string, string, string];
      if (ping === '+PONG') finish({ state: 'ready' });
      else if ([auth, ping].some((r) => r.startsWith('-LOADING')))
        finish({
          state: 'loading',
          loaded: number(info, 'loading_loaded_bytes'),
          total: number(info, 'loading_total_bytes'),
        });
      else finish({ state: 'none' });
    });
    socket.connect(port, '127.0.0.1', () =>
      socket.write(command('AUTH', password) + command('PING') + command('INFO', 'persistence')),
    );
  });
}

/** `412 MB`, `1.2 GB`. */
function bytes(count: number): string {
  const units = ['bytes', 'KB', 'MB', 'GB', 'TB'];
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit > 0 && value < 10 ? value.toFixed(1) : Math.round(value)} ${units[unit]}`;
}

/** How far a load is, for a log line or a failure: `412 MB of 1.2 GB`. */
function progressOf(loading: Loading): string {
  if (loading.loaded === null) return 'how far not said';
  return loading.total ? `${bytes(loading.loaded)} of ${bytes(loading.total)}` : `${bytes(loading.loaded)} so far`;
}

/** Why a wait for the private Redis ended without it: which limit (or that it is gone). */
interface GivenUp {
  why: string;
  /** It was still loading its data after LOAD_TIMEOUT_MS: starting it again would take as long. */
  tooLong: boolean;
}

/**
 * Until the private Redis `server` answers PING (null), or why it is given up. While it answers
 * `-LOADING` (reading its AOF) and loads further, it is waited for up to LOAD_TIMEOUT_MS, its
 * progress logged every LOAD_LOG_MS; START_TIMEOUT_MS is the limit of no answer and no progress.
 * `gone` says why the server can no longer answer (it exited), null while it runs. Each progress
 * line is also told to `onLoading`; an aborted `signal` ends the wait (RedisWaitStopped).
 */
async function awaitReady(
  server: ServerFile,
  password: string,
  dir: string,
  { log, onLoading, signal }: ResolveOptions,
  gone: () => string | null,
): Promise<GivenUp | null> {
  const since = Date.now();
  let heard = since;
  let logged = since;
  let loading: Loading | null = null;
  for (;;) {
    stopIfAsked(signal, dir);
    const exited = gone();
    if (exited !== null) return { why: exited, tooLong: false };
    // Long enough to catch a loading server between two reads (it answers only then), never past the limit.
    const timeout = Math.min(5000, Math.max(300, heard + START_TIMEOUT_MS - Date.now()));
    const answer = await probePrivate(server.port, password, timeout, signal);
    stopIfAsked(signal, dir);
    if (answer.state === 'ready') return null;
    const now = Date.now();
    if (answer.state === 'loading') {
      // Progress: the first `-LOADING`, more bytes read, or a server that does not say how far (its answer is then all there is).
      if (loading === null || answer.loaded === null || answer.loaded !== loading.loaded) heard = now;
      loading = { loaded: answer.loaded, total: answer.total };
      if (now - logged >= LOAD_LOG_MS) {
        logged = now;
        log.info(
          {
            dir,
            pid: server.pid,
            port: server.port,
            loadedBytes: loading.loaded,
            totalBytes: loading.total,
            seconds: Math.round((now - since) / 1000),
          },
          `private Redis loading its data: ${progressOf(loading)}`,
        );
        onLoading?.(progressOf(loading));
      }
    }
    if (loading !== null && now - since >= LOAD_TIMEOUT_MS)
      return {
        why: `still loading its data after ${LOAD_TIMEOUT_MS / 60_000} min, the longest a load is waited for (${progressOf(loading)})`,
        tooLong: true,
      };
    if (now - heard >= START_TIMEOUT_MS)
      return {
        why:
          loading === null
            ? `no answer within ${START_TIMEOUT_MS / 1000} s`
            : `its load made no progress for ${START_TIMEOUT_MS / 1000} s (${progressOf(loading)})`,
        tooLong: false,
      };
    await pause(loading === null ? 50 : 250, signal, dir);
  }
}

/**
 * The password of the private Redis of `dir`, made on first use. Processes starting at once on a
 * fresh folder all end up with the same one: it is written whole under a name of this process's and
 * linked into place, and only the first link succeeds (each had made its own and started a server
 * with it: several redis-servers on one folder, each with a password the others did not have).
 */
async function passwordOf(dir: string): Promise<string> {
  const file = join(dir, PASSWORD_FILE);
  for (;;) {
    const existing = await readFile(file, 'utf8').then(
      (text) => text.trim(),
      (err: NodeJS.ErrnoException) => {
        if (err.code === 'ENOENT') return null;
        throw err;
      },
    );
    if (existing) return existing;
    // An empty file (an earlier version's write cut short by a full disk) counts as none.
    if (existing === '') await unlink(file).catch(() => undefined);
    const password = randomBytes(24).toString('hex');
    const mine = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
    try {
      await writeFile(mine, `${password}\n`, { mode: 0o600 });
      await link(mine, file);
      return password;
    } catch (err) {
      // Another process linked its own first: read that one.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    } finally {
      await unlink(mine).catch(() => undefined);
    }
  }
}

/**
 * The private Redis of `dir` when it runs and answers: its port. One still loading its data (started
 * by another process, or by one that died since) is waited for, as its starter does (awaitReady);
 * one that stops loading, or exits, is not this process's to end: null (the start lock decides).
 */
async function runningServer(dir: string, password: string, options: ResolveOptions): Promise<ServerFile | null> {
  const server = await readJson<ServerFile>(join(dir, SERVER_FILE));
  if (!server || !alive(server.pid)) return null;
  // Long enough to catch a loading server between two reads (it answers only then: a command,
  // which never starts one, took a load's silence for no server at all).
  const answer = await probePrivate(server.port, password, 3000, options.signal);
  stopIfAsked(options.signal, dir);
  if (answer.state === 'ready') return server;
  if (answer.state === 'none') return null;
  const givenUp = await awaitReady(server, password, dir, options, () => (alive(server.pid) ? null : 'it exited'));
  if (givenUp === null) return server;
  if (givenUp.tooLong)
    throw new Error(`the private Redis in ${dir} (pid ${server.pid}) did not come up: ${givenUp.why}`);
  return null;
}

/**
 * Whether process `pid` is the redis-server of `dir`: on Linux, by its working folder (redis-server
 * moves to `dir` as it reads its config); elsewhere, or when that cannot be read, not known.
 */
async function serverOfDir(pid: number, dir: string): Promise<boolean | null> {
  if (process.platform !== 'linux') return null;
  const [cwd, real] = await Promise.all([
    readlink(`/proc/${pid}/cwd`).catch(() => null),
    realpath(dir).catch(() => dir),
  ]);
  if (cwd === null) return null;
  return cwd === real;
}

/**
 * A server named in server.json that runs but does not answer yet: one whose starter died before
 * it answered (SIGKILL, a second Ctrl-C while starting). Waited for like a start of this process's
 * own; one that still does not answer is ended when it is known to be this folder's. Starting
 * another beside it would put two redis-servers on one folder, each appending to the same AOF.
 */
async function awaitStarting(dir: string, password: string, options: ResolveOptions): Promise<ServerFile | null> {
  const server = await readJson<ServerFile>(join(dir, SERVER_FILE));
  if (!server || !alive(server.pid)) return null;
  const ours = await serverOfDir(server.pid, dir);
  // Another program under a reused pid (after a reboot): nothing to wait for.
  if (ours === false) return null;
  // Stopped meanwhile (RedisWaitStopped): it is not this process's, and loads on for the next one.
  const givenUp = await awaitReady(server, password, dir, options, () => (alive(server.pid) ? null : 'it exited'));
  if (givenUp === null) return server;
  if (ours && alive(server.pid)) {
    try {
      process.kill(server.pid, 'SIGKILL');
    } catch {
      // gone meanwhile
    }
    const gone = Date.now() + 2000;
    while (alive(server.pid) && Date.now() < gone) await new Promise((ok) => setTimeout(ok, 20));
  }
  // A load longer than LOAD_TIMEOUT_MS: one started again would take as long.
  if (givenUp.tooLong)
    throw new Error(`the private Redis in ${dir} (pid ${server.pid}) did not come up: ${givenUp.why}`);
  return null;
}

/** Takes the start lock of `dir` (one process starts the server, the others wait for it); returns its release. */
async function lockStart(dir: string): Promise<(() => Promise<void>) | null> {
  const file = join(dir, LOCK_FILE);
  try {
    const handle = await open(file, 'wx');
    try {
      await handle.writeFile(String(process.pid));
    } catch (err) {
      // Its pid did not fit (a full disk): an empty lock names no holder to find dead, and the next
      // start waited STALE_LOCK_MS for it in silence. Given back before the failure is said.
      await handle.close().catch(() => undefined);
      await unlink(file).catch(() => undefined);
      throw err;
    }
    await handle.close();
    return () => unlink(file).catch(() => undefined);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    const age = await stat(file).then(
      (s) => Date.now() - s.mtimeMs,
      () => 0,
    );
    const holder = Number((await readFile(file, 'utf8').catch(() => '')).trim());
    if (age > STALE_LOCK_MS || (holder > 0 && !alive(holder))) await unlink(file).catch(() => undefined);
    return null;
  }
}

async function startServer(bin: string, dir: string, password: string, options: ResolveOptions): Promise<ServerFile> {
  const { log } = options;
  const port = await freeLoopbackPort();
  // The password goes in a file only this user reads, never on a command line (`ps` shows those).
  const conf = [
    'bind 127.0.0.1 -::1',
    'protected-mode yes',
    `port ${port}`,
    `dir "${dir}"`,
    'appendonly yes',
    'appendfsync everysec',
    'save ""',
    'maxmemory-policy noeviction',
    `requirepass "${password}"`,
    'daemonize no',
    'loglevel warning',
    `logfile "${join(dir, LOG_FILE)}"`,
    '',
  ].join('\n');
  const confFile = join(dir, CONF_FILE);
  await writeFile(confFile, conf, { mode: 0o600 });
  // Why a start fails is in what this start writes: redis-server's stderr (a refused config file
  // goes there, before the log is open) and the lines it adds to its log (earlier runs' lines stay).
  const logFile = join(dir, LOG_FILE);
  const logFrom = await sizeOf(logFile);
  // Its output goes to a file, not a pipe: the server outlives this process, and a pipe would end
  // with it (or fill up unread); a file is valid for the server's whole life and holds nothing here.
  const outputFile = join(dir, OUTPUT_FILE);
  const output = await open(outputFile, 'w', 0o600);
  let child: ChildProcess;
  try {
    // Its own process group: a Ctrl-C on the terminal reaches callsync, which stops it when it is the last user.
    // Started in its folder: that is how a later process tells it from another program (serverOfDir).
    child = spawn(bin, [confFile], { cwd: dir, detached: true, stdio: ['ignore', output.fd, output.fd] });
  } catch (err) {
    await output.close();
    throw err;
  }
  // Listened to before anything is awaited: a server that fails at once may be gone by then, and
  // its 'exit' would go unheard (the start then waited its whole time limit, and for that 'exit').
  const exited = new Promise<string>((ok) => {
    child.once('exit', (code, signal) => ok(signal ? `killed by ${signal}` : `exited with code ${code}`));
    child.once('error', (err) => ok(`could not run: ${err.message}`));
  });
  child.unref();
  await output.close();
  // Named in server.json from its first moment: should this process die before the server answers
  // (SIGKILL, a second Ctrl-C), the next one finds the server and waits for it instead of
  // starting a second redis-server on the same folder (runOrStart).
  const server = child.pid === undefined ? null : { pid: child.pid, port };
  if (server)
    await writeFile(join(dir, SERVER_FILE), `${JSON.stringify(server)}\n`).catch(async (err: unknown) => {
      // Not named anywhere (a full disk took the file's last page): no later process could find
      // it, and it was left running, one more on the folder at each attempt. Ended before the
      // failure is said; not waited for longer than a second (the child is unref'd).
      child.kill('SIGKILL');
      await Promise.race([exited, new Promise((ok) => setTimeout(ok, 1000))]);
      throw err;
    });
  let gone: string | null = null;
  void exited.then((how) => (gone ??= how));
  // Waited for while it loads its data (a large AOF: minutes, progress logged), not only START_TIMEOUT_MS.
  let givenUp: GivenUp | null = null;
  try {
    if (server) givenUp = await awaitReady(server, password, dir, options, () => gone);
  } catch (err) {
    if (err instanceof RedisWaitStopped && server && gone === null) await stopStarted(dir, server, child, exited, log);
    throw err;
  }
  if (server && givenUp === null) {
    log.info(
      { dir, port, pid: child.pid },
      'no Redis configured or answering locally: started a private Redis (loopback only, AOF; stopped when the last callsync process using it stops)',
    );
    return server;
  }
  if (gone === null) {
    child.kill('SIGKILL');
    gone = givenUp?.why ?? `no answer within ${START_TIMEOUT_MS / 1000} s`;
    // Its output is whole once it is gone; not waited for longer than a second (nothing else may
    // keep this process alive meanwhile: the child is unref'd).
    await Promise.race([exited, new Promise((ok) => setTimeout(ok, 1000))]);
  }
  await rm(join(dir, SERVER_FILE), { force: true });
  const said = [...linesOf(await readSince(outputFile, 0)), ...linesOf(await readSince(logFile, logFrom)).slice(-3)]
    .join(' ')
    .replace(/\s+/g, ' ');
  const reason = said.length > REASON_CHARS ? `…${said.slice(-REASON_CHARS)}` : said;
  throw new Error(`the private Redis (${bin}) did not start in ${dir} (${gone})${reason ? `: ${reason}` : ''}`);
}

/**
 * A start stopped while the server it started loads (RedisWaitStopped): the last user stops it, as
 * the lifetime rule says — the server is ended (SIGTERM: a loading redis-server exits without
 * writing; SIGKILL after 3 s) and its server.json removed. When another process uses it or waits
 * for it (a user file of a live process: another start, a command), it loads on for that one.
 */
async function stopStarted(
  dir: string,
  server: ServerFile,
  child: ChildProcess,
  exited: Promise<string>,
  log: LogLike,
): Promise<void> {
  const others = await otherUsers(dir);
  if (others.length > 0) {
    log.info(
      { dir, pid: server.pid, users: others },
      'the wait for the private Redis was stopped: it loads on for the other callsync processes using it',
    );
    return;
  }
  // Not unref'd: nothing else may keep this process alive meanwhile (the child is unref'd), and it
  // ended before it had stopped the server.
  const ended = (ms: number) => Promise.race([exited, new Promise((ok) => setTimeout(ok, ms))]);
  child.kill('SIGTERM');
  await ended(3000);
  if (alive(server.pid)) {
    child.kill('SIGKILL');
    await ended(1000);
  }
  await rm(join(dir, SERVER_FILE), { force: true });
  log.info({ dir, pid: server.pid }, 'the wait for the private Redis was stopped: the server it started is stopped');
}

async function sizeOf(file: string): Promise<number> {
  return stat(file).then(
    (s) => s.size,
    () => 0,
  );
}

/** What `file` holds from byte `from` on (all of it when it shrank since), its last REASON_BYTES at most. */
async function readSince(file: string, from: number): Promise<string> {
  const handle = await open(file, 'r').catch(() => null);
  if (handle === null) return '';
  try {
    const { size } = await handle.stat();
    const start = Math.max(size < from ? 0 : from, size - REASON_BYTES);
    const { buffer, bytesRead } = await handle.read(Buffer.alloc(size - start), 0, size - start, start);
    return buffer.subarray(0, bytesRead).toString('utf8');
  } finally {
    await handle.close();
  }
}

const linesOf = (text: string): string[] =>
  text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '');

async function addUser(dir: string): Promise<string> {
  await mkdir(join(dir, USERS_DIR), { recursive: true });
  const file = join(dir, USERS_DIR, String(process.pid));
  await writeFile(file, '');
  return file;
}

/** The users of the private Redis still alive, other than this process (files of dead ones are removed). */
async function otherUsers(dir: string): Promise<number[]> {
  const names = await readdir(join(dir, USERS_DIR)).catch(() => [] as string[]);
  const others: number[] = [];
  for (const name of names) {
    const pid = Number(name);
    if (pid === process.pid) continue;
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) others.push(pid);
    else await unlink(join(dir, USERS_DIR, name)).catch(() => undefined);
  }
  return others;
}

async function shutdownServer(dir: string, server: ServerFile, password: string): Promise<void> {
  const redis = new Redis({
    host: '127.0.0.1',
    port: server.port,
    password,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    lazyConnect: true,
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    // SHUTDOWN flushes the append-only file; it closes the connection instead of answering.
    await redis.call('SHUTDOWN').catch(() => undefined);
  } catch {
    // already gone
  } finally {
    redis.disconnect();
  }
  const deadline = Date.now() + 5000;
  while (alive(server.pid) && Date.now() < deadline) await new Promise((ok) => setTimeout(ok, 20));
  if (alive(server.pid)) process.kill(server.pid, 'SIGKILL');
  await rm(join(dir, SERVER_FILE), { force: true });
}

export interface ResolveOptions {
  log: LogLike;
  /** Whether this process may start a private Redis (check-config only looks for one). Default true. */
  start?: boolean;
  /**
   * Told how far a load waited for is (`412 MB of 1.2 GB`), as often as `log` is (every 5 s): a
   * CLI command says it on stderr. Never given the password.
   */
  onLoading?: (progress: string) => void;
  /**
   * Aborted: the wait for the private Redis ends at once (a SIGTERM or Ctrl-C while it loads for
   * minutes), resolveRedis rejecting with RedisWaitStopped once it gave back what it took: the
   * start lock, its user file, and a server it started when no other process uses it.
   */
  signal?: AbortSignal;
  /**
   * A look (`start: false`) whose user file cannot be written (DATA_DIR read-only, or not this
   * user's to write: EROFS, EACCES, EPERM) uses a running private Redis without being its user, and
   * is told so here (one line, for stderr); its release then does nothing. Without it, or for a
   * start, that is a failure of the folder (PrivateRedisFolderError).
   */
  onNotUser?: (note: string) => void;
}

const unchanged = (settings: RedisSettings, origin: RedisOrigin, where: string): ResolvedRedis => ({
  settings,
  origin,
  where,
  started: false,
  release: async () => undefined,
});

/**
 * The Redis this process uses: the configured one; else the one answering at the probe address;
 * else the private Redis of `local.dir`, started when none runs there (and `start` allows). Throws
 * NoRedisError when there is none and no redis-server to start.
 */
export async function resolveRedis(settings: RedisSettings, options: ResolveOptions): Promise<ResolvedRedis> {
  const { local, ...rest } = settings;
  if (!local) return unchanged(rest, 'configured', 'configured');
  const answer = local.probe ? await probeLocal(local.probe) : null;
  const at = local.probe ? `${local.probe.host}:${local.probe.port}` : '';
  if (local.probe && answer === 'redis') {
    const url = `redis://${local.probe.host.includes(':') ? `[${local.probe.host}]` : local.probe.host}:${local.probe.port}`;
    return unchanged({ ...rest, url }, 'local', `local ${at}`);
  }
  // A Redis that asks for a password is some other program's (a system Redis with requirepass):
  // taken without one, every command failed NOAUTH and callsync ran on, answering 503 for ever.
  if (answer === 'password')
    options.log.warn(
      { at },
      `no Redis configured (REDIS_URL unset): the Redis at ${at} asks for a password, so callsync does not use it (a private Redis instead); to use it, set REDIS_URL with its password`,
    );
  const dir = resolve(local.dir);
  const probed = !local.probe
    ? 'REDIS_LOCAL_PROBE=off'
    : answer === 'password'
      ? `the Redis at ${at} asks for a password (set REDIS_URL with it to use that one)`
      : `nothing answers at ${at}`;
  const bin = await findRedisServer(local.serverBin);
  if (bin === null && !existsSync(join(dir, SERVER_FILE))) {
    const what =
      local.serverBin !== undefined
        ? `REDIS_SERVER_BIN (${local.serverBin}) is not an executable`
        : 'redis-server is not on PATH';
    throw new NoRedisError(`no Redis: REDIS_URL is unset, ${probed} and ${what}; ${INSTALL_HINT}`);
  }
  try {
    return await usePrivate(dir, rest, bin, probed, options);
  } catch (err) {
    throw inFolder(await whyNoFolder(err, dir), dir);
  }
}

/**
 * A folder that could not be made: why, from the nearest folder above it that exists. Node's
 * recursive mkdir reports ENOENT (`no such file or directory, mkdir …`) for a parent on a read-only
 * file system or one this user may not write, which sent the reader looking for a missing folder.
 */
async function whyNoFolder(err: unknown, dir: string): Promise<unknown> {
  const { syscall, code } = err as NodeJS.ErrnoException;
  if (syscall !== 'mkdir' || code !== 'ENOENT') return err;
  let above = resolve(dir);
  while (
    !(await stat(above).then(
      (s) => s.isDirectory(),
      () => false,
    ))
  ) {
    const parent = resolve(above, '..');
    if (parent === above) return err;
    above = parent;
  }
  const denied = await access(above, constants.W_OK).then(
    () => null,
    (e: NodeJS.ErrnoException) => e.code ?? null,
  );
  if (denied === null) return err;
  const why = denied === 'EROFS' ? 'is on a read-only file system' : 'is not writable by this user';
  return Object.assign(new Error(`cannot be created: ${above} ${why} (${denied})`), { syscall: 'mkdir', code: denied });
}

/** Codes of a file this process may not write: a read-only file system, or another user's folder. */
const NOT_WRITABLE = new Set(['EROFS', 'EACCES', 'EPERM']);

/** System calls on files: an error of one of these while the private Redis is prepared is its folder's. */
const FILE_CALLS = new Set(['access', 'chmod', 'link', 'mkdir', 'open', 'read', 'scandir', 'stat', 'unlink', 'write']);

/**
 * A file error in the private Redis' folder said with the folder and the setting that chose it:
 * a full disk's `ENOSPC: no space left on device, write` named no path at all.
 */
function inFolder(err: unknown, dir: string): unknown {
  const { syscall, code } = err as NodeJS.ErrnoException;
  if (!(err instanceof Error) || syscall === undefined || !FILE_CALLS.has(syscall)) return err;
  return new PrivateRedisFolderError(`the private Redis' folder ${dir} (DATA_DIR/redis): ${err.message}`, code);
}

/** The private Redis' folder (DATA_DIR/redis) could not be prepared: a set-up problem, named with its folder. */
export class PrivateRedisFolderError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
  ) {
    super(message);
    this.name = 'PrivateRedisFolderError';
  }
}

/** The private Redis of `dir`: the folder prepared, this process a user, the server found or started. */
async function usePrivate(
  dir: string,
  rest: Omit<RedisSettings, 'local'>,
  bin: string | null,
  probed: string,
  options: ResolveOptions,
): Promise<ResolvedRedis> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  // The folder holds the password and the append-only file (every call, the privacy key): this
  // user's only, also when it existed before (mkdir's mode is for a folder it creates; Redis writes
  // its files 0644).
  await chmod(dir, 0o700).catch((err: NodeJS.ErrnoException) =>
    options.log.warn(
      { dir, code: err.code },
      'the private Redis folder could not be made private (chmod 700): other users may read its append-only file',
    ),
  );
  const password = await passwordOf(dir);
  // A user before anything runs or is found: a process stopping meanwhile sees this one and leaves the server up.
  const userFile = await addUser(dir).catch((err: NodeJS.ErrnoException) => {
    const code = err.code ?? '';
    if (options.start !== false || !options.onNotUser || !NOT_WRITABLE.has(code)) throw err;
    options.onNotUser(
      `${join(dir, USERS_DIR)} is not writable (${code}): this command uses the private Redis without registering as its user`,
    );
    return null;
  });
  if (userFile === null) {
    const { server } = await runOrStart(dir, password, bin, probed, options);
    return {
      settings: { ...rest, url: `redis://127.0.0.1:${server.port}`, password, tls: false },
      origin: 'private',
      where: `private ${dir} (127.0.0.1:${server.port}, pid ${server.pid})`,
      started: false,
      // No user file to remove, and not its user: the server is its users' to stop.
      release: async () => undefined,
    };
  }
  try {
    const { server, started } = await runOrStart(dir, password, bin, probed, options);
    return {
      settings: { ...rest, url: `redis://127.0.0.1:${server.port}`, password, tls: false },
      origin: 'private',
      where: `private ${dir} (127.0.0.1:${server.port}, pid ${server.pid})`,
      started,
      release: releaser(dir, password, userFile, server),
    };
  } catch (err) {
    await unlink(userFile).catch(() => undefined);
    throw err;
  }
}

/** The private Redis running in `dir`, else one this process starts (one process at a time, under the start lock). */
async function runOrStart(
  dir: string,
  password: string,
  bin: string | null,
  probed: string,
  options: ResolveOptions,
): Promise<{ server: ServerFile; started: boolean }> {
  // A holder of the start lock keeps it fresh while it starts (a load: up to LOAD_TIMEOUT_MS); one
  // that stops doing so loses it after STALE_LOCK_MS. This bound is the last resort beyond both.
  const deadline = Date.now() + LOAD_TIMEOUT_MS + START_TIMEOUT_MS + STALE_LOCK_MS;
  for (;;) {
    stopIfAsked(options.signal, dir);
    const running = await runningServer(dir, password, options);
    if (running) return { server: running, started: false };
    if (options.start === false)
      throw new NoRedisError(
        `no Redis running: ${probed} and no private Redis runs in ${dir} (\`callsync start\` starts one)`,
      );
    if (bin === null)
      throw new NoRedisError(
        `no Redis: REDIS_URL is unset, ${probed}, the private Redis in ${dir} is not running and redis-server is not on PATH; ${INSTALL_HINT}`,
      );
    const unlock = await lockStart(dir);
    if (unlock) {
      const lockFile = join(dir, LOCK_FILE);
      const fresh = setInterval(() => {
        const now = new Date();
        void utimes(lockFile, now, now).catch(() => undefined);
      }, STALE_LOCK_MS / 3);
      fresh.unref();
      try {
        // Another process may have started it between the look above and the lock.
        const again = (await runningServer(dir, password, options)) ?? (await awaitStarting(dir, password, options));
        if (again) return { server: again, started: false };
        const tooOld = await serverBinProblem(bin);
        if (tooOld) throw new NoRedisError(`no Redis: REDIS_URL is unset, ${probed}, and ${tooOld}`);
        return { server: await startServer(bin, dir, password, options), started: true };
      } finally {
        clearInterval(fresh);
        await unlock();
      }
    }
    if (Date.now() > deadline)
      throw new Error(`the private Redis in ${dir} did not come up: another process holds ${join(dir, LOCK_FILE)}`);
    await pause(100, options.signal, dir);
  }
}

/** This process stops using the private Redis: its user file goes; the last user shuts the server down. */
function releaser(dir: string, password: string, userFile: string, server: ServerFile): () => Promise<void> {
  let releasing: Promise<void> | undefined;
  return () => {
    releasing ??= (async () => {
      await unlink(userFile).catch(() => undefined);
      if ((await otherUsers(dir)).length > 0) return;
      // The server in the file may have been replaced (it died and another process started one): stop that one.
      const current = (await readJson<ServerFile>(join(dir, SERVER_FILE))) ?? server;
      if (alive(current.pid)) await shutdownServer(dir, current, password);
      else await rm(join(dir, SERVER_FILE), { force: true });
    })();
    return releasing;
  };
}
