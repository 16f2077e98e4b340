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
  'src/redact': 0,
  'src/errors': 0.5,
  'src/log': 0,
  'src/backoff': 0,
  'src/deadline': 0,
  'src/http-request': 0.5,
  'src/listen': 0,
  'src/env-values': 0,
  'src/redis-slot': 0,
  'src/charset': 0,
  'src/list-trim': 0,
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

/** Imports that go up or sideways in LAYERS, as `file imports dep (from → to)`. */
function wrongImports(g: Map<string, string[]>): string[] {
  const wrong: string[] = [];
  for (const [file, deps] of g) {
    const from = areaOf(file);
    for (const dep of deps) {
      const to = areaOf(dep);
      if (to !== from && !(LAYERS[to]! < LAYERS[from]!))
        wrong.push(`${relative(ROOT, file)} imports ${relative(ROOT, dep)} (${from} → ${to})`);
    }
  }
  return wrong;
}

/** Import cycles between the files of `g`, each as `a → b → a`. */
function cyclesOf(g: Map<string, string[]>): string[] {
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'open');
    stack.push(file);
    for (const dep of g.get(file) ?? []) {
      if (!g.has(dep)) continue;
      if (state.get(dep) === 'open')
        cycles.push([...stack.slice(stack.indexOf(dep)), dep].map((f) => relative(ROOT, f)).join(' → '));
      else if (!state.has(dep)) visit(dep);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of g.keys()) if (!state.has(file)) visit(file);
  return cycles;
}

test('imports go down the layers only', () => {
  assert.deepEqual(wrongImports(graph), []);
});

test('no import cycles between files', () => {
  assert.deepEqual(cyclesOf(graph), []);
});

test('the layer check sees a wrong import and a cycle (it can fail)', () => {
  // The real graph with one wrong line added: a sink importing the worker role, errors.ts a sink.
  const sink = join(ROOT, 'src', 'sinks', 'archive', 'index.ts');
  const role = join(ROOT, 'workers', 'roles', 'worker.ts');
  const errors = join(ROOT, 'src', 'errors.ts');
  assert.ok(graph.has(sink) && graph.has(role) && graph.has(errors), 'the files of this check exist');
  const broken = new Map(graph);
  broken.set(sink, [...graph.get(sink)!, role]);
  broken.set(errors, [...graph.get(errors)!, sink]);
  assert.deepEqual(wrongImports(broken).sort(), [
    'src/errors.ts imports src/sinks/archive/index.ts (src/errors → src/sinks)',
    'src/sinks/archive/index.ts imports workers/roles/worker.ts (src/sinks → workers)',
  ]);
  assert.deepEqual(cyclesOf(graph).length, 0);
  const redact = join(ROOT, 'src', 'redact.ts');
  const cyclic = new Map(graph);
  cyclic.set(redact, [errors]);
  const found = cyclesOf(cyclic);
  assert.equal(found.length, 1, 'the cycle errors.ts ⇄ redact.ts is seen');
  assert.match(found[0]!, /^src\/(errors|redact)\.ts → src\/(redact|errors)\.ts → src\/(errors|redact)\.ts$/);
  assert.ok(
    importsOf(join(ROOT, 'workers', 'callsync.ts')).some((d) => areaOf(d) === 'queues'),
    'import lines are read',
  );
});

test('the rooms at the root: redaction imports nothing, the error classes only redaction', () => {
  const local = (file: string) => (graph.get(join(ROOT, file)) ?? []).map((d) => relative(ROOT, d));
  assert.deepEqual(local('src/redact.ts'), []);
  assert.deepEqual(local('src/errors.ts'), ['src/redact.ts']);
  // The redaction code lives in src/redact.ts only, not again in src/errors.ts.
  const errorsText = readFileSync(join(ROOT, 'src', 'errors.ts'), 'utf8');
  assert.deepEqual(
    ['redactRemoteText', 'scrubEchoes', 'maskDigitRuns', 'clipText'].filter((n) =>
      new RegExp(`function ${n}\\b`).test(errorsText),
    ),
    [],
  );
});

/** Where sink errors may be made: the sinks, the telephony client they (and the poller) call, errors.ts itself. */
const SINK_ERROR_MAKERS = /^(src\/sinks\/|src\/telephony\/|src\/errors\.ts$)/;
const MAKES_SINK_ERROR =
  /\bnew (PermanentError|TransientError|AuthError|RetryLaterError|EndpointDisabledError)\(|\berrorFrom(Http|Network)\(/;

test('sink errors are made by sink code only; the mailer needs nothing of the telephony client', () => {
  const wrong = files
    .map((f) => relative(ROOT, f))
    .filter((f) => !SINK_ERROR_MAKERS.test(f) && MAKES_SINK_ERROR.test(readFileSync(join(ROOT, f), 'utf8')));
  assert.deepEqual(wrong, [], 'throw UnprocessableJobError (or an error of your own) outside sink code');
  assert.ok(
    MAKES_SINK_ERROR.test('if (!queue) throw new PermanentError(`route names sink`);'),
    'the check sees a sink error being made',
  );
  assert.deepEqual(
    (graph.get(join(ROOT, 'src', 'sinks', 'notify', 'mailer.ts')) ?? [])
      .map((d) => relative(ROOT, d))
      .filter((d) => d.startsWith('src/telephony/')),
    [],
  );
});

test('tests named without .redis need no Redis: they import no Redis client, queue or Redis-backed test support', () => {
  const testDir = join(ROOT, 'test');
  // What a test uses to reach Redis or start servers: a Redis client or queue, the Redis-backed helpers
  // (the support's REDIS_URL imported, not the variable's name in a configuration).
  const redisSupport =
    /from '(ioredis|bullmq)'|\b(startTestCallsync|startOpsCallsync|crmTestDeps|startS3|startSmtp|RedisServer|cleanupPrefix)\b|import\s*\{[^}]*\bREDIS_URL\b[^}]*\}\s*from/;
  const wrong = readdirSync(testDir)
    .filter((name) => name.endsWith('.test.ts') && !name.endsWith('.redis.test.ts') && name !== 'layers.test.ts')
    .filter((name) => redisSupport.test(readFileSync(join(testDir, name), 'utf8')));
  assert.deepEqual(wrong, [], 'rename these to *.redis.test.ts (npm run test:unit runs the others without Redis)');
  assert.ok(redisSupport.test("import { Redis } from 'ioredis';"), 'the check sees a Redis import');
  assert.ok(redisSupport.test("import { REDIS_URL } from './support/redis.js';"), "the check sees the support's URL");
  assert.ok(!redisSupport.test("loadConfig({ REDIS_URL: 'redis://h:1' })"), 'a configuration key is no Redis');
});
