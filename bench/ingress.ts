// `npm run bench:ingress`: N unique webhooks over M connections against callsync's ingress (real
// Redis), and against a bare Hono handler answering 202 in the same run — the ceiling on this
// machine. Prints accepted/s, p50/p99 latency for both, the ratio, and the count found in Redis
// versus acknowledged.
//
//   BENCH_N=20000 BENCH_CONNECTIONS=64 BENCH_ROUNDS=1 npm run bench:ingress
//   BENCH_REDIS_URL=redis://127.0.0.1:6379   use this Redis instead of a private redis-server (AOF everysec)
//   BENCH_CPU_PROF=1                          profile the ingress process and print where its time goes
//   BENCH_TARGETS=bare,ingress                which targets (bench/server.ts): bare, bare-node (node:http alone), ingress (as `callsync
//                                             start` runs it), ingress-core (without request ids, access log, metrics),
//                                             ingress-layers (the operations wired, only the layers in
//                                             BENCH_LAYERS: context/gate/readyz/ops/metrics, e.g.
//                                             `ingress-layers+BENCH_LAYERS=context/metrics`),
//                                             and parts of the ingress: parse, normalize, app-no-redis;
//                                             handwritten: bare Hono + BullMQ Queue.add, no validation
//                                             (`CPU × handwritten`: the ingress' CPU per request against it)
//                                             `ingress+LOG_LEVEL=warn+X=1` adds environment variables to one target (A/B in one run)
//   BENCH_LOG_LEVEL=info                      the ingress' LOG_LEVEL (default info, as in production)
//   BENCH_TRANSCRIPT_BYTES=3000               the fixture's transcript text grown to this many characters
//   BENCH_CALLSYNC_NODE_OPTIONS=...           Node flags of every target (default: those of `npm start`)
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { inboundStreamKey } from '../queues/inbound.js';
import { webhookPayload } from '../test/support/calls.js';
import { startPrivateRedis, type PrivateRedis } from '../test/support/redis-server.js';
import {
  callsyncNodeOptions,
  compiled,
  cpuSecondsOfPid,
  load,
  machine,
  printTable,
  round,
  startProcess,
  summariseProfiles,
  type LoadResult,
} from './support.js';

const N = Number(process.env.BENCH_N ?? 20_000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 2000);
const PROFILE = process.env.BENCH_CPU_PROF === '1';
const TARGETS = (process.env.BENCH_TARGETS ?? 'bare,ingress')
  .split(',')
  .map((t) => t.trim())
  .filter(Boolean);
const LOG_LEVEL = process.env.BENCH_LOG_LEVEL ?? 'info';

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'callsync-bench-'));
  let privateRedis: PrivateRedis | null = null;
  const redisUrl =
    process.env.BENCH_REDIS_URL ?? (privateRedis = await startPrivateRedis({ appendfsync: 'everysec' })).url;
  const prefix = `bench-${randomBytes(3).toString('hex')}`;
  // The v2 fixture (summary, scenarios, transcript: ~2 KB), a unique call id per request.
  const transcriptBytes = Number(process.env.BENCH_TRANSCRIPT_BYTES ?? 0);
  const body = JSON.stringify(
    webhookPayload('[<id>]', (p) => {
      const t = p.assist.transcription as { content: string };
      while (t.content.length < transcriptBytes) t.content += `\nCaller: ${t.content.slice(0, 60)}`;
    }),
  );
  const build = compiled();
  const machineBefore = machine();
  console.log(
    `bench:ingress  N=${N} connections=${CONNECTIONS} rounds=${ROUNDS} body=${body.length} B  targets=${TARGETS.join(',')} LOG_LEVEL=${LOG_LEVEL}  redis=${privateRedis ? 'private redis-server (AOF everysec)' : redisUrl}`,
  );
  console.log(`machine: ${JSON.stringify(machineBefore)}`);

  const rows: Record<string, unknown>[] = [];
  const results: Record<string, LoadResult[]> = Object.fromEntries(TARGETS.map((t) => [t, []]));
  const cpu: Record<string, number[]> = {};
  let acknowledged = 0;
  const rss: Record<string, number> = {};
  try {
    for (let round_ = 1; round_ <= ROUNDS; round_++) {
      for (const target of TARGETS) {
        const [kind, ...extra] = target.split('+');
        const proc = await startProcess(
          target,
          build.run('bench/server.ts'),
          {
            BENCH_TARGET: kind!,
            REDIS_URL: redisUrl,
            QUEUE_PREFIX: prefix,
            WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
            SPOOL_DIR: join(work, 'spool'),
            LOG_LEVEL: LOG_LEVEL,
            // Every target (the bare handler too) runs with the Node flags `npm start` uses.
            NODE_OPTIONS: callsyncNodeOptions(),
            ...Object.fromEntries(extra.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
          },
          { cpuProfDir: PROFILE && target !== 'bare' ? work : undefined },
        );
        const url = `${proc.ready.url as string}/webhooks/ai-agent/bench-agent`;
        const warm = await load(url, body, WARMUP, CONNECTIONS);
        const cpuBefore = proc.cpuSeconds();
        const redisCpuBefore = privateRedis ? cpuSecondsOfPid(privateRedis.pid) : NaN;
        const selfCpuBefore = process.cpuUsage();
        const r = await load(url, body, N, CONNECTIONS);
        const cpuUsPerRequest = Math.round(((proc.cpuSeconds() - cpuBefore) * 1e6) / r.requests);
        const redisUsPerRequest = Math.round(
          ((cpuSecondsOfPid(privateRedis?.pid ?? NaN) - redisCpuBefore) * 1e6) / r.requests,
        );
        const selfCpu = process.cpuUsage(selfCpuBefore);
        const loaderUsPerRequest = Math.round((selfCpu.user + selfCpu.system) / r.requests);
        const peak = proc.peakRssMb();
        rss[target] = Math.max(rss[target] ?? 0, peak);
        await proc.stop();
        // Only the ingress targets store what they acknowledge (bare and the parts answer without storing).
        if (kind === 'ingress' || kind === 'ingress-core' || kind === 'ingress-layers') acknowledged += warm.ok + r.ok;
        results[target]!.push(r);
        (cpu[target] ??= []).push(cpuUsPerRequest);
        rows.push({
          round: round_,
          target,
          requests: r.requests,
          ok: r.ok,
          non2xx: r.non2xx,
          errors: r.errors,
          'accepted/s': r.perSecond,
          'p50 ms': r.p50Ms,
          'p99 ms': r.p99Ms,
          'max ms': r.maxMs,
          'CPU µs/req': cpuUsPerRequest,
          'Redis µs/req': redisUsPerRequest,
          'autocannon µs/req': loaderUsPerRequest,
          'peak RSS MB': peak,
        });
      }
    }

    const conn = new Redis(redisUrl, { maxRetriesPerRequest: 1 });
    const inRedis = await conn.xlen(inboundStreamKey(prefix));
    await conn.del(inboundStreamKey(prefix));
    conn.disconnect();

    printTable(rows);
    // Medians over the rounds (the upper one of two); the ratio is to the bare handler's median.
    const median = (xs: number[]) =>
      xs.length === 0 ? NaN : [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const bare = median((results.bare ?? []).map((r) => r.perSecond));
    const summary = TARGETS.map((target) => {
      const perSecond = median(results[target]!.map((r) => r.perSecond));
      return {
        target,
        'accepted/s': perSecond,
        'ratio to bare': round(perSecond / bare, 2),
        'p50 ms': median(results[target]!.map((r) => r.p50Ms)),
        'p99 ms': median(results[target]!.map((r) => r.p99Ms)),
        'CPU µs/req': median(cpu[target]!),
        ...(cpu.handwritten ? { 'CPU × handwritten': round(median(cpu[target]!) / median(cpu.handwritten), 2) } : {}),
      };
    });
    console.log('');
    printTable(summary);
    console.log(`\nacknowledged ${acknowledged}, found in Redis ${inRedis}, lost ${acknowledged - inRedis}`);
    console.log(
      `\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, rounds: ROUNDS, targets: TARGETS, logLevel: LOG_LEVEL, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, rows, summary, acknowledged, inRedis, lost: acknowledged - inRedis, peakRssMb: rss })}`,
    );
    if (PROFILE) console.log(`\n${await summariseProfiles(work)}`);
    if (acknowledged !== inRedis) process.exitCode = 1;
  } finally {
    await privateRedis?.destroy();
    await rm(work, { recursive: true, force: true });
  }
}

void main();
