// Revisions of one call at a sink: the platform may send a call again with more in it, and the
// update reaches the sink as a job of its own (workers/fanout.ts, sinkJobId). The original and the
// update may run at the same time (a worker runs several jobs at once) or in the wrong order (a
// retry of the original after the update succeeded). Two rules make that harmless:
//   - one revision of a call at a time per sink: a lock in the sink's state (`lock:<call hash>`);
//     a job that finds it held waits (RetryLaterError, no attempt spent) — so two revisions never
//     both create a CRM record, or both create a contact;
//   - never an older revision over a newer one: the stamp of the revision last written
//     (`rev:<call hash>[:<scope>]`) is remembered; an older one arriving later is skipped, a
//     repeat of the same one is written again (redeliveries stay harmless as before).
import { randomBytes } from 'node:crypto';
import { callHash, compareStamps, type CallRevision } from '../model/call.js';
import type { KeyValueStore, TimedWrite } from '../state/kv.js';
import { RetryLaterError } from '../errors.js';
import type { ListAppend } from '../state/kv.js';
import type { SinkContext, SinkResult } from './types.js';

/** How long the stamp of the last written revision is kept: longer than any redelivery or dead-letter replay. */
export const REVISION_MEMORY_TTL_MS = 90 * 24 * 3600_000;

export interface RevisionGuardOptions {
  /**
   * Longest one delivery may hold the call's lock: its requests' time limits, with margin. A lock
   * whose holder died is taken over at once by the same job's next attempt, and by others after this.
   */
  lockTtlMs: number;
  /** Where the sink writes, for reasons and errors (`HubSpot`, `the archive`). */
  what: string;
}

/** What a holder of the call's lock (RevisionGuard.hold) reads and writes with the lock's round trips. */
export interface Held {
  /** True when a newer revision than this job's was written already. */
  readonly superseded: boolean;
  /** The values of the `reads` asked for, in order (null: absent). */
  readonly values: (string | null)[];
  /** Sets a key (of the guard's store) when the lock is released, if the holder succeeds. */
  set(key: string, value: string, ttlMs: number): void;
  /** Remembers this job's revision as the one last written, when the lock is released. */
  written(): void;
}

export class RevisionGuard {
  constructor(
    private readonly kv: KeyValueStore,
    private readonly options: RevisionGuardOptions,
  ) {}

  /**
   * Writes this revision of the call (`write`) unless a newer one was written already, holding the
   * call's lock meanwhile. An older revision is answered `skipped` and its job completes. Two round
   * trips to Redis: one takes the lock and reads the stamp (and `reads`, for `write`), one writes
   * the stamp (and what `write` set) and releases the lock. `final`: what this answers is the
   * sink's result for the attempt (nothing follows): the release carries its timeline entries.
   */
  async deliver(
    callKey: string,
    ctx: Pick<SinkContext, 'jobId' | 'revision' | 'outcome'>,
    write: (held: Held) => Promise<SinkResult>,
    reads: string[] = [],
    final = false,
  ): Promise<SinkResult> {
    const body = async (held: Held) => {
      if (held.superseded) return this.skipped();
      const result = await write(held);
      held.written();
      return result;
    };
    return final ? this.holdToEnd(callKey, ctx, reads, body) : this.hold(callKey, ctx, reads, body);
  }

  /**
   * `hold` for a sink whose result for the attempt is `fn`'s (nothing follows the release): with
   * `ctx.outcome`, the attempt's timeline entries for that result go in the release's script (one
   * command less per attempt; Redis has them before the queue hears of the outcome, as
   * workers/attempts.ts requires). Where the store cannot (another slot, no script), or a release
   * without writes failed, the attempt writes them itself.
   */
  async holdToEnd(
    callKey: string,
    ctx: Pick<SinkContext, 'jobId' | 'revision' | 'outcome'>,
    reads: string[],
    fn: (held: Held) => Promise<SinkResult>,
  ): Promise<SinkResult> {
    return this.hold(callKey, ctx, reads, fn, ctx.outcome);
  }

  /** What an older revision answers. */
  skipped(): SinkResult {
    return { status: 'skipped', reason: `a newer revision of this call is already in ${this.options.what}` };
  }

  /** Runs `fn` holding the call's lock; throws RetryLaterError (job scope) while another job holds it. */
  async exclusive<T>(callKey: string, ctx: Pick<SinkContext, 'jobId'>, fn: () => Promise<T>): Promise<T> {
    return this.hold(callKey, ctx, [], () => fn());
  }

  /**
   * Runs `fn` holding the call's lock (RetryLaterError, job scope, while another job holds it), with
   * `reads` (keys of this store) read in the same round trip as the lock is taken, and whether this
   * revision is superseded. What `fn` sets with `held.set` or `held.written` is written in the
   * round trip that releases the lock, and only when `fn` succeeds. `append`: entries for `fn`'s
   * result appended by the releasing script (holdToEnd), `written` told when they were.
   */
  async hold<T>(
    callKey: string,
    ctx: Pick<SinkContext, 'jobId' | 'revision'>,
    reads: string[],
    fn: (held: Held) => Promise<T>,
    append?: { entries(result: T): ListAppend; written(result: T): void },
  ): Promise<T> {
    const key = `lock:${callHash(callKey)}`;
    const token = `${ctx.jobId} ${randomBytes(6).toString('hex')}`;
    const stampKey = this.stampKey(callKey, undefined);
    // Held by an earlier attempt of this very job: BullMQ runs a job again only once that attempt
    // lost its lock (its worker died or stalled), so the lock is taken over instead of waited out.
    const got = await this.kv.acquire(key, { token, jobId: ctx.jobId, ttlMs: this.options.lockTtlMs }, [
      stampKey,
      ...reads,
    ]);
    if (!got.acquired) {
      const delayMs = 500 + Math.round(Math.random() * 1000);
      throw new RetryLaterError(`${this.options.what}: another revision of this call is being written`, delayMs, {
        scope: 'job',
      });
    }
    const latest = got.values[0] ?? null;
    const writes: TimedWrite[] = [];
    const held: Held = {
      superseded: latest !== null && compareStamps(ctx.revision?.stamp, latest) < 0,
      values: got.values.slice(1),
      set: (k, value, ttlMs) => void writes.push({ key: k, value, ttlMs }),
      written: () => {
        if (ctx.revision?.stamp)
          writes.push({ key: stampKey, value: ctx.revision.stamp, ttlMs: REVISION_MEMORY_TTL_MS });
      },
    };
    let result: T;
    try {
      result = await fn(held);
    } catch (err) {
      // A failed release leaves the lock to expire; the next attempt of this job takes it over anyway.
      await this.kv.release(key, token, []).catch(() => false);
      throw err;
    }
    const list = append && this.kv.releaseAppending ? listOf(append, result) : undefined;
    if (list && append && this.kv.releaseAppending) {
      const release = this.kv.releaseAppending(key, token, writes, list);
      // With writes, their failure is the job's (as below); without, the lock is left to expire and
      // the entries to the attempt. `append` hears of them only when the script ran.
      const released = writes.length > 0 ? await release : await release.catch(() => undefined);
      if (released?.appended) append.written(result);
      return result;
    }
    // With writes, their failure is the job's (the stamp must not be lost: Redis' trouble waits for Redis).
    if (writes.length > 0) await this.kv.release(key, token, writes);
    else await this.kv.release(key, token, []).catch(() => false);
    return result;
  }

  /** True when a newer revision than `revision` was written (under `scope`, e.g. one URL of several). */
  async superseded(callKey: string, revision: CallRevision | undefined, scope?: string): Promise<boolean> {
    const latest = await this.kv.get(this.stampKey(callKey, scope));
    return latest !== null && compareStamps(revision?.stamp, latest) < 0;
  }

  /** Remembers `revision` as the one last written (under `scope`). Call it holding the lock. */
  async written(callKey: string, revision: CallRevision | undefined, scope?: string): Promise<void> {
    if (!revision?.stamp) return;
    await this.kv.set(this.stampKey(callKey, scope), revision.stamp, REVISION_MEMORY_TTL_MS);
  }

  private stampKey(callKey: string, scope: string | undefined): string {
    return scope ? `rev:${callHash(callKey)}:${scope}` : `rev:${callHash(callKey)}`;
  }
}

/** The entries to append for `result`; undefined when they cannot be made (the attempt then writes them itself). */
function listOf<T>(append: { entries(result: T): ListAppend }, result: T): ListAppend | undefined {
  try {
    return append.entries(result);
  } catch {
    return undefined;
  }
}
