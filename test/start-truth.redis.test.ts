// A start that tells the truth: a Redis never reached since start is not an outage — /readyz
// answers 503 with the reason although the spool could take webhooks — and once it was reached an
// outage is the spool's (ready). During a 30 s outage the process logs each kind of connection
// error at most once per 10 s, with a count, instead of several lines a second.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';

const OUTAGE_MS = 30_000;

let dir: string;
let redis: PrivateRedis;
let child: CallsyncProcess | undefined;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'callsync-start-truth-'));
  redis = await startPrivateRedis();
  await redis.stop();
});

after(async () => {
  if (child && child.proc.exitCode === null) {
    child.proc.kill('SIGTERM');
    await bounded(child.exit, 30_000, 'callsync to stop', child).catch(() => child?.proc.kill('SIGKILL'));
  }
  await redis.destroy();
  await rm(dir, { recursive: true, force: true });
});

async function readyz(url: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: await res.text() };
}

test('/readyz is 503 until Redis was first reached, ready during a later outage (spool); errors of the outage logged at most once per 10 s per kind', async () => {
  child = startCallsyncProcess({
    REDIS_URL: redis.url,
    QUEUE_PREFIX: uniquePrefix('truth'),
    PORT: '0',
    OPS_PORT: 'off',
    SPOOL_DIR: join(dir, 'spool'),
    ARCHIVE_DIR: join(dir, 'archive'),
    LOG_LEVEL: 'info',
  });
  const url = await bounded(child.url, 30_000, 'the ingress to listen', child);

  // Never reached: not ready, and it says why — although the spool is on and writable.
  const before = await readyz(url);
  assert.equal(before.status, 503, before.body);
  assert.match(before.body, /Redis not reached since start \(redis:\/\/127\.0\.0\.1:\d+\/?\)/);
  // With the cause, as the CLI names it (before: only "not reached").
  assert.match(before.body, /Redis not reached since start \([^)]*\): connection refused \(ECONNREFUSED\)/);

  await redis.start();
  await waitFor(async () => (await readyz(url)).status === 200 || null, {
    timeoutMs: 20_000,
    what: '/readyz 200 once Redis answers',
  });

  // An outage after the first connection: the spool takes webhooks, so the ingress stays ready.
  const from = child.lines.length;
  await redis.stop();
  await new Promise((r) => setTimeout(r, OUTAGE_MS / 2));
  const during = await readyz(url);
  assert.equal(during.status, 200, `the spool serves the outage: ${during.body}`);
  await new Promise((r) => setTimeout(r, OUTAGE_MS / 2));
  const outage = child.lines.slice(from).filter((l) => Number(l.level) >= 40);

  // At most one line per kind (message and error) per 10 s: the first at once, then one per interval.
  const perKind = new Map<string, number>();
  for (const line of outage) {
    const kind = `${String(line.msg)} | ${String((line.err as { message?: string } | undefined)?.message ?? '')}`;
    perKind.set(kind, (perKind.get(kind) ?? 0) + 1);
  }
  const flooding = [...perKind].filter(([, n]) => n > OUTAGE_MS / 10_000 + 1);
  assert.deepEqual(
    flooding,
    [],
    `kinds logged more than once per 10 s:\n${[...perKind].map(([k, n]) => `${n} × ${k}`).join('\n')}`,
  );
  assert.ok(outage.length <= 40, `${outage.length} warning/error lines in ${OUTAGE_MS / 1000} s`);
  // The repeats are counted, not dropped silently.
  assert.ok(
    outage.some((l) => Number(l.repeated) > 1),
    'a later line of a kind says how many there were',
  );

  await redis.start();
  await waitFor(async () => (await readyz(url)).status === 200 || null, {
    timeoutMs: 20_000,
    what: '/readyz 200 after the outage',
  });
  const stopFrom = child.lines.length;
  child.proc.kill('SIGTERM');
  const code = await bounded(child.exit, 30_000, 'callsync to stop', child);
  // Exit 1: its shutdown outlived SHUTDOWN_GRACE_MS (CI once, on a loaded machine); say what it logged meanwhile.
  const stopLines = child.lines.slice(stopFrom).map((l) => JSON.stringify(l));
  assert.equal(code, 0, `the lines of its stop:\n${stopLines.join('\n')}\n${child.stderr.join('\n')}`);
});

test('a worker\'s ops server says the same: /readyz 503 "Redis not reached since start" while its Redis was never reached', async () => {
  const nowhere = await startPrivateRedis();
  const url = nowhere.url;
  await nowhere.destroy();
  const worker = startCallsyncProcess({
    REDIS_URL: url,
    QUEUE_PREFIX: uniquePrefix('truth-worker'),
    CALLSYNC_ROLE: 'worker',
    OPS_PORT: '0',
    LOG_LEVEL: 'info',
  });
  try {
    const ops = await bounded(
      waitFor(() => worker.lines.find((l) => l.msg === 'callsync started')?.opsUrl as string | undefined, {
        timeoutMs: 30_000,
        what: 'the worker to start',
      }),
      35_000,
      'the worker to start',
      worker,
    );
    const res = await readyz(ops);
    assert.equal(res.status, 503);
    assert.match(res.body, /Redis not reached since start \(redis:\/\/127\.0\.0\.1:\d+\/?\)/);
  } finally {
    worker.proc.kill('SIGTERM');
    await bounded(worker.exit, 30_000, 'the worker to stop', worker).catch(() => worker.proc.kill('SIGKILL'));
  }
});
