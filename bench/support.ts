// Shared plumbing of the benchmarks: server processes that say when they are ready, their peak RSS,
// autocannon runs, the machine's description, and CPU profiles summarised by where time goes.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { cpus, loadavg, totalmem } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { execFileSync } from 'node:child_process';
import autocannon, { type Result } from 'autocannon';

export const ROOT = new URL('../', import.meta.url).pathname;

/**
 * The Node flags `npm start` runs callsync with (package.json's "start" script), so benchmarks
 * measure what production runs; BENCH_CALLSYNC_NODE_OPTIONS replaces them (A/B).
 */
export function callsyncNodeOptions(): string {
  if (process.env.BENCH_CALLSYNC_NODE_OPTIONS !== undefined) return process.env.BENCH_CALLSYNC_NODE_OPTIONS;
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  return (pkg.scripts.start?.match(/--[a-z-]+=\S+/g) ?? []).join(' ');
}

export interface BenchProcess {
  name: string;
  pid: number;
  child: ChildProcess;
  /** What the process printed after `READY ` (JSON). */
  ready: Record<string, unknown>;
  /** Peak resident set size so far (VmHWM), in MiB. */
  peakRssMb(): number;
  /** Current resident set size (VmRSS), in MiB. */
  rssMb(): number;
  /** CPU time used so far (user + system), in seconds. */
  cpuSeconds(): number;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves on exit. */
  stop(graceMs?: number): Promise<void>;
}

function procStatusMb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status);
    return m ? Math.round(Number(m[1]) / 102.4) / 10 : NaN;
  } catch {
    return NaN;
  }
}

/** CPU time (user + system) a process has used, in seconds, from /proc/<pid>/stat. */
export function cpuSecondsOfPid(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the line (11 and 12 after the command name), in clock ticks.
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

/**
 * Compiles the project with tsc into data/bench-build (git-ignored; inside the project so packages
 * resolve), so benchmarks measure what production runs — plain JavaScript, no tsx loader thread.
 * BENCH_TSX=1 skips this and runs the TypeScript through tsx.
 */
export function compiled(): { run(script: string): string[] } {
  if (process.env.BENCH_TSX === '1') return { run: (script) => ['--import', 'tsx', script] };
  const out = join(ROOT, 'data', 'bench-build');
  try {
    execFileSync(
      process.execPath,
      [
        join(ROOT, 'node_modules/typescript/bin/tsc'),
        '-p',
        'tsconfig.json',
        '--noEmit',
        'false',
        '--outDir',
        out,
        '--sourceMap',
        'false',
      ],
      {
        cwd: ROOT,
        stdio: 'pipe',
      },
    );
  } catch {
    // Type errors elsewhere in the tree (work in progress) do not stop the emit.
  }
  return { run: (script) => [join(out, script.replace(/\.ts$/, '.js'))] };
}

/**
 * Runs `node [--cpu-prof] <args>` and waits for a `READY {json}` line on its stdout (or
 * `readyMarker`); `onLine` sees every stdout line.
 */
export async function startProcess(
  name: string,
  args: string[],
  env: Record<string, string>,
  options: { cpuProfDir?: string; readyMarker?: RegExp; timeoutMs?: number; onLine?: (line: string) => void } = {},
): Promise<BenchProcess> {
  const nodeArgs = [...(options.cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${options.cpuProfDir}`] : []), ...args];
  const child = spawn(process.execPath, nodeArgs, {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // A bench that fails half-way (a load error, a throw) still takes its processes along.
  const orphaned = () => child.kill('SIGKILL');
  process.once('exit', orphaned);
  const exited = new Promise<void>((resolve) =>
    child.once('exit', () => {
      process.removeListener('exit', orphaned);
      resolve();
    }),
  );
  const marker = options.readyMarker ?? /^READY (.*)$/;
  const stderr: string[] = [];
  createInterface({ input: child.stderr! }).on('line', (l) => {
    stderr.push(l);
    if (stderr.length > 50) stderr.shift();
  });
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`${name} not ready in time; stderr:\n${stderr.join('\n')}`)),
      options.timeoutMs ?? 60_000,
    );
    createInterface({ input: child.stdout! }).on('line', (line) => {
      options.onLine?.(line);
      const m = marker.exec(line);
      if (m) {
        clearTimeout(timer);
        try {
          resolve(m[1] ? (JSON.parse(m[1]) as Record<string, unknown>) : {});
        } catch {
          resolve({ line });
        }
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`${name} exited before it was ready; stderr:\n${stderr.join('\n')}`));
    });
  });
  const pid = child.pid!;
  return {
    name,
    pid,
    child,
    ready,
    peakRssMb: () => procStatusMb(pid, 'VmHWM'),
    rssMb: () => procStatusMb(pid, 'VmRSS'),
    cpuSeconds: () => cpuSecondsOfPid(pid),
    async stop(graceMs = 30_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Peak RSS (VmHWM) of any process, in MiB. */
export function peakRssOfPid(pid: number): number {
  return procStatusMb(pid, 'VmHWM');
}

export interface LoadResult {
  requests: number;
  ok: number;
  non2xx: number;
  errors: number;
  durationS: number;
  perSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/**
 * `amount` POSTs of `body` (with `[<id>]` replaced by a unique id each time) over `connections`;
 * `overallRate` caps the offered rate (requests per second across all connections; autocannon
 * sends each connection's share as a burst at the start of each second — see `paced` for a steady rate).
 * The duration runs to the last response: autocannon itself notices the end only on its next
 * once-a-second tick, which would round a 4.2 s run up to 5 s.
 */
export async function load(
  url: string,
  body: string,
  amount: number,
  connections: number,
  options: { overallRate?: number } = {},
): Promise<LoadResult> {
  const started = process.hrtime.bigint();
  let last = started;
  const r = await new Promise<Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
        idReplacement: true,
        amount,
        connections,
        timeout: 30,
        ...(options.overallRate ? { overallRate: options.overallRate } : {}),
      },
      (err, result) => (err ? reject(err) : resolve(result)),
    );
    instance.on('response', () => {
      last = process.hrtime.bigint();
    });
  });
  const seconds = Number(last - started) / 1e9;
  const total = r['2xx'] + r.non2xx;
  return {
    requests: total,
    ok: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    durationS: round(seconds, 2),
    perSecond: Math.round(r['2xx'] / seconds),
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    maxMs: r.latency.max,
  };
}

/**
 * `amount` POSTs offered at a steady `rate` per second (spread evenly: a batch every 10 ms, not
 * autocannon's burst per connection per second), at most `connections` in flight over keep-alive
 * sockets. `[<id>]` in the body becomes a unique id. Bounded: gives up 30 s after the last send.
 */
export async function paced(
  url: string,
  body: string,
  amount: number,
  rate: number,
  connections: number,
): Promise<LoadResult> {
  const { Agent, request } = await import('node:http');
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  const target = new URL(url);
  const tag = Math.random().toString(36).slice(2, 8);
  const latencies: number[] = [];
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  const post = (i: number) =>
    new Promise<void>((resolve) => {
      const payload = body.replaceAll('[<id>]', `${tag}-${i}`);
      const t0 = performance.now();
      const req = request(
        {
          host: target.hostname,
          port: target.port,
          path: target.pathname,
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
          timeout: 30_000,
        },
        (res) => {
          res.resume();
          res.on('end', () => {
            latencies.push(performance.now() - t0);
            if (res.statusCode! >= 200 && res.statusCode! < 300) ok++;
            else non2xx++;
            resolve();
          });
        },
      );
      req.on('timeout', () => req.destroy(new Error('timeout')));
      req.on('error', () => {
        errors++;
        resolve();
      });
      req.end(payload);
    });
  const started = performance.now();
  const inFlight: Promise<void>[] = [];
  for (let sent = 0; sent < amount;) {
    const due = Math.min(amount, Math.floor(((performance.now() - started) / 1000) * rate) + 1);
    while (sent < due) inFlight.push(post(sent++));
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.race([Promise.all(inFlight), new Promise((r) => setTimeout(r, 30_000))]);
  const seconds = (performance.now() - started) / 1000;
  agent.destroy();
  latencies.sort((a, b) => a - b);
  return {
    requests: ok + non2xx,
    ok,
    non2xx,
    errors,
    durationS: round(seconds, 2),
    perSecond: Math.round(ok / seconds),
    p50Ms: Math.round(percentile(latencies, 50)),
    p99Ms: Math.round(percentile(latencies, 99)),
    maxMs: Math.round(latencies[latencies.length - 1] ?? NaN),
  };
}

export function round(n: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(n * f) / f;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export function machine(): Record<string, unknown> {
  let redis = 'unknown';
  try {
    redis =
      execFileSync('redis-server', ['--version'], { encoding: 'utf8' })
        .trim()
        .split(' ')
        .find((s) => s.startsWith('v='))
        ?.slice(2) ?? redis;
  } catch {
    // not installed
  }
  return {
    cpu: cpus()[0]?.model,
    cores: cpus().length,
    memoryGiB: round(totalmem() / 1024 ** 3, 1),
    node: process.version,
    redis,
    loadavg: loadavg().map((l) => round(l, 2)),
  };
}

export function printTable(rows: Record<string, unknown>[]): void {
  if (rows.length === 0) return;
  const keys = Object.keys(rows[0]!);
  const cells = rows.map((r) => keys.map((k) => String(r[k] ?? '')));
  const widths = keys.map((k, i) => Math.max(k.length, ...cells.map((c) => c[i]!.length)));
  const line = (vals: string[]) => vals.map((v, i) => v.padStart(widths[i]!)).join('  ');
  console.log(line(keys));
  for (const c of cells) console.log(line(c));
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

/** Self time of a `.cpuprofile`, grouped by package / file area, plus the top functions. */
export async function summariseProfiles(dir: string, top = Number(process.env.BENCH_PROF_TOP ?? 12)): Promise<string> {
  const out: string[] = [];
  for (const file of (await readdir(dir)).filter((f) => f.endsWith('.cpuprofile'))) {
    const profile = JSON.parse(await readFile(join(dir, file), 'utf8')) as {
      nodes: ProfileNode[];
      samples: number[];
      timeDeltas: number[];
    };
    const selfUs = new Map<number, number>();
    profile.samples.forEach((id, i) => selfUs.set(id, (selfUs.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
    const byNode = new Map(profile.nodes.map((n) => [n.id, n]));
    const total = [...selfUs.values()].reduce((a, b) => a + b, 0);
    const areas = new Map<string, number>();
    const fns = new Map<string, number>();
    for (const [id, us] of selfUs) {
      const n = byNode.get(id);
      if (!n) continue;
      const area = areaOf(n.callFrame.url, n.callFrame.functionName);
      areas.set(area, (areas.get(area) ?? 0) + us);
      const fn = `${n.callFrame.functionName || '(anonymous)'} ${shortUrl(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
      fns.set(fn, (fns.get(fn) ?? 0) + us);
    }
    // Inclusive time: a function's own samples plus everything it called (synchronously; an await
    // starts a new stack). Counted once per stack even when a function recurses.
    const inclusive = new Map<string, number>();
    const label = (n: ProfileNode) =>
      `${n.callFrame.functionName || '(anonymous)'} ${shortUrl(n.callFrame.url)}:${n.callFrame.lineNumber + 1}`;
    const walk = (id: number, onStack: Set<string>): number => {
      const n = byNode.get(id);
      if (!n) return 0;
      const name = label(n);
      const fresh = !onStack.has(name);
      if (fresh) onStack.add(name);
      let sum = selfUs.get(id) ?? 0;
      for (const c of n.children ?? []) sum += walk(c, onStack);
      if (fresh) {
        onStack.delete(name);
        inclusive.set(name, (inclusive.get(name) ?? 0) + sum);
      }
      return sum;
    };
    const root = profile.nodes[0];
    if (root) walk(root.id, new Set());
    const pct = (us: number) => `${((100 * us) / total).toFixed(1)}%`.padStart(6);
    out.push(`${file} (${round(total / 1e6, 1)} s sampled)`);
    out.push('  by area:');
    for (const [a, us] of [...areas].sort((x, y) => y[1] - x[1]).slice(0, top)) out.push(`    ${pct(us)}  ${a}`);
    out.push('  top functions (self time):');
    for (const [f, us] of [...fns].sort((x, y) => y[1] - x[1]).slice(0, top)) out.push(`    ${pct(us)}  ${f}`);
    const interesting = new RegExp(
      process.env.BENCH_PROF_MATCH ??
        'data/bench-build/(src|workers|queues)/|bullmq/|hono/|@hono/|zod/|ioredis/|_http_server|_http_outgoing',
    );
    out.push('  inclusive time of callsync, Hono, zod, BullMQ, ioredis and http frames:');
    for (const [f, us] of [...inclusive]
      .filter(([f]) => interesting.test(f))
      .sort((x, y) => y[1] - x[1])
      .slice(0, top * 2))
      out.push(`    ${pct(us)}  ${f}`);
  }
  return out.join('\n');
}

function shortUrl(url: string): string {
  const i = url.indexOf('node_modules/');
  if (i >= 0) return url.slice(i + 'node_modules/'.length);
  return url.replace(`file://${ROOT}`, '').replace(ROOT, '');
}

function areaOf(url: string, fn: string): string {
  if (url === '') return fn.startsWith('(') ? fn : '(native / V8 builtins)';
  const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (m) return m[1]!;
  if (url.startsWith('node:')) return url.split('/')[0]!.replace(/^node:internal/, 'node:internal');
  return shortUrl(url).split('/').slice(0, 2).join('/');
}
