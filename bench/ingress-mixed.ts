// `npm run bench:ingress-mixed`: the ingress' memory under a mix of call sizes at full speed (issue
// 26, item 4: "ingress RSS bounded under the mixed-size load"), side by side with the hand-written
// receiver (bench/server.ts, `handwritten`: no body budget) in the same run.
//
// The mix, by call length (a transcript of ~150 words a minute with a chunk every ~5 s, German text
// with umlauts, so the strings are two-byte as real ones often are; docs/operations.md "Memory" for
// the sizes): 55 % one-minute calls (~3 KB), 25 % five-minute (~13 KB), 14 % half-hour (~77 KB),
// 5 % three-hour (~0.45 MB), 1 % near the 8 MiB body limit (~7.5 MB: a vCon with a recording inline,
// or a hostile sender). Which class request i gets is fixed by i, so runs and targets see the same load.
//
// Every request gets a unique call id and is sent until it is acknowledged: a 503 (the body budget:
// "retry shortly") or a connection closed under it is sent again after BENCH_RETRY_MS, as the
// platform would after Retry-After (shorter here, to keep the load at full speed). The ingress'
// RSS is read every 100 ms; the run is cut in quarters by requests answered, and the table shows the
// highest RSS of each quarter: a bounded process has the same in the last quarter as in the second.
// Every acknowledged call is counted in Redis (private redis-server, flushed between targets).
//
//   BENCH_N=3000 BENCH_CONNECTIONS=32 BENCH_ROUNDS=1 npm run bench:ingress-mixed
//   BENCH_TARGETS=handwritten,ingress        which targets (bench/server.ts), in this order per round
//   BENCH_RETRY_MS=20                        wait before sending a refused request again
//   BENCH_TIME_CAP_S=600                     stop sending (and report what was answered) after this long
//   BENCH_CALLSYNC_NODE_OPTIONS=...          Node flags of every target (default: those of `npm start`)
import { Agent, request } from 'node:http';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { inboundStreamKey } from '../queues/inbound.js';
import { webhookPayload } from '../test/support/calls.js';
import { startPrivateRedis } from '../test/support/redis-server.js';
import { callsyncNodeOptions, compiled, machine, percentile, printTable, round, startProcess } from './support.js';

const N = Number(process.env.BENCH_N ?? 3000);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
const RETRY_MS = Number(process.env.BENCH_RETRY_MS ?? 20);
const TIME_CAP_MS = Number(process.env.BENCH_TIME_CAP_S ?? 600) * 1000;
const TARGETS = (process.env.BENCH_TARGETS ?? 'handwritten,ingress')
  .split(',')
  .map((t) => t.trim())
  .filter(Boolean);
for (const t of TARGETS)
  if (!['handwritten', 'ingress', 'ingress-core'].includes(t.split('+')[0]!))
    throw new Error(`BENCH_TARGETS: ${t} is not one of handwritten, ingress, ingress-core`);

/** A size class: a call of `minutes` (transcript content and chunks), or one grown to `bytes`. */
interface SizeClass {
  name: string;
  /** Share of the requests, in per mille. */
  perMille: number;
  minutes: number;
  /** Grow the transcript's content until the body is about this many bytes (the near-limit class). */
  bytes?: number;
}

const CLASSES: SizeClass[] = [
  { name: '1 min', perMille: 550, minutes: 1 },
  { name: '5 min', perMille: 250, minutes: 5 },
  { name: '30 min', perMille: 140, minutes: 30 },
  { name: '3 h', perMille: 50, minutes: 180 },
  { name: '~7.5 MB', perMille: 10, minutes: 180, bytes: 7.5 * 1024 * 1024 },
];

const LINES = [
  'Guten Tag, ich möchte meinen Termin für Freitag verschieben.',
  'Natürlich, welcher Tag passt Ihnen besser?',
  'Am liebsten nächste Woche Dienstag, früh am Morgen.',
  'Ich schaue nach: Dienstag um neun Uhr wäre frei.',
  'Das passt. Bekomme ich eine Bestätigung per SMS?',
  'Ja, die schicke ich Ihnen gleich. Grüße an die Familie!',
];

/** The documented v2 payload with a transcript of `minutes` (~900 characters and 12 chunks a minute). */
function bodyOf(cls: SizeClass): string {
  const payload = webhookPayload('[<id>]', (p) => {
    const t = p.assist.transcription as { content: string; chunks: Record<string, unknown>[] };
    const start = p.call.startTime as number;
    const lines: string[] = [];
    const chunks: Record<string, unknown>[] = [];
    for (let i = 0; i < cls.minutes * 12; i++) {
      const text = LINES[i % LINES.length]!;
      const speaker = i % 2 === 0 ? 'caller' : 'callee';
      lines.push(`${speaker === 'caller' ? 'Anrufer' : 'Agentin'}: ${text} ${text.slice(0, 15)}`);
      chunks.push({ speaker, startTime: start + i * 5000, endTime: start + i * 5000 + 4200, content: text });
    }
    t.content = lines.join('\n');
    t.chunks = chunks;
    p.call.endTime = start + cls.minutes * 60_000;
    p.call.duration = cls.minutes * 60;
    if (cls.bytes !== undefined) {
      const base = JSON.stringify(p).length;
      const grow = `\n${lines.slice(0, 40).join('\n')}`;
      const parts = [t.content];
      for (let size = base; size < cls.bytes; size += grow.length) parts.push(grow);
      t.content = parts.join('');
    }
  });
  return JSON.stringify(payload);
}

/** Request i's class: a fixed, well-spread sequence (the same for every target and run). */
function classOf(i: number): number {
  // Knuth's multiplicative hash of i, in [0, 1000).
  const r = Math.imul(i + 1, 2654435761) >>> 0;
  let x = r % 1000;
  for (let c = 0; c < CLASSES.length; c++) {
    x -= CLASSES[c]!.perMille;
    if (x < 0) return c;
  }
  return CLASSES.length - 1;
}

interface Template {
  before: Buffer;
  after: Buffer;
  bytes: number;
}

function template(body: string): Template {
  const parts = body.split('[<id>]');
  if (parts.length !== 2) throw new Error('the payload must hold the id placeholder once');
  const before = Buffer.from(parts[0]!);
  const after = Buffer.from(parts[1]!);
  return { before, after, bytes: before.length + after.length };
}

interface Outcome {
  status: number;
  id?: string;
}

/** One POST of template `t` with `id`; a connection error resolves with status 0. */
function post(url: URL, agent: Agent, t: Template, id: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const idBytes = Buffer.from(id);
    let done = false;
    const finish = (o: Outcome) => {
      if (!done) {
        done = true;
        resolve(o);
      }
    };
    const req = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': t.bytes + idBytes.length },
        timeout: 60_000,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          let jobId: string | undefined;
          if (status >= 200 && status < 300) {
            try {
              jobId = String((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: unknown }).id);
            } catch {
              jobId = undefined;
            }
          }
          finish({ status, id: jobId });
        });
        res.on('error', () => finish({ status: 0 }));
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', () => finish({ status: 0 }));
    req.write(t.before);
    req.write(idBytes);
    req.end(t.after);
  });
}

interface RunResult {
  acknowledged: Set<string>;
  answered: number;
  refused503: number;
  connectionErrors: number;
  otherStatus: number;
  seconds: number;
  bytesAccepted: number;
  /** Per class: time from the first send to the acknowledgement, ms (retries included). */
  latencies: number[][];
  retriesByClass: number[];
  /** [ms since start, answered so far, RSS MiB] every 100 ms. */
  samples: [number, number, number][];
  capped: boolean;
}

async function run(url: URL, templates: Template[], rssMb: () => number, tag: string): Promise<RunResult> {
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const result: RunResult = {
    acknowledged: new Set(),
    answered: 0,
    refused503: 0,
    connectionErrors: 0,
    otherStatus: 0,
    seconds: 0,
    bytesAccepted: 0,
    latencies: CLASSES.map(() => []),
    retriesByClass: CLASSES.map(() => 0),
    samples: [],
    capped: false,
  };
  const started = performance.now();
  const sampler = setInterval(
    () => result.samples.push([Math.round(performance.now() - started), result.answered, rssMb()]),
    100,
  );
  let next = 0;
  const worker = async () => {
    while (next < N) {
      if (performance.now() - started > TIME_CAP_MS) {
        result.capped = true;
        return;
      }
      const i = next++;
      const c = classOf(i);
      const t = templates[c]!;
      const id = `${tag}-${i}`;
      const t0 = performance.now();
      for (;;) {
        const o = await post(url, agent, t, id);
        if (o.status >= 200 && o.status < 300) {
          result.acknowledged.add(id);
          result.latencies[c]!.push(performance.now() - t0);
          result.bytesAccepted += t.bytes;
          break;
        }
        if (o.status === 503) result.refused503++;
        else if (o.status === 0) result.connectionErrors++;
        else {
          // Not a refusal to retry (a 4xx would be a bug in the fixture): counted, not sent again.
          result.otherStatus++;
          break;
        }
        result.retriesByClass[c]!++;
        if (performance.now() - started > TIME_CAP_MS) {
          result.capped = true;
          return;
        }
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
      result.answered++;
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, worker));
  clearInterval(sampler);
  result.samples.push([Math.round(performance.now() - started), result.answered, rssMb()]);
  result.seconds = (performance.now() - started) / 1000;
  agent.destroy();
  return result;
}

/** Highest RSS sampled in each quarter of the run (by requests answered). */
function quarters(samples: [number, number, number][], total: number): number[] {
  const q = [0, 0, 0, 0];
  for (const [, answered, rss] of samples) {
    if (!Number.isFinite(rss)) continue;
    const k = Math.min(3, Math.floor((answered / Math.max(1, total)) * 4));
    q[k] = Math.max(q[k]!, rss);
  }
  return q;
}

async function main(): Promise<void> {
  const work = await mkdtemp(join(tmpdir(), 'callsync-bench-mixed-'));
  const redis = await startPrivateRedis({ appendfsync: 'everysec' });
  const prefix = `bench-${randomBytes(3).toString('hex')}`;
  const bodies = CLASSES.map(bodyOf);
  const templates = bodies.map(template);
  const counts = CLASSES.map(() => 0);
  for (let i = 0; i < N; i++) counts[classOf(i)]!++;
  const offeredMb = counts.reduce((sum, n, c) => sum + n * templates[c]!.bytes, 0) / 1024 / 1024;
  const build = compiled();
  const machineBefore = machine();
  console.log(
    `bench:ingress-mixed  N=${N} connections=${CONNECTIONS} rounds=${ROUNDS} retry=${RETRY_MS} ms  targets=${TARGETS.join(',')}  ${round(offeredMb, 1)} MB offered per run`,
  );
  printTable(
    CLASSES.map((cls, c) => ({
      class: cls.name,
      share: `${cls.perMille / 10} %`,
      'body KB': round(templates[c]!.bytes / 1024, 1),
      'requests per run': counts[c],
    })),
  );
  console.log(`machine: ${JSON.stringify(machineBefore)}\n`);

  const rows: Record<string, unknown>[] = [];
  const classRows: Record<string, unknown>[] = [];
  let lost = 0;
  const conn = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  try {
    for (let round_ = 1; round_ <= ROUNDS; round_++) {
      for (const target of TARGETS) {
        const [kind, ...extra] = target.split('+');
        const proc = await startProcess(target, build.run('bench/server.ts'), {
          BENCH_TARGET: kind!,
          REDIS_URL: redis.url,
          QUEUE_PREFIX: prefix,
          WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
          SPOOL_DIR: join(work, 'spool'),
          LOG_LEVEL: 'warn',
          NODE_OPTIONS: callsyncNodeOptions(),
          ...Object.fromEntries(extra.map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)])),
        });
        const url = new URL(`${proc.ready.url as string}/webhooks/ai-agent/bench-agent`);
        const atRest = proc.rssMb();
        const cpuBefore = proc.cpuSeconds();
        const r = await run(
          url,
          templates,
          () => proc.rssMb(),
          `${target}-${round_}-${randomBytes(2).toString('hex')}`,
        );
        const cpuS = proc.cpuSeconds() - cpuBefore;
        // RSS once the load is over: what the process gives back.
        await new Promise((res) => setTimeout(res, 2000));
        const after = proc.rssMb();
        const peak = proc.peakRssMb();
        // The ingress stores in the inbound log; a call it spooled (Redis slower than the in-flight
        // bound) is moved there by its drainer: every acknowledged call must arrive, within 60 s.
        let stored: number | string = '-';
        if (kind !== 'handwritten') {
          const until = performance.now() + 60_000;
          while (
            (stored = await conn.xlen(inboundStreamKey(prefix))) < r.acknowledged.size &&
            performance.now() < until
          )
            await new Promise((res) => setTimeout(res, 200));
          lost += r.acknowledged.size - stored;
        }
        await proc.stop();
        await conn.flushall();
        const q = quarters(r.samples, N);
        rows.push({
          round: round_,
          target,
          acknowledged: r.acknowledged.size,
          'in Redis': stored,
          '503s (retried)': r.refused503,
          'conn. errors (retried)': r.connectionErrors,
          other: r.otherStatus,
          s: round(r.seconds, 1),
          'calls/s': Math.round(r.acknowledged.size / r.seconds),
          'MB/s': round(r.bytesAccepted / 1024 / 1024 / r.seconds, 1),
          'CPU ms/MB': round((cpuS * 1000) / (r.bytesAccepted / 1024 / 1024), 1),
          'RSS at rest': atRest,
          'RSS max q1/q2/q3/q4': q.map((x) => round(x, 0)).join('/'),
          'peak RSS MB': peak,
          'RSS 2 s after': after,
          ...(r.capped ? { capped: 'yes' } : {}),
        });
        for (let c = 0; c < CLASSES.length; c++) {
          const l = [...r.latencies[c]!].sort((a, b) => a - b);
          classRows.push({
            round: round_,
            target,
            class: CLASSES[c]!.name,
            acknowledged: l.length,
            retries: r.retriesByClass[c],
            'p50 ms': Math.round(percentile(l, 50)),
            'p99 ms': Math.round(percentile(l, 99)),
            'max ms': Math.round(l[l.length - 1] ?? NaN),
          });
        }
      }
    }
    printTable(rows);
    console.log('\nper class (time from the first send to the acknowledgement, retries included):');
    printTable(classRows);
    console.log(`\nlost (acknowledged by the ingress, not in its inbound log): ${lost}`);
    console.log(
      `\nRESULT ${JSON.stringify({ n: N, connections: CONNECTIONS, rounds: ROUNDS, retryMs: RETRY_MS, targets: TARGETS, classes: CLASSES.map((c, i) => ({ ...c, bodyBytes: templates[i]!.bytes, requests: counts[i] })), machine: { ...machineBefore, loadavgAfter: machine().loadavg }, rows, classRows, lost })}`,
    );
    if (lost !== 0) process.exitCode = 1;
  } finally {
    conn.disconnect();
    await redis.destroy();
    await rm(work, { recursive: true, force: true });
  }
}

void main();
