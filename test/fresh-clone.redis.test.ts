// README's "two commands" on a clean copy of the tree (git archive of HEAD, node_modules linked as
// `npm ci` would have made them), on a machine where no Redis runs: `npm start`, then
// `npx callsync send-sample`, and the call is in data/archive. "No Redis runs" is made true with a
// private network namespace (`unshare --net`, root; only `lo`, brought up inside): 127.0.0.1:6379
// answers nothing there, whatever runs on this machine's loopback. redis-server is on PATH, as after
// `apt install redis-server`.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { alive } from './support/pids.js';

const run = promisify(execFile);
const ROOT = new URL('../', import.meta.url).pathname;
const namespaces = spawnSync('unshare', ['--net', 'true']).status === 0;

let dir: string;
let tree: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'callsync-fresh-clone-'));
  tree = join(dir, 'callsync');
  await run('bash', ['-c', `mkdir -p "${tree}" && git -C "${ROOT}" archive HEAD | tar -x -C "${tree}"`]);
  await symlink(join(ROOT, 'node_modules'), join(tree, 'node_modules'));
});

after(async () => {
  // Whatever the script left running (a failed assertion): stopped by the pids it wrote.
  for (const file of [join(tree, 'npm.pid'), join(tree, 'data', 'redis', 'server.json')]) {
    const text = await readFile(file, 'utf8').catch(() => '');
    const pid = Number(text.startsWith('{') ? (JSON.parse(text) as { pid: number }).pid : text.trim());
    if (pid > 0 && alive(pid)) process.kill(pid, 'SIGKILL');
    // npm start's process group (npm, its shell, callsync): its leader's pid.
    if (file.endsWith('npm.pid') && pid > 0) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        // none left
      }
    }
  }
  await rm(dir, { recursive: true, force: true });
});

test(
  "README's two commands on a clean copy without a running Redis: npm start, send-sample, the call archived",
  { skip: namespaces ? false : 'unshare --net is not permitted here (needs root)' },
  async () => {
    const script = join(dir, 'two-commands.sh');
    await writeFile(
      script,
      `set -u
# Job control: \`npm start\` gets a process group of its own, as in a terminal, for the Ctrl-C below.
set -m
ip link set lo up
cd "${tree}"
export WEBHOOK_ALLOWED_IPS=127.0.0.1,::1
npm start > start.log 2>&1 &
echo $! > npm.pid
for _ in $(seq 1 300); do grep -q '"msg":"callsync started"' start.log && break; sleep 0.1; done
npx callsync send-sample > sample.log 2>&1
echo "send-sample exit $?" >> sample.log
for _ in $(seq 1 200); do ls data/archive/transcripts/*/*/*/*.json > archived.txt 2>/dev/null && break; sleep 0.1; done
# Ctrl-C: SIGINT to the whole process group (npm, its shell, callsync).
kill -INT -- -"$(cat npm.pid)"
for _ in $(seq 1 300); do kill -0 "$(cat npm.pid)" 2>/dev/null || break; sleep 0.1; done
exit 0
`,
    );
    const env = { ...process.env };
    for (const name of [
      'REDIS_URL',
      'REDIS_CLUSTER_NODES',
      'REDIS_SENTINELS',
      'QUEUE_PREFIX',
      'DATA_DIR',
      'ARCHIVE_DIR',
      'SPOOL_DIR',
      'PORT',
      'CALLSYNC_CONFIG',
    ])
      delete env[name];
    const child = spawn('unshare', ['--net', 'bash', script], { env, stdio: 'ignore' });
    const code = await new Promise<number | null>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.once('exit', (c) => {
        clearTimeout(timer);
        resolve(c);
      });
    });
    const startLog = await readFile(join(tree, 'start.log'), 'utf8').catch(() => '');
    const sample = await readFile(join(tree, 'sample.log'), 'utf8').catch(() => '');
    const context = `start.log:\n${startLog.slice(-3000)}\nsample.log:\n${sample}`;
    assert.equal(code, 0, context);
    assert.match(startLog, /started a private Redis/, context);
    assert.match(sample, /^accepted: call sample-/m, context);
    assert.doesNotMatch(sample, /spooled/, context);
    assert.match(sample, /send-sample exit 0/, context);
    // The path send-sample printed is the file the archive wrote.
    const printed = /^archive archive: (\S+\.json) /m.exec(sample)?.[1];
    assert.ok(printed, context);
    const archived = (await readFile(join(tree, 'archived.txt'), 'utf8').catch(() => ''))
      .trim()
      .split('\n')
      .filter(Boolean);
    assert.ok(
      archived.some((file) => join(tree, file) === printed),
      `${printed} among ${archived.join(', ')}`,
    );
    assert.ok(existsSync(printed));
    // Stopped with npm start: the private Redis stopped too.
    assert.match(startLog, /"msg":"stopped"/, context);
    assert.ok(!existsSync(join(tree, 'data', 'redis', 'server.json')), 'the private Redis stopped with callsync');
  },
);
