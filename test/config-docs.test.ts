// The documentation of the configuration cannot drift from the code: README's variable table lists
// exactly the variables of the one environment schema, every variable table of README and docs/*.md
// gives the schema's defaults (.env.example's values too), README and docs/*.md name no variable
// callsync does not read, the tests' Redis variable is the one
// README names, and the retry time README and docs/reliability.md state for JOB_ATTEMPTS is computed
// from the backoff and the defaults.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { envSchema, envVariables } from '../src/config/env.js';
import { backoffDelay } from '../src/backoff.js';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const readme = read('README.md');
// docs/performance.md is a log of past rounds: the variables of its benchmarks are named there.
const docFiles = [
  'README.md',
  ...readdirSync(new URL('../docs/', import.meta.url))
    .filter((f) => f.endsWith('.md') && f !== 'performance.md')
    .map((f) => `docs/${f}`),
];

/** The rows of README's table under "## Configuration": the variables of the first column, the default cell. */
function tableRows(): { names: string[]; defaults: string }[] {
  const section = readme.slice(readme.indexOf('\n## Configuration\n'));
  const table = /\n(\| variable \|[^\n]*\n(?:\|[^\n]*\n)+)/.exec(section)?.[1] ?? '';
  assert.ok(table.length > 0, 'README has the variable table under "## Configuration"');
  return table
    .split('\n')
    .filter((r) => r.startsWith('|'))
    .slice(2)
    .map((row) => {
      const [, names = '', defaults = ''] = row.split('|').map((c) => c.trim());
      return { names: [...names.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!), defaults };
    });
}

/** The variable names in the first column of README's table under "## Configuration". */
const tableVariables = (): string[] => tableRows().flatMap((r) => r.names);

/** A schema default as the docs write it: `30000`, `true`, `./data`; byte sizes may read `1 GiB`. */
function defaultTexts(value: unknown): string[] {
  const text = String(value);
  const texts = [`\`${text}\``];
  if (typeof value === 'number')
    for (const [unit, size] of [
      ['GiB', 2 ** 30],
      ['MiB', 2 ** 20],
    ] as const)
      if (value >= size && value % size === 0) texts.push(`${value / size} ${unit}`);
  return texts;
}

test("README's configuration table lists exactly the variables of the schema", () => {
  const documented = tableVariables();
  const declared = envVariables();
  assert.deepEqual(
    [...new Set(documented)].sort(),
    declared,
    'every variable of the schema is in the table, and only those',
  );
  assert.equal(documented.length, new Set(documented).size, 'each variable once');
});

/**
 * Every variable table of README and docs/*.md (a header `| variable | default |`, any case): its
 * rows, the variables of the first column, the default cell. Several variables in one row
 * (`A` / `B`, `A`, `B`) have their defaults in the same order, likewise separated.
 */
function allTableRows(): { file: string; names: string[]; defaults: string }[] {
  const out = [];
  for (const file of docFiles)
    for (const [table] of read(file).matchAll(/^\| variable \| default \|[^\n]*\n(?:\|[^\n]*\n)+/gim))
      for (const row of table
        .split('\n')
        .filter((r) => r.startsWith('|'))
        .slice(2)) {
        const [, names = '', defaults = ''] = row.split('|').map((c) => c.trim());
        out.push({ file, names: [...names.matchAll(/`([A-Z][A-Z0-9_]*)`/g)].map((m) => m[1]!), defaults });
      }
  return out;
}

test('the variable tables of README and docs/*.md, and .env.example, give each variable the default of the schema', () => {
  const defaults = envSchema.parse({}) as Record<string, unknown>;
  // Variables whose default is decided by their reader (undefined or [] in the schema) are not checked here.
  const fixed = (name: string) =>
    defaults[name] !== undefined && !(Array.isArray(defaults[name]) && defaults[name].length === 0);
  const wrong: string[] = [];
  const checkedIn = new Map<string, number>();
  for (const { file, names, defaults: cell } of allTableRows()) {
    // `A` / `B` | `1` / `2` (or `A`, `B` | `1`, `2`): one default per variable, in the same order.
    const cells = names.length > 1 ? cell.split(cell.includes(' / ') ? ' / ' : ', ') : [cell];
    names.forEach((name, i) => {
      if (!fixed(name)) return;
      checkedIn.set(file, (checkedIn.get(file) ?? 0) + 1);
      const documented = (cells.length === names.length ? cells[i] : cell)!.trim();
      if (!defaultTexts(defaults[name]).some((t) => documented.startsWith(t)))
        wrong.push(`${file} ${name}: "${documented}", the schema's default is ${String(defaults[name])}`);
    });
  }
  assert.ok((checkedIn.get('README.md') ?? 0) > 40, `README's defaults were found (${checkedIn.get('README.md')})`);
  assert.ok((checkedIn.get('docs/operations.md') ?? 0) >= 5, "docs/operations.md's tables were found");
  // .env.example: `# NAME=value`, the value the default (or empty when the reader decides).
  for (const [, name, value] of read('.env.example').matchAll(/^# ([A-Z][A-Z0-9_]*)=(.*)$/gm)) {
    if (!fixed(name!)) continue;
    const def = defaults[name!];
    if (value !== (Array.isArray(def) ? def.join(',') : String(def)))
      wrong.push(`.env.example ${name}: "${value}", the schema's default is ${String(def)}`);
  }
  assert.deepEqual(wrong, []);
});

test('README and docs/*.md name no environment variable that callsync does not read', () => {
  const declared = new Set(envVariables());
  // A value that looks like a variable name, the tests' own variable, and Node's.
  // INGRESS_BIND_ADDRESS is read by docker-compose.yml (where port 3000 is published), not by callsync.
  const notVariables = new Set([
    'NO_ANSWER',
    'TEST_REDIS_URL',
    'NODE_OPTIONS',
    'NODE_EXTRA_CA_CERTS',
    'INGRESS_BIND_ADDRESS',
  ]);
  // Read by the OpenTelemetry SDK itself (docs/operations.md "Traces"); a benchmark's; HubSpot's
  // names of a rate-limit policy and error categories; the limit a test sets with ulimit.
  for (const name of [
    'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    'OTEL_EXPORTER_OTLP_HEADERS',
    'OTEL_EXPORTER_OTLP_TIMEOUT',
    'OTEL_SERVICE_NAME',
    'OTEL_SDK_DISABLED',
    'OTEL_TRACES_EXPORTER',
    'BENCH_TIMELINE',
    'TEN_SECONDLY_ROLLING',
    'INVALID_VALUE',
    'VALIDATION_ERROR',
    'RLIMIT_FSIZE',
  ])
    notVariables.add(name);
  const wrong: string[] = [];
  for (const file of docFiles) {
    // `NAME_*` names a family of variables, not one.
    const named = [...read(file).matchAll(/`([A-Z][A-Z0-9]*_[A-Z0-9_]+)(?![A-Z0-9_]*\*)/g)].map((m) => m[1]!);
    for (const n of new Set(named)) if (!declared.has(n) && !notVariables.has(n)) wrong.push(`${file}: ${n}`);
  }
  assert.deepEqual(wrong, []);
});

test('the tests read the Redis variable README names for them', () => {
  const support = read('test/support/redis.ts');
  assert.match(support, /process\.env\.TEST_REDIS_URL/);
  assert.match(readme, /The tests use the Redis at `TEST_REDIS_URL`/);
});

test('the time JOB_ATTEMPTS spends in backoff is what README and docs/reliability.md say', () => {
  const defaults = envSchema.parse({});
  const attempts = defaults.JOB_ATTEMPTS;
  const total = (random: () => number) => {
    let ms = 0;
    for (let retry = 1; retry < attempts; retry++)
      ms += backoffDelay(retry, defaults.JOB_BACKOFF_MS, defaults.JOB_MAX_BACKOFF_MS, random);
    return ms;
  };
  const minutes = (ms: number) => Math.round(ms / 60_000);
  const least = minutes(total(() => 0));
  const most = minutes(total(() => 1));
  const average = minutes(total(() => 0.5));
  assert.deepEqual([least, average, most], [16, 24, 32], 'the figures the docs give (change them together)');
  const phrase = `${attempts - 1} retries over ${least}–${most} min, about ${average} min on average`;
  assert.ok(readme.includes(phrase), `README: "${phrase}"`);
  assert.ok(read('docs/reliability.md').replace(/\s+/g, ' ').includes(`${least}–${most} min`), 'docs/reliability.md');
  for (const [file, text] of [
    ['README.md', readme],
    ['docs/reliability.md', read('docs/reliability.md')],
    ['queues/registry.ts', read('queues/registry.ts')],
  ]) {
    assert.doesNotMatch(text!, /about an hour|≈ an\s+hour/, `${file} no longer says "about an hour"`);
  }
});
