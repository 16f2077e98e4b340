// `npm run bench:timeline`: what the call timelines (queues/timeline.ts) cost the worker. One
// process accepts BENCH_N calls into the inbound log and runs the worker role on them (the fan-out
// and one sink whose delivery does nothing, so the timeline's share is the largest it can be), on a
// private redis-server; rounds alternate timeline on and off in the same run. Prints calls per
// second and this process' CPU per call (user + system; Redis' own CPU not counted) for each, and the
// timeline's overhead. Issue 26's budget: at most 10 % of worker CPU per call.
//
//   BENCH_N=2000 BENCH_ROUNDS=2 npm run bench:timeline
//   BENCH_SINK=archive   the real archive sink (a local folder: JSON, text and vCon per call) instead
//   BENCH_OTEL=1         compare OpenTelemetry traces on and off instead (the timeline on in both),
//                        exported to a local OTLP/HTTP receiver that accepts and drops them
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/log.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import { InboundLog } from '../queues/inbound.js';
import { redisKeys } from '../queues/keys.js';
import { sinkQueueName } from '../queues/registry.js';
import { CallTimeline } from '../queues/timeline.js';
import { startCallsync } from '../workers/callsync.js';
import { sampleCall } from '../test/support/calls.js';
import { startPrivateRedis } from '../test/support/redis-server.js';
import { startTracing, stopTracing } from '../src/telemetry.js';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

const N = Math.min(20_000, Number(process.env.BENCH_N ?? 2000));
const ROUNDS = Math.min(5, Number(process.env.BENCH_ROUNDS ?? 2));
/** `noop`: a sink that does nothing (the timeline's largest share); `archive`: the real archive sink into a local folder. */
const SINK = process.env.BENCH_SINK === 'archive' ? 'archive' : 'noop';
const OTEL = process.env.BENCH_OTEL === '1';

class NoopSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  async deliver(call: CanonicalCall): Promise<SinkResult> {
    return { status: 'done', refs: { json: `transcripts/${call.callId}.json` } };
  }
}

interface Result {
  timeline: boolean;
  callsPerSecond: number;
  cpuMsPerCall: number;
}

/** One round with the feature under comparison on or off: the timeline, or (BENCH_OTEL=1) traces. */
async function round(url: string, dir: string, on: boolean, index: number): Promise<Result> {
  if (!OTEL) return timelineRound(url, dir, on, index);
  if (on) await startTracing(process.env);
  try {
    return { ...(await timelineRound(url, dir, true, index)), timeline: on };
  } finally {
    if (on) await stopTracing();
  }
}

async function timelineRound(url: string, dir: string, timeline: boolean, index: number): Promise<Result> {
  const prefix = `bench-tl-${index}`;
  const env = {
    REDIS_URL: url,
    QUEUE_PREFIX: prefix,
    CALLSYNC_ROLE: 'worker',
    OPS_PORT: 'off',
    ARCHIVE_DIR: dir,
    LOG_LEVEL: 'warn',
    WORKER_CONCURRENCY: '32',
  };
  const config = loadConfig(env);
  const log = createLogger({ level: 'warn' });
  const redis = new Redis(url, { maxRetriesPerRequest: null });
  const keys = redisKeys(config.redis);
  const acceptor = new InboundAcceptor(new InboundLog(redis, keys), {
    dedupeWindowMs: 60_000,
    timeoutMs: 10_000,
    ...(timeline && process.env.BENCH_RECEIVED !== '0'
      ? { timeline: new CallTimeline(redis, keys, { ttlDays: 1 }) }
      : {}),
  });
  const calls = Array.from({ length: N }, (_, i) => sampleCall(`bench-${index}-${i}`));
  const archive = new Queue(sinkQueueName('archive'), {
    connection: redis,
    prefix: keys.queuePrefix(sinkQueueName('archive')),
  });
  const cs = await startCallsync(config, {
    log,
    ...(SINK === 'noop' ? { sinks: new Map([['archive', new NoopSink()]]) } : {}),
    timelines: timeline,
  });
  try {
    const cpu = process.cpuUsage();
    const started = performance.now();
    for (let i = 0; i < calls.length; i += 500)
      await Promise.all(calls.slice(i, i + 500).map((c) => acceptor.accept(c)));
    for (;;) {
      const { completed } = await archive.getJobCounts('completed');
      if ((completed ?? 0) >= N) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    const seconds = (performance.now() - started) / 1000;
    const used = process.cpuUsage(cpu);
    return { timeline, callsPerSecond: N / seconds, cpuMsPerCall: (used.user + used.system) / 1000 / N };
  } finally {
    await cs.close();
    await archive.close();
    await redis.flushall();
    redis.disconnect();
  }
}

const server = await startPrivateRedis();
// BENCH_OTEL=1: a receiver that takes the exported spans and drops them.
const collector = createServer((req, res) =>
  req.resume().on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}')),
);
if (OTEL) {
  await new Promise<void>((r) => collector.listen(0, '127.0.0.1', r));
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT = `http://127.0.0.1:${(collector.address() as AddressInfo).port}`;
}
const dir = await mkdtemp(join(tmpdir(), 'bench-timeline-'));
try {
  const results: Result[] = [];
  // A warm-up round first (JIT, connections), not counted.
  await round(server.url, dir, true, 0);
  for (let r = 0; r < ROUNDS; r++) {
    results.push(await round(server.url, dir, r % 2 === 0, 1 + 2 * r));
    results.push(await round(server.url, dir, r % 2 !== 0, 2 + 2 * r));
  }
  const mean = (on: boolean, key: 'callsPerSecond' | 'cpuMsPerCall') => {
    const of = results.filter((x) => x.timeline === on);
    return of.reduce((a, x) => a + x[key], 0) / of.length;
  };
  const what = OTEL ? 'traces' : 'timeline';
  console.log(`calls per round: ${N}, rounds per mode: ${ROUNDS}, sink: ${SINK}`);
  console.log(`${what.padEnd(8)}  calls/s  CPU ms/call`);
  for (const on of [false, true])
    console.log(
      `${on ? 'on ' : 'off'}       ${mean(on, 'callsPerSecond').toFixed(0).padStart(7)}  ${mean(on, 'cpuMsPerCall').toFixed(3).padStart(11)}`,
    );
  const overhead = (mean(true, 'cpuMsPerCall') / mean(false, 'cpuMsPerCall') - 1) * 100;
  console.log(`${what} CPU overhead per call: ${overhead.toFixed(1)} % (budget: 10 %)`);
} finally {
  if (OTEL) collector.close();
  await server.stop();
  await rm(dir, { recursive: true, force: true });
}
