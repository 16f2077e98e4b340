// Archives one call with a recording through the archive sink in a process of its own and reports
// how much its memory grew meanwhile (peak minus baseline), as one JSON line. Run with --expose-gc.
// MEASURE=retained collects garbage before every sample (every 20 ms): the memory the process
// actually holds. MEASURE=raw samples every 5 ms without help: that also counts freed buffers V8
// has not collected yet (it lets tens of MB of external garbage pile up before it collects).
// Environment: TELEPHONY_API_URL, EVENT_JSON, WARMUP_EVENT_JSON, and either S3_ENDPOINT + S3_BUCKET or ARCHIVE_DIR.
import { createLogger } from '../../src/log.js';
import { normalizeChannelEvent } from '../../src/model/channel-event.js';
import { ArchiveSink } from '../../src/sinks/archive/index.js';
import { LocalFolderStore, type ObjectStore } from '../../src/sinks/archive/store.js';
import { S3Store } from '../../src/sinks/archive/s3-store.js';
import { createTelephonyClient } from '../../src/telephony/client.js';

const env = process.env;
const store: ObjectStore = env.S3_ENDPOINT
  ? new S3Store({
      bucket: env.S3_BUCKET!,
      region: 'us-east-1',
      endpoint: env.S3_ENDPOINT,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    })
  : new LocalFolderStore(env.ARCHIVE_DIR!);
// Counts the multipart calls the upload makes (proof it did not send one big PUT).
const s3Calls: Record<string, number> = {};
if (store instanceof S3Store) {
  store.client.middlewareStack.add(
    (next, context) => async (args) => {
      const name = String((context as { commandName?: string }).commandName);
      s3Calls[name] = (s3Calls[name] ?? 0) + 1;
      return next(args);
    },
    { step: 'initialize', name: 'countCalls' },
  );
}
const telephony = createTelephonyClient({
  baseUrl: env.TELEPHONY_API_URL!,
  auth: { kind: 'basic', tokenId: 'token-id', token: 'token-secret' },
});
const log = createLogger({ level: 'warn', destination: process.stderr });
const sink = new ArchiveSink('archive', store, 'callsync/', telephony);
const ctx = { jobId: 'mem', attempt: 1, log, signal: new AbortController().signal };
const gc = (globalThis as { gc?: () => void }).gc;

// Warm-up: load every module and open the connections the measured run uses.
await sink.deliver(normalizeChannelEvent(JSON.parse(env.WARMUP_EVENT_JSON!), new Date(), { channelId: 'mem' }), ctx);
for (const k of Object.keys(s3Calls)) delete s3Calls[k];
gc?.();
await new Promise((r) => setTimeout(r, 100));
gc?.();
const base = process.memoryUsage();
const peak = { rss: base.rss, heapUsed: base.heapUsed, external: base.external, arrayBuffers: base.arrayBuffers };
const retained = env.MEASURE === 'retained';
const sample = () => {
  if (retained) gc?.();
  const m = process.memoryUsage();
  peak.rss = Math.max(peak.rss, m.rss);
  peak.heapUsed = Math.max(peak.heapUsed, m.heapUsed);
  peak.external = Math.max(peak.external, m.external);
  peak.arrayBuffers = Math.max(peak.arrayBuffers, m.arrayBuffers);
};
const timer = setInterval(sample, retained ? 20 : 5);
const started = Date.now();
const result = await sink.deliver(
  normalizeChannelEvent(JSON.parse(env.EVENT_JSON!), new Date(), { channelId: 'mem' }),
  ctx,
);
clearInterval(timer);
sample();
process.stdout.write(
  `${JSON.stringify({
    measure: retained ? 'retained' : 'raw',
    ms: Date.now() - started,
    refs: result.refs,
    s3Calls,
    growth: {
      rss: peak.rss - base.rss,
      heapUsed: peak.heapUsed - base.heapUsed,
      external: peak.external - base.external,
      arrayBuffers: peak.arrayBuffers - base.arrayBuffers,
    },
  })}\n`,
);
process.exit(0);
