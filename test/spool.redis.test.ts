// The ingress spool against a private redis-server that the test stops and starts: webhooks
// acknowledged while Redis is away reach the inbound log, in order, once it is back — also when the
// ingress restarted in between — and deduplication holds across spool and log.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile, appendFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { SpoolingAcceptor, SpoolLockedError } from '../src/ingress/spool.js';
import { createLogger } from '../src/log.js';
import { InboundLog } from '../queues/inbound.js';
import { minimalPayload, sampleCall, webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';

const log = createLogger({ level: 'silent' });

/** The inbound log's entries (an ingress-only process has no fan-out: they stay there). */
async function inboundEntries(url: string, prefix: string) {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    // Oldest first: the order in which the entries were appended.
    const entries = await new InboundLog(redis, prefix).entries();
    return entries.map((e) => ({ id: e.id, callId: e.call?.callId }));
  } finally {
    redis.disconnect();
  }
}

async function segmentFiles(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).filter((n) => n.endsWith('.jsonl'));
}

describe('spool with a real ingress and a Redis that goes away', () => {
  let redis: PrivateRedis;
  let spoolRoot: string;

  before(async () => {
    redis = await startPrivateRedis();
    spoolRoot = await mkdtemp(join(tmpdir(), 'callsync-spool-'));
  });
  after(async () => {
    await redis.destroy();
    await rm(spoolRoot, { recursive: true, force: true });
  });

  const start = (prefix: string, env: Record<string, string> = {}) =>
    startTestCallsync({
      REDIS_URL: redis.url,
      QUEUE_PREFIX: prefix,
      CALLSYNC_ROLE: 'ingress',
      SPOOL_DIR: spoolRoot,
      ...env,
    });

  test("Redis down: 202 spooled, fsync'd to disk; back up: drained in acknowledged order, same ids", async () => {
    const prefix = uniquePrefix('spool');
    const cs = await start(prefix);
    try {
      assert.ok(cs.spool, 'spool is on by default when the folder is writable');
      const before = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('sp-0'));
      assert.equal(before.status, 202);
      assert.equal(before.body.spooled, undefined, 'with Redis up nothing is spooled');

      await redis.stop();
      // Still ready: events are acknowledged durably into the spool.
      assert.equal((await fetch(`${cs.url}/readyz`)).status, 200);
      const ids: string[] = [];
      for (let i = 1; i <= 20; i++) {
        const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload(`sp-${i}`));
        assert.equal(res.status, 202, JSON.stringify(res.body));
        assert.equal(res.body.spooled, true);
        assert.equal(res.body.duplicate, false);
        ids.push(res.body.id);
      }
      // A redelivery while spooled is a duplicate with the same id, and is not written twice.
      const again = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('sp-5'));
      assert.equal(again.status, 202);
      assert.deepEqual(again.body, { id: ids[4], duplicate: true, spooled: true });

      // On disk before Redis is back: one line per acknowledged event.
      const dir = cs.spool!.dir;
      const files = await segmentFiles(dir);
      assert.ok(files.length >= 1);
      const lines = (await Promise.all(files.map((f) => readFile(join(dir, f), 'utf8')))).join('').trim().split('\n');
      assert.equal(lines.length, 20);
      assert.equal(cs.spool!.pending, 20);

      await redis.start();
      await waitFor(() => cs.spool!.pending === 0, { timeoutMs: 20_000, what: 'spool drained' });
      const entries = await inboundEntries(redis.url, prefix);
      assert.deepEqual(
        entries.map((e) => e.callId),
        Array.from({ length: 21 }, (_, i) => `sp-${i}`),
      );
      assert.deepEqual(
        entries.slice(1).map((e) => e.id),
        ids,
        'the ids acknowledged are the inbound log entry ids',
      );
      assert.deepEqual(await segmentFiles(dir), [], 'drained segments are deleted');

      // Back to normal: straight into Redis, and deduplicated against what was spooled.
      const after = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('sp-3'));
      assert.deepEqual(after.body, { id: ids[2], duplicate: true });
    } finally {
      if (!redis.running) await redis.start();
      await cs.stop();
    }
  });

  test('an event stored before the outage and redelivered during it ends up once in the log', async () => {
    const prefix = uniquePrefix('spool');
    const cs = await start(prefix);
    try {
      const first = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('dup-1'));
      assert.equal(first.status, 202);
      await redis.stop();
      const spooled = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('dup-1'));
      assert.equal(spooled.body.spooled, true);
      await redis.start();
      await waitFor(() => cs.spool!.pending === 0, { timeoutMs: 20_000, what: 'spool drained' });
      const entries = await inboundEntries(redis.url, prefix);
      assert.deepEqual(entries, [{ id: first.body.id, callId: 'dup-1' }]);
    } finally {
      if (!redis.running) await redis.start();
      await cs.stop();
    }
  });

  test('a call resent with other content while Redis is away is spooled as an update, never dropped as a duplicate', async () => {
    const prefix = uniquePrefix('spool');
    const cs = await start(prefix);
    const v = (n: number) =>
      webhookPayload('rev-1', (p) =>
        n === 1 ? delete p.assist.summary : (p.assist.summary.content = `Summary, revision ${n}.`),
      );
    try {
      const v1 = await postJson(`${cs.url}/webhooks/ai-agent`, v(1));
      assert.deepEqual(v1.body, { id: v1.body.id, duplicate: false });
      await redis.stop();
      // The spool does not know what Redis holds: a new revision, spooled.
      const v2 = await postJson(`${cs.url}/webhooks/ai-agent`, v(2));
      assert.deepEqual(v2.body, { id: v2.body.id, duplicate: false, spooled: true });
      // Another revision while the previous one waits in the spool: an update.
      const v3 = await postJson(`${cs.url}/webhooks/ai-agent`, v(3));
      assert.deepEqual(v3.body, { id: v3.body.id, duplicate: false, update: true, spooled: true });
      // Repeats of what waits in the spool: duplicates, not written again.
      for (const n of [2, 3])
        assert.deepEqual((await postJson(`${cs.url}/webhooks/ai-agent`, v(n))).body, {
          id: v2.body.id,
          duplicate: true,
          spooled: true,
        });
      assert.equal(cs.spool!.pending, 2);

      await redis.start();
      await waitFor(() => cs.spool!.pending === 0, { timeoutMs: 20_000, what: 'spool drained' });
      const conn = new Redis(redis.url, { maxRetriesPerRequest: 1 });
      try {
        const entries = await new InboundLog(conn, prefix).entries();
        assert.deepEqual(
          entries.map((e) => [e.id, e.call?.revision?.update, e.call?.summary?.content ?? null]),
          [
            [v1.body.id, false, null],
            [v2.body.id, true, 'Summary, revision 2.'],
            [v3.body.id, true, 'Summary, revision 3.'],
          ],
          'every revision reached the log, the spooled ones as updates of the first',
        );
      } finally {
        conn.disconnect();
      }
      // Back to normal: each revision is now a duplicate of the call's first delivery.
      assert.deepEqual((await postJson(`${cs.url}/webhooks/ai-agent`, v(2))).body, { id: v1.body.id, duplicate: true });
    } finally {
      if (!redis.running) await redis.start();
      await cs.stop();
    }
  });

  test('ingress restarted while Redis is away: the next ingress drains what the first acknowledged', async () => {
    const prefix = uniquePrefix('spool');
    let cs: TestCallsync | null = await start(prefix);
    try {
      await redis.stop();
      for (let i = 0; i < 10; i++) {
        const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload(`rs-${i}`));
        assert.equal(res.body.spooled, true);
      }
      const dir = cs.spool!.dir;
      await cs.close();
      cs = null;
      assert.ok((await segmentFiles(dir)).length >= 1, 'the spool outlives the process');

      await redis.start();
      cs = await start(prefix);
      await waitFor(() => cs!.spool!.pending === 0, { timeoutMs: 20_000, what: 'leftovers drained at start-up' });
      const entries = await inboundEntries(redis.url, prefix);
      assert.deepEqual(
        entries.map((e) => e.callId),
        Array.from({ length: 10 }, (_, i) => `rs-${i}`),
      );
    } finally {
      if (!redis.running) await redis.start();
      await cs?.stop();
    }
  });

  // What a Redis crash costs depends on its appendfsync policy, not on callsync: with `always`
  // nothing Redis confirmed is lost; with `everysec` up to about a second of confirmed writes may be.
  for (const appendfsync of ['always', 'everysec'] as const) {
    test(`Redis killed (SIGKILL, appendfsync ${appendfsync}) under concurrent load: the 202s are in the log afterwards`, async () => {
      const own = await startPrivateRedis({ appendfsync });
      const prefix = uniquePrefix('spool');
      const cs = await startTestCallsync({
        REDIS_URL: own.url,
        QUEUE_PREFIX: prefix,
        CALLSYNC_ROLE: 'ingress',
        SPOOL_DIR: spoolRoot,
      });
      try {
        const acknowledged = new Set<string>();
        let spooled = 0;
        const send = async (i: number) => {
          const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload(`kill-${i}`));
          assert.equal(res.status, 202, JSON.stringify(res.body));
          acknowledged.add(`kill-${i}`);
          if (res.body.spooled) spooled++;
        };
        const sending = (async () => {
          for (let i = 0; i < 300; i += 10) await Promise.all(Array.from({ length: 10 }, (_, k) => send(i + k)));
        })();
        await waitFor(() => acknowledged.size >= 50, { timeoutMs: 20_000, what: 'first acknowledgements' });
        await own.kill();
        await waitFor(() => acknowledged.size >= 150, {
          timeoutMs: 20_000,
          what: 'acknowledgements while Redis is down',
        });
        await own.start();
        await sending;
        await waitFor(() => cs.spool!.pending === 0, { timeoutMs: 20_000, what: 'spool drained' });
        const inLog = new Set((await inboundEntries(own.url, prefix)).map((e) => e.callId));
        const missing = [...acknowledged].filter((id) => !inLog.has(id));
        assert.equal(acknowledged.size, 300, 'with the spool every webhook was acknowledged');
        assert.ok(spooled > 0, 'some were spooled');
        if (appendfsync === 'always') assert.deepEqual(missing, []);
        else assert.ok(missing.length <= 50, `lost to the SIGKILL: ${missing.length}`);
      } finally {
        await cs.stop();
        await own.destroy();
      }
    });
  }

  test('SPOOL_ENABLED=false: without Redis the ingress answers 503 and acknowledges nothing', async () => {
    const prefix = uniquePrefix('spool');
    const cs = await start(prefix, { SPOOL_ENABLED: 'false' });
    try {
      assert.equal(cs.spool, null);
      await redis.stop();
      const res = await postJson(`${cs.url}/webhooks/ai-agent`, minimalPayload('off-1'));
      assert.equal(res.status, 503);
      assert.ok(res.headers.get('retry-after'));
      assert.equal((await fetch(`${cs.url}/readyz`)).status, 503, 'without a spool, no Redis means not ready');
    } finally {
      if (!redis.running) await redis.start();
      await cs.stop();
    }
  });
});

describe('spool files', () => {
  let redis: PrivateRedis;
  before(async () => {
    redis = await startPrivateRedis();
  });
  after(async () => {
    await redis.destroy();
  });

  test('a torn last line (a write that never reached fsync) is ignored; the rest drains', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-spool-torn-'));
    const prefix = uniquePrefix('spool');
    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
    const inbound = new InboundLog(conn, prefix);
    try {
      await waitFor(() => conn.status === 'ready', { what: 'Redis connection' });
      const lines = ['t-1', 't-2'].map((id) =>
        JSON.stringify({ v: 1, id: `${id}-spooled`, at: new Date().toISOString(), call: sampleCall(id) }),
      );
      await writeFile(join(dir, '0000000000000001.jsonl'), `${lines.join('\n')}\n`);
      await appendFile(join(dir, '0000000000000001.jsonl'), '{"v":1,"id":"t-3","at":"2026-');
      const spool = new SpoolingAcceptor(new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1000 }), {
        dir,
        log,
      });
      await spool.open();
      await waitFor(() => spool.pending === 0, { what: 'drained' });
      const entries = await inbound.entries();
      assert.deepEqual(
        entries.map((e) => e.id),
        ['t-1-spooled', 't-2-spooled'],
      );
      assert.deepEqual(
        entries.map((e) => e.call?.callId),
        ['t-1', 't-2'],
      );
      await spool.close();
      assert.deepEqual(await readdir(dir).catch(() => []), [], 'an empty spool leaves no folder');
    } finally {
      conn.disconnect();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('one spool per folder: a second one is refused while the first holds the lock', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-spool-lock-'));
    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
    const acceptor = new InboundAcceptor(new InboundLog(conn, uniquePrefix('spool')), {
      dedupeWindowMs: 60_000,
      timeoutMs: 1000,
    });
    try {
      const first = new SpoolingAcceptor(acceptor, { dir, log });
      await first.open();
      await assert.rejects(new SpoolingAcceptor(acceptor, { dir, log }).open(), SpoolLockedError);
      await first.close();
      // Free again once closed; a stale lock of a dead process is taken over.
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, 'LOCK'), '999999999');
      const second = new SpoolingAcceptor(acceptor, { dir, log });
      await second.open();
      await second.close();
    } finally {
      conn.disconnect();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
