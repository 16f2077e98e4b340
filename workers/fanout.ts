// Fan-out: one inbound call -> one job per matching sink (per endpoint of a sink with endpoints:
// each has its own queue), with deterministic job ids so that running the fan-out again (a
// redelivered log entry, a retried dead letter) never duplicates sink work.
//
// The hot path reads the inbound log (queues/inbound.ts) in batches through a consumer group,
// adds each batch's sink jobs with one `addBulk` per sink queue, then acknowledges and deletes the
// entries. An entry that cannot be fanned out (unreadable, routed to a sink this process does not
// know, or redelivered too often) moves to the BullMQ `inbound` queue, whose worker runs the same
// fan-out with the full retry policy: a permanent failure stays there as a dead letter, which an
// operator can retry after fixing the configuration.
//
// Only Redis being unavailable holds a batch back (retried with backoff, unacknowledged). Any other
// error — a call too deep to serialize, a reply about the data — is isolated to the entries that
// cause it (the batch is halved until they fail alone); they go to the dead letters with the error
// (as their stored text when the record cannot be a job), and the rest of the batch flows. A fan-out
// that makes no progress for `stallAfterMs` says so (`stalled()`: readiness; `events.stalled`: metrics).
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Job, Queue } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import type { Logger } from 'pino';
import { logRepeated } from '../src/log.js';
import { withParts, type CallPart, type CanonicalCall } from '../src/model/call.js';
import { routeMatches } from '../src/routing/router.js';
import type { ParsedRoute } from '../src/routing/types.js';
import { UnprocessableJobError } from '../src/errors.js';
import { JobName, sinkJobId, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import {
  inboundStreamKey,
  parseStoredCall,
  type InboundEntry,
  type InboundLog,
  type InboundShard,
} from '../queues/inbound.js';
import { isRedisUnavailable } from '../queues/connection.js';
import type { CallTimeline } from '../queues/timeline.js';
import { traceFannedOut, tracingOn } from '../src/telemetry.js';

/** The queue of one endpoint of a sink with endpoints (`sink-<sink>.<endpoint>`). */
export interface EndpointQueue {
  endpoint: string;
  queue: Queue<SinkDeliverJob>;
}

export interface FanOutDeps {
  routes: readonly ParsedRoute[];
  /** The queue of each configured sink, by sink name. */
  sinkQueues: ReadonlyMap<string, Queue<SinkDeliverJob>>;
  /**
   * The endpoint queues of the sinks with endpoints, by sink name: such a sink gets one job per
   * endpoint (each with the job id of `sinkJobId` in its own queue), none in its own queue.
   */
  endpointQueues?: ReadonlyMap<string, readonly EndpointQueue[]>;
  /** Sinks that do not read `call.raw`: their jobs carry the call with `raw: null`. */
  withoutRaw?: ReadonlySet<string>;
  /** Sinks that do not read the transcript's text: their jobs carry it as `{ content: '', chunks: [], omitted: true }`. */
  withoutTranscript?: ReadonlySet<string>;
  /** Sinks that read only some parts of a call (`needsParts`), by sink name: their jobs carry only those (`withParts`). */
  partsRead?: ReadonlyMap<string, ReadonlySet<CallPart>>;
  /**
   * Called after jobs were added to `queues` and before what they were made of is deleted (a log
   * entry, an `inbound` job, a job handed over): resolves once those jobs are on enough replicas of
   * the queues' masters (ACK_REPLICAS with spread keys, where they are on other masters than their
   * source: `waitForReplicas`); throws `ReplicationError` when too few confirm, and it is tried
   * again. Without it nothing waits.
   */
  replicated?: (queues: readonly Queue[]) => Promise<void>;
  /** Where each call's `fanned-out` event is written (queues/timeline.ts); absent: nowhere. */
  timeline?: CallTimeline;
}

interface PlannedJob {
  queue: Queue<SinkDeliverJob>;
  job: { name: typeof JobName.sinkDeliver; data: SinkDeliverJob; opts: { jobId: string } };
}

/** One job per endpoint queue of a sink with endpoints. */
function endpointJobs(sink: string, endpoints: readonly EndpointQueue[], call: CanonicalCall): PlannedJob[] {
  const jobId = sinkJobId(call);
  return endpoints.map(({ endpoint, queue }) => ({
    queue,
    job: { name: JobName.sinkDeliver, data: { kind: JobName.sinkDeliver, sink, endpoint, call }, opts: { jobId } },
  }));
}

/** What the call's `fanned-out` event says: the routes that matched (by name, else `#<n>`) and their sinks. */
interface FannedOutInfo {
  call: CanonicalCall;
  /** The sink jobs' id (it begins with the call hash). */
  jobId: string;
  routes: string[];
  sinks: string[];
  /** The endpoints given a job, per sink with endpoints (absent when there is none). */
  endpoints?: Record<string, string[]>;
}

/**
 * The sink jobs of one call, and what its `fanned-out` event says (the routes matched once, the
 * job id hashed once); throws UnprocessableJobError when a route names a sink without a queue.
 */
function plan(deps: FanOutDeps, call: CanonicalCall): FannedOutInfo & { jobs: PlannedJob[] } {
  const names = new Set<string>();
  const routes: string[] = [];
  deps.routes.forEach((route, i) => {
    if (!routeMatches(route, call)) return;
    routes.push(route.name ?? `#${i + 1}`);
    for (const name of route.to) names.add(name);
  });
  const sinks = [...names];
  const jobId = sinkJobId(call);
  let endpointsOf: Record<string, string[]> | undefined;
  const jobs = sinks.flatMap((sink): PlannedJob[] => {
    let sinkCall = deps.withoutRaw?.has(sink) ? { ...call, raw: null } : call;
    if (deps.withoutTranscript?.has(sink) && sinkCall.transcript !== null && sinkCall.transcript !== undefined) {
      sinkCall = { ...sinkCall, transcript: { content: '', chunks: [], omitted: true } };
    }
    const parts = deps.partsRead?.get(sink);
    if (parts) sinkCall = withParts(sinkCall, parts);
    const endpoints = deps.endpointQueues?.get(sink);
    if (endpoints) {
      (endpointsOf ??= {})[sink] = endpoints.map((e) => e.endpoint);
      return endpointJobs(sink, endpoints, sinkCall);
    }
    const queue = deps.sinkQueues.get(sink);
    if (!queue) throw new UnprocessableJobError(`route names sink "${sink}", which has no queue`);
    const data: SinkDeliverJob = { kind: JobName.sinkDeliver, sink, call: sinkCall };
    return [{ queue, job: { name: JobName.sinkDeliver, data, opts: { jobId } } }];
  });
  return endpointsOf
    ? { call, jobId, routes, sinks, endpoints: endpointsOf, jobs }
    : { call, jobId, routes, sinks, jobs };
}

/**
 * The worker of the own queue of a sink with endpoints: a job found there was queued before the
 * sink's endpoints had queues (or by a fan-out of an older version during an upgrade); it is handed
 * on as one job per endpoint, with the same job ids the fan-out gives them, and completes.
 */
export function createHandOverProcessor(
  sink: string,
  endpoints: readonly EndpointQueue[],
  replicated?: FanOutDeps['replicated'],
) {
  return async function handOver(job: Job<SinkDeliverJob>): Promise<{ endpoints: string[] }> {
    const call = job.data?.call;
    if (!call || typeof call.key !== 'string')
      throw new UnprocessableJobError('sink job carries no canonical call record');
    await Promise.all(
      endpointJobs(sink, endpoints, call).map(({ queue, job: j }) => queue.add(j.name, j.data, j.opts)),
    );
    await replicated?.(endpoints.map((e) => e.queue));
    return { endpoints: endpoints.map((e) => e.endpoint) };
  };
}

const fannedOutInfo = ({ call, jobId, routes, sinks, endpoints }: FannedOutInfo): FannedOutInfo =>
  endpoints ? { call, jobId, routes, sinks, endpoints } : { call, jobId, routes, sinks };

/** Fan-out of one BullMQ `inbound` job: the dead letters of the log (see above), retried by operators. */
export function createFanOutProcessor(deps: FanOutDeps) {
  return async function fanOut(job: Job<CallReceivedJob>): Promise<{ sinks: string[] }> {
    // A dead letter kept as its stored text is read again: the cause may have been fixed since.
    const call = job.data?.call ?? (typeof job.data?.text === 'string' ? parseStoredCall(job.data.text) : null);
    if (!call || typeof call.key !== 'string' || typeof call.callId !== 'string') {
      throw new UnprocessableJobError(job.data?.reason ?? 'inbound job carries no canonical call record');
    }
    const planned = plan(deps, call);
    const { sinks, jobs } = planned;
    try {
      await Promise.all(jobs.map(({ queue, job: j }) => queue.add(j.name, j.data, j.opts)));
      await deps.replicated?.(jobs.map((j) => j.queue));
      // The call's `fanned-out` event (never rejects).
      if (deps.timeline) await deps.timeline.fannedOut(call, fannedOutInfo(planned));
      if (tracingOn()) traceFannedOut(planned.jobId.slice(0, 32), fannedOutInfo(planned), Date.now());
    } catch (err) {
      // The same data fails the same way on every attempt: a dead letter at once, with the reason.
      if (!isRedisUnavailable(err))
        throw new UnprocessableJobError(
          `sink jobs of call ${call.callId} cannot be stored: ${errorNameAndFirstLine(err)}`,
          { cause: err },
        );
      throw err;
    }
    return { sinks };
  };
}

/**
 * What went wrong in the log's fan-out, for `callsync_fanout_errors_total{kind}`:
 * - `redis`: a round failed because Redis was unavailable; its entries are kept and tried again
 * - `unexpected`: a round failed with another error outside the per-entry handling (a bug); tried again
 * - `entry`: an entry failed on its own with an error that is not Redis'; it went to the dead letters
 * - `parked`: a dead letter that could not be stored as a job even as text; the entry was moved whole to the parked stream
 * - `unstorable`: an entry that could be kept nowhere; it stays unacknowledged in the log and is tried again
 */
export type FanOutErrorKind = 'redis' | 'unexpected' | 'entry' | 'parked' | 'unstorable';

export interface LogFanOutEvents {
  /** A batch of entries was fanned out into `jobs` sink jobs. */
  fannedOut?(entries: number, jobs: number): void;
  /** An entry went to the `inbound` queue instead (see above). */
  deadLettered?(reason: string): void;
  /** Something went wrong, of this kind (see `FanOutErrorKind`). */
  failed?(kind: FanOutErrorKind): void;
  /** The fan-out stopped (true) or resumed (false) making progress; see `stallAfterMs`. */
  stalled?(stalled: boolean): void;
}

export interface LogFanOutOptions extends FanOutDeps {
  /** The log: one loop per shard reads it. */
  inbound: InboundLog;
  /**
   * A connection of its own for the blocking reads (of shard 0; each further shard reads on a
   * duplicate of it, closed with the fan-out).
   */
  blocking: RedisClient;
  /** Where entries go that cannot be fanned out here (the BullMQ `inbound` queue). */
  deadLetters: Queue<CallReceivedJob>;
  log: Logger;
  /** Entries read at once, at most. Default 200. */
  batch?: number;
  /**
   * Characters of stored calls one read brings, about, at most: the entries a read asks for follow
   * the size of those read before (1 entry of calls this large and more). Default 64 Mi.
   */
  readBudgetChars?: number;
  /** How long one read waits for new entries. Default 1000 ms. */
  blockMs?: number;
  /** An entry unacknowledged this long belongs to a fan-out that died: another takes it. Default 30 s. */
  claimIdleMs?: number;
  /** A taken-over entry delivered this often is dead-lettered instead of tried again. Default 5. */
  maxDeliveries?: number;
  /**
   * No round finished for this long (a read, or a batch handled) and the fan-out counts as stalled:
   * `stalled()` names it (readiness) and `events.stalled` reports it (metrics). Default `claimIdleMs`.
   */
  stallAfterMs?: number;
  events?: LogFanOutEvents;
}

export interface RunningLogFanOut {
  /** The consumer name of this fan-out in the group. */
  consumer: string;
  /** Why the fan-out counts as stalled (see `stallAfterMs`), or null while it makes progress. */
  stalled(): string | null;
  close(): Promise<void>;
}

/** A consumer that held nothing and was not seen for a day is removed from the group. */
const FORGET_CONSUMER_AFTER_MS = 24 * 3600_000;
/** What a dead letter keeps of the text of an entry that was parked (the whole text is in the parked stream). */
const PARKED_TEXT_HEAD_CHARS = 64 * 1024;

/** Entries the first read of a fan-out asks for (see LogFanOut.readCount). */
const FIRST_READ_COUNT = 8;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/** An error for a reason or a log line: its name and first line, bounded (no payload data in it). */
function errorNameAndFirstLine(err: unknown): string {
  const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
  return text.split('\n')[0]!.slice(0, 300);
}

/** BullMQ refuses custom job ids that are integers or contain ':'; an entry's id came from outside. */
function deadLetterJobId(entry: InboundEntry): string {
  const id = entry.id;
  const usable = id !== '' && `${parseInt(id, 10)}` !== id && !id.includes(':');
  return usable ? id : `log-${entry.entryId}`;
}

/**
 * The fan-out of one process: reads the inbound log through the consumer group, fans batches out
 * (isolating entries that fail on their own), takes over what dead fan-outs left, and tells
 * readiness when it makes no progress.
 */
class LogFanOut implements RunningLogFanOut {
  private readonly batch: number;
  private readonly readBudgetChars: number;
  /**
   * Entries the next read asks for: from a few at start (after a crash the log may hold a backlog
   * of the largest calls, 8 MiB each: 200 of them in one reply were 1.6 GB, past what the process
   * could hold, and so on at every restart), doubled while reads come back full and small, cut to
   * what readBudgetChars holds of calls of the size just read.
   */
  private readCount: number;
  private readonly blockMs: number;
  private readonly claimIdleMs: number;
  private readonly maxDeliveries: number;
  private readonly stallAfterMs: number;
  private readonly log: Logger;
  private readonly events: LogFanOutEvents | undefined;
  private closed = false;
  /** Ends the wait between failed rounds at once (close). */
  private wake: (() => void) | null = null;
  /** When a round last finished, or entries were last acknowledged. */
  private lastProgressAt = Date.now();
  /** Queues jobs were added to since entries last left the log (`replicated` waits for them). */
  private readonly touched = new Set<Queue>();
  /** Rounds failed in a row. */
  private failures = 0;
  /** What `events.stalled` was last told. */
  private reportedStalled = false;
  private readonly watch: NodeJS.Timeout;
  private readonly running: Promise<void>;

  constructor(
    private readonly options: LogFanOutOptions,
    /** The shard this loop reads. */
    private readonly shard: InboundShard,
    /** Its connection for blocking reads. */
    private readonly blocking: RedisClient,
    readonly consumer: string,
  ) {
    this.batch = options.batch ?? 200;
    this.readBudgetChars = options.readBudgetChars ?? 64 * 1024 * 1024;
    this.readCount = Math.min(this.batch, FIRST_READ_COUNT);
    this.blockMs = options.blockMs ?? 1000;
    this.claimIdleMs = options.claimIdleMs ?? 30_000;
    this.maxDeliveries = options.maxDeliveries ?? 5;
    this.stallAfterMs = options.stallAfterMs ?? this.claimIdleMs;
    this.log = options.log.child({
      component: 'fanout',
      consumer: this.consumer,
      ...(shard.key !== inboundStreamKey(options.inbound.prefix) ? { shard: shard.key } : {}),
    });
    this.events = options.events;
    // Reports changes of `stalled()` to the hooks (a gauge): also while a round hangs on Redis.
    this.watch = setInterval(() => this.reportStall(), Math.max(50, Math.min(1000, this.stallAfterMs / 4)));
    this.watch.unref();
    this.running = this.run();
  }

  private progressed(): void {
    this.lastProgressAt = Date.now();
  }

  private addDeadLetter(data: CallReceivedJob, jobId: string) {
    this.touched.add(this.options.deadLetters);
    return this.options.deadLetters.add(JobName.callReceived, data, { jobId });
  }

  /** Acknowledges and deletes entries whose jobs exist (on enough replicas, see `replicated`). */
  private async acknowledge(entryIds: string[]): Promise<void> {
    if (this.options.replicated && this.touched.size > 0) {
      await this.options.replicated([...this.touched]);
      this.touched.clear();
    }
    await this.shard.done(entryIds);
  }

  private reportStall(): void {
    const now = this.stalled() !== null;
    if (now === this.reportedStalled) return;
    this.reportedStalled = now;
    if (now)
      this.log.error(
        { stalledForMs: Date.now() - this.lastProgressAt, failures: this.failures },
        'fan-out stalled: no progress, accepted calls are not reaching their sinks',
      );
    else this.log.info('fan-out making progress again');
    this.events?.stalled?.(now);
  }

  /**
   * Moves an entry to the inbound dead letters with the reason: as its call record when that can be
   * stored as a job, else as the text the log held (what was acknowledged), else — the text cannot
   * be sent as a job either — the entry moves whole, inside Redis, to the parked stream, and a dead
   * letter with the head of its text points there. True when the entry is kept somewhere, so it may
   * leave the log; false when it could be kept nowhere (it then stays in the log, unacknowledged,
   * and is taken over and tried again later). Throws only when Redis is unavailable.
   */
  private async deadLetter(entry: InboundEntry, reason: string): Promise<boolean> {
    const jobId = deadLetterJobId(entry);
    const where = { id: entry.id, entryId: entry.entryId, callId: entry.call?.callId };
    if (entry.call) {
      try {
        await this.addDeadLetter({ kind: JobName.callReceived, call: entry.call, reason }, jobId);
        this.events?.deadLettered?.(reason);
        this.log.error({ ...where, reason }, 'inbound entry cannot be fanned out: moved to the inbound dead letters');
        return true;
      } catch (err) {
        if (isRedisUnavailable(err)) throw err;
        reason = `${reason}; the call record cannot be stored as a job (${errorNameAndFirstLine(err)}): kept as the text it was stored with`;
      }
    }
    let failure: unknown;
    try {
      await this.addDeadLetter({ kind: JobName.callReceived, call: null, text: entry.text, reason }, jobId);
      this.events?.deadLettered?.(reason);
      this.log.error(
        { ...where, reason, chars: entry.text.length },
        'inbound entry cannot be fanned out: moved to the inbound dead letters as its stored text',
      );
      return true;
    } catch (err) {
      if (isRedisUnavailable(err)) throw err;
      failure = err;
    }
    const parkedReason = `${reason}; its text cannot be stored as a job either (${errorNameAndFirstLine(failure)})`;
    let parked: string | null;
    try {
      parked = await this.shard.park(entry.entryId, parkedReason);
    } catch (err) {
      if (isRedisUnavailable(err)) throw err;
      this.events?.failed?.('unstorable');
      this.log.error(
        { ...where, reason: parkedReason, parkError: errorNameAndFirstLine(err), chars: entry.text.length },
        'inbound entry can be kept nowhere: left unacknowledged in the log, tried again after the take-over interval',
      );
      return false;
    }
    if (parked === null) {
      this.log.warn({ ...where }, 'inbound entry to park was no longer in the log (handled elsewhere)');
      return true;
    }
    this.events?.failed?.('parked');
    this.events?.deadLettered?.(parkedReason);
    this.log.error(
      { ...where, reason: parkedReason, parkedKey: this.shard.parkedKey, parkedId: parked, chars: entry.text.length },
      'inbound entry cannot be stored as a dead letter: moved whole to the parked stream',
    );
    // The entry is safe already; the dead letter makes it show where operators look.
    const pointer = `${parkedReason}; kept whole in ${this.shard.parkedKey} as ${parked}${entry.text.length > PARKED_TEXT_HEAD_CHARS ? `, the first ${PARKED_TEXT_HEAD_CHARS} of its ${entry.text.length} characters here` : ''}`;
    await this.addDeadLetter(
      { kind: JobName.callReceived, call: null, text: entry.text.slice(0, PARKED_TEXT_HEAD_CHARS), reason: pointer },
      jobId,
    ).catch((err: unknown) => {
      this.log.error(
        { ...where, parkedId: parked, err: { message: errorNameAndFirstLine(err) } },
        'dead letter pointing at a parked entry not stored: find the entry in the parked stream',
      );
    });
    return true;
  }

  /**
   * Fans entries out together: one `addBulk` per sink queue, then the entries that cannot be fanned
   * out to the dead letters, then acknowledges them; each handled entry's id goes to `handled`.
   * Throws when that fails (nothing of it acknowledged; sink jobs already added are harmless again).
   */
  private async fanOutAsOneBatch(entries: InboundEntry[], handled: Set<string>): Promise<void> {
    const startedAt = Date.now();
    const byQueue = new Map<Queue<SinkDeliverJob>, PlannedJob['job'][]>();
    const dead: [InboundEntry, string][] = [];
    let jobs = 0;
    const fanned: FannedOutInfo[] = [];
    for (const entry of entries) {
      if (!entry.call) {
        dead.push([entry, 'inbound entry is not a readable call record']);
        continue;
      }
      let planned: PlannedJob[];
      try {
        const p = plan(this.options, entry.call);
        planned = p.jobs;
        if (this.options.timeline || tracingOn()) fanned.push(fannedOutInfo(p));
      } catch (err) {
        dead.push([entry, (err as Error).message]);
        continue;
      }
      for (const { queue, job } of planned) {
        let list = byQueue.get(queue);
        if (!list) byQueue.set(queue, (list = []));
        list.push(job);
        jobs++;
      }
    }
    for (const queue of byQueue.keys()) this.touched.add(queue);
    const added = await Promise.allSettled([...byQueue].map(([queue, list]) => queue.addBulk(list)));
    const errors = added.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
    // Redis away outweighs a data error: the whole batch waits for it.
    if (errors.length > 0) throw errors.find(isRedisUnavailable) ?? errors[0];
    // Before the entries leave the log: a crash here fans them out (and notes them) again.
    if (fanned.length > 0) {
      if (tracingOn()) for (const info of fanned) traceFannedOut(info.jobId.slice(0, 32), info, startedAt);
      if (this.options.timeline) await this.options.timeline.fannedOutMany(fanned);
    }
    const kept = new Set(entries.map((e) => e.entryId));
    for (const [entry, reason] of dead) if (!(await this.deadLetter(entry, reason))) kept.delete(entry.entryId);
    await this.acknowledge([...kept]);
    for (const e of entries) handled.add(e.entryId);
    this.progressed();
    this.events?.fannedOut?.(entries.length - dead.length, jobs);
  }

  /**
   * `entries` failed together with an error that is not Redis': halves are tried on their own, and
   * again halved while they fail, down to the single entries that fail alone; those go to the dead
   * letters with their error. The rest is fanned out in log order. Throws only when Redis is unavailable.
   */
  private async bisectToFailingEntries(entries: InboundEntry[], err: unknown, handled: Set<string>): Promise<void> {
    if (entries.length === 1) {
      const entry = entries[0]!;
      this.events?.failed?.('entry');
      const reason = `fan-out of ${entry.call ? `call ${entry.call.callId}` : 'this entry'} failed: ${errorNameAndFirstLine(err)}`;
      if (await this.deadLetter(entry, reason)) await this.acknowledge([entry.entryId]);
      handled.add(entry.entryId);
      this.progressed();
      return;
    }
    const middle = Math.ceil(entries.length / 2);
    for (const part of [entries.slice(0, middle), entries.slice(middle)]) {
      try {
        await this.fanOutAsOneBatch(part, handled);
      } catch (partErr) {
        if (isRedisUnavailable(partErr)) throw partErr;
        await this.bisectToFailingEntries(part, partErr, handled);
      }
    }
  }

  /**
   * Fans a batch out. An error that is not Redis' (a value that cannot be serialized, a reply about
   * the data) is isolated to the entries that cause it; the others flow. Throws only when Redis is
   * unavailable: the entries not in `handled` then stay unacknowledged and are tried again.
   */
  private async fanOut(entries: InboundEntry[], handled: Set<string>): Promise<void> {
    try {
      await this.fanOutAsOneBatch(entries, handled);
    } catch (err) {
      if (isRedisUnavailable(err)) throw err;
      this.log.warn(
        { entries: entries.length, err: { message: errorNameAndFirstLine(err) } },
        "fan-out of a batch failed with an error that is not Redis': isolating the entries that cause it",
      );
      await this.bisectToFailingEntries(entries, err, handled);
    }
  }

  /** Entries of fan-outs that died, taken over; the ones delivered too often are dead-lettered. */
  /** Takes over stale entries; true when it took as many as it asked for (there may be more: go on at once). */
  private async takeOver(): Promise<boolean> {
    await this.shard.forgetIdleConsumers(FORGET_CONSUMER_AFTER_MS);
    const asked = this.readCount;
    const stale = await this.shard.claimStale(this.consumer, this.claimIdleMs, asked);
    this.sizeReads(stale.map((s) => s.entry));
    if (stale.length === 0) return false;
    this.log.warn({ entries: stale.length }, 'taking over inbound entries a stopped fan-out left unacknowledged');
    const retry: InboundEntry[] = [];
    for (const { entry, deliveries } of stale) {
      if (deliveries > this.maxDeliveries) {
        if (await this.deadLetter(entry, `delivered to the fan-out ${deliveries} times without being acknowledged`))
          await this.acknowledge([entry.entryId]);
      } else {
        retry.push(entry);
      }
    }
    if (retry.length > 0) await this.fanOut(retry, new Set());
    return stale.length >= asked;
  }

  /** The next read's count from the entries just read (LogFanOut.readCount). */
  private sizeReads(entries: readonly InboundEntry[]): void {
    if (entries.length === 0) return;
    let chars = 0;
    for (const e of entries) chars += e.text.length;
    const fits = Math.max(1, Math.floor(this.readBudgetChars / Math.max(1, chars / entries.length)));
    const grown = entries.length >= this.readCount ? this.readCount * 2 : this.readCount;
    this.readCount = Math.max(1, Math.min(this.batch, fits, grown));
  }

  /** Why the fan-out counts as stalled (see `this.stallAfterMs`), or null while it makes progress. */
  stalled(): string | null {
    if (this.closed) return null;
    const idleMs = Date.now() - this.lastProgressAt;
    if (idleMs <= this.stallAfterMs) return null;
    return `the fan-out has made no progress for ${Math.round(idleMs / 1000)} s${this.failures > 0 ? ` (${this.failures} failed attempts in a row)` : ''}`;
  }

  private async run(): Promise<void> {
    let nextTakeOver = 0;
    let inHand: InboundEntry[] = [];
    const handled = new Set<string>();
    while (!this.closed) {
      try {
        if (this.failures > 0 || nextTakeOver === 0) await this.shard.ensureGroup();
        if (Date.now() >= nextTakeOver) {
          // A full take-over (its count follows the calls' size): the rest right after this round.
          nextTakeOver = (await this.takeOver()) ? Date.now() : Date.now() + Math.max(1000, this.claimIdleMs / 2);
        }
        // Entries read but not fanned out (Redis failed mid-batch) are tried again first.
        if (inHand.length === 0) {
          inHand = await this.shard.read(this.consumer, this.readCount, this.blockMs, this.blocking);
          this.sizeReads(inHand);
        }
        if (inHand.length > 0) {
          await this.fanOut(inHand, handled);
          inHand = [];
          handled.clear();
        }
        this.failures = 0;
        this.progressed();
      } catch (err) {
        this.failures++;
        inHand = inHand.filter((e) => !handled.has(e.entryId));
        handled.clear();
        if (this.closed) break;
        const redis = isRedisUnavailable(err);
        this.events?.failed?.(redis ? 'redis' : 'unexpected');
        const delay = Math.min(2000, 100 * 2 ** Math.min(this.failures, 5));
        const fields = {
          err: { message: errorNameAndFirstLine(err) },
          retryInMs: delay,
          inHand: inHand.length,
          failures: this.failures,
        };
        // Every round fails while Redis is away: one line per REPEAT_LOG_INTERVAL_MS, with the count.
        if (redis)
          logRepeated(
            this.log,
            'warn',
            'fan-out could not read or write Redis: retrying',
            this.shard.key,
            { message: errorNameAndFirstLine(err) },
            { inHand: inHand.length, failures: this.failures },
          );
        else this.log.error(fields, 'fan-out round failed: retrying');
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, delay).unref();
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.wake = null;
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.watch);
    if (this.reportedStalled) this.events?.stalled?.(false);
    this.wake?.();
    // A read blocks at most blockMs; while Redis is away it waits for the reconnect, so give up
    // then — at once when the connection is away already: nothing it sent can come back.
    const away = this.blocking.status !== 'ready';
    const finished =
      !away && (await Promise.race([this.running.then(() => true), sleep(this.blockMs + 2000).then(() => false)]));
    if (!finished) {
      this.blocking.disconnect();
      // Still waiting for Redis to write a batch: what is unacknowledged is taken over later.
      await Promise.race([this.running, sleep(away ? 200 : 2000)]);
    }
    // Leave the group tidy: a consumer with nothing pending can go.
    if (finished && this.blocking.status === 'ready') {
      await this.shard.removeConsumerIfIdle(this.consumer).catch(() => undefined);
    }
  }
}

/**
 * Starts the fan-out of this process: one loop per shard of the log, each with its own blocking
 * connection (a blocking read holds its connection; on a cluster each shard may be on another master).
 */
export function startLogFanOut(options: LogFanOutOptions): RunningLogFanOut {
  const consumer = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const duplicates: RedisClient[] = [];
  const loops = options.inbound.shards.map((shard, i) => {
    let blocking = options.blocking;
    if (i > 0) {
      blocking = options.blocking.duplicate();
      blocking.on('error', () => undefined); // reported by the loop that uses it
      duplicates.push(blocking);
    }
    return new LogFanOut(options, shard, blocking, consumer);
  });
  if (loops.length === 1) return loops[0]!;
  return {
    consumer,
    stalled() {
      for (const loop of loops) {
        const reason = loop.stalled();
        if (reason !== null) return reason;
      }
      return null;
    },
    async close() {
      await Promise.all(loops.map((loop) => loop.close()));
      await Promise.all(duplicates.map((c) => c.quit().catch(() => c.disconnect())));
    },
  };
}
