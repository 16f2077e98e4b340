// The private Redis of a folder, for its tests: the redis-servers running in it (found by their
// working folder: Linux only), and a process of its own that starts one (resolveRedis, as
// `callsync start` does) — for tests that kill a starter before its server answers.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readlink, realpath } from 'node:fs/promises';

const PRIVATE_REDIS = new URL('../../queues/private-redis.ts', import.meta.url).pathname;

/** Starts a process resolving the private Redis in `dir` with the redis-server `serverBin`; its output ignored. */
export function spawnPrivateRedisStarter(dir: string, serverBin: string): ChildProcess {
  const script = `
      import { resolveRedis } from ${JSON.stringify(PRIVATE_REDIS)};
      await resolveRedis(
        { url: 'redis://127.0.0.1:6379', clusterNodes: [], sentinels: [], tls: false, prefix: 'x', local: { probe: null, dir: ${JSON.stringify(dir)}, serverBin: ${JSON.stringify(serverBin)} } },
        { log: { info: () => {}, warn: () => {} } },
      );
    `;
  return spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { stdio: 'ignore' });
}

/** The processes whose working folder is `dir`: the redis-servers of that folder. */
export async function serversIn(dir: string): Promise<number[]> {
  const real = await realpath(dir);
  const pids: number[] = [];
  for (const name of await readdir('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    if ((await readlink(`/proc/${name}/cwd`).catch(() => null)) === real) pids.push(Number(name));
  }
  return pids;
}

/** SIGKILLs the redis-servers of `dir` (a test's leftovers). */
export async function killServersIn(dir: string): Promise<void> {
  if (!existsSync(dir)) return;
  for (const pid of await serversIn(dir)) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
}
