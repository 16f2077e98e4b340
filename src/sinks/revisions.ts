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
import type { KeyValueStore } from '../state/kv.js';
import { RetryLaterError } from '../errors.js';
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

export class RevisionGuard {
  constructor(
    private readonly kv: KeyValueStore,
    private readonly options: RevisionGuardOptions,
  ) {}

  /**
   * Writes this revision of the call (`write`) unless a newer one was written already, holding the
   * call's lock meanwhile. An older revision is answered `skipped` and its job completes.
   */
  async deliver(callKey: string, ctx: Pick<SinkContext, 'jobId' | 'revision'>, write: () => Promise<SinkResult>): Promise<SinkResult> {
    return this.exclusive(callKey, ctx, async () => {
      if (await this.superseded(callKey, ctx.revision)) return this.skipped();
      const result = await write();
      await this.written(callKey, ctx.revision);
      return result;
    });
  }

  /** What an older revision answers. */
  skipped(): SinkResult {
    return { status: 'skipped', reason: `a newer revision of this call is already in ${this.options.what}` };
  }

  /** Runs `fn` holding the call's lock; throws RetryLaterError (job scope) while another job holds it. */
  async exclusive<T>(callKey: string, ctx: Pick<SinkContext, 'jobId'>, fn: () => Promise<T>): Promise<T> {
    const key = `lock:${callHash(callKey)}`;
    const token = `${ctx.jobId} ${randomBytes(6).toString('hex')}`;
    if (!(await this.kv.setIfAbsent(key, token, this.options.lockTtlMs))) {
      const holder = await this.kv.get(key);
      const holderJob = holder === null ? null : holder.slice(0, holder.lastIndexOf(' '));
      // Held by an earlier attempt of this very job: BullMQ runs a job again only once that attempt
      // lost its lock (its worker died or stalled), so the lock is taken over instead of waited out.
      const takeOver = holder !== null && ctx.jobId !== '' && holderJob === ctx.jobId;
      if (takeOver) await this.kv.set(key, token, this.options.lockTtlMs);
      else if (holder !== null || !(await this.kv.setIfAbsent(key, token, this.options.lockTtlMs))) {
        const delayMs = 500 + Math.round(Math.random() * 1000);
        throw new RetryLaterError(`${this.options.what}: another revision of this call is being written`, delayMs, { scope: 'job' });
      }
    }
    try {
      return await fn();
    } finally {
      // A failed release leaves the lock to expire; the next attempt of this job takes it over anyway.
      await this.kv.deleteIfEquals(key, token).catch(() => false);
    }
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
