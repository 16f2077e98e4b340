// A preload for the callsync processes of a bench run (issue 26 item 4): every 500 ms one JSON line
// per process in BENCH_HEAP_PROBE_DIR/heap-<pid>.jsonl — RSS and its peak (VmHWM), resident anonymous
// and file-backed memory (smaps_rollup), process.memoryUsage() (heapTotal, heapUsed, external,
// arrayBuffers), each V8 heap space's size and use, and the count and main-thread time of scavenges
// and full GCs so far. BENCH_HEAP_PROBE_SNAPSHOT_MB: one heap snapshot (v8.writeHeapSnapshot, a full GC
// first: what is live) into the same folder when a process' RSS first passes that many MB; writing
// it raises the RSS for the rest of the run.
//
//   BENCH_HEAP_PROBE_DIR=/tmp/probe BENCH_CALLSYNC_NODE_OPTIONS='--max-semi-space-size=8 --import ./data/bench-build/bench/heap-probe.js' \
//     BENCH_N=10000 BENCH_BARE=0 npm run bench:e2e
//
// (bench:e2e compiles bench/ into data/bench-build before it starts the processes.) The worker's
// file is the one of the two callsync processes with the larger heap.
import { appendFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { constants, PerformanceObserver } from 'node:perf_hooks';
import { getHeapSpaceStatistics, writeHeapSnapshot } from 'node:v8';

const dir = process.env.BENCH_HEAP_PROBE_DIR;
const snapshotAtMb = Number(process.env.BENCH_HEAP_PROBE_SNAPSHOT_MB ?? 0);
const mb = (bytes: number) => Math.round(bytes / 1048576);

if (dir) {
  const file = join(dir, `heap-${process.pid}.jsonl`);
  const gc = { scavenges: 0, scavengeMs: 0, fullGcs: 0, fullGcMs: 0 };
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as unknown as { detail?: { kind?: number } }).detail?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MINOR) {
        gc.scavenges++;
        gc.scavengeMs += e.duration;
      } else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) {
        gc.fullGcs++;
        gc.fullGcMs += e.duration;
      }
    }
  }).observe({ entryTypes: ['gc'] });
  const kb = (text: string, key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(text)?.[1] ?? 0);
  const started = Date.now();
  let snapped = false;
  setInterval(() => {
    const m = process.memoryUsage();
    const rollup = readFileSync('/proc/self/smaps_rollup', 'utf8');
    const status = readFileSync('/proc/self/status', 'utf8');
    const spaces = Object.fromEntries(
      getHeapSpaceStatistics()
        .filter((s) => s.space_size > 0)
        .map((s) => [s.space_name.replace(/_space$/, ''), { size: mb(s.space_size), used: mb(s.space_used_size) }]),
    );
    const line = {
      t: Date.now() - started,
      rss: mb(m.rss),
      peakRss: Math.round(kb(status, 'VmHWM') / 1024),
      anon: Math.round(kb(rollup, 'Anonymous') / 1024),
      file: Math.round((kb(rollup, 'Rss') - kb(rollup, 'Anonymous')) / 1024),
      heapTotal: mb(m.heapTotal),
      heapUsed: mb(m.heapUsed),
      external: mb(m.external),
      arrayBuffers: mb(m.arrayBuffers),
      spaces,
      gc: { ...gc, scavengeMs: Math.round(gc.scavengeMs), fullGcMs: Math.round(gc.fullGcMs) },
    };
    appendFileSync(file, `${JSON.stringify(line)}\n`);
    if (snapshotAtMb > 0 && !snapped && line.rss > snapshotAtMb) {
      snapped = true;
      writeHeapSnapshot(join(dir, `heap-${process.pid}.heapsnapshot`));
    }
  }, 500).unref();
}
