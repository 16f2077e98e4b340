// The worker process' heap growth. Each job's working set (its call, the requests it has open, its
// Redis commands) lives longer than two scavenges and is promoted to the old generation, where it
// dies; V8 lets the old generation grow up to 4× what survived the last full GC before it
// collects again (its factor on a machine where the heap may reach 2 GB or more), so a worker at
// full speed held ~145 MB of old space for ~35 MB that was live, ~270 MB RSS in all. A fixed,
// smaller factor (WORKER_HEAP_GROWTH_PERCENT, default 30) collects sooner: ~150 MB instead of
// ~255 MB RSS, for the more frequent full GCs (~5–10 % more worker CPU per call at full speed since
// the logs' redaction stopped allocating; docs/performance.md, rounds 9 and 11); 0 leaves V8's
// policy alone.
import { setFlagsFromString } from 'node:v8';

/**
 * Sets V8's old-generation growth factor to 1 + `percent` / 100 for the rest of the process
 * (`--heap-growing-percent`, read at each full GC, so it takes effect from the next one).
 * `percent` 0 leaves V8's own factor (or a `--heap-growing-percent` given to node) alone.
 * Returns whether it set anything.
 */
export function limitHeapGrowth(percent: number): boolean {
  if (!Number.isInteger(percent) || percent <= 0) return false;
  setFlagsFromString(`--heap-growing-percent=${percent}`);
  return true;
}
