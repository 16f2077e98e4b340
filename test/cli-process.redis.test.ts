// The `callsync` command as a real process (bin/callsync.js): output to a reader that has gone
// (`| head -1`) ends quietly, and `start` says each start-up warning once.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { bounded, startCallsyncProcess } from './support/callsync-process.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

interface Ended {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

/**
 * Runs `callsync <args>` with its stdout piped to a reader that closes early: at once (before the
 * command writes anything, so its first write meets a closed pipe) or after the first line (`| head -1`).
 */
function runIntoClosedPipe(
  args: string[],
  env: NodeJS.ProcessEnv,
  closeAfterLines: 0 | 1,
): Promise<Ended & { read: string[] }> {
  const child = spawn(process.execPath, [BIN, ...args], {
    env: { ...process.env, CALLSYNC_FROM_SOURCE: '1', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const read: string[] = [];
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  if (closeAfterLines === 0) child.stdout.destroy();
  else {
    const lines = createInterface({ input: child.stdout });
    lines.once('line', (line) => {
      read.push(line);
      lines.close();
      child.stdout.destroy();
    });
  }
  const ended = new Promise<Ended & { read: string[] }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal, stderr, read })),
  );
  return bounded(ended, 60_000, `callsync ${args.join(' ')} to end`);
}

describe('output to a closed pipe', () => {
  const env = { REDIS_URL, QUEUE_PREFIX: uniquePrefix('pipe'), ARCHIVE_DIR: join(tmpdir(), 'callsync-never-written') };

  test('check-config and --help into a reader that is already gone end quietly with exit 0', async () => {
    for (const args of [['check-config'], ['check-config', '--json'], ['--help'], ['dlq', '--help']]) {
      const r = await runIntoClosedPipe(args, env, 0);
      assert.equal(
        r.stderr,
        '',
        `callsync ${args.join(' ')}: nothing on stderr (before: an unhandled EPIPE with its stack trace)`,
      );
      assert.deepEqual([r.code, r.signal], [0, null], `callsync ${args.join(' ')}`);
    }
  });

  test('`callsync check-config | head -1`: the first line is read, the rest is dropped quietly, exit 0', async () => {
    const r = await runIntoClosedPipe(['check-config'], env, 1);
    assert.deepEqual(r.read, ['configuration OK']);
    assert.equal(r.stderr, '');
    assert.deepEqual([r.code, r.signal], [0, null]);
  });

  test('a command that fails keeps its exit code and its message on stderr', async () => {
    const r = await runIntoClosedPipe(['check-config'], { ...env, PORT: 'eighty' }, 0);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /PORT: expected a whole number/);
    assert.doesNotMatch(r.stderr, /EPIPE/);
  });
});

describe('start-up warnings', () => {
  const prefix = uniquePrefix('warn-once');
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-warn-once-'));
  });
  after(async () => {
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('PUSH_API_VERIFY=false and WEBHOOK_ALLOWED_IPS=* are each logged once at start', async () => {
    const child = startCallsyncProcess({
      CALLSYNC_FROM_SOURCE: '1',
      REDIS_URL,
      QUEUE_PREFIX: prefix,
      PORT: '0',
      HOST: '127.0.0.1',
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      PUSH_API_VERIFY: 'false',
      WEBHOOK_ALLOWED_IPS: '*',
      LOG_LEVEL: 'info',
    });
    try {
      await bounded(child.url, 60_000, 'the ingress to listen', child);
      await waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
        timeoutMs: 30_000,
        what: 'callsync started',
      });
    } finally {
      child.proc.kill('SIGTERM');
      await bounded(child.exit, 60_000, 'callsync to stop', child);
    }
    const said = (text: string) => child.lines.filter((l) => typeof l.msg === 'string' && l.msg.startsWith(text));
    assert.equal(said('PUSH_API_VERIFY=false').length, 1, JSON.stringify(said('PUSH_API_VERIFY=false')));
    assert.equal(said('WEBHOOK_ALLOWED_IPS=*').length, 1, JSON.stringify(said('WEBHOOK_ALLOWED_IPS=*')));
    assert.equal(said('PUSH_API_VERIFY=false')[0]?.level, 40);
  });
});
