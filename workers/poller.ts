// The poller: reads each configured channel's inbox (spec 2.7 ChannelInbox) from the platform API
// and queues every CALL event through the same acceptor as the webhook ingress.
//
// Guarantees (docs/polling.md):
// - at-least-once, no gaps: a channel's position is stored in Redis only after every event of the
//   page is in the inbound log (or in the poll dead letters); a restart resumes from it, and the
//   events of a page read twice are dropped by the acceptor's dedupe on `channel:<id>:<eventId>`.
// - one active poller per channel across processes: a Redis lock (SET NX PX) renewed every third
//   of its TTL; a crashed holder's channel is taken over once the TTL runs out. The cursor write
//   is fenced by the lock (a poller that lost its lock cannot move the cursor).
// - 401/403 stop that channel (error log + metric) until the process restarts; other API failures
//   back off exponentially; a Retry-After is waited out (at least POLL_INTERVAL_MS, at most
//   POLL_MAX_BACKOFF_MS).
// - each channel's state (polling, backing-off, rate-limited, stopped: why, the last poll and the
//   next) is written to Redis by the lock's holder after every poll, for `callsync poller`.
import { createHash, randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { Queue, type Job } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import { backoffDelay } from '../src/backoff.js';
import type { Logger } from '../src/log.js';
import { logRepeated, maskPhone } from '../src/log.js';
import { callHash, type CanonicalCall } from '../src/model/call.js';
import {
  ChannelEventError,
  parseChannelEvent,
  sentCallSid,
  toCanonical,
  type UnreadChannelField,
} from '../src/model/channel-event.js';
import { MAX_KEPT_DEPTH, TOO_DEEP_MARKER, withinDepth } from '../src/model/json-depth.js';
import { UnprocessableJobError, classify } from '../src/errors.js';
import { AnswerTooLargeError } from '../src/http-request.js';
import { TelephonyApiError } from '../src/telephony/errors.js';
import type { TelephonyClient } from '../src/telephony/types.js';
import type { PollerSettings } from '../src/config/index.js';
import { asKeys, JobName, POLL_DEAD_LETTER_QUEUE, type PollDeadLetterJob, type RedisKeys } from '../queues/index.js';
import type { CallTimeline } from '../queues/timeline.js';
import { logSafePointer, refusalDetail } from '../src/ingress/log-safe.js';
import {
  cursorKey,
  lockKey,
  writeChannelState,
  type ChannelPollState,
  type ChannelStateRecord,
  type PageCounts,
  type PollOutcome,
} from '../queues/poller-state.js';
import { redactRemoteText } from '../src/redact.js';
import { runWorker, type RunnerOptions, type RunningWorker } from './runner.js';

// ---------------------------------------------------------------------------------------------
// Settings: POLL_* variables are part of the one environment schema (src/config/env.ts).

// ---------------------------------------------------------------------------------------------
// Redis keys and scripts

// A channel's lock, cursor and state record share the channel's slot (the cursor moves only under
// the lock, in one script); channels are spread over a cluster's masters (queues/keys.ts). The keys
// are made in queues/poller-state.ts, where `callsync poller` reads them too.

const RENEW = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end`;
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`;
/** Moves the cursor only while this poller still holds the lock (fencing). */
const STORE_CURSOR = `if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('SET', KEYS[2], ARGV[2]) return 1 else return 0 end`;

// ---------------------------------------------------------------------------------------------
// Dependencies and hooks

/** What the poller needs from the spine: the same acceptor as the ingress (dedupe + enqueue). */
interface PollAcceptor {
  accept(call: CanonicalCall): Promise<{ id: string; duplicate: boolean }>;
}

/** Keeps an event that cannot be parsed, with the reason, where operators find dead letters. */
interface PollDeadLetters {
  add(channelId: string, event: unknown, reason: string): Promise<void>;
}

/** Hooks for metrics and tests; every one optional. */
export interface PollerEvents {
  /** A page was read and every event of it queued; the cursor moved to `position`. */
  polled?(
    channelId: string,
    info: {
      events: number;
      accepted: number;
      duplicates: number;
      deadLettered: number;
      ignored: number;
      position: string;
      lagSeconds: number;
    },
  ): void;
  failed?(channelId: string, err: Error, retryInMs: number): void;
  /** The API answered 429/503 with a wait longer than the client waits itself; the poller waits `waitMs`. */
  rateLimited?(channelId: string, waitMs: number): void;
  /** Polling of the channel stopped (credentials rejected). */
  stopped?(channelId: string, reason: string): void;
  deadLettered?(channelId: string, reason: string): void;
  /** A queued event had optional fields callsync could not read (read as absent): their paths. */
  unread?(channelId: string, fields: string[]): void;
  /** This process took (true) or lost / gave back (false) the channel's lock. */
  lock?(channelId: string, held: boolean): void;
}

interface ChannelPollerDeps {
  client: TelephonyClient;
  acceptor: PollAcceptor;
  deadLetters: PollDeadLetters;
  /** Redis for the lock and the cursor (commands should fail fast while Redis is away). */
  redis: RedisClient;
  /** Where the keys are (queues/keys.ts; a QUEUE_PREFIX alone: one slot). */
  prefix: RedisKeys | string;
  log: Logger;
  events?: PollerEvents;
  now?: () => Date;
  /** Identifies this poller in the lock. Default host:pid:random. */
  instanceId?: string;
  random?: () => number;
}

type ChannelPollerState = 'idle' | 'standby' | 'polling' | 'stopped' | 'closed';

// ---------------------------------------------------------------------------------------------
// One channel

class ChannelPoller {
  readonly instanceId: string;
  private stateValue: ChannelPollerState = 'idle';
  private stopReason: string | null = null;
  private readonly shutdown = new AbortController();
  private loop: Promise<void> | null = null;
  private holding = false;
  private renewTimer: NodeJS.Timeout | undefined;
  private lastRenewedAt = 0;
  /** Aborted when the lock is lost: the page in progress is abandoned (its cursor is not stored). */
  private leaseSignal: AbortController | null = null;
  private readonly log: Logger;
  private readonly now: () => Date;
  private readonly random: () => number;
  private readonly unreadLogged = new Set<string>();
  /** The positions read in the current run of full pages (read back to back): a repeat is a cycle. */
  private readonly runPositions = new Set<string>();
  /** Events asked for per page: POLL_PAGE_SIZE, halved while a page is too large to read (then grown back). */
  private pageSize: number;
  /** What this poller last reported in the channel's state record (queues/poller-state.ts). */
  private record: ChannelStateRecord | null = null;
  private recordWrite: Promise<void> = Promise.resolve();
  private recordWriteFailing = false;

  constructor(
    readonly channelId: string,
    private readonly deps: ChannelPollerDeps,
    private readonly settings: Omit<PollerSettings, 'channelIds'>,
  ) {
    this.instanceId = deps.instanceId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.log = deps.log.child({ channel: channelId });
    this.now = deps.now ?? (() => new Date());
    this.random = deps.random ?? Math.random;
    this.pageSize = settings.pageSize;
  }

  get state(): ChannelPollerState {
    return this.stateValue;
  }

  /** Why polling stopped (credentials rejected), when it did. */
  get stoppedBecause(): string | null {
    return this.stopReason;
  }

  get holdsLock(): boolean {
    return this.holding;
  }

  start(): void {
    if (this.loop) return;
    this.loop = this.run().catch((err: unknown) => {
      // run() handles its own failures; reaching here is a bug, logged rather than crashing the process.
      this.log.error({ err }, 'poller loop ended unexpectedly');
    });
  }

  /** Stops polling, waits for the page in progress (its events are queued or not, never half-stored), gives the lock back. */
  async close(): Promise<void> {
    this.shutdown.abort();
    await this.loop;
    this.stateValue = 'closed';
    await this.recordWrite;
    await this.releaseLock();
  }

  private get closing(): boolean {
    return this.shutdown.signal.aborted;
  }

  private async run(): Promise<void> {
    let failures = 0;
    while (!this.closing) {
      if (this.stopReason !== null) {
        // Credentials were rejected: no more requests from this process. The lock is kept (renewed)
        // so other processes do not take the channel over and hit the same 401 again.
        this.stateValue = 'stopped';
        // The record lives while this process keeps the channel stopped (refreshed with its TTL).
        this.writeRecord();
        await this.sleep(Math.max(50, Math.round(this.settings.lockTtlMs / 3)));
        continue;
      }
      if (!this.holding) {
        const acquired = await this.tryAcquire();
        if (!acquired) {
          this.stateValue = 'standby';
          // Try again within a third of the TTL: a crashed holder is replaced within TTL + TTL/3.
          await this.sleep(Math.max(50, Math.round(this.settings.lockTtlMs / 3)));
          continue;
        }
        this.report('polling', { waitMs: 0 });
      }
      this.stateValue = 'polling';
      let wait: number;
      try {
        const { full, counts } = await this.pollOnce();
        failures = 0;
        wait = full ? 0 : this.settings.intervalMs;
        this.report('polling', { outcome: 'ok', waitMs: wait, page: counts });
      } catch (err) {
        if (this.closing) break;
        const error = err instanceof Error ? err : new Error(String(err));
        if (error instanceof LeaseLostError) {
          this.log.warn('lost the channel lock while polling: another poller continues from the stored position');
          continue;
        }
        if (error instanceof TelephonyApiError && error.cause instanceof AnswerTooLargeError && this.pageSize > 1) {
          // A page larger than an answer may be (the client reads 16 MiB at most): the same page
          // would be refused at every poll. Half as many events, at once.
          this.pageSize = Math.max(1, Math.floor(this.pageSize / 2));
          this.log.warn(
            { reason: error.message, pageSize: this.pageSize },
            'channel page too large to read: reading it in smaller pages',
          );
          continue;
        }
        if (error instanceof TelephonyApiError && error.kind === 'auth') {
          this.stateValue = 'stopped';
          this.stopReason = error.message;
          this.log.error(
            { status: error.status, reason: error.message },
            'telephony API rejected the credentials: polling of this channel stopped until the process restarts with working credentials',
          );
          this.deps.events?.stopped?.(this.channelId, error.message);
          this.report('stopped', { outcome: 'rejected', reason: error.message, waitMs: null });
          continue;
        }
        if (error instanceof TelephonyApiError && error.kind === 'retry-later') {
          // Not a failure: the API said when to come back. Never sooner than the poll interval (a
          // Retry-After of 0 or a date in the past would otherwise make a tight request loop), never
          // later than POLL_MAX_BACKOFF_MS (a huge one would stop the channel, and a timer past
          // 2^31 ms fires at once).
          wait = Math.min(Math.max(error.retryAfterMs, this.settings.intervalMs), this.settings.maxBackoffMs);
          this.log.warn(
            { status: error.status, retryAfterMs: error.retryAfterMs, waitMs: wait },
            'telephony API asked to wait before the next poll',
          );
          this.deps.events?.rateLimited?.(this.channelId, wait);
          this.report('rate-limited', { outcome: 'rate-limited', reason: error.message, waitMs: wait });
        } else {
          failures += 1;
          // From the poll interval (at least 500 ms), doubling up to POLL_MAX_BACKOFF_MS.
          wait = backoffDelay(
            failures,
            Math.max(this.settings.intervalMs, 500),
            this.settings.maxBackoffMs,
            this.random,
          );
          this.log.warn(
            {
              reason: error.message,
              kind: error instanceof TelephonyApiError ? error.kind : classify(error),
              failures,
              retryInMs: wait,
            },
            'poll failed: backing off',
          );
          this.deps.events?.failed?.(this.channelId, error, wait);
          this.report('backing-off', { outcome: 'failed', reason: error.message, waitMs: wait, failures });
        }
      }
      if (wait > 0) await this.sleep(wait);
    }
  }

  /** Reads one page and queues it; `full` when the page was full (read the next one at once). */
  private async pollOnce(): Promise<{ full: boolean; counts: PageCounts }> {
    const { redis, prefix, client } = this.deps;
    const lease = this.leaseSignal!;
    const signal = AbortSignal.any([lease.signal, this.shutdown.signal]);
    const position = (await redis.get(cursorKey(prefix, this.channelId))) ?? undefined;
    const page = await client
      .readChannelEvents(this.channelId, position, this.pageSize, signal)
      .catch((err: unknown) => {
        if (lease.signal.aborted) throw new LeaseLostError();
        throw err;
      });
    const receivedAt = this.now();
    let accepted = 0;
    let duplicates = 0;
    let deadLettered = 0;
    let ignored = 0;
    let newest: number | null = null;
    for (const read of page.events) {
      // Shutdown or a lost lease abandons the page before its cursor is stored: it is read again.
      if (lease.signal.aborted) throw new LeaseLostError();
      // An event nested deeper than anything can store (JSON.stringify overflows its stack) would
      // fail the page at every read, and the channel with it: its deeper parts become a marker.
      const { value: raw, cut, firstCutUnder } = withinDepth(read);
      let parsed;
      try {
        parsed = parseChannelEvent(raw);
      } catch (err) {
        if (!(err instanceof ChannelEventError)) throw err;
        await this.deps.deadLetters.add(this.channelId, raw, err.message);
        deadLettered += 1;
        this.log.warn(
          { eventId: err.eventId, fields: err.fields, reason: err.message },
          'channel event cannot be parsed: dead-lettered',
        );
        this.deps.events?.deadLettered?.(this.channelId, err.message);
        continue;
      }
      if (parsed.kind === 'ignored') {
        ignored += 1;
        this.log.debug({ eventId: parsed.event.eventId, type: parsed.event.type }, 'channel event skipped: not a call');
        continue;
      }
      if (cut > 0)
        parsed.unread.push({
          field: firstCutUnder ?? '(event)',
          detail: `nested deeper than ${MAX_KEPT_DEPTH} levels: ${cut} value(s) kept as "${TOO_DEEP_MARKER}"`,
        });
      if (parsed.unread.length > 0) this.reportUnread(parsed.event.eventId, parsed.unread);
      let call: CanonicalCall;
      try {
        call = toCanonical(parsed.event, parsed.call, raw, receivedAt, { channelId: this.channelId });
      } catch (err) {
        if (!(err instanceof ChannelEventError)) throw err;
        await this.deps.deadLetters.add(this.channelId, raw, err.message);
        deadLettered += 1;
        this.log.warn(
          { eventId: err.eventId, fields: err.fields, reason: err.message },
          'channel event cannot be normalized: dead-lettered',
        );
        this.deps.events?.deadLettered?.(this.channelId, err.message);
        continue;
      }
      const result = await this.deps.acceptor.accept(call);
      if (result.duplicate) duplicates += 1;
      else accepted += 1;
      this.log.debug(
        {
          eventId: call.eventId,
          callId: call.callId,
          jobId: result.id,
          duplicate: result.duplicate,
          from: maskPhone(call.from),
          to: maskPhone(call.to),
          outcome: call.outcome,
        },
        'channel event queued',
      );
      const created = Date.parse(parsed.event.createdAt ?? call.endedAt ?? call.startedAt);
      if (!Number.isNaN(created)) newest = Math.max(newest ?? created, created);
    }
    // Every event of the page is queued (or dead-lettered): only now may the cursor move.
    const stored = await redis.eval(
      STORE_CURSOR,
      2,
      lockKey(prefix, this.channelId),
      cursorKey(prefix, this.channelId),
      this.instanceId,
      page.position,
    );
    if (stored !== 1) {
      this.lost();
      throw new LeaseLostError();
    }
    const lagSeconds = newest === null ? 0 : Math.max(0, (receivedAt.getTime() - newest) / 1000);
    this.deps.events?.polled?.(this.channelId, {
      events: page.events.length,
      accepted,
      duplicates,
      deadLettered,
      ignored,
      position: page.position,
      lagSeconds,
    });
    if (page.events.length > 0) {
      this.log.info({ events: page.events.length, accepted, duplicates, deadLettered, ignored }, 'channel page queued');
    }
    const asked = this.pageSize;
    // A page that fit: the next may be larger again, up to POLL_PAGE_SIZE.
    this.pageSize = Math.min(this.settings.pageSize, this.pageSize * 2);
    const limit = Math.min(asked, page.limit > 0 ? page.limit : asked);
    // A full page means more are waiting; a position that did not move, or went back to one already
    // read in this run of full pages, would loop (reading the same pages back to back), so it waits.
    const full = page.events.length > 0 && page.events.length >= limit && page.position !== position;
    const counts: PageCounts = { events: page.events.length, accepted, duplicates, deadLettered, ignored };
    if (!full) {
      this.runPositions.clear();
      return { full: false, counts };
    }
    if (position !== undefined) this.runPositions.add(position);
    if (this.runPositions.has(page.position) || this.runPositions.size > MAX_RUN_POSITIONS) {
      this.log.warn(
        { runPages: this.runPositions.size },
        'telephony API returned a full page whose next position was already read: waiting POLL_INTERVAL_MS before reading on',
      );
      this.runPositions.clear();
      return { full: false, counts };
    }
    return { full: true, counts };
  }

  // ---- state record (for operators: `callsync poller`) ----

  /**
   * Records the channel's state after a change or a poll: one write per poll, never per event.
   * `waitMs` null: no next poll planned (stopped). A reason is redacted again here (no credential,
   * no number), whatever produced it.
   */
  private report(
    state: ChannelPollState,
    info: { outcome?: PollOutcome; reason?: string; waitMs: number | null; failures?: number; page?: PageCounts },
  ): void {
    const now = this.now();
    const at = now.toISOString();
    const previous = this.record;
    this.record = {
      state,
      reason: info.reason === undefined ? null : redactRemoteText(info.reason),
      since: previous !== null && previous.state === state ? previous.since : at,
      instance: this.instanceId,
      lastPollAt: info.outcome === undefined ? (previous?.lastPollAt ?? null) : at,
      lastOutcome: info.outcome ?? previous?.lastOutcome ?? null,
      nextPollAt: info.waitMs === null ? null : new Date(now.getTime() + info.waitMs).toISOString(),
      failures: info.failures ?? 0,
      lastPage: info.page === undefined ? (previous?.lastPage ?? null) : { ...info.page, at },
    };
    this.writeRecord();
  }

  /**
   * Writes the record without waiting for it: a Redis that is away must not hold up polling. Its
   * TTL reaches a few lock TTLs past the next poll, so a channel no longer polled leaves nothing.
   */
  private writeRecord(): void {
    const record = this.record;
    if (record === null) return;
    const untilNext =
      record.nextPollAt === null ? 0 : Math.max(0, Date.parse(record.nextPollAt) - this.now().getTime());
    const ttlMs = untilNext + 3 * this.settings.lockTtlMs;
    this.recordWrite = writeChannelState(this.deps.redis, this.deps.prefix, this.channelId, record, ttlMs).then(
      () => {
        this.recordWriteFailing = false;
      },
      (err: unknown) => {
        const reason = err instanceof Error ? err.message : String(err);
        // Warned once per run of failures; polling goes on either way.
        if (this.recordWriteFailing) this.log.debug({ reason }, 'could not write the channel state record');
        else this.log.warn({ reason }, 'could not write the channel state record (polling goes on)');
        this.recordWriteFailing = true;
      },
    );
  }

  /** Counts every unread optional field; logs each field once per channel and process (never the value). */
  private reportUnread(eventId: string, unread: UnreadChannelField[]): void {
    this.deps.events?.unread?.(
      this.channelId,
      unread.map((u) => u.field),
    );
    const fresh = unread.filter((u) => !this.unreadLogged.has(u.field));
    for (const u of fresh) this.unreadLogged.add(u.field);
    if (fresh.length > 0)
      this.log.warn(
        { eventId, fields: fresh.map((u) => `${u.field}: ${u.detail}`) },
        'channel event has optional fields callsync cannot read: read as absent, kept verbatim in the record (logged once per field)',
      );
    else this.log.debug({ eventId, fields: unread.map((u) => u.field) }, 'channel event has unread optional fields');
  }

  // ---- lock ----

  private async tryAcquire(): Promise<boolean> {
    const { redis, prefix } = this.deps;
    let ok: string | null;
    try {
      ok = await redis.set(lockKey(prefix, this.channelId), this.instanceId, 'PX', this.settings.lockTtlMs, 'NX');
    } catch (err) {
      this.log.warn(
        { reason: err instanceof Error ? err.message : String(err) },
        'cannot reach Redis for the channel lock',
      );
      return false;
    }
    if (ok !== 'OK') return false;
    this.holding = true;
    this.lastRenewedAt = Date.now();
    this.leaseSignal = new AbortController();
    this.scheduleRenewal();
    this.log.info({ instance: this.instanceId }, 'took the channel lock: polling');
    this.deps.events?.lock?.(this.channelId, true);
    return true;
  }

  private scheduleRenewal(): void {
    clearTimeout(this.renewTimer);
    this.renewTimer = setTimeout(() => void this.renew(), Math.max(50, Math.round(this.settings.lockTtlMs / 3)));
  }

  private async renew(): Promise<void> {
    if (!this.holding) return;
    const { redis, prefix } = this.deps;
    try {
      const renewed = await redis.eval(
        RENEW,
        1,
        lockKey(prefix, this.channelId),
        this.instanceId,
        String(this.settings.lockTtlMs),
      );
      if (renewed !== 1) {
        this.lost();
        return;
      }
      this.lastRenewedAt = Date.now();
    } catch (err) {
      // Redis unreachable: past the TTL another process may hold the channel, so stop acting on it.
      if (Date.now() - this.lastRenewedAt >= this.settings.lockTtlMs) {
        this.log.warn(
          { reason: err instanceof Error ? err.message : String(err) },
          'could not renew the channel lock in time',
        );
        this.lost();
        return;
      }
    }
    if (this.holding) this.scheduleRenewal();
  }

  private lost(): void {
    if (!this.holding) return;
    this.holding = false;
    clearTimeout(this.renewTimer);
    this.leaseSignal?.abort();
    this.deps.events?.lock?.(this.channelId, false);
  }

  private async releaseLock(): Promise<void> {
    clearTimeout(this.renewTimer);
    if (!this.holding) return;
    this.holding = false;
    try {
      await this.deps.redis.eval(RELEASE, 1, lockKey(this.deps.prefix, this.channelId), this.instanceId);
    } catch (err) {
      this.log.warn(
        { reason: err instanceof Error ? err.message : String(err) },
        'could not release the channel lock (it expires by itself)',
      );
    }
    this.deps.events?.lock?.(this.channelId, false);
  }

  private sleep(ms: number): Promise<void> {
    const signal = this.shutdown.signal;
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        resolve();
      }
      signal.addEventListener('abort', done, { once: true });
    });
  }
}

/** After this many full pages back to back the poller waits POLL_INTERVAL_MS once (bounds runPositions). */
const MAX_RUN_POSITIONS = 10_000;

class LeaseLostError extends Error {
  constructor() {
    super('channel lock lost');
    this.name = 'LeaseLostError';
  }
}

// ---------------------------------------------------------------------------------------------
// Dead letters: the poll-dead-letters queue's failed set

/** A dead-letter job id per channel and event (the same bad event read twice is one dead letter). */
function deadLetterJobId(channelId: string, event: unknown): string {
  const eventId = typeof event === 'object' && event !== null ? (event as Record<string, unknown>).eventId : undefined;
  const identity =
    typeof eventId === 'string' && eventId !== ''
      ? eventId
      : createHash('sha256')
          .update(JSON.stringify(event) ?? 'undefined')
          .digest('hex');
  return `dl-${callHash(`poll:${channelId}:${identity}`)}`;
}

/**
 * Adds unparseable events to the poll-dead-letters queue. Its worker (createPollDeadLetterProcessor)
 * tries the event again and, while it still cannot be read, fails it at once: the event then sits
 * in the queue's failed set (the dead letters) with the reason, and "retry" after a fix queues it.
 */
class QueuePollDeadLetters implements PollDeadLetters {
  constructor(private readonly queue: Queue<PollDeadLetterJob>) {}

  async add(channelId: string, event: unknown, reason: string): Promise<void> {
    await this.queue.add(
      JobName.pollDeadLetter,
      { kind: JobName.pollDeadLetter, channelId, reason, event },
      // One try: a malformed event does not become well-formed by waiting.
      { jobId: deadLetterJobId(channelId, event), attempts: 1 },
    );
  }
}

/** A dotted field path of a ChannelEventError (`call.direction`, `(event)`) as a JSON pointer (`/call/direction`, `/`). */
function fieldPointer(field: string | undefined): string {
  if (field === undefined || field === '(event)') return '/';
  return `/${field
    .split('.')
    .map((key) => key.replace(/~/g, '~0').replace(/\//g, '~1'))
    .join('/')}`;
}

/** Where the refusals of dead-lettered events are kept, and where a failure to keep one is logged. */
interface DeadLetterRefusals {
  refusals: Pick<CallTimeline, 'refused'>;
  log: Logger;
}

/**
 * Keeps the refusal of a channel event dead-lettered as job `jobId` under its call id
 * (`call.callSid`; null when that cannot be read): `callsync call <callSid>`, /api/calls/<callSid>,
 * `callsync refused` and the Calls page then say why the call is missing, as for a refused webhook. No HTTP status: the status
 * says where the dead letter is. Never throws, never waited for: the dead letter is kept whatever
 * this does.
 */
function keepRefusal(
  kept: DeadLetterRefusals,
  jobId: string,
  event: unknown,
  reason: string,
  err: ChannelEventError,
  at: number,
): void {
  try {
    // Without a readable call id it is kept too (as a webhook's is): `callsync refused` lists it.
    const callId = sentCallSid(event);
    kept.refusals.refused({
      at,
      callId,
      source: 'channel',
      status: `dead letter in ${POLL_DEAD_LETTER_QUEUE}, id ${jobId}`,
      pointer: logSafePointer(fieldPointer(err.fields[0])) ?? '/',
      detail: refusalDetail(reason),
    });
  } catch (failure) {
    kept.log.warn({ err: failure, jobId }, 'refusal of a dead-lettered channel event not kept');
  }
}

/**
 * Processor of the poll-dead-letters queue: queue the event if it can now be read, else dead-letter
 * it with the reason (and keep its refusal under its call id, with `kept`).
 */
function createPollDeadLetterProcessor(
  acceptor: PollAcceptor,
  now: () => Date = () => new Date(),
  kept?: DeadLetterRefusals,
) {
  return async function reprocessChannelEvent(job: Job<PollDeadLetterJob>): Promise<{ status: string; id?: string }> {
    const { channelId, event } = job.data;
    let parsed;
    try {
      parsed = parseChannelEvent(event);
      if (parsed.kind === 'ignored') return { status: 'skipped' };
      const call = toCanonical(parsed.event, parsed.call, event, now(), { channelId });
      const result = await acceptor.accept(call);
      return { status: result.duplicate ? 'duplicate' : 'queued', id: result.id };
    } catch (err) {
      if (err instanceof ChannelEventError) {
        const reason = `channel ${channelId}: ${err.message}`;
        if (kept) keepRefusal(kept, job.id ?? deadLetterJobId(channelId, event), event, reason, err, now().getTime());
        throw new UnprocessableJobError(reason);
      }
      throw err;
    }
  };
}

// ---------------------------------------------------------------------------------------------
// The poller role

export interface StartPollerOptions {
  settings: PollerSettings;
  client: TelephonyClient;
  /** The inbound acceptor (dedupe + enqueue), as the ingress uses it. */
  acceptor: PollAcceptor;
  /** Fail-fast connection for locks, cursors and adding dead letters. */
  redis: RedisClient;
  /** Blocking connection (maxRetriesPerRequest: null) for the dead-letter worker. */
  workerConnection: RedisClient;
  /** Where the keys are (queues/keys.ts; a QUEUE_PREFIX alone: one slot). */
  prefix: RedisKeys | string;
  log: Logger;
  /** Runner settings of the dead-letter worker (retry policy, stalled checks...); connection and prefix are taken from above. */
  runner: Omit<RunnerOptions, 'connection' | 'prefix' | 'log'>;
  events?: PollerEvents;
  now?: () => Date;
  instanceId?: string;
  /**
   * Where the refusals of dead-lettered events are kept (the call timelines', as the ingress keeps a
   * refused webhook's); absent: nowhere.
   */
  refusals?: Pick<CallTimeline, 'refused'>;
}

export interface RunningPoller {
  pollers: ChannelPoller[];
  deadLetterQueue: Queue<PollDeadLetterJob>;
  deadLetterWorker: RunningWorker;
  close(): Promise<void>;
}

/** Starts one ChannelPoller per configured channel plus the dead-letter worker. */
export function startPoller(options: StartPollerOptions): RunningPoller {
  const log = options.log.child({ role: 'poller' });
  const deadLetterQueue = new Queue<PollDeadLetterJob>(POLL_DEAD_LETTER_QUEUE, {
    connection: options.redis,
    prefix: asKeys(options.prefix).queuePrefix(POLL_DEAD_LETTER_QUEUE),
    defaultJobOptions: {
      removeOnComplete: { age: 24 * 3600, count: 10_000 },
      removeOnFail: { age: 14 * 24 * 3600, count: 100_000 },
    },
  });
  deadLetterQueue.on('error', (err) => logRepeated(log, 'error', 'queue error', 'poll-dead-letters', err));
  const deadLetterWorker = runWorker<PollDeadLetterJob>(
    POLL_DEAD_LETTER_QUEUE,
    createPollDeadLetterProcessor(
      options.acceptor,
      options.now,
      options.refusals ? { refusals: options.refusals, log } : undefined,
    ),
    {
      ...options.runner,
      concurrency: 1,
      connection: options.workerConnection,
      prefix: options.prefix,
      log,
    },
  );
  const deadLetters = new QueuePollDeadLetters(deadLetterQueue);
  const pollers = options.settings.channelIds.map(
    (channelId) =>
      new ChannelPoller(
        channelId,
        {
          client: options.client,
          acceptor: options.acceptor,
          deadLetters,
          redis: options.redis,
          prefix: options.prefix,
          log,
          events: options.events,
          now: options.now,
          instanceId: options.instanceId,
        },
        options.settings,
      ),
  );
  for (const p of pollers) p.start();
  if (pollers.length === 0) log.warn('poller role without POLL_CHANNEL_IDS: nothing to poll');
  else
    log.info(
      {
        channels: options.settings.channelIds,
        intervalMs: options.settings.intervalMs,
        pageSize: options.settings.pageSize,
      },
      'poller started',
    );

  let closing: Promise<void> | undefined;
  return {
    pollers,
    deadLetterQueue,
    deadLetterWorker,
    close() {
      closing ??= (async () => {
        // Stop reading first (each page in progress finishes or is abandoned uncommitted), then the worker, then the queue.
        await Promise.all(
          pollers.map((p) =>
            p
              .close()
              .catch((err: unknown) => log.error({ err, channel: p.channelId }, 'closing channel poller failed')),
          ),
        );
        await deadLetterWorker.close().catch((err: unknown) => log.error({ err }, 'closing dead-letter worker failed'));
        await deadLetterQueue.close().catch((err: unknown) => log.error({ err }, 'closing dead-letter queue failed'));
      })();
      return closing;
    },
  };
}
