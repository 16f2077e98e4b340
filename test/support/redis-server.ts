// A private redis-server on a random loopback port, with AOF, that tests may stop, kill and start
// again (the shared Redis on 6379 is never touched). Its data lives in a temporary folder, so a
// restart comes back with what the append-only file kept.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';

export interface PrivateRedisOptions {
  /** `appendfsync` policy: `always`, `everysec` (Redis' default) or `no`. Default `everysec`. */
  appendfsync?: 'always' | 'everysec' | 'no';
  /** Append-only file on (default) or off. */
  appendonly?: boolean;
}

export interface PrivateRedis {
  port: number;
  url: string;
  dir: string;
  /** Process id of the running server (NaN when stopped). */
  readonly pid: number;
  /** Whether the server process is running. */
  readonly running: boolean;
  /** Starts the server (again) on the same port with the same data folder; waits until it answers PING. */
  start(): Promise<void>;
  /** SHUTDOWN without saving an RDB (AOF is already on disk); waits for the process to exit. */
  stop(): Promise<void>;
  /** SIGKILL: what a crash or an OOM kill looks like. */
  kill(): Promise<void>;
  /** Stops the server and removes its folder. */
  destroy(): Promise<void>;
}

/** Whether `port` can be bound on 127.0.0.1 now. */
async function bindable(port: number): Promise<boolean> {
  const server = createServer();
  const ok = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (ok) await new Promise<void>((resolve) => server.close(() => resolve()));
  return ok;
}

/**
 * The ports this test process may take: `TEST_PORT_RANGE` (`low-high`), 20000-22699 by default.
 * test/run.sh gives each of the lanes that run side by side a third, so that none takes a port
 * another's killed node is about to come back on.
 */
export function testPortRange(env: NodeJS.ProcessEnv = process.env): { low: number; high: number } {
  const text = env.TEST_PORT_RANGE?.trim();
  if (!text) return { low: 20_000, high: 22_699 };
  const m = /^(\d+)-(\d+)$/.exec(text);
  const low = Number(m?.[1]);
  const high = Number(m?.[2]);
  // Its cluster bus ports (+10000) stay below Linux's ephemeral range too.
  if (!m || low < 1024 || high < low || high + 10_000 > 32_767)
    throw new Error(`TEST_PORT_RANGE=${text}: expected low-high, 1024 <= low <= high <= 22767`);
  return { low, high };
}

/**
 * A free TCP port on 127.0.0.1 for a server a test starts (closed again before redis-server binds
 * it), below Linux's ephemeral range (32768–60999), as is its cluster bus port (+10000): a port the
 * OS hands out for `listen(0)` is one it also hands to outgoing connections, and under load one
 * of them took a cluster node's port between this check and redis-server's bind (CI: "timed out
 * waiting for node 33019").
 */
export async function freePort(): Promise<number> {
  const { low, high } = testPortRange();
  for (let tries = 0; tries < 200; tries++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    if ((await bindable(port)) && (await bindable(port + 10_000))) return port;
  }
  throw new Error(`no free port in ${low}-${high} (with its +10000 cluster bus port) after 200 tries`);
}

async function waitForPing(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const redis = new Redis(url, {
      lazyConnect: true,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      connectTimeout: 500,
    });
    redis.on('error', () => undefined);
    try {
      await redis.connect();
      if ((await redis.ping()) === 'PONG') return;
    } catch {
      // not up yet
    } finally {
      redis.disconnect();
    }
    if (Date.now() > deadline) throw new Error(`redis-server at ${url} did not answer within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export async function startPrivateRedis(options: PrivateRedisOptions = {}): Promise<PrivateRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-redis-'));
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess | null = null;
  let exited: Promise<void> = Promise.resolve();

  const start = async () => {
    if (child) return;
    const args = [
      '--port',
      String(port),
      '--bind',
      '127.0.0.1',
      '--save',
      '',
      '--appendonly',
      options.appendonly === false ? 'no' : 'yes',
      '--appendfsync',
      options.appendfsync ?? 'everysec',
      '--dir',
      dir,
      '--maxmemory-policy',
      'noeviction',
      '--loglevel',
      'warning',
    ];
    const proc = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    exited = new Promise<void>((resolve) =>
      proc.once('exit', () => {
        if (child === proc) child = null;
        resolve();
      }),
    );
    await waitForPing(url, 10_000);
  };

  const stop = async (signal: 'shutdown' | 'SIGKILL') => {
    const proc = child;
    if (!proc) return;
    if (signal === 'SIGKILL') {
      proc.kill('SIGKILL');
    } else {
      const redis = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
      redis.on('error', () => undefined);
      // SHUTDOWN closes the connection instead of answering.
      await redis.call('SHUTDOWN', 'NOSAVE').catch(() => undefined);
      redis.disconnect();
    }
    const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  };

  await start();
  return {
    port,
    url,
    dir,
    get running() {
      return child !== null;
    },
    get pid() {
      return child?.pid ?? NaN;
    },
    start,
    stop: () => stop('shutdown'),
    kill: () => stop('SIGKILL'),
    async destroy() {
      await stop('SIGKILL');
      await rm(dir, { recursive: true, force: true });
    },
  };
}
