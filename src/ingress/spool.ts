// The ingress spool: when Redis cannot take an event, the ingress may still acknowledge it, once it
// is appended to a local, fsync'd, append-only file. A drainer in the same process hands spooled
// events to the inbound log in the order they were acknowledged as soon as Redis answers again, and on
// start-up drains what an earlier process left behind. Re-accepting goes through the same
// deduplication as any other delivery, so an event drained twice (a crash mid-drain) is harmless.
//
// On disk: `<dir>/<seq>.jsonl` segments, one JSON line per event (`{v, id, at, call}`), numbered in
// order. Only the newest segment is written to; the drainer seals it (starts a new one) before
// reading, and deletes a segment only after every event in it is in Redis.
//
// Large events: segments are read as streams, one line at a time (never a whole segment in memory),
// and drained oldest first in batches bounded by count and by bytes (a large event goes alone); a
// batch is sent again only once its earlier attempt has settled in Redis (`settled`), so copies never
// pile up. Per-call order: once the drainer has stored a batch (Redis is back), a new event goes to
// Redis directly unless a revision of the same call still waits in the spool — that one queues
// behind it, so a call's update never overtakes its first revision; other calls are not held up.
//
// A full disk: a batch whose write comes up short or fails is cut off again (ftruncate + fdatasync)
// before any of it is answered, so a segment only ever holds whole, acknowledged lines, and the
// whole batch gets 503. Events are refused before that happens when the filesystem's free space
// (statfs, at most a second old) would drop below `minFreeBytes`.
import { closeSync, constants, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { access, mkdir, open, readdir, rm, stat, statfs, unlink, type FileHandle } from 'node:fs/promises';
import { randomBytes } from 'node:crypto';
import { join, resolve } from 'node:path';
import type { Logger } from 'pino';
import { logRepeated } from '../log.js';
import { callHash, type CanonicalCall } from '../model/call.js';
import { parseStoredCall } from '../../queues/inbound.js';
import { QueueUnavailableError, type AcceptOptions, type AcceptResult, type CallAcceptor } from './accept.js';
import { SpooledRevisions } from './spool-revisions.js';

export interface SpoolOptions {
  /** Folder of the segments; created if missing. */
  dir: string;
  log: Logger;
  /** Largest segment before a new one is started, in bytes. Default 64 MiB. */
  segmentMaxBytes?: number;
  /** Refuse to spool (answer 503) beyond this many bytes on disk. Default 1 GiB. */
  maxBytes?: number;
  /**
   * Refuse to spool (answer 503, not ready) when the spool's filesystem would have less than this
   * many bytes free after the event. Default 16 MiB.
   */
  minFreeBytes?: number;
  /** Pause between drain attempts while Redis is still away. Default 500 ms. */
  retryIntervalMs?: number;
  /** Events handed to Redis at once while draining (pipelined on one connection, so in order). Default 200. */
  drainBatch?: number;
  /** Bytes of spooled lines handed to Redis at once while draining; a larger event goes alone. Default 4 MiB. */
  drainBatchBytes?: number;
  /** Told about each drained batch and each spooled event (metrics, tests). */
  events?: SpoolEvents;
}

interface SpoolEvents {
  spooled?(): void;
  drained?(count: number): void;
}

/** What `accept` answers for a spooled event: the id its inbound log entry will have once drained. */
export interface SpooledResult extends AcceptResult {
  spooled: true;
}

interface ActiveSegment {
  seq: number;
  handle: FileHandle;
  /** Bytes of whole, acknowledged lines in the file (its length). */
  bytes: number;
  lines: number;
}

interface SpoolEntry {
  v: 1;
  id: string;
  /** When it was spooled (ISO-8601). */
  at: string;
  call: CanonicalCall;
}

/** A segment's file name: `<seq, 16 digits>.jsonl` (also read by ./spool-forget.ts). */
export const SEGMENT = /^(\d{16})\.jsonl$/;
/** Bytes read from a segment at a time. */
const READ_CHUNK = 1024 * 1024;
/**
 * How long a free-space figure (statfs) is used before it is measured again.
 * @internal Exported for its tests only (test/spool-disk-full.redis.test.ts).
 */
export const FREE_SPACE_TTL_MS = 1000;
/** Errors that say the disk (or a file size limit) is full: they clear once a check finds room again. */
const SPACE_ERRORS = new Set(['ENOSPC', 'EDQUOT', 'EFBIG']);
/** The folder's lock: the pid of the process that owns it (also read by ./spool-forget.ts). */
export const LOCK_FILE = 'LOCK';
/**
 * The spool holds whole call records: its folders and files are for callsync's own user only,
 * whatever the umask lets through (a umask of 022 made them readable by every local user).
 */
const SPOOL_DIR_MODE = 0o700;
export const SPOOL_FILE_MODE = 0o600;
const segmentName = (seq: number) => `${String(seq).padStart(16, '0')}.jsonl`;

/** Records up to this many characters are held instead of their call while Redis takes them (see `accept`). */
const REBUILD_RECORDS_UP_TO = 256 * 1024;

/** The call itself, for `toRedis` (a function of its own: its closure holds nothing else). */
function keep(call: CanonicalCall): () => CanonicalCall {
  return () => call;
}

/** The call rebuilt from its stored record (queues/inbound.ts), for `toRedis`: the record alone is held. */
function rebuild(json: string): () => CanonicalCall | null {
  return () => parseStoredCall(json);
}

/** Folders locked by this process (a second spool on the same folder in one process is refused too). */
const heldHere = new Set<string>();

/** @internal Exported for its tests only (test/spool.redis.test.ts). */
export class SpoolLockedError extends Error {
  constructor(dir: string, pid: number) {
    super(`spool folder ${dir} is in use by process ${pid}`);
    this.name = 'SpoolLockedError';
  }
}

/** Whether a process with this pid runs (EPERM: it does, as another user's). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Whether `dir` exists (or can be created) and is writable: the default for SPOOL_ENABLED. */
export async function spoolDirWritable(dir: string): Promise<boolean> {
  try {
    await mkdir(dir, { recursive: true, mode: SPOOL_DIR_MODE });
    await access(dir, constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/**
 * A `CallAcceptor` that puts events into Redis through `inner` and, while Redis is unavailable
 * (or while older spooled events still wait, so acknowledged order is kept), into the spool.
 */
export class SpoolingAcceptor implements CallAcceptor {
  readonly dir: string;
  private readonly log: Logger;
  private readonly segmentMaxBytes: number;
  private readonly maxBytes: number;
  private readonly minFreeBytes: number;
  private readonly retryIntervalMs: number;
  private readonly drainBatch: number;
  private readonly drainBatchBytes: number;
  /** The drainer's last batch reached Redis (and nothing failed since): new events may go there directly. */
  private redisBack = false;

  /** Events acknowledged from the spool and not yet confirmed in Redis (including ones being written). */
  private pendingCount = 0;
  /** Revisions of calls waiting in the spool: a repeat while spooled is a duplicate, other content an update. */
  private readonly waiting = new SpooledRevisions();
  private bytesOnDisk = 0;

  /** Free space of the spool's filesystem when last measured, and `bytesOnDisk` at that moment. */
  private disk: { free: number; at: number; bytesAtCheck: number } | null = null;
  private diskCheck: Promise<void> | null = null;
  /** Write failures so far; the last one, while no write or (for a full disk) free-space check has succeeded since. */
  private failures = 0;
  /** Bytes of the last event refused for want of free space (0 once an event is spooled again). */
  private roomWanted = 0;
  private writeFailure: { n: number; code: string; space: boolean } | null = null;
  /**
   * Segments whose failed batch could not be cut off (ftruncate failed): only their first `bytes`
   * are acknowledged lines, so the drainer reads no further. Never written to again.
   */
  private readonly cutShort = new Map<number, number>();

  private nextSeq = 0;
  private active: ActiveSegment | null = null;
  /** Every file operation runs through this chain: writes, seals and the drainer's reads never overlap. */
  private chain: Promise<unknown> = Promise.resolve();
  private batch: { line: string; resolve: () => void; reject: (err: unknown) => void }[] = [];
  private flushScheduled = false;

  private draining: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private opened = false;
  private closed = false;

  constructor(
    private readonly inner: CallAcceptor,
    private readonly options: SpoolOptions,
  ) {
    this.dir = resolve(options.dir);
    this.log = options.log.child({ component: 'spool' });
    this.segmentMaxBytes = options.segmentMaxBytes ?? 64 * 1024 * 1024;
    this.maxBytes = options.maxBytes ?? 1024 * 1024 * 1024;
    this.minFreeBytes = options.minFreeBytes ?? 16 * 1024 * 1024;
    this.retryIntervalMs = options.retryIntervalMs ?? 500;
    this.drainBatch = options.drainBatch ?? 200;
    this.drainBatchBytes = options.drainBatchBytes ?? 4 * 1024 * 1024;
  }

  /** Events acknowledged but not yet in Redis. */
  get pending(): number {
    return this.pendingCount;
  }

  /**
   * Whether an event could be spooled now: open, below SPOOL_MAX_BYTES, more than SPOOL_MIN_FREE_BYTES
   * free on its filesystem as last measured (and room for the last event refused for want of it),
   * and the last write did not fail. See `checkAccepting`.
   */
  get accepting(): boolean {
    return (
      this.opened &&
      !this.closed &&
      this.bytesOnDisk < this.maxBytes &&
      this.writeFailure === null &&
      this.estimatedFree() - this.minFreeBytes >= Math.max(1, this.roomWanted)
    );
  }

  /** `accepting`, after measuring the free space again when the last figure is older than FREE_SPACE_TTL_MS (for /readyz). */
  async checkAccepting(): Promise<boolean> {
    if (this.opened && !this.closed && this.diskStale()) await this.checkDisk();
    return this.accepting;
  }

  /** Free bytes as last measured, less what the spool has taken since (in-flight events included). */
  private estimatedFree(): number {
    if (!this.disk) return Number.POSITIVE_INFINITY;
    return this.disk.free - (this.bytesOnDisk - this.disk.bytesAtCheck);
  }

  private diskStale(): boolean {
    return !this.disk || Date.now() - this.disk.at >= FREE_SPACE_TTL_MS;
  }

  /** Measures the filesystem's free space (one statfs shared by everyone asking meanwhile). */
  private checkDisk(): Promise<void> {
    this.diskCheck ??= (async () => {
      const failuresBefore = this.failures;
      const bytesAtCheck = this.bytesOnDisk;
      const at = Date.now();
      try {
        const fs = await statfs(this.dir);
        this.disk = { free: fs.bavail * fs.bsize, at, bytesAtCheck };
      } catch (err) {
        // No figure (statfs unsupported here): only SPOOL_MAX_BYTES and the write itself guard.
        if (this.disk?.free !== Number.POSITIVE_INFINITY) {
          this.log.warn({ dir: this.dir, err: { message: (err as Error).message } }, 'spool cannot measure free space');
        }
        this.disk = { free: Number.POSITIVE_INFINITY, at, bytesAtCheck };
      }
      // A full disk that has room again (measured after the failure) takes events again.
      const failure = this.writeFailure;
      if (failure && failure.space && failure.n <= failuresBefore && this.estimatedFree() > this.minFreeBytes) {
        this.writeFailure = null;
        this.log.info({ dir: this.dir, free: this.disk.free }, 'spool disk has room again');
      }
    })().finally(() => {
      this.diskCheck = null;
    });
    return this.diskCheck;
  }

  /** Takes the folder's lock, reads what an earlier process left, and starts draining it. */
  async open(): Promise<void> {
    if (this.opened) return;
    await mkdir(this.dir, { recursive: true, mode: SPOOL_DIR_MODE });
    this.lock();
    this.opened = true;
    const segments = await this.segments();
    this.nextSeq = segments.length > 0 ? segments[segments.length - 1]! + 1 : 1;
    for (const seq of segments) {
      // One line at a time: a segment of large events never has to fit in memory.
      for await (const { entry } of this.readSegment(seq)) {
        this.pendingCount++;
        this.waiting.add(entry.call, entry.id);
      }
      this.bytesOnDisk += await this.segmentBytes(seq);
    }
    if (this.pendingCount > 0) {
      this.log.warn(
        { pending: this.pendingCount, segments: segments.length, dir: this.dir },
        'spool holds events from an earlier run: draining',
      );
      this.kick();
    }
  }

  accept(call: CanonicalCall, options?: AcceptOptions): Promise<AcceptResult> {
    // Straight to Redis when nothing waits, or when Redis is back and no revision of this call
    // waits in the spool (per-call order; see the top of this file).
    if (this.pendingCount === 0 || this.closed || (this.redisBack && !this.waiting.waits(call))) {
      // While Redis takes it, this keeps the record the inner acceptor filled in, not the call and
      // its parsed payload (fewer live objects across scavenges: docs/performance.md, round 9); the
      // call to spool is rebuilt from it should Redis fail. An acceptor that fills in no record: the call.
      const record: { json?: string } = {};
      const pending = this.inner.accept(call, { ...options, record });
      // A large call is kept as it is: rebuilding it from its record during an outage would parse
      // megabytes again for every such call at once (a burst of 10 MB calls: +150–200 MB of peak RSS).
      const rebuildable = record.json !== undefined && record.json.length <= REBUILD_RECORDS_UP_TO;
      return this.toRedis(pending, rebuildable ? rebuild(record.json!) : keep(call));
    }
    return this.spool(call);
  }

  /** The inner acceptor's answer; should Redis fail, the call (`again()`) is spooled instead. */
  private async toRedis(pending: Promise<AcceptResult>, again: () => CanonicalCall | null): Promise<AcceptResult> {
    try {
      return await pending;
    } catch (err) {
      if (!(err instanceof QueueUnavailableError) || this.closed || !this.opened) throw err;
      this.redisBack = false;
      logRepeated(this.log, 'warn', 'queue unavailable: spooling events to local disk', 'ingress', err);
      const call = again();
      if (call === null) throw err;
      return this.spool(call);
    }
  }

  private async spool(call: CanonicalCall): Promise<SpooledResult> {
    if (this.diskStale()) await this.checkDisk();
    const hash = callHash(call.key);
    const seen = this.waiting.check(call);
    if (seen.duplicate) return { id: seen.firstId, duplicate: true, spooled: true };
    const id = `${hash}-${randomBytes(6).toString('hex')}`;
    const entry: SpoolEntry = { v: 1, id, at: new Date().toISOString(), call };
    const line = `${JSON.stringify(entry)}\n`;
    const bytes = Buffer.byteLength(line);
    if (this.bytesOnDisk + bytes > this.maxBytes) {
      throw new QueueUnavailableError(new Error(`spool full (${this.bytesOnDisk} bytes in ${this.dir})`));
    }
    const free = this.estimatedFree();
    if (free - bytes < this.minFreeBytes) {
      this.roomWanted = bytes;
      throw new QueueUnavailableError(
        new Error(`spool disk full (${free} bytes free in ${this.dir}, keeping ${this.minFreeBytes})`),
      );
    }
    this.waiting.add(call, id, seen.contentHash);
    this.pendingCount++;
    this.bytesOnDisk += bytes;
    try {
      await this.write(line);
    } catch (err) {
      this.waiting.remove(call, id, seen.contentHash);
      this.pendingCount--;
      this.bytesOnDisk -= bytes;
      throw new QueueUnavailableError(err);
    }
    this.roomWanted = 0;
    this.options.events?.spooled?.();
    this.kick();
    // An update only when the spool holds the earlier revision; one already in Redis is found on drain.
    return seen.update
      ? { id, duplicate: false, update: true, spooled: true }
      : { id, duplicate: false, spooled: true };
  }

  /**
   * Appends a line; lines arriving together share one write and one fsync (group commit). A batch
   * is all or nothing: if any of it cannot be written and synced, the segment is cut back to its
   * length before the batch and closed, and every event of the batch is refused.
   */
  private write(line: string): Promise<void> {
    return new Promise<void>((resolvePromise, reject) => {
      this.batch.push({ line, resolve: resolvePromise, reject });
      if (this.flushScheduled) return;
      this.flushScheduled = true;
      void this.serial(async () => {
        this.flushScheduled = false;
        const batch = this.batch;
        this.batch = [];
        let active: ActiveSegment | null = null;
        try {
          const data = Buffer.from(batch.map((b) => b.line).join(''), 'utf8');
          if (!this.active || this.active.bytes >= this.segmentMaxBytes) await this.startSegment();
          active = this.active!;
          await writeAll(active.handle, data);
          await active.handle.datasync();
          active.bytes += data.length;
          active.lines += batch.length;
          if (this.writeFailure) this.log.info({ dir: this.dir }, 'spool writes again');
          this.writeFailure = null;
        } catch (err) {
          const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
          const space = SPACE_ERRORS.has(code);
          this.writeFailure = { n: ++this.failures, code, space };
          // Ready again only with room for (at least the smallest of) what was refused.
          if (space)
            this.roomWanted = batch.reduce(
              (least, b) => Math.min(least, Buffer.byteLength(b.line)),
              Number.POSITIVE_INFINITY,
            );
          // Measure the free space again before trusting the last figure.
          if (this.disk) this.disk.at = 0;
          this.log.error(
            { err: { message: (err as Error).message, code }, dir: this.dir, events: batch.length },
            'spool write failed: the batch is refused',
          );
          if (active) await this.closeAfterFailure(active);
          for (const b of batch) b.reject(err);
          return;
        }
        for (const b of batch) b.resolve();
      });
    });
  }

  /**
   * Removes what a failed batch left in `active` (a short write, or a write whose sync failed), so
   * the file ends with its last acknowledged line, and closes it: the next batch starts a new
   * segment (a file size limit, EFBIG, is then no obstacle). If the cut fails too, the drainer reads
   * the segment only up to its last acknowledged line.
   */
  private async closeAfterFailure(active: ActiveSegment): Promise<void> {
    if (this.active === active) this.active = null;
    try {
      await active.handle.truncate(active.bytes);
      await active.handle.datasync();
    } catch (err) {
      this.cutShort.set(active.seq, active.bytes);
      this.log.error(
        {
          err: { message: (err as Error).message },
          segment: this.segmentPath(active.seq),
          acknowledgedBytes: active.bytes,
        },
        'spool segment could not be cut back after a failed write: read only up to its last acknowledged line',
      );
    }
    await active.handle.close().catch(() => undefined);
    if (active.lines === 0)
      await unlink(this.segmentPath(active.seq)).then(
        () => this.cutShort.delete(active.seq),
        () => undefined,
      );
  }

  private segmentPath(seq: number): string {
    return join(this.dir, segmentName(seq));
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  private async startSegment(): Promise<void> {
    await this.seal();
    const seq = this.nextSeq++;
    const handle = await open(this.segmentPath(seq), 'a', SPOOL_FILE_MODE);
    try {
      // The new file's name must survive a power cut too, not only its contents.
      await fsyncDir(this.dir);
    } catch (err) {
      await handle.close().catch(() => undefined);
      await unlink(this.segmentPath(seq)).catch(() => undefined);
      throw err;
    }
    this.active = { seq, handle, bytes: 0, lines: 0 };
  }

  /** Closes the segment being written; later events go to a new one. */
  private async seal(): Promise<void> {
    const active = this.active;
    if (!active) return;
    this.active = null;
    await active.handle.close();
    if (active.lines === 0) await unlink(this.segmentPath(active.seq)).catch(() => undefined);
  }

  private async segments(): Promise<number[]> {
    const names = await readdir(this.dir);
    return names
      .map((n) => SEGMENT.exec(n))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
  }

  /** Bytes of the segment's acknowledged lines (its length, or up to where a failed batch was refused). */
  private async segmentBytes(seq: number): Promise<number> {
    const size = (await stat(this.segmentPath(seq)).catch(() => ({ size: 0 }))).size;
    const limit = this.cutShort.get(seq);
    return limit === undefined ? size : Math.min(size, limit);
  }

  /**
   * The segment's entries in order, read as a stream: one line in memory at a time (a large event's
   * line whole, never the segment). A torn last line (a write that never reached fsync, so was never
   * acknowledged) is ignored; an unreadable line elsewhere is logged and skipped.
   */
  private async *readSegment(seq: number): AsyncGenerator<{ entry: SpoolEntry; bytes: number }> {
    const path = this.segmentPath(seq);
    // A segment that could not be cut back after a failed write: what follows `limit` was refused.
    const limit = this.cutShort.get(seq) ?? Number.POSITIVE_INFINITY;
    const handle = await open(path, 'r');
    try {
      const chunk = Buffer.alloc(READ_CHUNK);
      let parts: Buffer[] = [];
      let position = 0;
      let lineNo = 0;
      while (position < limit) {
        const { bytesRead } = await handle.read(chunk, 0, Math.min(chunk.length, limit - position), position);
        if (bytesRead === 0) break;
        position += bytesRead;
        let start = 0;
        for (;;) {
          const nl = chunk.indexOf(10, start);
          if (nl < 0 || nl >= bytesRead) {
            if (start < bytesRead) parts.push(Buffer.from(chunk.subarray(start, bytesRead)));
            break;
          }
          parts.push(chunk.subarray(start, nl));
          const raw = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
          parts = [];
          start = nl + 1;
          lineNo++;
          const line = raw.toString('utf8');
          if (line.trim() === '') continue;
          try {
            const entry = JSON.parse(line) as SpoolEntry;
            if (entry.v !== 1 || typeof entry.id !== 'string' || typeof entry.call?.key !== 'string')
              throw new Error('not a spool entry');
            yield { entry, bytes: raw.length + 1 };
          } catch (err) {
            this.log.error(
              { segment: path, line: lineNo, err: { message: (err as Error).message } },
              'unreadable spool line skipped',
            );
          }
        }
      }
      if (parts.some((p) => p.length > 0))
        this.log.warn({ segment: path }, 'spool segment ends in an incomplete line (never acknowledged): ignored');
    } finally {
      await handle.close();
    }
  }

  /** Starts the drainer, or wakes it from its pause. */
  private kick(): void {
    if (this.closed) return;
    if (this.wake) this.wake();
    this.draining ??= this.drain()
      .catch((err: unknown) => this.log.error({ err }, 'spool drainer stopped'))
      .finally(() => {
        this.draining = null;
        if (this.pendingCount > 0 && !this.closed) this.kick();
      });
  }

  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolvePromise) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolvePromise();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolvePromise();
      };
    });
  }

  private async drain(): Promise<void> {
    let announced = false;
    while (this.pendingCount > 0 && !this.closed) {
      // Seal after the writes already queued, so every event counted as pending is in a sealed segment.
      const sealed = await this.serial(async () => {
        await this.seal();
        return this.segments();
      });
      if (sealed.length === 0) {
        await this.pause(this.retryIntervalMs);
        continue;
      }
      for (const seq of sealed) {
        if (this.closed) return;
        const bytes = await this.segmentBytes(seq);
        let drained = 0;
        // Oldest first, in batches of at most drainBatch events and drainBatchBytes (a larger event alone).
        let batch: SpoolEntry[] = [];
        let batchBytes = 0;
        const send = async (): Promise<boolean> => {
          while (!this.closed) {
            try {
              // One connection keeps commands in order, so a batch sent at once lands in order.
              await Promise.all(batch.map((e) => this.inner.accept(e.call, { jobId: e.id })));
              break;
            } catch (err) {
              this.redisBack = false;
              if (!announced) {
                this.log.warn(
                  { pending: this.pendingCount, err: { message: (err as Error).message } },
                  'spool waits for Redis',
                );
                announced = true;
              }
              // A timed-out write may still be under way: never send the batch again beside it.
              await this.inner.settled?.();
              await this.pause(this.retryIntervalMs);
            }
          }
          if (this.closed) return false;
          this.redisBack = true;
          for (const e of batch) this.waiting.remove(e.call, e.id);
          this.pendingCount = Math.max(0, this.pendingCount - batch.length);
          drained += batch.length;
          this.options.events?.drained?.(batch.length);
          batch = [];
          batchBytes = 0;
          return true;
        };
        for await (const { entry, bytes: lineBytes } of this.readSegment(seq)) {
          if (batch.length > 0 && (batch.length >= this.drainBatch || batchBytes + lineBytes > this.drainBatchBytes)) {
            if (!(await send())) return;
          }
          batch.push(entry);
          batchBytes += lineBytes;
        }
        if (batch.length > 0 && !(await send())) return;
        await unlink(this.segmentPath(seq));
        this.cutShort.delete(seq);
        await fsyncDir(this.dir);
        this.bytesOnDisk -= bytes;
        this.log.info({ drained, pending: this.pendingCount }, 'spool segment drained into the inbound log');
      }
    }
    if (this.pendingCount === 0) this.bytesOnDisk = 0;
  }

  /** Stops draining (what is left stays on disk for the next start), closes the segment, frees the lock. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.wake?.();
    await this.draining;
    await this.serial(() => this.seal());
    if (this.opened) {
      const left = await this.segments().catch(() => [1]);
      this.unlock();
      // An empty spool leaves no folder behind.
      if (left.length === 0) await rm(this.dir, { recursive: true, force: true }).catch(() => undefined);
      else
        this.log.warn(
          { pending: this.pendingCount, dir: this.dir },
          'spool not empty at shutdown: drained at next start',
        );
    }
  }

  /** One process per folder: a LOCK file with our pid; a stale one (dead process) is taken over. */
  private lock(): void {
    if (heldHere.has(this.dir)) throw new SpoolLockedError(this.dir, process.pid);
    const path = join(this.dir, LOCK_FILE);
    for (let tries = 0; tries < 2; tries++) {
      try {
        const fd = openSync(path, 'wx', SPOOL_FILE_MODE);
        writeSync(fd, String(process.pid));
        closeSync(fd);
        heldHere.add(this.dir);
        return;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
        let pid = NaN;
        try {
          pid = Number(readFileSync(path, 'utf8').trim());
        } catch {
          // unreadable: treat as stale
        }
        // Our own pid in the file is a lock left by an earlier process that had the same pid (containers).
        if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && pidAlive(pid))
          throw new SpoolLockedError(this.dir, pid);
        this.log.warn({ dir: this.dir, stalePid: pid }, 'taking over a stale spool lock');
        rmSyncSafe(path);
      }
    }
    throw new SpoolLockedError(this.dir, NaN);
  }

  private unlock(): void {
    rmSyncSafe(join(this.dir, LOCK_FILE));
    heldHere.delete(this.dir);
  }

  /** Bytes of events waiting on disk (for metrics). */
  async diskBytes(): Promise<number> {
    let total = 0;
    for (const seq of await this.segments())
      total += (await stat(this.segmentPath(seq)).catch(() => ({ size: 0 }))).size;
    return total;
  }
}

/**
 * Writes all of `data` at the end of the file. A short count (the disk filled up mid-write) is
 * followed by a write of the rest, which then reports why (ENOSPC, EFBIG, ...); a write that takes
 * nothing is an error too.
 */
async function writeAll(handle: FileHandle, data: Buffer): Promise<void> {
  let written = 0;
  while (written < data.length) {
    const { bytesWritten } = await handle.write(data, written, data.length - written);
    if (bytesWritten <= 0) {
      throw Object.assign(new Error(`short write: ${written} of ${data.length} bytes`), { code: 'ENOSPC' });
    }
    written += bytesWritten;
  }
}

function rmSyncSafe(path: string): void {
  try {
    rmSync(path, { force: true });
  } catch {
    // already gone
  }
}
