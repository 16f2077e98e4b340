// `npm run bench:e2e`: webhooks in, every routed sink done — archive to a local S3 server (s3rver),
// CRM (signed webhook) and SMS (the platform's API) to local fake servers — with callsync as real
// processes (one ingress, BENCH_WORKERS workers) on a private redis-server (AOF everysec).
// Prints events per second end to end, p50/p99 from acknowledgement to the last sink, and the peak
// RSS of each process.
//
//   BENCH_N=10000 BENCH_CONNECTIONS=64 BENCH_WORKERS=1 BENCH_CONCURRENCY=32 npm run bench:e2e
//   BENCH_RATE=100     offer webhooks at this steady rate (per second, a batch every 10 ms) instead of as fast as the
//                      ingress takes them: below the workers' capacity, ack -> last sink is the
//                      pipeline's latency rather than the queueing of an overload
//   BENCH_CEILING=1    also time a bare AWS SDK loop against the same s3rver: the call's two PUTs,
//                      BENCH_CONCURRENCY at once, BENCH_CEILING_N calls (default 2000) — what the
//                      archive sink could reach on this machine
//   BENCH_CPU_PROF=1   profile the ingress and the workers and print where their time goes
//   BENCH_CALLSYNC_NODE_OPTIONS='--max-semi-space-size=16'   Node flags of the callsync processes
//                      instead of the ones `npm start` uses (package.json)
//
// Acknowledgement time is the call's `receivedAt` (set by the ingress just before it stores the call
// and answers 202; carried in every sink job); "done" is the latest `finishedOn` of the call's three
// sink jobs. Both come from Redis.
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { sinkQueueName } from '../queues/registry.js';
import { sampleCall, webhookPayload } from '../test/support/calls.js';
import { renderArchiveJson, renderTranscriptText } from '../src/sinks/archive/render.js';
import { freePort, startPrivateRedis } from '../test/support/redis-server.js';
import { callsyncNodeOptions, compiled, load, paced, machine, peakRssOfPid, percentile, printTable, round, startProcess, summariseProfiles, type BenchProcess } from './support.js';

const N = Math.min(10_000, Number(process.env.BENCH_N ?? 10_000));
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 1);
const CONCURRENCY = process.env.BENCH_CONCURRENCY ?? '32';
const PROFILE = process.env.BENCH_CPU_PROF === '1';
const RATE = process.env.BENCH_RATE ? Number(process.env.BENCH_RATE) : undefined;
const CEILING = process.env.BENCH_CEILING === '1';
const CEILING_N = Number(process.env.BENCH_CEILING_N ?? 2000);
const SINKS = ['archive', 'crm', 'sms'];
/** The queue of each sink's jobs: the signed webhook's are in its endpoint's queue. */
const queueOf = (sink: string) => (sink === 'crm' ? sinkQueueName('crm', 'receiver') : sinkQueueName(sink));

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'callsync-e2e-'));
  const redis = await startPrivateRedis({ appendfsync: 'everysec' });
  const build = compiled();
  const machineBefore = machine();
  const procs: BenchProcess[] = [];
  const prefix = `e2e-${randomBytes(3).toString('hex')}`;
  try {
    const sinks = await startProcess('sink-servers', build.run('bench/sink-servers.ts'), {});
    procs.push(sinks);
    const r = sinks.ready as { s3Env: Record<string, string>; crmUrl: string; secret: string; smsUrl: string; tokenId: string; token: string; statsUrl: string };
    const configPath = join(work, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:
  archive: { type: archive, bucket: "\${ARCHIVE_S3_BUCKET}", endpoint: "\${S3_ENDPOINT}", forcePathStyle: true, accessKeyId: "\${AWS_ACCESS_KEY_ID}", secretAccessKey: "\${AWS_SECRET_ACCESS_KEY}" }
  crm: { type: webhook, endpoints: [{ name: receiver, url: "${r.crmUrl}" }] }
  sms: { type: sms, smsId: s0, to: caller, message: "Thanks for calling. Agreed: {{summary}}" }
routes:
  - to: [archive, crm, sms]
`,
    );
    const port = await freePort();
    const env = {
      ...r.s3Env,
      REDIS_URL: redis.url,
      QUEUE_PREFIX: prefix,
      PORT: String(port),
      HOST: '127.0.0.1',
      CALLSYNC_CONFIG: configPath,
      WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
      SPOOL_DIR: join(work, 'spool'),
      CRM_WEBHOOK_SECRET: r.secret,
      TELEPHONY_API_URL: r.smsUrl,
      TELEPHONY_TOKEN_ID: r.tokenId,
      TELEPHONY_TOKEN: r.token,
      WORKER_CONCURRENCY: CONCURRENCY,
      // Workers serve /metrics on 9464 by default: two on one machine would collide (the second exits).
      OPS_PORT: 'off',
      LOG_LEVEL: 'info',
      // Node flags of the callsync processes (A/B, e.g. `--max-semi-space-size=16`); default: as `npm start` runs them.
      NODE_OPTIONS: callsyncNodeOptions(),
    };
    const prof = PROFILE ? work : undefined;
    const roles = [
      startProcess('ingress', build.run('workers/main.ts'), { ...env, CALLSYNC_ROLE: 'ingress' }, { readyMarker: /"msg":"ingress listening"/, cpuProfDir: prof }),
      ...Array.from({ length: WORKERS }, (_, i) =>
        startProcess(`worker-${i + 1}`, build.run('workers/main.ts'), { ...env, CALLSYNC_ROLE: 'worker' }, { readyMarker: /"msg":"workers started"/, cpuProfDir: prof }),
      ),
    ];
    procs.push(...(await Promise.all(roles)));

    // A mobile caller (the SMS goes to the caller), a unique call id per request.
    const body = JSON.stringify(webhookPayload('[<id>]', (p) => (p.call.from = '+491701234567')));
    console.log(`bench:e2e  N=${N} connections=${CONNECTIONS} workers=${WORKERS} concurrency=${CONCURRENCY}/queue rate=${RATE ?? 'max'}/s body=${body.length} B  sinks=${SINKS.join(',')}`);
    console.log(`machine: ${JSON.stringify(machineBefore)}`);

    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    const workerProcs = procs.filter((p) => p.name.startsWith('worker-'));
    const workerCpuBefore = workerProcs.reduce((s, p) => s + p.cpuSeconds(), 0);
    const started = Date.now();
    const webhookUrl = `http://127.0.0.1:${port}/webhooks/ai-agent/bench-agent`;
    const ingress = RATE ? await paced(webhookUrl, body, N, RATE, CONNECTIONS) : await load(webhookUrl, body, N, CONNECTIONS);
    const acked = Date.now();
    const key = (queue: string, part: string) => `${prefix}:${queue}:${part}`;
    const deadline = Date.now() + Math.max(120_000, N * 20);
    for (;;) {
      const counts = await Promise.all(SINKS.map((s) => conn.zcard(key(queueOf(s), 'completed'))));
      const failed = await Promise.all(SINKS.map((s) => conn.zcard(key(queueOf(s), 'failed'))));
      if (counts.every((c) => c >= ingress.ok)) break;
      if (failed.some((f) => f > 0)) throw new Error(`sink jobs failed: ${failed.join(', ')}`);
      if (Date.now() > deadline) throw new Error(`not done in time: ${counts.join(', ')} of ${ingress.ok}`);
      await new Promise((res) => setTimeout(res, 200));
    }
    const allDone = Date.now();
    const workerCpuMsPerCall = round(((workerProcs.reduce((s, p) => s + p.cpuSeconds(), 0) - workerCpuBefore) * 1000) / ingress.ok, 2);
    const rss = Object.fromEntries([...procs.map((p) => [p.name, p.peakRssMb()]), ['redis-server', peakRssOfPid(redis.pid)]]);

    // Acknowledged (the call's receivedAt, set by the ingress just before it stores the call and
    // answers 202) -> last sink finished, per call. Sink job ids are the call hash in every queue.
    const hashes = await conn.zrange(key(sinkQueueName(SINKS[0]!), 'completed'), 0, -1);
    const fieldOf = async (queue: string, ids: string[], field: 'data' | 'finishedOn') => {
      const out = new Map<string, string>();
      for (let i = 0; i < ids.length; i += 1000) {
        const pipe = conn.pipeline();
        for (const id of ids.slice(i, i + 1000)) pipe.hget(key(queue, id), field);
        const res = await pipe.exec();
        ids.slice(i, i + 1000).forEach((id, k) => out.set(id, String(res?.[k]?.[1])));
      }
      return out;
    };
    const ackAt = new Map<string, number>();
    for (const [h, data] of await fieldOf(sinkQueueName(SINKS[0]!), hashes, 'data')) {
      ackAt.set(h, Date.parse((JSON.parse(data) as { call: { receivedAt: string } }).call.receivedAt));
    }
    const doneAt = new Map<string, number>();
    const perSink: Record<string, unknown>[] = [];
    for (const s of SINKS) {
      const own: number[] = [];
      for (const [h, at] of await fieldOf(queueOf(s), hashes, 'finishedOn')) {
        doneAt.set(h, Math.max(doneAt.get(h) ?? 0, Number(at)));
        own.push(Number(at) - ackAt.get(h)!);
      }
      own.sort((a, b) => a - b);
      perSink.push({ sink: s, 'ack->done p50 ms': percentile(own, 50), 'p90 ms': percentile(own, 90), 'p99 ms': percentile(own, 99), 'max ms': own[own.length - 1] });
    }
    const latencies = hashes.map((h) => doneAt.get(h)! - ackAt.get(h)!).filter(Number.isFinite).sort((a, b) => a - b);
    const firstAck = Math.min(...ackAt.values());
    const lastDone = Math.max(...doneAt.values());
    const stats = (await (await fetch(r.statsUrl)).json()) as Record<string, number>;
    conn.disconnect();

    const summary = {
      webhooks: N,
      'offered/s': RATE ?? 'max',
      acknowledged: ingress.ok,
      'ingress accepted/s': ingress.perSecond,
      'ingress p99 ms': ingress.p99Ms,
      'e2e events/s': Math.round((ingress.ok * 1000) / (lastDone - firstAck)),
      'ack->done p50 ms': percentile(latencies, 50),
      'ack->done p99 ms': percentile(latencies, 99),
      'ack->done max ms': latencies[latencies.length - 1],
      'all done after s': round((allDone - started) / 1000, 1),
      'worker CPU ms/call': workerCpuMsPerCall,
    };
    printTable([summary]);
    console.log('');
    printTable(perSink);
    console.log('');
    printTable([rss]);
    const ceiling = CEILING ? await s3Ceiling(r.s3Env, Number(CONCURRENCY), Math.min(CEILING_N, 20_000)) : undefined;
    if (ceiling) {
      console.log('');
      printTable([ceiling]);
    }
    console.log(`\nremote side: ${JSON.stringify(stats)}  (sink jobs per sink: ${ingress.ok}; ack phase ${round((acked - started) / 1000, 1)} s)`);
    console.log(`\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, workers: WORKERS, concurrency: CONCURRENCY, rate: RATE ?? null, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, summary, perSink, peakRssMb: rss, remote: stats, ceiling })}`);
  } finally {
    for (const p of procs.reverse()) await p.stop().catch(() => undefined);
    if (PROFILE) console.log(`\n${await summariseProfiles(work)}`);
    await redis.destroy();
    await rm(work, { recursive: true, force: true });
  }
}

/**
 * The ceiling for the archive sink on this machine: the same two PutObjects per call (the call's
 * JSON and transcript, same sizes), `concurrency` calls at once, through a bare S3Client configured
 * as the archive's (no BullMQ, no callsync), against the same s3rver. Bounded in count and time.
 */
async function s3Ceiling(s3Env: Record<string, string>, concurrency: number, calls: number): Promise<Record<string, unknown>> {
  const { S3Client, PutObjectCommand } = await import('@aws-sdk/client-s3');
  const client = new S3Client({
    region: 'us-east-1',
    endpoint: s3Env.S3_ENDPOINT,
    forcePathStyle: true,
    credentials: { accessKeyId: s3Env.AWS_ACCESS_KEY_ID!, secretAccessKey: s3Env.AWS_SECRET_ACCESS_KEY! },
    maxAttempts: 2,
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
  const call = sampleCall('ceiling');
  const json = renderArchiveJson(call);
  const text = renderTranscriptText(call);
  const bucket = s3Env.ARCHIVE_S3_BUCKET!;
  let next = 0;
  let failed = 0;
  const deadline = Date.now() + 120_000;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < calls && Date.now() < deadline) {
        const i = next++;
        try {
          await client.send(new PutObjectCommand({ Bucket: bucket, Key: `ceiling/${i}.json`, Body: json, ContentType: 'application/json; charset=utf-8' }));
          await client.send(new PutObjectCommand({ Bucket: bucket, Key: `ceiling/${i}.txt`, Body: text, ContentType: 'text/plain; charset=utf-8' }));
        } catch {
          failed++;
        }
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  client.destroy();
  return { 'S3 ceiling: calls': next, concurrency, failed, 'PUT/s': Math.round((2 * (next - failed)) / seconds), 'calls/s (2 PUTs each)': Math.round((next - failed) / seconds) };
}

void main();
