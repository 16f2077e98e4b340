// Fan-out: one inbound call -> one job per matching sink, with deterministic job ids so that
// running the fan-out again (a redelivered log entry, a retried dead letter) never duplicates sink work.
//
// The hot path reads the inbound log (queues/inbound.ts) in batches through a consumer group,
// adds each batch's sink jobs with one `addBulk` per sink queue, then acknowledges and deletes the
// entries. An entry that cannot be fanned out (unreadable, routed to a sink this process does not
// know, or redelivered too often) moves to the BullMQ `inbound` queue, whose worker runs the same
// fan-out with the full retry policy: a permanent failure stays there as a dead letter, which an
// operator can retry after fixing the configuration.
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { Job, Queue } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { callHash, type CanonicalCall } from '../src/model/call.js';
import { sinksFor } from '../src/routing/router.js';
import type { ParsedRoute } from '../src/routing/types.js';
import { PermanentError } from '../src/errors.js';
import { JobName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import type { InboundEntry, InboundLog } from '../queues/inbound.js';

export interface FanOutDeps {
  routes: readonly ParsedRoute[];
  /** The queue of each configured sink, by sink name. */
  sinkQueues: ReadonlyMap<string, Queue<SinkDeliverJob>>;
  /** Sinks that do not read `call.raw`: their jobs carry the call with `raw: null`. */
  withoutRaw?: ReadonlySet<string>;
}

interface PlannedJob {
  queue: Queue<SinkDeliverJob>;
  job: { name: typeof JobName.sinkDeliver; data: SinkDeliverJob; opts: { jobId: string } };
}

/**
 * The sink job id of one revision of a call: the call hash for its first revision, the call hash
 * and the content hash for an update. Each revision gets its own job (BullMQ would drop an update
 * added under the id of the first revision's job, which it keeps for a day), and fanning the same
 * revision out again still adds nothing.
 */
export function sinkJobId(call: CanonicalCall): string {
  const base = callHash(call.key);
  const revision = call.revision;
  return revision?.update && revision.content ? `${base}-${revision.content}` : base;
}

/** The sink jobs of one call; throws PermanentError when a route names a sink without a queue. */
function plan(deps: FanOutDeps, call: CanonicalCall): { sinks: string[]; jobs: PlannedJob[] } {
  const sinks = sinksFor(deps.routes, call);
  const jobId = sinkJobId(call);
  const jobs = sinks.map((sink) => {
    const queue = deps.sinkQueues.get(sink);
    if (!queue) throw new PermanentError(`route names sink "${sink}", which has no queue`);
    const data: SinkDeliverJob = { kind: JobName.sinkDeliver, sink, call: deps.withoutRaw?.has(sink) ? { ...call, raw: null } : call };
    return { queue, job: { name: JobName.sinkDeliver, data, opts: { jobId } } };
  });
  return { sinks, jobs };
}

/** Fan-out of one BullMQ `inbound` job: the dead letters of the log (see above), retried by operators. */
export function createFanOutProcessor(deps: FanOutDeps) {
  return async function fanOut(job: Job<CallReceivedJob>): Promise<{ sinks: string[] }> {
    const call = job.data?.call;
    if (!call || typeof call.key !== 'string' || typeof call.callId !== 'string') {
      throw new PermanentError(job.data?.reason ?? 'inbound job carries no canonical call record');
    }
    const { sinks, jobs } = plan(deps, call);
    await Promise.all(jobs.map(({ queue, job: j }) => queue.add(j.name, j.data, j.opts)));
    return { sinks };
  };
}

export interface LogFanOutEvents {
  /** A batch of entries was fanned out into `jobs` sink jobs. */
  fannedOut?(entries: number, jobs: number): void;
  /** An entry went to the `inbound` queue instead (see above). */
  deadLettered?(reason: string): void;
}

export interface LogFanOutOptions extends FanOutDeps {
  inbound: InboundLog;
  /** A connection of its own for the blocking reads. */
  blocking: Redis;
  /** Where entries go that cannot be fanned out here (the BullMQ `inbound` queue). */
  deadLetters: Queue<CallReceivedJob>;
  log: Logger;
  /** Entries read at once. Default 200. */
  batch?: number;
  /** How long one read waits for new entries. Default 1000 ms. */
  blockMs?: number;
  /** An entry unacknowledged this long belongs to a fan-out that died: another takes it. Default 30 s. */
  claimIdleMs?: number;
  /** A taken-over entry delivered this often is dead-lettered instead of tried again. Default 5. */
  maxDeliveries?: number;
  events?: LogFanOutEvents;
}

export interface RunningLogFanOut {
  /** The consumer name of this fan-out in the group. */
  consumer: string;
  close(): Promise<void>;
}

/** A consumer that held nothing and was not seen for a day is removed from the group. */
const FORGET_CONSUMER_AFTER_MS = 24 * 3600_000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

export function startLogFanOut(options: LogFanOutOptions): RunningLogFanOut {
  const batch = options.batch ?? 200;
  const blockMs = options.blockMs ?? 1000;
  const claimIdleMs = options.claimIdleMs ?? 30_000;
  const maxDeliveries = options.maxDeliveries ?? 5;
  const consumer = `${hostname()}-${process.pid}-${randomBytes(3).toString('hex')}`;
  const log = options.log.child({ component: 'fanout', consumer });
  let closed = false;

  const deadLetter = async (entry: InboundEntry, reason: string) => {
    log.error({ id: entry.id, reason }, 'inbound entry cannot be fanned out: moved to the inbound dead letters');
    options.events?.deadLettered?.(reason);
    await options.deadLetters.add(JobName.callReceived, { kind: JobName.callReceived, call: entry.call, reason }, { jobId: entry.id || entry.entryId });
  };

  /** Fans a batch out; throws (entries stay unacknowledged) only when Redis fails. */
  const fanOut = async (entries: InboundEntry[]) => {
    const byQueue = new Map<Queue<SinkDeliverJob>, PlannedJob['job'][]>();
    const dead: [InboundEntry, string][] = [];
    let jobs = 0;
    for (const entry of entries) {
      if (!entry.call) {
        dead.push([entry, 'inbound entry is not a readable call record']);
        continue;
      }
      let planned: PlannedJob[];
      try {
        planned = plan(options, entry.call).jobs;
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
    await Promise.all([...byQueue].map(([queue, list]) => queue.addBulk(list)));
    for (const [entry, reason] of dead) await deadLetter(entry, reason);
    await options.inbound.done(entries.map((e) => e.entryId));
    options.events?.fannedOut?.(entries.length, jobs);
  };

  /** Entries of fan-outs that died, taken over; the ones delivered too often are dead-lettered. */
  const takeOver = async () => {
    await options.inbound.forgetIdleConsumers(FORGET_CONSUMER_AFTER_MS);
    const stale = await options.inbound.claimStale(consumer, claimIdleMs, batch);
    if (stale.length === 0) return;
    log.warn({ entries: stale.length }, 'taking over inbound entries a stopped fan-out left unacknowledged');
    const retry: InboundEntry[] = [];
    for (const { entry, deliveries } of stale) {
      if (deliveries > maxDeliveries) {
        await deadLetter(entry, `delivered to the fan-out ${deliveries} times without being acknowledged`);
        await options.inbound.done([entry.entryId]);
      } else {
        retry.push(entry);
      }
    }
    if (retry.length > 0) await fanOut(retry);
  };

  const run = async () => {
    let failures = 0;
    let nextTakeOver = 0;
    let inHand: InboundEntry[] = [];
    while (!closed) {
      try {
        if (failures > 0 || nextTakeOver === 0) await options.inbound.ensureGroup();
        if (Date.now() >= nextTakeOver) {
          await takeOver();
          nextTakeOver = Date.now() + Math.max(1000, claimIdleMs / 2);
        }
        // Entries read but not fanned out (Redis failed mid-batch) are tried again first.
        if (inHand.length === 0) inHand = await options.inbound.read(consumer, batch, blockMs, options.blocking);
        if (inHand.length > 0) {
          await fanOut(inHand);
          inHand = [];
        }
        failures = 0;
      } catch (err) {
        failures++;
        if (closed) break;
        const delay = Math.min(2000, 100 * 2 ** Math.min(failures, 5));
        log.warn({ err: { message: (err as Error).message }, retryInMs: delay, inHand: inHand.length }, 'fan-out could not read or write Redis: retrying');
        await sleep(delay);
      }
    }
  };

  const running = run();
  return {
    consumer,
    async close() {
      closed = true;
      // A read blocks at most blockMs; while Redis is away it waits for the reconnect, so give up then.
      const finished = await Promise.race([running.then(() => true), sleep(blockMs + 2000).then(() => false)]);
      if (!finished) {
        options.blocking.disconnect();
        // Still waiting for Redis to write a batch: what is unacknowledged is taken over later.
        await Promise.race([running, sleep(2000)]);
      }
      // Leave the group tidy: a consumer with nothing pending can go.
      if (finished && options.blocking.status === 'ready') {
        await options.inbound.removeConsumerIfIdle(consumer).catch(() => undefined);
      }
    },
  };
}
