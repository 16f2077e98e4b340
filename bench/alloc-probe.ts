// A preload for the callsync processes of a bench run: V8's sampling heap profiler with the objects
// that died young and old kept in (what a process *allocates*, where, not what it holds), written
// every 3 s and at exit to BENCH_ALLOC_PROBE_DIR/alloc-<pid>.heapprofile. bench/alloc-summary.ts reads it.
//
//   BENCH_ALLOC_PROBE_DIR=/tmp/alloc BENCH_CALLSYNC_NODE_OPTIONS='--max-semi-space-size=8 --import ./data/bench-build/bench/alloc-probe.js' \
//     BENCH_N=5000 BENCH_BARE=0 npm run bench:e2e
//   npx tsx bench/alloc-summary.ts /tmp/alloc/alloc-<worker pid>.heapprofile 5000
//
// The profiler costs CPU and holds its samples: read the bytes, not the run's rates or RSS.
import { Session } from 'node:inspector';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.BENCH_ALLOC_PROBE_DIR;
if (dir) {
  const session = new Session();
  session.connect();
  session.post('HeapProfiler.enable');
  session.post('HeapProfiler.startSampling', {
    samplingInterval: 16384,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  const write = () =>
    session.post('HeapProfiler.getSamplingProfile', (err, result) => {
      if (!err) writeFileSync(join(dir, `alloc-${process.pid}.heapprofile`), JSON.stringify(result.profile));
    });
  setInterval(write, 3000).unref();
  // And once more at the end (an in-process session answers at once): a short run is whole.
  process.once('exit', write);
}
