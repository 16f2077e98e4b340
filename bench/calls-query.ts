// `npm run bench:calls-query`: what one `callsync calls` query (findCalls, queues/timeline.ts) costs
// over many calls with long timelines. Fills a private redis-server (never the shared one) with
// BENCH_N calls through the real timeline writer — a receipt, a fan-out, then BENCH_ENTRIES sink
// events (retries, then the outcome: every BENCH_FAILED_EVERY-th call dead-lettered, the rest
// done) —, then times queries and prints, per query, the calls returned, the timeline entries read,
// Redis' commands (INFO commandstats) and the wall time. The server and its data go at the end.
//
//   BENCH_N=5000 BENCH_ENTRIES=200 BENCH_FAILED_EVERY=1000 TEST_PORT_RANGE=17000-17899 npm run -s bench:calls-query
import { Redis } from 'ioredis';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline, findCalls, timelineId, type CallQuery } from '../queues/timeline.js';
import { sampleCall } from '../test/support/calls.js';
import { startPrivateRedis } from '../test/support/redis-server.js';

const N = Math.min(20_000, Number(process.env.BENCH_N ?? 5000));
const ENTRIES = Math.min(200, Math.max(2, Number(process.env.BENCH_ENTRIES ?? 200)));
const FAILED_EVERY = Math.max(1, Number(process.env.BENCH_FAILED_EVERY ?? 1000));

async function commandStats(redis: Redis): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const line of (await redis.info('commandstats')).split('\n')) {
    const m = /^cmdstat_([^:]+):calls=(\d+)/.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

async function main(): Promise<void> {
  const server = await startPrivateRedis({ appendonly: false });
  const redis = new Redis(server.url, { maxRetriesPerRequest: null });
  const keys = redisKeys({ prefix: 'bench-cq', clusterNodes: [] });
  const base = Date.now() - 3600_000;
  let clock = base;
  const timeline = new CallTimeline(redis, keys, { ttlDays: 30, now: () => clock });
  try {
    // A worker of this version started an hour before the range: the index of dead-lettered calls
    // covers it (a range that starts before it is read call by call, as before the index).
    clock = base - 3600_000;
    await timeline.beginFailedIndex();
    clock = base;
    const fillStarted = Date.now();
    for (let i = 0; i < N; i += 200) {
      const writes: Promise<void>[] = [];
      for (let j = i; j < Math.min(N, i + 200); j++) {
        clock = base + j * 100;
        const call = sampleCall(`bench-${j}`);
        const jobId = `${timelineId(call)}-1`;
        writes.push(timeline.received(call, { jobId, revision: 'new' }));
        writes.push(timeline.fannedOut(call, { jobId, routes: ['all'], sinks: ['archive'] }));
        const events: {
          event: 'retry' | 'done' | 'dead-lettered';
          sink: string;
          jobId: string;
          attempt: number;
          kind?: string;
          reason?: string;
        }[] = [];
        for (let a = 1; a < ENTRIES - 2; a++)
          events.push({
            event: 'retry',
            sink: 'archive',
            jobId,
            attempt: a,
            kind: 'transient',
            reason: 'HTTP 503 from the archive',
          });
        const failed = j % FAILED_EVERY === 0;
        events.push(
          failed
            ? {
                event: 'dead-lettered',
                sink: 'archive',
                jobId,
                attempt: ENTRIES - 2,
                kind: 'permanent',
                reason: 'HTTP 400',
              }
            : { event: 'done', sink: 'archive', jobId, attempt: ENTRIES - 2 },
        );
        writes.push(timeline.sinkEvents(call, events));
      }
      await Promise.all(writes);
    }
    clock = base + N * 100 + 1000;
    console.log(
      `filled ${N} calls × ${ENTRIES} entries in ${Date.now() - fillStarted} ms; ${await redis.dbsize()} keys`,
    );
    const queries: [string, CallQuery][] = [
      ['any state, limit 50', { since: base, until: clock }],
      ['--status failed', { since: base, until: clock, status: 'failed' }],
      ['--status failed --limit 1000', { since: base, until: clock, status: 'failed', limit: 1000 }],
      ['--status pending', { since: base, until: clock, status: 'pending' }],
      ['--number (every call has it)', { since: base, until: clock, number: '+492116355340', status: 'failed' }],
    ];
    for (const [name, query] of queries) {
      const before = await commandStats(redis);
      const started = process.hrtime.bigint();
      const found = await findCalls(timeline, query);
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      const after = await commandStats(redis);
      const used = [...after]
        .map(([c, n]) => [c, n - (before.get(c) ?? 0)] as const)
        .filter(([c, n]) => n > 0 && c !== 'info');
      const lrange = used.find(([c]) => c === 'lrange')?.[1] ?? 0;
      console.log(
        `${name}: ${found.calls.length} calls, scanned ${found.scanned}, truncated ${found.truncated}, more ${found.more}` +
          `${'entriesRead' in found ? `, entries read ${String(found.entriesRead)}` : ''}; ${ms.toFixed(0)} ms; ` +
          `commands ${used.map(([c, n]) => `${c}=${n}`).join(' ')} (lrange ${lrange})`,
      );
    }
  } finally {
    redis.disconnect();
    await server.destroy();
  }
}

await main();
