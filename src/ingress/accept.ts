// Accepting a call means: it is stored in Redis (the inbound log) before anyone is told "yes".
// The ingress and the poller both accept through here, so deduplication is the same for both.
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { callHash, encodeCall, type CanonicalCall } from '../model/call.js';
import { transcriptFromPayload } from '../model/webhook.js';
import type { AppendItem, AppendOutcome, InboundAppender } from '../../queues/inbound.js';
import type { CallTimeline } from '../../queues/timeline.js';
import type { RedisClient } from '../../queues/connection.js';

export interface AcceptResult {
  /** The id the call is acknowledged with; a duplicate gets the id of the call's first delivery. */
  id: string;
  duplicate: boolean;
  /**
   * True when the call was accepted before within the dedupe window with other content: this
   * delivery is stored as an update of the same call (docs/reliability.md). Absent otherwise.
   */
  update?: true;
  /** True when the event was acknowledged into the local spool (Redis away); see spool.ts. */
  spooled?: boolean;
}

export interface AcceptOptions {
  /** Job id to use instead of a fresh one (the spool drainer reuses the id it acknowledged with). */
  jobId?: string;
  /**
   * The request body `call.raw` was parsed from, as received: stored as it is instead of
   * serializing the parsed payload again (the same JSON value, one copy of work less).
   */
  rawJson?: string;
  /** The HTTP request's id, for the call's timeline. */
  requestId?: string;
  /**
   * Filled in with the stored record (`json`) as soon as the call is encoded, before `accept`
   * returns: the spool wrapper keeps it instead of the call while the append is under way, and
   * rebuilds the call from it should Redis fail (less held per waiting request).
   */
  record?: { json?: string };
}

/**
 * The call as JSON; with `rawJson`, its `raw` is that text verbatim.
 * @internal Exported for its tests only (test/chaos/chaos.redis.test.ts, test/fanout-isolation.redis.test.ts …).
 */
export function serializeCall(call: CanonicalCall, rawJson?: string): string {
  return encodeCall(call, rawJson).json;
}

export interface CallAcceptor {
  accept(call: CanonicalCall, options?: AcceptOptions): Promise<AcceptResult>;
  /**
   * Resolves once every write started so far has settled in Redis — also those whose callers were
   * already answered "timed out" (a timeout does not cancel a write). The spool's drainer waits for
   * it before sending a batch again, so copies of large events never pile up behind each other.
   */
  settled?(): Promise<void>;
}

/** Redis did not take the event in time: nothing was acknowledged, the sender should retry. */
export class QueueUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`queue unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'QueueUnavailableError';
  }
}

export interface InboundAcceptorOptions {
  /** Same call key and content within this window -> duplicate; other content -> update. */
  dedupeWindowMs: number;
  /** Give up waiting for Redis after this long (the ingress then answers 503 or spools). */
  timeoutMs: number;
  /** Most calls stored with one script call. Default 256. */
  maxBatch?: number;
  /** A batch is sent as soon as its records reach this many characters. Default 4 Mi. */
  maxBatchChars?: number;
  /** Where each accepted call's `received` event is written (queues/timeline.ts); absent: nowhere. */
  timeline?: CallTimeline;
  /**
   * The connection `timeline` writes over (a single Redis): its socket is corked while a stored
   * batch's `received` entries are sent, so they leave in one write instead of one per call (the
   * same commands, fewer system calls). Absent, or a cluster: each goes out on its own.
   */
  timelineConnection?: RedisClient;
  /**
   * Characters of records on their way to Redis at most (sent and not yet settled, timed out or
   * not); a call that would go beyond is refused at once (QueueUnavailableError: the spool or 503)
   * unless nothing is in flight. Bounds the ingress' memory whatever the bodies. Default 64 Mi.
   */
  maxInFlightChars?: number;
}

/**
 * Characters per millisecond added to `timeoutMs` for a batch's size: a batch of N characters may
 * take timeoutMs + N / ENQUEUE_CHARS_PER_MS (8 MB/s: 1.25 s more for a 10 MB call), so a large call
 * is not cut off by a limit sized for small ones while Redis is still taking it.
 */
const ENQUEUE_CHARS_PER_MS = 8_000;

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Fresh ids are `<call hash>-<process tag><sequence>`: 48 random bits drawn once per process
 * (a restart draws new ones), then a counter, so ids stay unique across processes and restarts
 * without reading the CSPRNG on every request.
 */
const PROCESS_TAG = randomBytes(6).toString('hex');
let sequence = 0;

/** What `CallTimeline.received` reads of a call: kept while it waits for Redis instead of the whole call. */
type ReceivedCall = Pick<CanonicalCall, 'key' | 'source' | 'callId' | 'direction' | 'from' | 'to' | 'startedAt'> &
  Partial<Pick<CanonicalCall, 'fromRaw' | 'toRaw'>>;

interface Waiting {
  item: AppendItem;
  /** The few fields of the call its timeline's `received` entry needs (not its payload: less held per request). */
  call: ReceivedCall | null;
  requestId: string | undefined;
  /** A job id was handed in: the spool drainer's (acknowledged from the spool). */
  spooled: boolean;
  resolve(result: AcceptResult): void;
  reject(err: unknown): void;
}

/**
 * Stores calls in the inbound log. Every call accepted during one turn of the event loop (all the
 * requests Node read in that turn) goes to Redis in one script call, in order; each caller is
 * answered once its batch is stored. Deduplication is inside that script, atomic per call.
 */
export class InboundAcceptor implements CallAcceptor {
  private batch: Waiting[] = [];
  private batchChars = 0;
  private readonly maxBatch: number;
  private readonly maxBatchChars: number;
  private readonly maxInFlightChars: number;
  /** Characters batched or sent and not yet settled in Redis. */
  private inFlightChars = 0;
  /** Writes sent and not yet settled (answered or not). */
  private readonly writes = new Set<Promise<unknown>>();

  constructor(
    private readonly log: InboundAppender,
    private readonly options: InboundAcceptorOptions,
  ) {
    this.maxBatch = options.maxBatch ?? 256;
    this.maxBatchChars = options.maxBatchChars ?? 4 * 1024 * 1024;
    this.maxInFlightChars = options.maxInFlightChars ?? 64 * 1024 * 1024;
  }

  /** Characters of records on their way to Redis (for tests and metrics). */
  get inFlight(): number {
    return this.inFlightChars;
  }

  async settled(): Promise<void> {
    while (this.writes.size > 0) await Promise.allSettled([...this.writes]);
  }

  accept(call: CanonicalCall, options?: AcceptOptions): Promise<AcceptResult> {
    const dedupeId = callHash(call.key);
    // A fresh id per delivery: the script answers a duplicate with the first delivery's id.
    const id = options?.jobId ?? `${dedupeId}-${PROCESS_TAG}${(++sequence).toString(36)}`;
    return new Promise<AcceptResult>((resolve, reject) => {
      // The transcript the payload gives back is stored once, in the payload (less to write and to hold).
      const encoded = encodeCall(call, options?.rawJson, transcriptFromPayload(call));
      const item: AppendItem = { dedupeId, id, call: encoded.json, content: encoded.contentHash };
      if (options?.record) options.record.json = encoded.json;
      if (this.inFlightChars > 0 && this.inFlightChars + item.call.length > this.maxInFlightChars) {
        reject(
          new QueueUnavailableError(
            new Error(
              `${this.inFlightChars} characters already on their way to Redis (at most ${this.maxInFlightChars})`,
            ),
          ),
        );
        return;
      }
      this.inFlightChars += item.call.length;
      const timeline = this.options.timeline;
      const spooled = options?.jobId !== undefined;
      // The `received` entry goes with the call in the append script where it can (the one-slot
      // layout); else it is written after the append, from the few fields kept here.
      const inline = timeline?.receivedWrite(call, { requestId: options?.requestId, spooled }, dedupeId) ?? null;
      if (inline) item.received = inline;
      const received: ReceivedCall | null =
        timeline && !inline
          ? {
              key: call.key,
              source: call.source,
              callId: call.callId,
              direction: call.direction,
              from: call.from,
              to: call.to,
              // The number as sent only when it is no E.164 one (an extension, `23`): shown as that.
              ...(call.from === null && call.fromRaw !== null ? { fromRaw: call.fromRaw.slice(0, 64) } : {}),
              ...(call.to === null && call.toRaw !== null ? { toRaw: call.toRaw.slice(0, 64) } : {}),
              startedAt: call.startedAt,
            }
          : null;
      this.batch.push({
        item,
        call: received,
        requestId: options?.requestId,
        spooled,
        resolve,
        reject,
      });
      this.batchChars += item.call.length;
      if (this.batch.length >= this.maxBatch || this.batchChars >= this.maxBatchChars) this.flush();
      else if (this.batch.length === 1) setImmediate(() => this.flush());
    });
  }

  private flush(): void {
    const batch = this.batch;
    if (batch.length === 0) return;
    const chars = this.batchChars;
    this.batch = [];
    this.batchChars = 0;
    let write: Promise<AppendOutcome[]>;
    try {
      write = this.log.append(
        batch.map((w) => w.item),
        this.options.dedupeWindowMs,
      );
    } catch (err) {
      write = Promise.reject(err);
    }
    // Counted until Redis has answered, even after the callers were told "timed out".
    const tracked = write.then(
      () => undefined,
      () => undefined,
    );
    this.writes.add(tracked);
    void tracked.then(() => {
      this.writes.delete(tracked);
      this.inFlightChars -= chars;
    });
    withTimeout(write, this.options.timeoutMs + Math.ceil(chars / ENQUEUE_CHARS_PER_MS), 'enqueue').then(
      (outcomes: AppendOutcome[]) => {
        if (outcomes.length !== batch.length) {
          const failure = new QueueUnavailableError(
            new Error(`store answered ${outcomes.length} outcomes for ${batch.length} calls`),
          );
          for (const w of batch) w.reject(failure);
          return;
        }
        // Written before anyone is answered (not awaited: a write never holds up the acknowledgement).
        if (this.options.timeline && batch.some((w) => w.call !== null)) {
          const uncork = corked(this.options.timelineConnection);
          try {
            noteReceived(this.options.timeline, batch, outcomes);
          } finally {
            uncork();
          }
        }
        batch.forEach((w, i) => {
          const outcome = outcomes[i]!;
          if (!outcome.stored) w.resolve({ id: outcome.firstId, duplicate: true });
          else
            w.resolve(
              outcome.update ? { id: w.item.id, duplicate: false, update: true } : { id: w.item.id, duplicate: false },
            );
        });
      },
      (err: unknown) => {
        const failure = new QueueUnavailableError(err);
        for (const w of batch) w.reject(failure);
      },
    );
  }
}

/** Corks the socket of a single Redis connection that is ready; answers what uncorks it. */
function corked(connection: RedisClient | undefined): () => void {
  if (!(connection instanceof Redis) || connection.status !== 'ready' || !connection.stream) return () => undefined;
  const stream = connection.stream;
  stream.cork();
  return () => stream.uncork();
}

/** The `received` events of a stored batch; a job id handed in is the spool drainer's (acknowledged from the spool). */
function noteReceived(timeline: CallTimeline, batch: Waiting[], outcomes: AppendOutcome[]): void {
  batch.forEach((w, i) => {
    const outcome = outcomes[i]!;
    // A duplicate under its own id is the same delivery again (the spool's drainer resending what a
    // write that timed out stored after all): its receipt is noted already.
    if (!outcome.stored && outcome.firstId === w.item.id) return;
    const revision = !outcome.stored ? 'duplicate' : outcome.update ? 'update' : 'new';
    const jobId = outcome.stored ? w.item.id : outcome.firstId;
    // `received` reads only the fields of ReceivedCall (queues/timeline.ts).
    if (w.call) void timeline.received(w.call, { jobId, revision, requestId: w.requestId, spooled: w.spooled });
  });
}
