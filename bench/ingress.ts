// `npm run bench:ingress`: N unique webhooks over M connections against callsync's ingress (real
// Redis), and against a bare Hono handler answering 202 in the same run — the ceiling on this
// machine. Prints accepted/s, p50/p99 latency for both, the ratio, and the count found in Redis
// versus acknowledged.
//
//   BENCH_N=20000 BENCH_CONNECTIONS=64 BENCH_ROUNDS=1 npm run bench:ingress
//   BENCH_REDIS_URL=redis://127.0.0.1:6379   use this Redis instead of a private redis-server (AOF everysec)
//   BENCH_CPU_PROF=1                          profile the ingress process and print where its time goes
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { INBOUND_QUEUE } from '../queues/registry.js';
import { webhookPayload } from '../test/support/calls.js';
import { startPrivateRedis, type PrivateRedis } from '../test/support/redis-server.js';
import { compiled, load, machine, printTable, round, startProcess, summariseProfiles, type LoadResult } from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2000);
const PROFILE = process.env.BENCH_CPU_PROF === '1';

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'callsync-bench-'));
  let privateRedis: PrivateRedis | null = null;
  const redisUrl = process.env.BENCH_REDIS_URL ?? (privateRedis = await startPrivateRedis({ appendfsync: 'everysec' })).url;
  const prefix = `bench-${randomBytes(3).toString('hex')}`;
  // The v2 fixture (summary, scenarios, transcript: ~2 KB), a unique call id per request.
  const body = JSON.stringify(webhookPayload('[<id>]'));
  const build = compiled();
  const machineBefore = machine();
  console.log(`bench:ingress  N=${N} connections=${CONNECTIONS} rounds=${ROUNDS} body=${body.length} B  redis=${privateRedis ? 'private redis-server (AOF everysec)' : redisUrl}`);
  console.log(`machine: ${JSON.stringify(machineBefore)}`);

  const rows: Record<string, unknown>[] = [];
  const results: { bare: LoadResult[]; ingress: LoadResult[] } = { bare: [], ingress: [] };
  let acknowledged = 0;
  const rss: Record<string, number> = {};
  try {
    for (let round_ = 1; round_ <= ROUNDS; round_++) {
      for (const target of ['bare', 'ingress'] as const) {
        const proc = await startProcess(target, build.run('bench/server.ts'), {
          BENCH_TARGET: target,
          REDIS_URL: redisUrl,
          QUEUE_PREFIX: prefix,
          WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
          SPOOL_DIR: join(work, 'spool'),
          LOG_LEVEL: 'warn',
        }, { cpuProfDir: PROFILE && target === 'ingress' ? work : undefined });
        const url = `${proc.ready.url as string}/webhooks/ai-agent/bench-agent`;
        const warm = await load(url, body, WARMUP, CONNECTIONS);
        const r = await load(url, body, N, CONNECTIONS);
        const peak = proc.peakRssMb();
        rss[target] = Math.max(rss[target] ?? 0, peak);
        await proc.stop();
        if (target === 'ingress') acknowledged += warm.ok + r.ok;
        results[target].push(r);
        rows.push({ round: round_, target, requests: r.requests, ok: r.ok, non2xx: r.non2xx, errors: r.errors, 'accepted/s': r.perSecond, 'p50 ms': r.p50Ms, 'p99 ms': r.p99Ms, 'max ms': r.maxMs, 'peak RSS MB': peak });
      }
    }

    const conn = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
    const inbound = new Queue(INBOUND_QUEUE, { connection: conn, prefix });
    const counts = await inbound.getJobCounts('wait', 'paused', 'prioritized', 'delayed', 'active', 'completed', 'failed');
    const inRedis = Object.values(counts).reduce((a, b) => a + b, 0);
    await inbound.obliterate({ force: true }).catch(() => undefined);
    await inbound.close();
    conn.disconnect();

    printTable(rows);
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const bare = median(results.bare.map((r) => r.perSecond));
    const ingress = median(results.ingress.map((r) => r.perSecond));
    const summary = {
      'bare accepted/s': bare,
      'ingress accepted/s': ingress,
      ratio: round(ingress / bare, 2),
      'ingress p50 ms': median(results.ingress.map((r) => r.p50Ms)),
      'ingress p99 ms': median(results.ingress.map((r) => r.p99Ms)),
      acknowledged,
      'found in Redis': inRedis,
      lost: acknowledged - inRedis,
    };
    console.log('');
    printTable([summary]);
    console.log(`\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, rounds: ROUNDS, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, rows, summary, peakRssMb: rss })}`);
    if (PROFILE) console.log(`\n${await summariseProfiles(work)}`);
    if (acknowledged !== inRedis) process.exitCode = 1;
  } finally {
    await privateRedis?.destroy();
    await rm(work, { recursive: true, force: true });
  }
}

void main();
