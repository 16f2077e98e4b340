// `npm start &`, then `kill $!` (what a script does to stop what it started): the SIGTERM reaches npm
// and its shell, not callsync, which ran on re-parented, holding its port (and a private Redis),
// so the next `npm start` found the port taken. Now callsync sees its parent gone and stops as on
// SIGTERM. A real `npm start` against the test Redis; its processes found through /proc.
// And the other order: a SIGTERM to callsync, then npm and its shell killed (a supervisor ending the
// group's parents): the shell's end during the shutdown is no second signal (it was taken for one:
// "exiting without waiting").
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
const dirs: string[] = [];
/** Process groups (npm's) and callsync processes still to end after the tests. */
const leftover = new Set<number>();

after(async () => {
  for (const pid of leftover)
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // gone already
    }
  await cleanupPrefix(prefix);
  for (const dir of dirs) await rm(dir, { recursive: true, force: true });
});

/** The parent of `pid` (from /proc/<pid>/stat), or null once it is gone. */
async function parentOf(pid: number): Promise<number | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
  if (stat === '') return null;
  // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** The pids whose parent is `pid`. */
async function childrenOf(pid: number): Promise<number[]> {
  const out: number[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    if ((await parentOf(Number(entry))) === pid) out.push(Number(entry));
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

/** `npm start` in its own process group with `role`; resolves once callsync has started. */
async function npmStart(role: string) {
  const dir = await mkdtemp(join(tmpdir(), 'npm-parent-'));
  dirs.push(dir);
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
      CALLSYNC_ROLE: role,
      CALLSYNC_CONFIG: '',
      REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      OPS_PORT: 'off',
      SPOOL_ENABLED: 'false',
      DATA_DIR: dir,
    },
  });
  leftover.add(-npm.pid!);
  const log = () => readFile(logFile, 'utf8').catch(() => '');
  await waitFor(async () => (await log()).includes('"msg":"callsync started"') || null, {
    what: 'npm start to start callsync',
    timeoutMs: 60_000,
  });
  const node = await callsyncUnder(npm.pid!);
  assert.ok(node, 'the callsync process under npm');
  leftover.add(node);
  return { npm: npm.pid!, node, log };
}

test('npm start stopped by a SIGTERM to npm alone: callsync stops too, as on SIGTERM', async () => {
  const { npm, node, log } = await npmStart('ingress');
  // `kill $!`: npm alone, not its process group.
  process.kill(npm, 'SIGTERM');
  await waitFor(async () => !alive(node) || null, { what: 'callsync to stop after npm', timeoutMs: 20_000 });
  const text = await log();
  assert.match(text, /"msg":"npm ended without stopping callsync \(its shell exited\): stopping as on SIGTERM"/);
  assert.match(text, /"msg":"stopped"/);
});

test('SIGTERM to callsync, then npm and its shell killed: one orderly stop, no second signal', async () => {
  const { npm, node, log } = await npmStart('all');
  const shell = await parentOf(node);
  assert.ok(shell !== null && shell !== npm, "npm's shell, callsync's parent");
  process.kill(node, 'SIGTERM');
  await waitFor(async () => (await log()).includes('"msg":"shutting down') || null, { what: 'the shutdown to begin' });
  // Its parents gone while it stops: what a supervisor ending the group's parents does.
  process.kill(npm, 'SIGKILL');
  process.kill(shell, 'SIGKILL');
  await waitFor(async () => !alive(node) || null, { what: 'callsync to stop', timeoutMs: 30_000 });
  const text = await log();
  assert.match(text, /"msg":"stopped"/);
  assert.doesNotMatch(text, /second signal|npm ended without stopping callsync/);
});
