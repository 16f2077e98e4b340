// The worker process' heap growth (workers/heap.ts, WORKER_HEAP_GROWTH_PERCENT): the setting, and
// V8 using it at the next full GC (its own trace of the limit it computes, in a child process).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { ConfigError, loadConfig } from '../src/config/index.js';

test('WORKER_HEAP_GROWTH_PERCENT: 30 by default, a percent when set (0: V8 alone), no negative values', () => {
  assert.equal(loadConfig({}).worker.heapGrowthPercent, 30);
  assert.equal(loadConfig({ WORKER_HEAP_GROWTH_PERCENT: '40' }).worker.heapGrowthPercent, 40);
  assert.equal(loadConfig({ WORKER_HEAP_GROWTH_PERCENT: '0' }).worker.heapGrowthPercent, 0);
  assert.equal(loadConfig({ WORKER_HEAP_GROWTH_PERCENT: '25' }).worker.heapGrowthPercent, 25);
  assert.throws(
    () => loadConfig({ WORKER_HEAP_GROWTH_PERCENT: '-1' }),
    (err) => err instanceof ConfigError && err.problems.some((p) => p.includes('WORKER_HEAP_GROWTH_PERCENT')),
  );
});

/** The growth factors V8 computed at the full GCs of a child process that ran `script` first. */
function factorsAfter(script: string): string[] {
  const out = execFileSync(
    process.execPath,
    ['--expose-gc', '--trace-gc-verbose', '--import', 'tsx', '--input-type=module', '-e', script],
    { cwd: new URL('..', import.meta.url), encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] },
  );
  // `[HeapController] Limit: old size: … KB, new limit: … KB (1.4)`: the factor the new limit used.
  return [...out.matchAll(/\[HeapController\] Limit: .*\(([\d.]+)\)$/gm)].map((m) => m[1]!);
}

const fullGcs = `
  const keep = [];
  for (let i = 0; i < 200_000; i++) keep.push({ i, s: 'x' + i });
  globalThis.gc();
  globalThis.gc();
  console.log(keep.length);
`;

test('limitHeapGrowth(40): the next full GCs set the old generation limit with factor 1.4', () => {
  const factors = factorsAfter(
    `import { limitHeapGrowth } from './workers/heap.ts'; if (!limitHeapGrowth(40)) throw new Error('not set'); ${fullGcs}`,
  );
  assert.ok(factors.length >= 2, `full GCs traced: ${factors.join(', ')}`);
  assert.deepEqual(new Set(factors), new Set(['1.4']));
});

test('limitHeapGrowth(0) sets nothing: V8 keeps its own factor', () => {
  const factors = factorsAfter(
    `import { limitHeapGrowth } from './workers/heap.ts'; if (limitHeapGrowth(0)) throw new Error('set'); ${fullGcs}`,
  );
  assert.ok(factors.length >= 2, `full GCs traced: ${factors.join(', ')}`);
  assert.ok(!factors.includes('1.4'), `factors: ${factors.join(', ')}`);
});
