// The metrics docs cannot drift from the code: docs/operations.md's metrics table lists exactly the
// callsync_* metrics the code registers, each with its type and labels, and every metric the
// README and docs/*.md name (`callsync_x{a,b}`, `callsync_x{a="…"}` in PromQL) exists with those labels.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import client from 'prom-client';

const ROOT = new URL('../', import.meta.url).pathname;
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');

function files(dir: string): string[] {
  return readdirSync(join(ROOT, dir)).flatMap((name) => {
    const path = join(dir, name);
    return statSync(join(ROOT, path)).isDirectory() ? files(path) : path.endsWith('.ts') ? [path] : [];
  });
}

interface MetricShape {
  type: string;
  labels: string[];
}

/** Every callsync_* metric of the registry, after loading each module that uses prom-client. */
async function registered(): Promise<Map<string, MetricShape>> {
  const users = ['src', 'queues', 'workers'].flatMap(files).filter((f) => /from 'prom-client'/.test(read(f)));
  assert.ok(users.includes('src/metrics.ts'), 'src/metrics.ts is among the files that register metrics');
  for (const f of users) await import(pathToFileURL(join(ROOT, f)).href);
  const typeOf = (m: client.Metric) =>
    m instanceof client.Counter
      ? 'counter'
      : m instanceof client.Gauge
        ? 'gauge'
        : m instanceof client.Histogram
          ? 'histogram'
          : 'summary';
  const out = new Map<string, MetricShape>();
  for (const { name } of client.register.getMetricsAsArray()) {
    const metric = client.register.getSingleMetric(name);
    if (!name.startsWith('callsync_') || !metric) continue;
    const { labelNames = [] } = metric as unknown as { labelNames?: string[] };
    out.set(name, { type: typeOf(metric), labels: [...labelNames].sort() });
  }
  return out;
}

/** The rows of docs/operations.md's table under "## Metrics": name -> type and labels. */
function documented(): Map<string, MetricShape> {
  const ops = read('docs/operations.md');
  const section = ops.slice(ops.indexOf('\n## Metrics\n'));
  const table = /\n(\| Metric \|[^\n]*\n(?:\|[^\n]*\n)+)/.exec(section)?.[1] ?? '';
  assert.ok(table.length > 0, 'docs/operations.md has the metrics table under "## Metrics"');
  const out = new Map<string, MetricShape>();
  for (const row of table
    .split('\n')
    .filter((r) => r.startsWith('|'))
    .slice(2)) {
    const [, names = '', type = '', labels = ''] = row.split('|').map((c) => c.trim());
    // Labels are the backticked words outside parentheses (inside: their values).
    const labelNames = [...labels.replace(/\([^)]*\)/g, '').matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!).sort();
    for (const m of names.matchAll(/`(callsync_[a-z_]+)`/g)) {
      assert.ok(!out.has(m[1]!), `${m[1]} has one row`);
      out.set(m[1]!, { type, labels: labelNames });
    }
  }
  return out;
}

test("docs/operations.md's metrics table lists exactly the metrics the code registers, with type and labels", async () => {
  const code = await registered();
  assert.ok(code.size > 20, 'the metrics were loaded');
  const docs = documented();
  assert.deepEqual([...docs.keys()].sort(), [...code.keys()].sort(), 'the same metric names');
  for (const [name, shape] of code) assert.deepEqual(docs.get(name), shape, `${name}: type and labels`);
});

test('every metric the README and docs/*.md name exists, with the labels they give it', async () => {
  const code = await registered();
  const docFiles = [
    'README.md',
    ...readdirSync(join(ROOT, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ];
  // Names that look like metrics and are not: a HubSpot property, Docker volumes, the session cookie.
  const notMetrics = new Set(['callsync_call_id', 'callsync_archive', 'callsync_session', 'callsync_redis']);
  const wrong: string[] = [];
  for (const file of docFiles) {
    for (const m of read(file).matchAll(/\bcallsync_([a-z_]+)(\{[^}]*\})?/g)) {
      const written = `callsync_${m[1]}`;
      if (notMetrics.has(written)) continue;
      // A histogram's series: _bucket, _sum, _count.
      const name = code.has(written) ? written : written.replace(/_(bucket|sum|count)$/, '');
      const shape = code.get(name);
      if (!shape) {
        wrong.push(`${file}: ${m[0]} is no metric`);
        continue;
      }
      const labels = [...(m[2] ?? '').matchAll(/([a-z_]+)\s*(?:=~|!=|!~|=|,|\})/g)].map((l) => l[1]!);
      for (const label of labels)
        if (!shape.labels.includes(label) && !(label === 'le' && shape.type === 'histogram'))
          wrong.push(`${file}: ${m[0]} has no label ${label}`);
    }
  }
  assert.deepEqual(wrong, []);
});
