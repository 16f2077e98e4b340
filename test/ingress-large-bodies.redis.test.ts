// A burst of large webhooks (issue 23, item 1) at an ingress of its own (`callsync start`, role
// ingress, spool on, a private Redis): 24 bodies of 10 MB at once, with Redis up and during a 5 s
// Redis outage. Every one is answered 202, or refused — 503 with Retry-After before its body is read
// (the body budget), which a sender still writing may see as a reset — and the process never crashes and its peak RSS stays under 640 MB, and every call
// acknowledged is in the inbound log once Redis is back; a webhook sent afterwards is not stuck.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { largeBodies, MB, postBody, RSS_BOUND_MB, startFlags, statusMb } from './support/large-bodies.js';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';

const BODY_MB = 10;
const BURST = 24;

let redis: PrivateRedis;
let dir: string;
let child: CallsyncProcess | undefined;
const prefix = uniquePrefix('large-bodies');
before(async () => {
  // AOF: what was stored before the outage is still there after the restart.
  redis = await startPrivateRedis({ appendfsync: 'always' });
  dir = await mkdtemp(join(tmpdir(), 'large-bodies-'));
});
after(async () => {
  if (child && child.proc.exitCode === null) child.proc.kill('SIGKILL');
  await redis.destroy();
  await rm(dir, { recursive: true, force: true });
});

test('24 × 10 MB at once, with Redis up and during an outage: 202 or 503, no crash, RSS under 640 MB, every 202 stored', async () => {
  child = startCallsyncProcess({
    NODE_OPTIONS: await startFlags(),
    CALLSYNC_FROM_SOURCE: '1',
    CALLSYNC_ROLE: 'ingress',
    CALLSYNC_CONFIG: '',
    REDIS_URL: redis.url,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    HOST: '127.0.0.1',
    OPS_PORT: 'off',
    WEBHOOK_ALLOWED_IPS: '127.0.0.1',
    SPOOL_ENABLED: 'true',
    SPOOL_DIR: join(dir, 'spool'),
    LOG_LEVEL: 'info',
    // A deployment that raised the limit (default 8 MiB) for bodies of 10 MB.
    WEBHOOK_BODY_LIMIT: String(16 * MB),
  });
  const url = await bounded(child.url, 60_000, 'the ingress to listen', child);
  const make = largeBodies(BODY_MB);
  const baseline = await statusMb(child.proc.pid!, 'VmRSS');
  const acknowledged = new Set<string>();
  const burst = async (tag: string) => {
    const answers = await Promise.all(Array.from({ length: BURST }, (_, i) => postBody(url, make(`${tag}${i}`))));
    for (const a of answers) {
      assert.ok(
        a.status === 202 || a.status === 503 || a.status === 'EPIPE' || a.status === 'ECONNRESET',
        `answered ${a.status}: ${a.body.slice(0, 200)}`,
      );
      if (a.status === 503) {
        assert.ok(a.retryAfter, 'a 503 says when to retry');
        assert.equal((JSON.parse(a.body) as { errors: { status: number }[] }).errors[0]!.status, 503, a.body);
      } else if (a.status === 202) {
        assert.ok(a.body !== '', `202 ${JSON.stringify(a)}`);
        acknowledged.add((JSON.parse(a.body) as { id: string }).id);
      }
    }
    assert.equal(child!.proc.exitCode, null, `the ingress died: ${child!.stderr.join('\n').slice(-2000)}`);
    return answers.filter((a) => a.status === 202).length;
  };

  const upAccepted = await burst('up');
  assert.ok(upAccepted > 0, 'some of the burst is taken at once');

  await redis.stop();
  const downAccepted = await burst('dn');
  assert.ok(downAccepted > 0, 'some of the burst is spooled while Redis is away');
  await new Promise((r) => setTimeout(r, 5000));
  await redis.start();

  const admin = new Redis(redis.url, { maxRetriesPerRequest: null });
  try {
    const log = new InboundLog(admin, prefix);
    await waitFor(
      async () => {
        const ids = new Set((await log.entries()).map((e) => e.id));
        return [...acknowledged].every((id) => ids.has(id));
      },
      { timeoutMs: 120_000, intervalMs: 500, what: 'every acknowledged call in the inbound log' },
    ).catch(async (err: unknown) => {
      const ids = new Set((await log.entries()).map((e) => e.id));
      const missing = [...acknowledged].filter((id) => !ids.has(id));
      const lines = child!.lines
        .filter((l) => (Number(l.level) >= 40 && !String(l.msg).includes('error')) || String(l.component) === 'spool')
        .map((l) => JSON.stringify(l).slice(0, 300));
      throw new Error(
        `${(err as Error).message}: ${missing.length} of ${acknowledged.size} missing; the ingress logged:\n${lines.slice(-30).join('\n')}`,
      );
    });
    // A webhook sent now is not stuck behind anything.
    const later = await postBody(url, make('later'));
    assert.equal(later.status, 202, later.body);
    const laterId = (JSON.parse(later.body) as { id: string }).id;
    await waitFor(async () => (await log.entries()).some((e) => e.id === laterId), {
      timeoutMs: 30_000,
      what: 'the later webhook stored',
    });
    const peak = await statusMb(child.proc.pid!, 'VmHWM');
    process.stdout.write(
      `# ingress RSS at start ${Math.round(baseline)} MB, peak ${Math.round(peak)} MB; ${upAccepted}/${BURST} taken with Redis up, ${downAccepted}/${BURST} spooled during the outage\n`,
    );
    assert.ok(peak < RSS_BOUND_MB, `peak RSS ${Math.round(peak)} MB`);
  } finally {
    admin.disconnect();
  }
  child.proc.kill('SIGTERM');
  await bounded(child.exit, 30_000, 'the ingress to stop', child);
});
