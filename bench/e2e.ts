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
//   BENCH_BARE=0       skip the bare loop (bench/bare-loop.ts; on by default, issue 26 item 2): after
//                      the run, in a process of its own on the same sink servers, the same external
//                      work per call by hand — the three archive objects PUT with the AWS SDK, the
//                      signed webhook and the SMS POSTed with node:http — BENCH_CONCURRENCY calls at once,
//                      BENCH_BARE_N calls (default min(N, 3000)) after 200 unmeasured; prints its CPU
//                      per call and `worker CPU × bare` (the aim: ≤ 1.5)
//   BENCH_CPU_PROF=1   profile the ingress and the workers and print where their time goes
//   BENCH_COUNT_COMMANDS=1   (default topology only) watch Redis with MONITOR while the run lasts and
//                      print per call: the commands callsync's clients sent (each an upper bound of
//                      a round trip: MONITOR does not show pipelining), those run inside scripts
//                      (MONITOR's `lua` source), by the script that ran them and by command, INFO commandstats'
//                      total, and the sent ones by name;
//                      and the server's read events (INFO stats total_reads_processed, the
//                      bench's own left out): commands that arrived together (pipelined, or
//                      written by many jobs at once) count once — depends on the load, a floor.
//                      MONITOR slows Redis: use it with a small BENCH_N, not for the rates.
//   BENCH_TIMELINE=compare   the call timeline's cost (issue 24): BENCH_ROUNDS (default 2) rounds of
//                      one run with the timeline off (CALL_TIMELINE=off in the ingress and the
//                      workers) and one with it on, alternating (off/on, on/off, …), each on a fresh
//                      redis-server, sink servers and callsync processes; prints each run's worker
//                      CPU ms/call, ingress CPU ms/call and calls/s, the means per mode and the
//                      overhead of the timeline on the worker's CPU per call (the budget: 10 %).
//                      The bare loop is skipped. BENCH_TIMELINE=off: one run with the timeline off.
//   BENCH_CALLSYNC_NODE_OPTIONS='--max-semi-space-size=16'   Node flags of the callsync processes
//                      instead of the ones `npm start` uses (package.json)
//
// Topology comparison (`npm run bench:cluster` runs the first line):
//   BENCH_TOPOLOGIES=single,cluster BENCH_ACK_REPLICAS=0,1 BENCH_N=3000 npm run bench:e2e
//                      the same load (N, connections, workers, rate) once per topology × ACK_REPLICAS
//                      value, each on fresh servers and fresh callsync processes, then one table:
//                      single  = a redis-server with one replica (`--replicaof`), QUEUE_PREFIX=callsync
//                      cluster = a Redis Cluster of 3 masters + 3 replicas (REDIS_CLUSTER_NODES), the
//                                spread layout (plain QUEUE_PREFIX=callsync, INBOUND_SHARDS default 8)
//                      Both without AOF (the test topologies' settings; the default run above has
//                      AOF everysec), the ingress spool off (a WAIT not confirmed in time is a 503
//                      and shows as non-2xx, never as a spooled 202). Per master it reports the
//                      share of keys (DBSIZE when the load ends — the queues hold the backlog then —
//                      and when every sink is done, completed jobs kept), of commands processed and
//                      of CPU. BENCH_PREFIX changes the prefix; BENCH_TIME_CAP_S (default 900)
//                      skips the runs left once the comparison has taken that long.
//
// Acknowledgement time is the call's `receivedAt` (set by the ingress just before it stores the call
// and answers 202; carried in every sink job); "done" is the latest `finishedOn` of the call's three
// sink jobs. Both come from Redis. "ingress p50/p99" is the client's request -> 202 latency
// (autocannon, or the paced client).
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRedis, type RedisSettings } from '../queues/connection.js';
import { inboundStreamKey } from '../queues/inbound.js';
import { redisKeys } from '../queues/keys.js';
import { sinkQueueName } from '../queues/registry.js';
import { sampleCall, webhookPayload } from '../test/support/calls.js';
import { renderArchiveJson, renderTranscriptText } from '../src/sinks/archive/render.js';
import { nodeCommand, startRedisCluster, startReplicatedRedis } from '../test/support/redis-cluster.js';
import { freePort, startPrivateRedis } from '../test/support/redis-server.js';
import {
  callsyncNodeOptions,
  compiled,
  cpuSecondsOfPid,
  load,
  paced,
  machine,
  peakRssOfPid,
  percentile,
  printTable,
  round,
  startProcess,
  summariseProfiles,
  type BenchProcess,
} from './support.js';

const N = Math.min(10_000, Number(process.env.BENCH_N ?? 10_000));
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
/** Worker processes; with BENCH_TOPOLOGIES a list (`1,2`): each topology runs once per count. */
const WORKER_COUNTS = (process.env.BENCH_WORKERS ?? '1').split(',').map((w) => Number(w.trim()));
const WORKERS = WORKER_COUNTS[0]!;
const CONCURRENCY = process.env.BENCH_CONCURRENCY ?? '32';
const PROFILE = process.env.BENCH_CPU_PROF === '1';
const RATE = process.env.BENCH_RATE ? Number(process.env.BENCH_RATE) : undefined;
const CEILING = process.env.BENCH_CEILING === '1';
const CEILING_N = Number(process.env.BENCH_CEILING_N ?? 2000);
const BARE = process.env.BENCH_BARE !== '0';
const BARE_N = Number(process.env.BENCH_BARE_N ?? Math.min(N, 3000));
const TOPOLOGIES = process.env.BENCH_TOPOLOGIES
  ? process.env.BENCH_TOPOLOGIES.split(',')
      .map((t) => t.trim())
      .filter(Boolean)
  : undefined;
const ACK_REPLICAS = (process.env.BENCH_ACK_REPLICAS ?? '0').split(',').map((a) => Number(a.trim()));
const COUNT_COMMANDS = process.env.BENCH_COUNT_COMMANDS === '1';
/** `compare`: timeline off and on in alternating runs; `off`: one run without it; unset: one run with it. */
const TIMELINE = process.env.BENCH_TIMELINE;
const TIMELINE_ROUNDS = Math.max(1, Math.min(10, Number(process.env.BENCH_ROUNDS ?? 2)));
const TIME_CAP_MS = Number(process.env.BENCH_TIME_CAP_S ?? 900) * 1000;
const SINKS = ['archive', 'crm', 'sms'];
/** The queue of each sink's jobs: the signed webhook's are in its endpoint's queue. */
const queueOf = (sink: string) => (sink === 'crm' ? sinkQueueName('crm', 'receiver') : sinkQueueName(sink));

/** A redis-server the bench watches: its port and process (for DBSIZE, INFO, CPU and RSS). */
interface Server {
  port: number;
  pid: number;
}

/** Where a run's Redis is: the callsync env that points there, the settings for the bench's own client, its servers. */
interface Target {
  /** `default` (the private redis-server of rounds 1–3), `single` (+ one replica) or `cluster` (3 + 3). */
  name: 'default' | 'single' | 'cluster';
  env: Record<string, string>;
  settings: RedisSettings;
  /** The masters now (one on a single node). */
  masters(): Promise<Server[]>;
  /** Every redis-server of the topology (masters and replicas). */
  servers: Server[];
  /** Which master holds each area of the layout (queues, inbound shards), by port. */
  areasByMaster(): Promise<Map<number, string[]>>;
  destroy(): Promise<void>;
}
const sinkAreas = (prefix: string, settings: RedisSettings) => {
  const keys = redisKeys({ ...settings, prefix });
  return [
    ...SINKS.map((s) => ({ area: queueOf(s), key: `${keys.queuePrefix(queueOf(s))}:${queueOf(s)}:meta` })),
    ...Array.from({ length: keys.inboundShards }, (_, i) => ({
      area: `inbound-${i}`,
      key: inboundStreamKey(keys.inboundShard(i)),
    })),
  ];
};

async function startTarget(name: Target['name'], prefix: string): Promise<Target> {
  if (name === 'cluster') {
    const cluster = await startRedisCluster();
    const settings: RedisSettings = {
      url: 'redis://127.0.0.1:1',
      clusterNodes: cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
      sentinels: [],
      tls: false,
      prefix,
    };
    const serverOf = (port: number) => ({ port, pid: cluster.nodes.find((n) => n.port === port)!.pid });
    return {
      name,
      // REDIS_URL at a closed port: only the cluster can serve.
      env: { REDIS_URL: 'redis://127.0.0.1:1', REDIS_CLUSTER_NODES: cluster.seeds },
      settings,
      masters: async () => (await cluster.masters()).sort((a, b) => a - b).map(serverOf),
      servers: cluster.nodes.map((n) => ({ port: n.port, pid: n.pid })),
      async areasByMaster() {
        const out = new Map<number, string[]>();
        for (const { area, key } of sinkAreas(prefix, settings)) {
          const port = (await cluster.nodesOfKey(key)).master.port;
          out.set(port, [...(out.get(port) ?? []), area]);
        }
        return out;
      },
      destroy: () => cluster.destroy(),
    };
  }
  if (name === 'single') {
    const pair = await startReplicatedRedis();
    const settings: RedisSettings = { url: pair.url, clusterNodes: [], sentinels: [], tls: false, prefix };
    const master = { port: pair.master.port, pid: pair.master.pid };
    return {
      name,
      env: { REDIS_URL: pair.url },
      settings,
      masters: async () => [master],
      servers: [master, { port: pair.replica.port, pid: pair.replica.pid }],
      areasByMaster: async () => new Map([[master.port, ['everything']]]),
      destroy: () => pair.destroy(),
    };
  }
  const redis = await startPrivateRedis({ appendfsync: 'everysec' });
  const server = { port: redis.port, pid: redis.pid };
  return {
    name,
    env: { REDIS_URL: redis.url },
    settings: { url: redis.url, clusterNodes: [], sentinels: [], tls: false, prefix },
    masters: async () => [server],
    servers: [server],
    areasByMaster: async () => new Map([[server.port, ['everything']]]),
    destroy: () => redis.destroy(),
  };
}

/** Keys, commands processed so far and CPU seconds of each master. */
async function masterStats(target: Target): Promise<Map<number, { keys: number; commands: number; cpuS: number }>> {
  const out = new Map<number, { keys: number; commands: number; cpuS: number }>();
  for (const m of await target.masters()) {
    const keys = Number(await nodeCommand(m.port, ['DBSIZE']));
    const info = String(await nodeCommand(m.port, ['INFO', 'stats']));
    const commands = Number(/total_commands_processed:(\d+)/.exec(info)?.[1] ?? NaN);
    out.set(m.port, { keys, commands, cpuS: cpuSecondsOfPid(m.pid) });
  }
  return out;
}

/** `a / b / c` shares in percent, in the masters' port order. */
const shares = (values: number[]) => {
  const total = values.reduce((s, v) => s + v, 0);
  return values.map((v) => (total > 0 ? `${Math.round((100 * v) / total)}%` : '–')).join(' / ');
};

interface RunResult {
  summary: Record<string, unknown>;
  perSink: Record<string, unknown>[];
  rss: Record<string, number>;
  remote: Record<string, number>;
  perMaster: Record<string, unknown>[];
  redisCpuS: { masters: number; replicas: number };
  ceiling?: Record<string, unknown>;
  bare?: Record<string, unknown>;
}

/** One end-to-end run on `target` with ACK_REPLICAS=`ackReplicas`: fresh sink servers and callsync processes. */
async function runOnce(
  target: Target,
  ackReplicas: number,
  build: ReturnType<typeof compiled>,
  comparing: boolean,
  workers = WORKERS,
  timeline: 'on' | 'off' | undefined = undefined,
): Promise<RunResult> {
  const work = await mkdtemp(join(tmpdir(), 'callsync-e2e-'));
  const procs: BenchProcess[] = [];
  const prefix = target.settings.prefix;
  try {
    const sinks = await startProcess('sink-servers', build.run('bench/sink-servers.ts'), {});
    procs.push(sinks);
    const r = sinks.ready as {
      s3Env: Record<string, string>;
      crmUrl: string;
      secret: string;
      smsUrl: string;
      tokenId: string;
      token: string;
      statsUrl: string;
    };
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
      ...target.env,
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
      ...(timeline === 'off' ? { CALL_TIMELINE: 'off' } : {}),
      // The comparison: every 202 is a stored (and, with ACK_REPLICAS, replicated) call; one the
      // replicas do not confirm in time is a 503 here, not a 202 from the spool.
      ...(comparing ? { SPOOL_ENABLED: 'false', ACK_REPLICAS: String(ackReplicas) } : {}),
    };
    const prof = PROFILE ? work : undefined;
    const roles = [
      startProcess(
        'ingress',
        build.run('workers/main.ts'),
        { ...env, CALLSYNC_ROLE: 'ingress' },
        { readyMarker: /"msg":"ingress listening"/, cpuProfDir: prof },
      ),
      ...Array.from({ length: workers }, (_, i) =>
        startProcess(
          `worker-${i + 1}`,
          build.run('workers/main.ts'),
          { ...env, CALLSYNC_ROLE: 'worker' },
          { readyMarker: /"msg":"workers started"/, cpuProfDir: prof },
        ),
      ),
    ];
    procs.push(...(await Promise.all(roles)));

    // A mobile caller (the SMS goes to the caller), a unique call id per request.
    const body = JSON.stringify(webhookPayload('[<id>]', (p) => (p.call.from = '+491701234567')));
    const where = comparing
      ? `  redis=${target.name} ACK_REPLICAS=${ackReplicas} prefix=${prefix}`
      : timeline
        ? `  timeline=${timeline}`
        : '';
    console.log(
      `bench:e2e  N=${N} connections=${CONNECTIONS} workers=${workers} concurrency=${CONCURRENCY}/queue rate=${RATE ?? 'max'}/s body=${body.length} B  sinks=${SINKS.join(',')}${where}`,
    );
    if (!comparing) console.log(`machine: ${JSON.stringify(machine())}`);

    const conn = createRedis(target.settings, 'worker');
    const keys = redisKeys(target.settings);
    const workerProcs = procs.filter((p) => p.name.startsWith('worker-'));
    const workerCpuBefore = workerProcs.reduce((s, p) => s + p.cpuSeconds(), 0);
    const ingressProc = procs.find((p) => p.name === 'ingress')!;
    const ingressCpuBefore = ingressProc.cpuSeconds();
    const redisCpu = () => target.servers.map((s) => cpuSecondsOfPid(s.pid));
    const redisCpuBefore = redisCpu();
    const statsBefore = await masterStats(target);
    const counter = COUNT_COMMANDS && !comparing ? await countCommands(target.settings, conn) : undefined;
    const started = Date.now();
    const webhookUrl = `http://127.0.0.1:${port}/webhooks/ai-agent/bench-agent`;
    const ingress = RATE
      ? await paced(webhookUrl, body, N, RATE, CONNECTIONS)
      : await load(webhookUrl, body, N, CONNECTIONS);
    const acked = Date.now();
    const ingressCpuMsPerCall = round(
      ((ingressProc.cpuSeconds() - ingressCpuBefore) * 1000) / Math.max(1, ingress.ok),
      2,
    );
    // The moment the queues hold the most work (at full speed the workers are behind by then).
    const statsAcked = await masterStats(target);
    const key = (queue: string, part: string) => `${keys.queuePrefix(queue)}:${queue}:${part}`;
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
    const counted = counter ? await counter.stop() : undefined;
    const statsDone = await masterStats(target);
    const redisCpuAfter = redisCpu();
    const workerCpuMsPerCall = round(
      ((workerProcs.reduce((s, p) => s + p.cpuSeconds(), 0) - workerCpuBefore) * 1000) / ingress.ok,
      2,
    );
    const rss = Object.fromEntries([
      ...procs.map((p) => [p.name, p.peakRssMb()]),
      ['redis-server', Math.max(...target.servers.map((s) => peakRssOfPid(s.pid)))],
    ]) as Record<string, number>;

    // Acknowledged (the call's receivedAt, set by the ingress just before it stores the call and
    // answers 202) -> last sink finished, per call. Sink job ids are the call hash in every queue.
    const hashes = await conn.zrange(key(sinkQueueName(SINKS[0]!), 'completed'), 0, -1);
    const fieldOf = async (queue: string, ids: string[], field: 'data' | 'finishedOn') => {
      const out = new Map<string, string>();
      for (let i = 0; i < ids.length; i += 1000) {
        // One queue's keys share a slot: one pipeline per queue works on a cluster too.
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
      perSink.push({
        sink: s,
        'ack->done p50 ms': percentile(own, 50),
        'p90 ms': percentile(own, 90),
        'p99 ms': percentile(own, 99),
        'max ms': own[own.length - 1],
      });
    }
    const latencies = hashes
      .map((h) => doneAt.get(h)! - ackAt.get(h)!)
      .filter(Number.isFinite)
      .sort((a, b) => a - b);
    const firstAck = Math.min(...ackAt.values());
    const lastDone = Math.max(...doneAt.values());
    const remote = (await (await fetch(r.statsUrl)).json()) as Record<string, number>;
    conn.disconnect();

    // Per master: which areas it holds, its share of the keys and of the commands and CPU of the run.
    const areas = await target.areasByMaster();
    const ports = [...statsDone.keys()];
    const perMaster = ports.map((p) => ({
      master: p,
      holds: (areas.get(p) ?? []).join(' '),
      'keys when acked': statsAcked.get(p)?.keys,
      'keys when done': statsDone.get(p)?.keys,
      commands: (statsDone.get(p)?.commands ?? NaN) - (statsBefore.get(p)?.commands ?? NaN),
      'CPU s': round((statsDone.get(p)?.cpuS ?? NaN) - (statsBefore.get(p)?.cpuS ?? NaN), 1),
    }));
    const masterPids = new Set((await target.masters()).map((m) => m.pid));
    const cpuDelta = target.servers.map((s, i) => ({
      master: masterPids.has(s.pid),
      s: redisCpuAfter[i]! - redisCpuBefore[i]!,
    }));
    const redisCpuS = {
      masters: round(
        cpuDelta.filter((c) => c.master).reduce((a, c) => a + c.s, 0),
        1,
      ),
      replicas: round(
        cpuDelta.filter((c) => !c.master).reduce((a, c) => a + c.s, 0),
        1,
      ),
    };

    const summary: Record<string, unknown> = {
      ...(comparing ? { redis: target.name, ACK_REPLICAS: ackReplicas, workers } : {}),
      webhooks: N,
      'offered/s': RATE ?? 'max',
      acknowledged: ingress.ok,
      ...(comparing ? { 'non-2xx': ingress.non2xx + ingress.errors } : {}),
      'ingress accepted/s': ingress.perSecond,
      ...(comparing ? { 'ingress p50 ms': ingress.p50Ms } : {}),
      'ingress p99 ms': ingress.p99Ms,
      'e2e events/s': Math.round((ingress.ok * 1000) / (lastDone - firstAck)),
      'ack->done p50 ms': percentile(latencies, 50),
      'ack->done p99 ms': percentile(latencies, 99),
      'ack->done max ms': latencies[latencies.length - 1],
      'all done after s': round((allDone - started) / 1000, 1),
      'worker CPU ms/call': workerCpuMsPerCall,
      ...(comparing || timeline ? { 'ingress CPU ms/call': ingressCpuMsPerCall } : {}),
      ...(comparing
        ? {
            'redis CPU s (masters+replicas)': `${redisCpuS.masters}+${redisCpuS.replicas}`,
            'keys per master when acked': shares(ports.map((p) => statsAcked.get(p)?.keys ?? 0)),
            'keys per master when done': shares(ports.map((p) => statsDone.get(p)?.keys ?? 0)),
            'commands per master': shares(perMaster.map((m) => m.commands)),
          }
        : {}),
    };
    printTable([summary]);
    console.log('');
    printTable(perSink);
    console.log('');
    printTable([rss]);
    if (comparing) {
      console.log('');
      printTable(perMaster);
    }
    if (counted) {
      const per = (n: number) => round(n / Math.max(1, ingress.ok), 1);
      const commandsPerCall = {
        'sent per call (≥ round trips)': per(counted.sent),
        'server read events per call (batched; load-dependent)': per(counted.readEvents),
        'inside scripts per call': per(counted.inScripts),
        'all per call (commandstats)': per(counted.commandstats),
        'EVAL (script text resent)': per(
          [...counted.byName].filter(([n]) => n.startsWith('eval(')).reduce((a, [, v]) => a + v, 0),
        ),
      };
      console.log('');
      printTable([commandsPerCall]);
      const byName = [...counted.byName].sort((a, b) => b[1] - a[1]).map(([name, n]) => `${name} ${per(n)}`);
      console.log(`sent per call by name: ${byName.join(', ')}`);
      const inside = [...counted.insideByScript].sort((a, b) => b[1] - a[1]).map(([name, n]) => `${name} ${per(n)}`);
      console.log(`run inside scripts per call, by script: ${inside.join(', ')}`);
      // Each script's share by command (what it would take to lower it: docs/performance.md round 15).
      for (const [script, byCommand] of [...counted.insideByScriptCommand].sort(
        (a, b) => (counted.insideByScript.get(b[0]) ?? 0) - (counted.insideByScript.get(a[0]) ?? 0),
      )) {
        const commands = [...byCommand]
          .filter(([, n]) => n / Math.max(1, ingress.ok) >= 0.05)
          .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
          .map(([name, n]) => `${name} ${per(n)}`);
        if (commands.length > 0) console.log(`  ${script}: ${commands.join(', ')}`);
      }
      summary.commands = commandsPerCall;
    }
    const ceiling = CEILING ? await s3Ceiling(r.s3Env, Number(CONCURRENCY), Math.min(CEILING_N, 20_000)) : undefined;
    if (ceiling) {
      console.log('');
      printTable([ceiling]);
    }
    const bare =
      BARE && TIMELINE !== 'compare'
        ? await bareLoop(
            build,
            r,
            work,
            Number(CONCURRENCY),
            workerCpuMsPerCall,
            (remote.smsRequests ?? 0) / ingress.ok,
          )
        : undefined;
    if (bare) {
      console.log('');
      printTable([bare]);
      summary['worker CPU × bare'] = bare['worker CPU × bare'];
    }
    console.log(
      `\nremote side: ${JSON.stringify(remote)}  (sink jobs per sink: ${ingress.ok}; ack phase ${round((acked - started) / 1000, 1)} s)`,
    );
    return { summary, perSink, rss, remote, perMaster, redisCpuS, ceiling, bare };
  } finally {
    for (const p of procs.reverse()) await p.stop().catch(() => undefined);
    if (PROFILE) console.log(`\n${await summariseProfiles(work)}`);
    await rm(work, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const build = compiled();
  if (TIMELINE === 'compare') return compareTimeline(build);
  if (TIMELINE !== undefined && TIMELINE !== 'off') throw new Error('BENCH_TIMELINE: compare or off');
  if (!TOPOLOGIES) {
    if (ACK_REPLICAS.some((a) => a !== 0))
      throw new Error('BENCH_ACK_REPLICAS needs BENCH_TOPOLOGIES (the default redis-server has no replica)');
    if (WORKER_COUNTS.length !== 1 || !Number.isInteger(WORKERS) || WORKERS < 1)
      throw new Error('BENCH_WORKERS: one worker count of 1 or more (a list needs BENCH_TOPOLOGIES)');
    const machineBefore = machine();
    const target = await startTarget('default', `e2e-${randomBytes(3).toString('hex')}`);
    try {
      const res = await runOnce(target, 0, build, false, WORKERS, TIMELINE === 'off' ? 'off' : undefined);
      console.log(
        `\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, workers: WORKERS, concurrency: CONCURRENCY, rate: RATE ?? null, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, summary: res.summary, perSink: res.perSink, peakRssMb: res.rss, remote: res.remote, ceiling: res.ceiling, bare: res.bare })}`,
      );
    } finally {
      await target.destroy();
    }
    return;
  }

  if (WORKER_COUNTS.some((w) => !Number.isInteger(w) || w < 1))
    throw new Error('BENCH_WORKERS: worker counts of 1 or more, e.g. 1,2');
  const unknown = TOPOLOGIES.filter((t) => t !== 'single' && t !== 'cluster');
  if (unknown.length > 0) throw new Error(`BENCH_TOPOLOGIES: ${unknown.join(', ')}: use single and/or cluster`);
  // Both topologies give each master one replica: more cannot confirm.
  if (ACK_REPLICAS.some((a) => !Number.isInteger(a) || a < 0 || a > 1))
    throw new Error('BENCH_ACK_REPLICAS: 0 and/or 1 (each master has one replica)');
  const prefix = process.env.BENCH_PREFIX ?? 'callsync';
  const machineBefore = machine();
  console.log(
    `bench:e2e topologies=${TOPOLOGIES.join(',')} ACK_REPLICAS=${ACK_REPLICAS.join(',')} N=${N} connections=${CONNECTIONS} workers=${WORKER_COUNTS.join(',')} concurrency=${CONCURRENCY}/queue rate=${RATE ?? 'max'}/s`,
  );
  console.log(`machine: ${JSON.stringify(machineBefore)}\n`);
  const begun = Date.now();
  const results: RunResult[] = [];
  const skipped: string[] = [];
  const failedRuns: string[] = [];
  for (const topology of TOPOLOGIES as Target['name'][]) {
    for (const ack of ACK_REPLICAS) {
      for (const workers of WORKER_COUNTS) {
        const run = `${topology}/ACK_REPLICAS=${ack}/workers=${workers}`;
        if (Date.now() - begun > TIME_CAP_MS) {
          skipped.push(run);
          continue;
        }
        // Fresh servers per run: no keys, no memory, no AOF of an earlier run.
        try {
          const target = await startTarget(topology, prefix);
          try {
            results.push(await runOnce(target, ack, build, true, workers));
          } finally {
            await target.destroy();
          }
        } catch (err) {
          // One failed run (a topology that did not start, sinks not done in time) does not lose the others.
          console.log(`${run} failed: ${err instanceof Error ? err.message : String(err)}`);
          failedRuns.push(run);
        }
        console.log('');
      }
    }
  }
  console.log('=== topologies, same load ===');
  printTable(
    results.map((r) => {
      const s = r.summary;
      return {
        redis: s.redis,
        ACK_REPLICAS: s.ACK_REPLICAS,
        workers: s.workers,
        acknowledged: s.acknowledged,
        'non-2xx': s['non-2xx'],
        'ingress accepted/s': s['ingress accepted/s'],
        'ack p50 ms': s['ingress p50 ms'],
        'ack p99 ms': s['ingress p99 ms'],
        'e2e calls/s': s['e2e events/s'],
        // Against the first worker count's run on the same topology and ACK_REPLICAS.
        '× first': (() => {
          const first = results.find(
            (o) =>
              o.summary.redis === s.redis &&
              o.summary.ACK_REPLICAS === s.ACK_REPLICAS &&
              o.summary.workers === WORKER_COUNTS[0],
          );
          return first ? round(Number(s['e2e events/s']) / Number(first.summary['e2e events/s']), 2) : '–';
        })(),
        'ack->done p50 ms': s['ack->done p50 ms'],
        'ack->done p99 ms': s['ack->done p99 ms'],
        'ingress CPU ms/call': s['ingress CPU ms/call'],
        'worker CPU ms/call': s['worker CPU ms/call'],
        'redis CPU s m+r': s['redis CPU s (masters+replicas)'],
        'keys/master acked': s['keys per master when acked'],
        'keys/master done': s['keys per master when done'],
        'cmds/master': s['commands per master'],
      };
    }),
  );
  if (skipped.length > 0) console.log(`\nskipped (BENCH_TIME_CAP_S reached): ${skipped.join(', ')}`);
  if (failedRuns.length > 0) console.log(`\nfailed: ${failedRuns.join(', ')}`);
  console.log(
    `\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, workers: WORKER_COUNTS, concurrency: CONCURRENCY, rate: RATE ?? null, topologies: TOPOLOGIES, ackReplicas: ACK_REPLICAS, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, runs: results, skipped, failed: failedRuns })}`,
  );
}

/**
 * BENCH_TIMELINE=compare: the timeline off and on in alternating runs (off/on, on/off, …), each on
 * a fresh redis-server and fresh processes; the worker's CPU per call with and without it.
 */
async function compareTimeline(build: ReturnType<typeof compiled>): Promise<void> {
  if (TOPOLOGIES) throw new Error('BENCH_TIMELINE=compare runs on the default redis-server: without BENCH_TOPOLOGIES');
  const machineBefore = machine();
  console.log(`bench:e2e timeline compare: ${TIMELINE_ROUNDS} rounds of off + on, N=${N} workers=${WORKERS}`);
  console.log(`machine: ${JSON.stringify(machineBefore)}\n`);
  const runs: { round: number; timeline: 'on' | 'off'; summary: Record<string, unknown> }[] = [];
  for (let r = 0; r < TIMELINE_ROUNDS; r++) {
    const order: ('on' | 'off')[] = r % 2 === 0 ? ['off', 'on'] : ['on', 'off'];
    for (const mode of order) {
      const target = await startTarget('default', `e2e-${randomBytes(3).toString('hex')}`);
      try {
        const res = await runOnce(target, 0, build, false, WORKERS, mode);
        runs.push({ round: r + 1, timeline: mode, summary: res.summary });
      } finally {
        await target.destroy();
      }
      console.log('');
    }
  }
  const num = (x: unknown) => Number(x);
  const mean = (mode: 'on' | 'off', field: string) => {
    const of = runs.filter((x) => x.timeline === mode).map((x) => num(x.summary[field]));
    return of.reduce((a, v) => a + v, 0) / of.length;
  };
  console.log('=== timeline off vs on, same load ===');
  printTable(
    runs.map((x) => ({
      round: x.round,
      timeline: x.timeline,
      'worker CPU ms/call': x.summary['worker CPU ms/call'],
      'ingress CPU ms/call': x.summary['ingress CPU ms/call'],
      'e2e calls/s': x.summary['e2e events/s'],
      'ack->done p50 ms': x.summary['ack->done p50 ms'],
    })),
  );
  const overhead = (field: string) => round((mean('on', field) / mean('off', field) - 1) * 100, 1);
  const means = (['off', 'on'] as const).map((mode) => ({
    timeline: mode,
    'worker CPU ms/call': round(mean(mode, 'worker CPU ms/call'), 3),
    'ingress CPU ms/call': round(mean(mode, 'ingress CPU ms/call'), 3),
    'e2e calls/s': Math.round(mean(mode, 'e2e events/s')),
  }));
  console.log('');
  printTable(means);
  const result = {
    'worker CPU overhead %': overhead('worker CPU ms/call'),
    'ingress CPU overhead %': overhead('ingress CPU ms/call'),
    'calls/s change %': overhead('e2e events/s'),
  };
  console.log(`\ntimeline: ${JSON.stringify(result)} (budget: worker CPU overhead ≤ 10 %)`);
  console.log(
    `\nRESULT ${JSON.stringify({ n: N, workers: WORKERS, concurrency: CONCURRENCY, rounds: TIMELINE_ROUNDS, machine: { ...machineBefore, loadavgAfter: machine().loadavg }, runs, means, ...result })}`,
  );
}

/** Commands counted while the run lasts: MONITOR (without the bench's own client) and INFO commandstats. */
async function countCommands(settings: RedisSettings, own: ReturnType<typeof createRedis>) {
  const statsClient = createRedis(settings, 'worker');
  const commandstats = async () => {
    const info = String(await statsClient.info('commandstats'));
    return [...info.matchAll(/^cmdstat_[^:]+:calls=(\d+)/gm)].reduce((s, m) => s + Number(m[1]), 0);
  };
  // The bench's own polling client, by its local port; the stats client's INFO too.
  const ownSources = new Set<string>();
  for (const c of [own, statsClient] as unknown as { stream?: { localPort?: number } }[]) {
    if (c.stream?.localPort) ownSources.add(`127.0.0.1:${c.stream.localPort}`);
  }
  // Read events of the server (INFO stats total_reads_processed): commands that arrive together
  // (pipelined, or written by many jobs at once) are one read — load-dependent, a floor. Less the bench's
  // own: each of its commands one read, the INFO calls and MONITOR itself.
  const reads = async () =>
    Number(/total_reads_processed:(\d+)/.exec(String(await statsClient.info('stats')))?.[1] ?? 0);
  const readsBefore = await reads();
  const before = await commandstats();
  const monitorClient = createRedis(settings, 'worker');
  const monitor = (await (monitorClient as unknown as { monitor(): Promise<unknown> }).monitor()) as {
    on(event: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
    disconnect(): void;
  };
  let sent = 0;
  let inScripts = 0;
  const byName = new Map<string, number>();
  /** Commands run inside scripts, by the script that ran them (MONITOR shows a script's call before its commands). */
  const insideByScript = new Map<string, number>();
  /** The same, by the command run: script → command → count. */
  const insideByScriptCommand = new Map<string, Map<string, number>>();
  let lastScript = '?';
  let ownSent = 0;
  monitor.on('monitor', (_time, args, source) => {
    if (ownSources.has(source)) {
      ownSent++;
      return;
    }
    if (source === 'lua') {
      inScripts++;
      insideByScript.set(lastScript, (insideByScript.get(lastScript) ?? 0) + 1);
      const command = String(args[0] ?? '').toLowerCase();
      let byCommand = insideByScriptCommand.get(lastScript);
      if (!byCommand) insideByScriptCommand.set(lastScript, (byCommand = new Map()));
      byCommand.set(command, (byCommand.get(command) ?? 0) + 1);
      return;
    }
    sent++;
    let name = String(args[0] ?? '').toLowerCase();
    // A script by its first key's kind (call hashes and job ids left out): which script it is.
    if (name === 'evalsha' || name === 'eval') {
      name += `(${String(args[3] ?? '')
        .split(':')
        .slice(-2)
        .map((p) => p.replace(/[0-9a-f]{16,}[^:]*/g, '*'))
        .join(':')})`;
      lastScript = name.replace(/^evalsha|^eval/, 'script');
    }
    byName.set(name, (byName.get(name) ?? 0) + 1);
  });
  return {
    async stop() {
      monitor.disconnect();
      monitorClient.disconnect();
      // MONITOR and INFO themselves are not counted by commandstats' callers' share: one INFO each side.
      const all = (await commandstats()) - before - 1;
      // Own: the polling client's commands (seen by MONITOR), INFO ×3 after the first, MONITOR's own.
      const readEvents = Math.max(0, (await reads()) - readsBefore - ownSent - 4);
      statsClient.disconnect();
      return { sent, inScripts, commandstats: all, byName, insideByScript, insideByScriptCommand, readEvents };
    },
  };
}

/**
 * The bare loop (bench/bare-loop.ts) in a process of its own, against the run's sink servers: its
 * CPU per call for the same external work, and the worker's against it.
 */
async function bareLoop(
  build: ReturnType<typeof compiled>,
  r: { s3Env: Record<string, string>; crmUrl: string; secret: string; smsUrl: string; tokenId: string; token: string },
  work: string,
  concurrency: number,
  workerCpuMsPerCall: number,
  smsShare: number,
): Promise<Record<string, unknown>> {
  // The call the run posted (a mobile caller), as its sink jobs carry it.
  const callFile = join(work, 'bare-call.json');
  await writeFile(callFile, JSON.stringify(sampleCall('bare', { patch: (p) => (p.call.from = '+491701234567') })));
  const proc = await startProcess(
    'bare-loop',
    build.run('bench/bare-loop.ts'),
    {
      ...r.s3Env,
      BARE_CRM_URL: r.crmUrl,
      BARE_SECRET: r.secret,
      BARE_SMS_URL: r.smsUrl,
      BARE_TOKEN_ID: r.tokenId,
      BARE_TOKEN: r.token,
      BARE_CALL_FILE: callFile,
      BARE_N: String(BARE_N),
      BARE_CONCURRENCY: String(concurrency),
      BARE_SMS_SHARE: String(Math.min(1, smsShare)),
      NODE_OPTIONS: callsyncNodeOptions(),
    },
    { timeoutMs: 300_000 },
  );
  await proc.stop(5_000);
  const b = proc.ready as {
    calls: number;
    failed: number;
    callsPerSecond: number;
    cpuMsPerCall: number;
    rssMb: number;
  };
  return {
    'bare loop: calls': b.calls,
    failed: b.failed,
    'calls/s': Math.round(b.callsPerSecond),
    'bare CPU ms/call': round(b.cpuMsPerCall, 2),
    'worker CPU ms/call': workerCpuMsPerCall,
    'worker CPU × bare': round(workerCpuMsPerCall / b.cpuMsPerCall, 2),
    'SMS per call': round(Math.min(1, smsShare), 2),
    'bare RSS MB': round(b.rssMb, 0),
  };
}

/**
 * The ceiling for the archive sink on this machine: the same two PutObjects per call (the call's
 * JSON and transcript, same sizes), `concurrency` calls at once, through a bare S3Client configured
 * as the archive's (no BullMQ, no callsync), against the same s3rver. Bounded in count and time.
 */
async function s3Ceiling(
  s3Env: Record<string, string>,
  concurrency: number,
  calls: number,
): Promise<Record<string, unknown>> {
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
          await client.send(
            new PutObjectCommand({
              Bucket: bucket,
              Key: `ceiling/${i}.json`,
              Body: json,
              ContentType: 'application/json; charset=utf-8',
            }),
          );
          await client.send(
            new PutObjectCommand({
              Bucket: bucket,
              Key: `ceiling/${i}.txt`,
              Body: text,
              ContentType: 'text/plain; charset=utf-8',
            }),
          );
        } catch {
          failed++;
        }
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  client.destroy();
  return {
    'S3 ceiling: calls': next,
    concurrency,
    failed,
    'PUT/s': Math.round((2 * (next - failed)) / seconds),
    'calls/s (2 PUTs each)': Math.round((next - failed) / seconds),
  };
}

void main();
