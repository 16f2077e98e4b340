// The spool when its disk fills up (issue "Nothing acknowledged is lost, whatever is sent", item 2):
// with Redis away, every webhook answered 202 must reach the inbound log once Redis is back, none
// answered 503 may be drained as if acknowledged, and /readyz says "not ready" while the spool cannot
// take events. Two ways to fill the disk, both real kernel behaviour:
// - a 2 MiB tmpfs mounted for the test (needs root; skipped with a message where mount is refused),
//   driven through the real ingress;
// - RLIMIT_FSIZE lowered on this test process (prlimit; no mount needed): writes past the limit come
//   back short, then fail with EFBIG, exactly like a disk filling mid-write.
import { after, before, describe, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { appendFile, mkdtemp, readdir, readFile, rm, statfs, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { InboundAcceptor, QueueUnavailableError } from '../src/ingress/accept.js';
import { FREE_SPACE_TTL_MS, SpoolingAcceptor } from '../src/ingress/spool.js';
import { createLogger } from '../src/log.js';
import type { CanonicalCall } from '../src/model/call.js';
import { InboundLog } from '../queues/inbound.js';
import { sampleCall, webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';

const run = promisify(execFile);
const log = createLogger({ level: 'silent' });

/** Summary text of varying length, so spool lines (about 4-9 KB) end anywhere within a page. */
const filler = (n: number) => `Summary ${n}: ${'lorem ipsum '.repeat(120 + ((n * 61) % 220))}`;

/** The inbound log's call ids, oldest first (an ingress-only process has no fan-out: they stay). */
async function inboundCallIds(url: string, prefix: string): Promise<string[]> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    return (await new InboundLog(redis, prefix).entries()).map((e) => e.call?.callId ?? `unreadable ${e.id}`);
  } finally {
    redis.disconnect();
  }
}

/** What the spool folder holds: the call ids of its whole lines, and anything that is not one. */
async function spoolContents(dir: string): Promise<{ callIds: string[]; problems: string[] }> {
  const callIds: string[] = [];
  const problems: string[] = [];
  for (const name of (await readdir(dir)).filter((n) => n.endsWith('.jsonl')).sort()) {
    const text = await readFile(join(dir, name), 'utf8');
    if (text !== '' && !text.endsWith('\n')) problems.push(`${name} ends in a partial line`);
    text.split('\n').forEach((line, i) => {
      if (line === '') return;
      try {
        callIds.push((JSON.parse(line) as { call: CanonicalCall }).call.callId);
      } catch {
        problems.push(`${name} line ${i + 1} is not a whole entry`);
      }
    });
  }
  return { callIds, problems };
}

async function freeBytes(dir: string): Promise<number> {
  const fs = await statfs(dir);
  return fs.bavail * fs.bsize;
}

/**
 * Waits until the drainer has handed every segment to Redis and deleted it. (Not only until
 * `pending` is 0: a spool that lost an event it counted would never get there, and the comparison
 * afterwards says what was lost.)
 */
async function drained(spool: SpoolingAcceptor): Promise<void> {
  const segments = async () =>
    (await readdir(spool.dir).catch(() => [] as string[])).filter((n) => n.endsWith('.jsonl'));
  await waitFor(async () => spool.pending === 0 || (await segments()).length === 0, {
    timeoutMs: 30_000,
    what: 'spool drained',
  });
}

/** Compares what was answered with what the inbound log holds after the drain. */
function compare(acknowledged: string[], refused: string[], inLog: string[]) {
  const logged = new Set(inLog);
  const answered503 = new Set(refused);
  return {
    lost: acknowledged.filter((id) => !logged.has(id)),
    drainedThough503: inLog.filter((id) => answered503.has(id)),
  };
}

async function mountTmpfs(size: string): Promise<{ dir: string; unmount(): Promise<void> } | string> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-spool-tmpfs-'));
  try {
    await run('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir]);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    const reason = ((err as { stderr?: string }).stderr || (err as Error).message).trim().split('\n')[0];
    return `cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN; the RLIMIT_FSIZE tests below cover the write path): ${reason}`;
  }
  return {
    dir,
    async unmount() {
      await run('umount', [dir]).catch(() => run('umount', ['-l', dir]));
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe('spool on a full disk: a 2 MiB tmpfs, the real ingress, Redis away', () => {
  let redis: PrivateRedis;
  before(async () => {
    redis = await startPrivateRedis();
  });
  after(async () => {
    await redis.destroy();
  });

  /**
   * Sends webhooks `wave` at a time until three waves in a row got no 202 (the disk is full);
   * every answer is 202 (spooled) or 503, nothing else.
   */
  async function fillDisk(url: string, tag: string, wave: number) {
    const acknowledged: string[] = [];
    const refused: string[] = [];
    let n = 0;
    for (let waves = 0, quiet = 0; quiet < 3; waves++) {
      assert.ok(waves < 300, `the disk never filled (${acknowledged.length} acknowledged)`);
      const answers = await Promise.all(
        Array.from({ length: wave }, async () => {
          const i = n++;
          const callId = `${tag}-${i}`;
          const payload = webhookPayload(callId, (p) => {
            p.assist.summary.content = filler(i);
          });
          return { callId, res: await postJson(`${url}/webhooks/ai-agent`, payload) };
        }),
      );
      let any = false;
      for (const { callId, res } of answers) {
        if (res.status === 202) {
          assert.equal(res.body.spooled, true, JSON.stringify(res.body));
          acknowledged.push(callId);
          any = true;
        } else {
          assert.equal(res.status, 503, `${res.status} ${JSON.stringify(res.body)}`);
          assert.equal(res.body.errors?.[0]?.status, 503);
          assert.ok(res.headers.get('retry-after'));
          refused.push(callId);
        }
      }
      quiet = any ? 0 : quiet + 1;
    }
    return { acknowledged, refused };
  }

  const readyz = async (cs: TestCallsync) => (await fetch(`${cs.url}/readyz`)).status;

  test('the disk fills under a burst (no margin): every 202 drains into the log, no 503 does; not ready while full', async (t: TestContext) => {
    const disk = await mountTmpfs('2m');
    if (typeof disk === 'string') return void t.skip(disk);
    const prefix = uniquePrefix('spoolfull');
    let cs: TestCallsync | null = null;
    try {
      // No free-space margin: the spool writes until the disk itself refuses (ENOSPC, short writes).
      cs = await startTestCallsync({
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        CALLSYNC_ROLE: 'ingress',
        SPOOL_DIR: disk.dir,
        SPOOL_MIN_FREE_BYTES: '0',
      });
      await redis.stop();
      const { acknowledged, refused } = await fillDisk(cs.url!, 'full', 20);
      const readyWhileFull = await readyz(cs);
      const onDisk = await spoolContents(cs.spool!.dir);

      await redis.start();
      await drained(cs!.spool!);
      const inLog = await inboundCallIds(redis.url, prefix);
      const { lost, drainedThough503 } = compare(acknowledged, refused, inLog);
      assert.deepEqual(lost, [], `acknowledged with 202 and lost: ${lost.length} of ${acknowledged.length}`);
      assert.deepEqual(drainedThough503, [], 'answered 503, yet drained as if acknowledged');
      await waitFor(() => cs!.spool!.pending === 0, { what: 'nothing left pending' });
      assert.equal(inLog.length, acknowledged.length);
      assert.ok(acknowledged.length >= 100, `acknowledged ${acknowledged.length}`);
      assert.ok(refused.length >= 60, `refused ${refused.length}`);
      // Before the drain, the spool held whole lines only, exactly the acknowledged events.
      assert.deepEqual(onDisk.problems, []);
      assert.deepEqual([...onDisk.callIds].sort(), [...acknowledged].sort());
      assert.equal(readyWhileFull, 503, '/readyz while the spool could take no event and Redis was away');
    } finally {
      if (!redis.running) await redis.start();
      await cs?.stop();
      await disk.unmount();
    }
  });

  test('another writer fills the disk under the spool (its free-space figure not yet renewed): ENOSPC mid-batch, the batch is cut back and refused', async (t: TestContext) => {
    const disk = await mountTmpfs('2m');
    if (typeof disk === 'string') return void t.skip(disk);
    const prefix = uniquePrefix('spoolfull');
    let cs: TestCallsync | null = null;
    const send = async (callId: string, n: number) =>
      postJson(
        `${cs!.url}/webhooks/ai-agent`,
        webhookPayload(callId, (p) => void (p.assist.summary.content = filler(n))),
      );
    try {
      cs = await startTestCallsync({
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        CALLSYNC_ROLE: 'ingress',
        SPOOL_DIR: disk.dir,
        SPOOL_MIN_FREE_BYTES: '0',
      });
      await redis.stop();
      const acknowledged: string[] = [];
      const refused: string[] = [];
      const record = (callId: string, res: { status: number; body: any }) => {
        if (res.status === 202) acknowledged.push(callId);
        else {
          assert.equal(res.status, 503, JSON.stringify(res.body));
          refused.push(callId);
        }
      };
      const enospc = () =>
        cs!.logs.filter(
          (l) => String(l.msg).startsWith('spool write failed') && (l.err as { code?: string })?.code === 'ENOSPC',
        );
      let n = 0;
      // The spool renews its free-space figure once a second; the other writer fills the disk right
      // after a renewal, so the next burst is written and meets ENOSPC. (Retried if this machine was
      // too slow and the figure was renewed before the burst.)
      for (let attempt = 0; attempt < 5 && enospc().length === 0; attempt++) {
        await new Promise((r) => setTimeout(r, FREE_SPACE_TTL_MS + 50));
        record(`other-${n}`, await send(`other-${n}`, n++));
        let k = 0;
        try {
          for (;;) await appendFile(join(disk.dir, `ballast-${attempt}`), Buffer.alloc(64 * 1024, k++));
        } catch (err) {
          assert.equal((err as NodeJS.ErrnoException).code, 'ENOSPC');
        }
        const burst = await Promise.all(
          Array.from({ length: 20 }, async () => {
            const i = n++;
            return { callId: `other-${i}`, res: await send(`other-${i}`, i) };
          }),
        );
        for (const { callId, res } of burst) record(callId, res);
        if (enospc().length === 0) await rm(join(disk.dir, `ballast-${attempt}`));
      }
      const onDisk = await spoolContents(cs.spool!.dir);
      const readyWhileFull = await readyz(cs);

      // The other writer's files go away: ready again, and new events are acknowledged.
      for (const name of (await readdir(disk.dir)).filter((f) => f.startsWith('ballast-')))
        await rm(join(disk.dir, name));
      await waitFor(async () => (await readyz(cs!)) === 200, {
        timeoutMs: 10_000,
        what: 'ready again once space is back',
      });
      for (let i = 0; i < 3; i++) {
        const res = await send(`other-after-${i}`, i);
        assert.equal(res.status, 202, JSON.stringify(res.body));
        acknowledged.push(`other-after-${i}`);
      }

      await redis.start();
      await drained(cs!.spool!);
      const inLog = await inboundCallIds(redis.url, prefix);
      const { lost, drainedThough503 } = compare(acknowledged, refused, inLog);
      assert.deepEqual(lost, [], `acknowledged with 202 and lost: ${lost.length} of ${acknowledged.length}`);
      assert.deepEqual(drainedThough503, [], 'answered 503, yet drained as if acknowledged');
      await waitFor(() => cs!.spool!.pending === 0, { what: 'nothing left pending' });
      assert.ok(enospc().length > 0, 'a write met ENOSPC (what this test is about)');
      assert.ok(refused.length >= 1);
      assert.deepEqual(onDisk.problems, []);
      assert.equal(readyWhileFull, 503, '/readyz after ENOSPC with the disk still full and Redis away');
    } finally {
      if (!redis.running) await redis.start();
      await cs?.stop();
      await disk.unmount();
    }
  });

  test('SPOOL_MIN_FREE_BYTES: refused before the disk is full, not ready; ready again once space is back, and those 202s drain too', async (t: TestContext) => {
    const disk = await mountTmpfs('2m');
    if (typeof disk === 'string') return void t.skip(disk);
    const margin = 256 * 1024;
    const prefix = uniquePrefix('spoolfull');
    let cs: TestCallsync | null = null;
    try {
      // Someone else's file on the same disk; deleted later to give the space back.
      await writeFile(join(disk.dir, 'ballast'), Buffer.alloc(512 * 1024));
      cs = await startTestCallsync({
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        CALLSYNC_ROLE: 'ingress',
        SPOOL_DIR: disk.dir,
        SPOOL_MIN_FREE_BYTES: String(margin),
      });
      await redis.stop();
      assert.equal(await readyz(cs), 200, 'Redis away, the spool has room: ready');
      const { acknowledged, refused } = await fillDisk(cs.url!, 'margin', 10);
      assert.ok(
        acknowledged.length >= 50 && refused.length >= 30,
        `acknowledged ${acknowledged.length}, refused ${refused.length}`,
      );
      // The margin was kept (less a page or two per segment: the spool counts bytes, the disk pages).
      const free = await freeBytes(disk.dir);
      assert.ok(free >= margin - 32 * 1024, `${free} bytes left free, margin ${margin}`);
      assert.deepEqual(
        cs.logs.filter((l) => String(l.msg).startsWith('spool write failed')),
        [],
        'the check refused, not the disk',
      );
      assert.equal(await readyz(cs), 503, 'below the margin with Redis away: not ready');

      await rm(join(disk.dir, 'ballast'));
      await waitFor(async () => (await readyz(cs!)) === 200, {
        timeoutMs: 10_000,
        what: 'ready again once space is back',
      });
      const later: string[] = [];
      for (let i = 0; i < 5; i++) {
        const res = await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload(`margin-later-${i}`));
        assert.equal(res.status, 202, JSON.stringify(res.body));
        assert.equal(res.body.spooled, true);
        later.push(`margin-later-${i}`);
      }

      await redis.start();
      await drained(cs!.spool!);
      const inLog = await inboundCallIds(redis.url, prefix);
      const { lost, drainedThough503 } = compare([...acknowledged, ...later], refused, inLog);
      assert.deepEqual(lost, []);
      assert.deepEqual(drainedThough503, []);
      assert.deepEqual(inLog.slice(-5), later, 'acknowledged order kept');
      await waitFor(() => cs!.spool!.pending === 0, { what: 'nothing left pending' });
    } finally {
      if (!redis.running) await redis.start();
      await cs?.stop();
      await disk.unmount();
    }
  });
});

describe('spool with short writes (RLIMIT_FSIZE on this process: no mount needed)', () => {
  let redis: PrivateRedis;
  before(async () => {
    redis = await startPrivateRedis();
  });
  after(async () => {
    await redis.destroy();
  });

  /** The soft file size limit of this process, or null when prlimit is not there. */
  async function fileSizeLimit(): Promise<string | null> {
    try {
      const { stdout } = await run('prlimit', [
        '--pid',
        String(process.pid),
        '--fsize',
        '--raw',
        '--noheadings',
        '-o',
        'SOFT',
      ]);
      return stdout.trim();
    } catch {
      return null;
    }
  }
  /** Sets the soft limit; SIGXFSZ is ignored by Node, so a write past it is short, then EFBIG. */
  const limitFileSize = (soft: number | string) => run('prlimit', ['--pid', String(process.pid), `--fsize=${soft}:`]);

  /** A spool over a real InboundAcceptor; Redis is stopped by the caller (spawned before any limit). */
  async function openSpool(prefix: string) {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-spool-short-'));
    const conn = new Redis(redis.url, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
    conn.on('error', () => undefined);
    await waitFor(() => conn.status === 'ready', { what: 'Redis connection' });
    const acceptor = new InboundAcceptor(new InboundLog(conn, prefix), { dedupeWindowMs: 60_000, timeoutMs: 1000 });
    const spool = new SpoolingAcceptor(acceptor, { dir, log, minFreeBytes: 0, retryIntervalMs: 100 });
    await spool.open();
    return { dir, conn, spool };
  }

  /** Accepts each call; sorts them into accepted (spooled) and refused (QueueUnavailableError = 503). */
  async function offer(spool: SpoolingAcceptor, calls: CanonicalCall[], accepted: string[], refused: string[]) {
    const results = await Promise.allSettled(calls.map((c) => spool.accept(c)));
    results.forEach((r, i) => {
      const callId = calls[i]!.callId;
      if (r.status === 'fulfilled') {
        assert.equal(r.value.spooled, true);
        accepted.push(callId);
      } else {
        assert.ok(r.reason instanceof QueueUnavailableError, String(r.reason));
        refused.push(callId);
      }
    });
  }

  const call = (callId: string, n: number) =>
    sampleCall(callId, { patch: (p) => void (p.assist.summary.content = filler(n)) });

  test('short writes: each refuses its whole batch and leaves whole lines; every accepted event drains, no refused one', async (t: TestContext) => {
    const original = await fileSizeLimit();
    if (original === null) return void t.skip('prlimit (util-linux) is not installed');
    const prefix = uniquePrefix('spoolshort');
    const { dir, conn, spool } = await openSpool(prefix);
    const accepted: string[] = [];
    const refused: string[] = [];
    try {
      await redis.stop();
      // Each segment file can grow to 64 KiB (about 9 lines): a write crossing that comes back short.
      await limitFileSize(64 * 1024);
      try {
        for (let i = 0; i < 20; i++) await offer(spool, [call(`short-${i}`, i)], accepted, refused);
        for (let i = 20; i < 140; i += 4)
          await offer(
            spool,
            Array.from({ length: 4 }, (_, k) => call(`short-${i + k}`, i + k)),
            accepted,
            refused,
          );
      } finally {
        await limitFileSize(original);
      }
      const onDisk = await spoolContents(dir);

      await redis.start();
      await drained(spool);
      const inLog = await inboundCallIds(redis.url, prefix);
      const { lost, drainedThough503 } = compare(accepted, refused, inLog);
      assert.deepEqual(lost, [], `accepted and lost: ${lost.length} of ${accepted.length}`);
      assert.deepEqual(drainedThough503, []);
      assert.deepEqual(inLog, accepted, 'drained in acknowledged order');
      await waitFor(() => spool.pending === 0, { what: 'nothing left pending' });
      assert.ok(refused.length >= 8, `refused ${refused.length}`);
      assert.ok(
        accepted.length >= 40,
        `accepted ${accepted.length}: after a failed batch the next one goes to a new segment`,
      );
      // Before the drain, the spool held whole lines only, exactly the accepted events.
      assert.deepEqual(onDisk.problems, []);
      assert.deepEqual([...onDisk.callIds].sort(), [...accepted].sort());
    } finally {
      await limitFileSize(original);
      if (!redis.running) await redis.start();
      await spool.close();
      conn.disconnect();
      await rm(dir, { recursive: true, force: true });
    }
  });

  test('a failed batch that cannot be cut back (append-only file): the drainer stops at the last acknowledged line', async (t: TestContext) => {
    const original = await fileSizeLimit();
    if (original === null) return void t.skip('prlimit (util-linux) is not installed');
    const prefix = uniquePrefix('spoolshort');
    const { dir, conn, spool } = await openSpool(prefix);
    let appendOnly: string | null = null;
    const accepted: string[] = [];
    const refused: string[] = [];
    // Equal-sized lines (same filler, ids of one width), so the limit can be set between two lines.
    const fixed = (callId: string) => call(callId, 7);
    try {
      await redis.stop();
      for (let i = 0; i < 3; i++) await offer(spool, [fixed(`cut-0${i}`)], accepted, refused);
      // The segment being written (the drainer sealed the first one when it started).
      const newest = (await readdir(dir))
        .filter((n) => n.endsWith('.jsonl'))
        .sort()
        .at(-1)!;
      appendOnly = join(dir, newest);
      try {
        // Appending still works on an append-only file; ftruncate fails (EPERM).
        await run('chattr', ['+a', appendOnly]);
      } catch (err) {
        appendOnly = null;
        return void t.skip(
          `chattr +a not permitted here (needs root and ext4/xfs/tmpfs): ${(err as Error).message.split('\n')[0]}`,
        );
      }
      await offer(spool, [fixed('cut-03')], accepted, refused);
      const before = await readFile(appendOnly, 'utf8');
      const lineBytes = Buffer.byteLength(before.split('\n')[0]!) + 1;
      assert.equal(Buffer.byteLength(before) % lineBytes, 0, 'equal-sized lines');
      assert.ok(before.includes('"cut-03"'), 'the append-only file is the one being written');

      // Room for 4.5 more lines: a burst of 10 (one batch) comes back short with 4 whole lines in it.
      await limitFileSize(Buffer.byteLength(before) + Math.floor(4.5 * lineBytes));
      try {
        await offer(
          spool,
          Array.from({ length: 10 }, (_, k) => fixed(`cut-1${k}`)),
          accepted,
          refused,
        );
      } finally {
        await limitFileSize(original);
      }
      assert.deepEqual(
        refused,
        Array.from({ length: 10 }, (_, k) => `cut-1${k}`),
        'the whole batch is refused',
      );
      const left = (await spoolContents(dir)).callIds.filter((id) => refused.includes(id));
      assert.ok(
        left.length >= 1,
        'the refused batch left whole lines behind in the file it could not cut back (what this test is about)',
      );

      for (let i = 0; i < 3; i++) await offer(spool, [fixed(`cut-2${i}`)], accepted, refused);
      assert.ok(
        !(await readFile(appendOnly, 'utf8')).includes('"cut-20"'),
        'a segment that could not be cut back is not written again',
      );
      assert.equal(await spool.checkAccepting(), true, 'writes work again: accepting');

      // The disk "heals" (the drainer must be able to delete the file), Redis comes back.
      await run('chattr', ['-a', appendOnly]);
      appendOnly = null;
      await redis.start();
      await drained(spool);
      assert.deepEqual(await inboundCallIds(redis.url, prefix), [
        'cut-00',
        'cut-01',
        'cut-02',
        'cut-03',
        'cut-20',
        'cut-21',
        'cut-22',
      ]);
      assert.deepEqual(accepted, ['cut-00', 'cut-01', 'cut-02', 'cut-03', 'cut-20', 'cut-21', 'cut-22']);
    } finally {
      await limitFileSize(original);
      if (appendOnly) await run('chattr', ['-a', appendOnly]).catch(() => undefined);
      if (!redis.running) await redis.start();
      await spool.close();
      conn.disconnect();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
