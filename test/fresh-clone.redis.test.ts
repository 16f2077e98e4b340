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

test(
  'npm test without a running Redis: one is started on 127.0.0.1:6379 for the run and stopped after it; without redis-server, one line and exit 1',
  { skip: namespaces ? false : 'unshare --net is not permitted here (needs root)' },
  async () => {
    // What test/run.sh does first (test/support/test-redis.sh), in a namespace where nothing answers
    // at 127.0.0.1:6379. Before, the suite ran on into minutes of ECONNREFUSED stack traces.
    // A fresh machine's shell: no TEST_REDIS_URL (test/run.sh sets one for the lanes on a redis-server of their own).
    const script = `ip link set lo up
unset TEST_REDIS_URL
cd "${tree}"
source test/support/test-redis.sh
ensure_test_redis
echo "ensure exit $?"
redis-cli -p 6379 ping
stop_test_redis
redis-cli -p 6379 ping 2>&1 | head -n 1
REDIS_SERVER_BIN=/nonexistent/redis-server ensure_test_redis 2>&1
echo "without redis-server exit $?"
TEST_REDIS_URL=redis://127.0.0.1:6390 ensure_test_redis 2>&1
echo "TEST_REDIS_URL away exit $?"
`;
    const r = spawnSync('unshare', ['--net', 'bash', '-c', script], { encoding: 'utf8', timeout: 30_000 });
    assert.equal(r.status, 0, r.stderr);
    const lines = r.stdout.trim().split('\n');
    assert.match(
      lines[0]!,
      /^== no Redis answered at 127\.0\.0\.1:6379: npm test started one there for this run \(redis-server, pid \d+\)$/,
    );
    assert.deepEqual(lines.slice(1), [
      'ensure exit 0',
      'PONG',
      'Could not connect to Redis at 127.0.0.1:6379: Connection refused',
      'npm test: no Redis answers at 127.0.0.1:6379 and there is no /nonexistent/redis-server to start one: install Redis 6.2 or later (apt install redis-server, brew install redis) or set TEST_REDIS_URL; npm run test:unit runs the tests that need none',
      'without redis-server exit 1',
      'npm test: no Redis answers at TEST_REDIS_URL (127.0.0.1:6390); start it, or unset TEST_REDIS_URL and npm test starts one on 127.0.0.1:6379',
      'TEST_REDIS_URL away exit 1',
    ]);
  },
);
