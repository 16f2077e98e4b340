// Opens an ingress spool left by an earlier process and drains it into the inbound log, in a process
// of its own (the test runs it with a small heap: a restart on a spool of large events must not run
// out of memory). Prints one JSON line `{ pending, drained }` and exits 0 once the spool is empty.
// Environment: SPOOL_DIR, REDIS_URL, QUEUE_PREFIX.
import { Redis } from 'ioredis';
import { InboundLog } from '../../queues/inbound.js';
import { InboundAcceptor } from '../../src/ingress/accept.js';
import { SpoolingAcceptor } from '../../src/ingress/spool.js';
import { createLogger } from '../../src/log.js';

const env = process.env;
const redis = new Redis(env.REDIS_URL!, { maxRetriesPerRequest: 1 });
const inner = new InboundAcceptor(new InboundLog(redis, env.QUEUE_PREFIX!), {
  dedupeWindowMs: 3_600_000,
  timeoutMs: 1500,
});
let drained = 0;
const spool = new SpoolingAcceptor(inner, {
  dir: env.SPOOL_DIR!,
  log: createLogger({ level: 'warn' }),
  events: { drained: (n) => (drained += n) },
});
await spool.open();
const deadline = Date.now() + 120_000;
while (spool.pending > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
const pending = spool.pending;
await spool.close();
redis.disconnect();
process.stdout.write(`${JSON.stringify({ pending, drained })}\n`);
process.exit(pending === 0 ? 0 : 1);
