// Erasing calls from the ingress spool (src/ingress/spool-forget.ts): without a live holder the
// matching lines are cut out of the segments (an emptied segment is deleted, the lock is released);
// with a live ingress holding the folder, forget waits for it to drain them and reports a holder
// that does not (exit 1 in the CLI), never writing under it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { eraseFromSpool, SpoolBusyError } from '../src/ingress/spool-forget.js';

const line = (id: string, from: string) =>
  JSON.stringify({ v: 1, id, at: '2026-11-26T10:00:00Z', call: { key: `ai-agent:a:${id}`, callId: id, from } });
const isA = (l: string) => l.includes('+491701234567');

async function spoolWith(segments: string[][]): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'spool-forget-'));
  for (const [i, lines] of segments.entries())
    await writeFile(join(dir, `${String(i + 1).padStart(16, '0')}.jsonl`), `${lines.join('\n')}\n`);
  return dir;
}

test('no live holder: matching lines cut out, an emptied segment deleted, the lock released; a dry run counts only', async () => {
  const dir = await spoolWith([
    [line('a1', '+491701234567'), line('b1', '+491761234599')],
    [line('a2', '+491701234567')],
  ]);
  try {
    assert.deepEqual(await eraseFromSpool(dir, isA, { dryRun: true, waitMs: 0 }), { removed: 2, drained: 0 });
    assert.equal((await readdir(dir)).length, 2, 'the dry run changed nothing');
    // A lock of a process that is gone is stale: taken over.
    await writeFile(join(dir, 'LOCK'), '999999999');
    assert.deepEqual(await eraseFromSpool(dir, isA, { dryRun: false, waitMs: 0 }), { removed: 2, drained: 0 });
    assert.deepEqual((await readdir(dir)).sort(), ['0000000000000001.jsonl']);
    const left = await readFile(join(dir, '0000000000000001.jsonl'), 'utf8');
    assert.ok(left.includes('b1') && !left.includes('a1'));
    assert.deepEqual(
      await eraseFromSpool(dir, isA, { dryRun: false, waitMs: 0 }),
      { removed: 0, drained: 0 },
      'idempotent',
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("a segment's rewrite left by a killed forget (other callers' lines) goes at the next forget, its lines counted", async () => {
  // A forget of another caller, killed after it wrote the rewrite and before the rename: the segment
  // is whole, the temporary file a copy of the lines it kept, A's among them.
  const dir = await spoolWith([[line('b1', '+491761234599')]]);
  const leftover = join(dir, '0000000000000001.jsonl.forget.tmp');
  await writeFile(leftover, `${line('a1', '+491701234567')}\n${line('b1', '+491761234599')}\n`);
  try {
    assert.deepEqual(await eraseFromSpool(dir, isA, { dryRun: true, waitMs: 0 }), { removed: 1, drained: 0 });
    assert.deepEqual(await eraseFromSpool(dir, isA, { dryRun: false, waitMs: 0 }), { removed: 1, drained: 0 });
    assert.deepEqual(await readdir(dir), ['0000000000000001.jsonl'], 'the leftover is gone, the segment stays');
    assert.ok((await readFile(join(dir, '0000000000000001.jsonl'), 'utf8')).includes('b1'));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('a live ingress holds the spool: forget waits for it to drain the lines, or says it did not', async () => {
  const dir = await spoolWith([[line('a1', '+491701234567'), line('b1', '+491761234599')]]);
  // A live process other than this one holds the lock (as a running ingress would).
  const holder = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)'], { stdio: 'ignore' });
  try {
    await writeFile(join(dir, 'LOCK'), String(holder.pid));
    await assert.rejects(eraseFromSpool(dir, isA, { dryRun: false, waitMs: 300 }), SpoolBusyError);
    assert.ok(
      (await readFile(join(dir, '0000000000000001.jsonl'), 'utf8')).includes('a1'),
      'nothing written under a live holder',
    );
    // The holder drains the segment (into Redis) while forget waits.
    const waiting = eraseFromSpool(dir, isA, { dryRun: false, waitMs: 10_000 });
    setTimeout(() => void rm(join(dir, '0000000000000001.jsonl')), 300);
    assert.deepEqual(await waiting, { removed: 0, drained: 1 });
  } finally {
    holder.kill();
    await rm(dir, { recursive: true, force: true });
  }
});
