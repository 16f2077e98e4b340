// A stop that takes a while says what it waits for: every 5 s a line names the shutdown steps
// still running, and when the grace period runs out its line names them too (before, an operator
// saw "shutting down" and, 25 s later, "grace period over", and nothing in between). In-process,
// as `callsync start` runs (workers/run.ts), with a sink whose close takes its time.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import { startOpsCallsync } from './support/ops.js';
import { cleanupPrefix } from './support/redis.js';

class SlowClosingSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  release!: () => void;
  private readonly released = new Promise<void>((resolve) => (this.release = resolve));
  constructor(private readonly closeMs: number) {}
  async deliver(_call: CanonicalCall): Promise<SinkResult> {
    return { status: 'done', refs: {} };
  }
  async close(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([this.released, new Promise((r) => (timer = setTimeout(r, this.closeMs)))]);
    clearTimeout(timer);
  }
}

async function stopWith(sink: SlowClosingSink, graceMs: number) {
  const dir = await mkdtemp(join(tmpdir(), 'shutdown-progress-'));
  const cs = await startOpsCallsync(
    { ARCHIVE_DIR: dir, SHUTDOWN_GRACE_MS: String(graceMs), OPS_PORT: 'off' },
    { sinks: new Map([['archive', sink]]) },
  );
  try {
    const code = await cs.shutdown('test');
    const stop = cs.logs.slice(cs.logs.findIndex((l) => String(l.msg).startsWith('shutting down: refusing')));
    return { code, stop };
  } finally {
    sink.release();
    await cleanupPrefix(cs.prefix);
    await rm(dir, { recursive: true, force: true });
  }
}

test('a stop that takes a while logs every 5 s which steps it still waits for, then stops (exit 0)', async () => {
  const { code, stop } = await stopWith(new SlowClosingSink(7_000), 20_000);
  assert.equal(code, 0);
  const waiting = stop.filter((l) => l.msg === 'shutting down: still waiting');
  assert.equal(waiting.length, 1, JSON.stringify(stop));
  assert.deepEqual(waiting[0]!.waitingFor, ['stop worker role', 'close sinks']);
  assert.ok(Number(waiting[0]!.elapsedMs) >= 5_000);
  assert.equal(stop.at(-1)?.msg, 'stopped');
});

test('a stop past its grace period names the steps it still waited for (exit 1)', async () => {
  const { code, stop } = await stopWith(new SlowClosingSink(60_000), 3_000);
  assert.equal(code, 1);
  const over = stop.find((l) => String(l.msg).startsWith('shutdown grace period over'));
  assert.ok(over, JSON.stringify(stop));
  assert.deepEqual(over.waitingFor, ['stop worker role', 'close sinks']);
});
