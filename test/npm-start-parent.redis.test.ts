// `npm start &`, then `kill $!` (what a script does to stop what it started): the SIGTERM reaches npm
// and its shell, not callsync, which ran on re-parented, holding its port (and a private Redis),
// so the next `npm start` found the port taken. Now callsync sees its parent gone and stops as on
// SIGTERM. A real `npm start` against the test Redis; its processes found through /proc.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSync } from 'node:fs';
import { alive } from './support/pids.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const ROOT = new URL('../', import.meta.url).pathname;
const prefix = uniquePrefix('npm-parent');
let dir: string | undefined;
let group: number | undefined;
let node: number | undefined;

after(async () => {
  for (const pid of [node, group === undefined ? undefined : -group])
    if (pid !== undefined)
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone already
      }
  await cleanupPrefix(prefix);
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The pids whose parent is `pid` (from /proc/<pid>/stat). */
async function childrenOf(pid: number): Promise<number[]> {
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === pid) out.push(Number(entry));
  }
  return out;
}

/** The `bin/callsync.js start` process under `pid` (npm, its shell, node). */
async function callsyncUnder(pid: number): Promise<number | null> {
  for (const child of await childrenOf(pid)) {
    const [program, ...args] = (await readFile(`/proc/${child}/cmdline`, 'utf8').catch(() => '')).split('\0');
    // node itself, not npm's shell (`sh -c "node … bin/callsync.js start"`).
    if (program?.endsWith('node') && args.some((a) => a.endsWith('bin/callsync.js'))) return child;
    const deeper = await callsyncUnder(child);
    if (deeper !== null) return deeper;
  }
  return null;
}

test('npm start stopped by a SIGTERM to npm alone: callsync stops too, as on SIGTERM', async () => {
  dir = await mkdtemp(join(tmpdir(), 'npm-parent-'));
  const logFile = join(dir, 'start.log');
  const out = openSync(logFile, 'w');
  const npm = spawn('npm', ['start'], {
    cwd: ROOT,
    // Its own process group, so that nothing of it outlives the test (after()).
    detached: true,
    stdio: ['ignore', out, out],
    env: {
      ...process.env,
      CALLSYNC_FROM_SOURCE: '1',
      CALLSYNC_ROLE: 'ingress',
      CALLSYNC_CONFIG: '',
      REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      OPS_PORT: 'off',
      SPOOL_ENABLED: 'false',
    },
  });
  group = npm.pid!;
  const log = () => readFile(logFile, 'utf8').catch(() => '');
  await waitFor(async () => (await log()).includes('"msg":"callsync started"') || null, {
    what: 'npm start to start callsync',
    timeoutMs: 60_000,
  });
  node = (await callsyncUnder(npm.pid!)) ?? undefined;
  assert.ok(node, 'the callsync process under npm');
  // `kill $!`: npm alone, not its process group.
  process.kill(npm.pid!, 'SIGTERM');
  await waitFor(async () => !alive(node!) || null, { what: 'callsync to stop after npm', timeoutMs: 20_000 });
  const text = await log();
  assert.match(text, /"msg":"npm ended without stopping callsync \(its shell exited\): stopping as on SIGTERM"/);
  assert.match(text, /"msg":"stopped"/);
  node = undefined;
});
