// The layers of docs/architecture.md, checked on the source: which folder may import which, no
// import cycles between files, and the error classes at the root importing nothing. Reads the
// import lines of src/, queues/ and workers/ (static, type-only and dynamic imports alike).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Each area and its rank: a file may import its own area and areas of a lower rank only. Keep in
 * step with the table in docs/architecture.md.
 */
export const LAYERS: Record<string, number> = {
  'src/errors': 0,
  'src/log': 0,
  'src/backoff': 0,
  'src/listen': 0,
  'src/env-values': 0,
  'src/telemetry': 0,
  'src/model': 1,
  queues: 2,
  'src/routing': 2,
  'src/state': 2,
  'src/telephony': 2,
  'src/metrics': 3,
  'src/sinks': 3,
  'src/config': 4,
  'src/sources': 3.5,
  'src/ingress': 5,
  'src/ops': 6,
  'src/privacy': 6.5,
  'src/cli': 7,
  workers: 8,
};

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

/** `src/sinks/crm/hubspot.ts` → `src/sinks`; `src/log.ts` → `src/log`; `workers/roles/x.ts` → `workers`. */
function areaOf(file: string): string {
  const parts = relative(ROOT, file).split('/');
  if (parts[0] !== 'src') return parts[0]!;
  return `src/${parts[1]!.replace(/\.ts$/, '')}`;
}

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^;]*?from\s+'(\.[^']+)'|import\(\s*'(\.[^']+)'\s*\)/g;

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(IMPORT)) out.push(resolve(dirname(file), (m[1] ?? m[2])!.replace(/\.js$/, '.ts')));
  return out;
}

const files = ['src', 'queues', 'workers'].flatMap((d) => sourceFiles(join(ROOT, d)));
const graph = new Map(files.map((f) => [f, importsOf(f)]));

test('every area is in the layer table', () => {
  const unknown = [...new Set(files.map(areaOf))].filter((a) => !(a in LAYERS));
  assert.deepEqual(unknown, [], 'add new areas to LAYERS here and to docs/architecture.md');
});

test('imports go down the layers only', () => {
  const wrong: string[] = [];
  for (const [file, deps] of graph) {
    const from = areaOf(file);
    for (const dep of deps) {
      const to = areaOf(dep);
      if (to !== from && !(LAYERS[to]! < LAYERS[from]!)) wrong.push(`${relative(ROOT, file)} imports ${relative(ROOT, dep)} (${from} → ${to})`);
    }
  }
  assert.deepEqual(wrong, []);
});

test('no import cycles between files', () => {
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    stack.push(file);
    for (const dep of graph.get(file) ?? []) {
      if (!graph.has(dep)) continue;
      if (state.get(dep) === 'open') cycles.push([...stack.slice(stack.indexOf(dep)), dep].map((f) => relative(ROOT, f)).join(' → '));
      else if (!state.has(dep)) visit(dep);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  assert.deepEqual(cycles, []);
});

test('the layer check sees a wrong import (it can fail)', () => {
  assert.ok(LAYERS.workers! > LAYERS['src/sinks']!, 'a sink importing workers/ would be refused');
  assert.ok(importsOf(join(ROOT, 'workers', 'callsync.ts')).some((d) => areaOf(d) === 'queues'), 'import lines are read');
});

test('tests named without .redis need no Redis: they import no Redis client, queue or Redis-backed test support', () => {
  const testDir = join(ROOT, 'test');
  // What a test uses to reach Redis or start servers: a Redis client or queue, the Redis-backed helpers.
  const redisSupport = /from '(ioredis|bullmq)'|\b(startTestCallsync|startOpsCallsync|crmTestDeps|startS3|startSmtp|RedisServer|REDIS_URL|cleanupPrefix)\b/;
  const wrong = readdirSync(testDir)
    .filter((name) => name.endsWith('.test.ts') && !name.endsWith('.redis.test.ts') && name !== 'layers.test.ts')
    .filter((name) => redisSupport.test(readFileSync(join(testDir, name), 'utf8')));
  assert.deepEqual(wrong, [], 'rename these to *.redis.test.ts (npm run test:unit runs the others without Redis)');
  assert.ok(redisSupport.test("import { Redis } from 'ioredis';"), 'the check sees a Redis import');
});
