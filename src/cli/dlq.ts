// `callsync dlq list|retry|purge|abandon`: the dead letters of every queue are its BullMQ failed set;
// `abandon` makes dead letters of the jobs a queue no worker runs holds (a sink taken out).
import { randomUUID } from 'node:crypto';
import { Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
import { Cluster } from 'ioredis';
import type { RedisClient } from '../../queues/connection.js';
import { retryDeadLetter, retryDeadLetters } from '../../queues/dead-letters.js';
import { redisKeys } from '../../queues/keys.js';
import { queuesInRedis } from '../../queues/scan.js';
import { CallTimeline, listedCallId, timelineIdOf } from '../../queues/timeline.js';
import { enableQueue } from '../../queues/disabled.js';
import { endpointFromQueue, sinkNameFromQueue } from '../../queues/registry.js';
import { strandedOf } from '../ops/stranded-queues.js';
import type { Config } from '../config/index.js';
import { sinkQueueName } from '../../queues/index.js';
import { queueNames, sinkQueueNames } from '../ops/index.js';
import { table, UsageError, type CliIo } from './io.js';
import { CliFailure } from './redis.js';

export interface DlqOptions {
  queue?: string;
  id?: string;
  /** Only the dead letters of this call (`dlq list --call`). */
  call?: string;
  limit: number;
  json: boolean;
  yes: boolean;
  /** abandon: say what would be abandoned, change nothing. */
  dryRun?: boolean;
}

export interface ResolvedQueues {
  /** The queues to act on. */
  names: string[];
  /** Of those, the ones found only in Redis (no sink of this configuration works them). */
  foundOnly: Set<string>;
}

/**
 * The queues of this configuration and those found in Redis. `--queue` takes a queue name
 * (`sink-crm`, `sink-hooks.erp`) or a sink name (`crm`: all of its queues) of either.
 */
export async function resolveQueues(
  config: Config,
  redis: RedisClient,
  queue: string | undefined,
): Promise<ResolvedQueues> {
  const configured = queueNames(config);
  const found = await queuesInRedis(redis, redisKeys(config.redis));
  const foundOnly = new Set(found.filter((name) => !configured.includes(name)));
  const known = [...configured, ...foundOnly];
  if (queue === undefined) return { names: known, foundOnly };
  if (known.includes(queue)) return { names: [queue], foundOnly: new Set(foundOnly.has(queue) ? [queue] : []) };
  const sink = config.sinks[queue];
  // A sink name stands for all of its queues (a signed webhook has one per endpoint).
  if (sink) return { names: sinkQueueNames(sink), foundOnly: new Set() };
  const named = sinkQueueName(queue);
  if (known.includes(named)) return { names: [named], foundOnly: new Set(foundOnly.has(named) ? [named] : []) };
  throw new UsageError(`unknown queue "${queue}" (known: ${known.join(', ')})`);
}

function callIdOf(job: Job): string {
  const data = job.data as { call?: { callId?: unknown }; channelId?: unknown } | undefined;
  if (typeof data?.call?.callId === 'string') return data.call.callId;
  if (typeof data?.channelId === 'string') return `channel ${data.channelId}`;
  return '';
}

function firstLine(text: string | undefined): string {
  return (text ?? '').split('\n')[0]!.slice(0, 200);
}

async function withQueues<T>(
  config: Config,
  redis: RedisClient,
  names: string[],
  fn: (queues: Queue[]) => Promise<T>,
): Promise<T> {
  const keys = redisKeys(config.redis);
  const queues = names.map((name) => new Queue(name, { connection: redis, prefix: keys.queuePrefix(name) }));
  for (const q of queues) q.on('error', () => undefined);
  try {
    return await fn(queues);
  } finally {
    await Promise.all(queues.map((q) => q.close().catch(() => undefined)));
  }
}

interface FoundJob {
  queue: Queue;
  job: Job;
  state: string;
}

/** The jobs with this id in the given queues, each with its state: every sink queue of a call has its job under the same id. */
async function jobsWithId(queues: Queue[], id: string): Promise<FoundJob[]> {
  const found: FoundJob[] = [];
  for (const queue of queues) {
    const job = await queue.getJob(id);
    if (job) found.push({ queue, job, state: await job.getState() });
  }
  return found;
}

/** The dead letters (failed jobs) with this id in the given queues; exit 1 naming where it is when there is none. */
async function deadLettersWithId(queues: Queue[], id: string): Promise<FoundJob[]> {
  const found = await jobsWithId(queues, id);
  if (found.length === 0) throw new CliFailure(`no job ${id} in ${queues.map((q) => q.name).join(', ')}`);
  const dead = found.filter((f) => f.state === 'failed');
  if (dead.length === 0)
    throw new CliFailure(
      `job ${id} is not a dead letter: ${found.map((f) => `in ${f.queue.name} it is ${f.state}`).join('; ')}`,
    );
  return dead;
}

/** The dead letters of one call in a queue, newest first: the failed set read page by page (it holds at most 100 000). */
async function deadLettersOfCall(queue: Queue, callId: string): Promise<Job[]> {
  const page = 500;
  const found: Job[] = [];
  for (let start = 0; ; start += page) {
    const jobs = await queue.getFailed(start, start + page - 1);
    found.push(...jobs.filter((job) => callIdOf(job) === callId));
    if (jobs.length < page) return found;
  }
}

export async function dlqList(config: Config, redis: RedisClient, options: DlqOptions, io: CliIo): Promise<number> {
  const { names } = await resolveQueues(config, redis, options.queue);
  return withQueues(config, redis, names, async (queues) => {
    const rows: { queue: string; id: string; failedAt: string; attempts: number; call: string; reason: string }[] = [];
    let total = 0;
    for (const queue of queues) {
      const jobs = options.id
        ? (await jobsWithId([queue], options.id)).filter((f) => f.state === 'failed').map((f) => f.job)
        : options.call !== undefined
          ? await deadLettersOfCall(queue, options.call)
          : await queue.getFailed(0, options.limit - 1);
      total += options.id || options.call !== undefined ? jobs.length : await queue.getFailedCount();
      if (options.call !== undefined) jobs.splice(options.limit);
      for (const job of jobs) {
        rows.push({
          queue: queue.name,
          id: job.id ?? '',
          failedAt: job.finishedOn ? new Date(job.finishedOn).toISOString() : '',
          attempts: job.attemptsMade,
          call: callIdOf(job),
          reason: firstLine(job.failedReason),
        });
      }
    }
    if (options.id && rows.length === 0)
      throw new CliFailure(`no dead letter ${options.id} in ${queues.map((q) => q.name).join(', ')}`);
    if (options.call !== undefined && rows.length === 0)
      throw new CliFailure(`no dead letter of call ${options.call} in ${queues.map((q) => q.name).join(', ')}`);
    if (options.json) {
      io.out(JSON.stringify(rows, null, 2));
      return 0;
    }
    if (rows.length === 0) {
      io.out(`no dead letters in ${queues.map((q) => q.name).join(', ')}`);
      return 0;
    }
    const lines = table([
      ['QUEUE', 'ID', 'FAILED AT', 'TRIES', 'CALL', 'REASON'],
      ...rows.map((r) => [r.queue, r.id, r.failedAt, String(r.attempts), listedCallId(r.call), r.reason]),
    ]);
    for (const line of lines) io.out(line);
    if (total > rows.length) io.out(`(${rows.length} of ${total} shown; --limit N shows more per queue)`);
    return 0;
  });
}

/** Who a `retried` timeline entry names: the door it came through. */
const RETRIED_BY = 'callsync dlq retry';

export async function dlqRetry(config: Config, redis: RedisClient, options: DlqOptions, io: CliIo): Promise<number> {
  const { names, foundOnly } = await resolveQueues(config, redis, options.queue);
  // Each retried sink job's call timeline says a new round of attempts began.
  const timeline = new CallTimeline(redis, redisKeys(config.redis), config.timeline);
  return withQueues(config, redis, names, async (queues) => {
    if (options.id) {
      // Every dead letter with the id in scope: one call's sink jobs share it (docs/reliability.md "Job ids").
      for (const { queue, job } of await deadLettersWithId(queues, options.id)) {
        await retryDeadLetter(queue, job, timeline, RETRIED_BY);
        io.out(`retrying ${queue.name} job ${options.id}`);
        if (foundOnly.has(queue.name))
          io.err(`${queue.name}: no sink of this configuration works that queue: the job waits for a worker that does`);
      }
      return 0;
    }
    let total = 0;
    let skipped = 0;
    for (const queue of queues) {
      const count = await queue.getFailedCount();
      if (count === 0) continue;
      // Retried without a worker, they would wait forever: only on request (--queue).
      if (options.queue === undefined && foundOnly.has(queue.name)) {
        io.err(
          `${queue.name}: ${count} dead letter(s) not retried: no sink of this configuration works that queue (--queue ${queue.name} retries them anyway)`,
        );
        skipped += count;
        continue;
      }
      // One by one (Queue.retryJobs cannot start a new round of attempts: it keeps the counts).
      const retried = await retryDeadLetters(queue, timeline, RETRIED_BY);
      io.out(`retrying ${retried} dead letter(s) of ${queue.name}`);
      total += retried;
    }
    if (total === 0 && skipped === 0) io.out(`no dead letters in ${queues.map((q) => q.name).join(', ')}`);
    return 0;
  });
}

export async function dlqPurge(config: Config, redis: RedisClient, options: DlqOptions, io: CliIo): Promise<number> {
  const { names } = await resolveQueues(config, redis, options.queue);
  return withQueues(config, redis, names, async (queues) => {
    if (options.id) {
      const dead = await deadLettersWithId(queues, options.id);
      // One dead letter goes without confirmation, as ever; more (one call's, in several queues) need --yes.
      if (dead.length > 1 && !options.yes) {
        for (const { queue } of dead) io.err(`would remove ${queue.name} job ${options.id}`);
        io.err('nothing removed: add --yes to remove them for good');
        return 1;
      }
      for (const { queue, job } of dead) {
        await job.remove();
        io.out(`removed ${queue.name} job ${options.id}`);
      }
      return 0;
    }
    const counts = await Promise.all(queues.map(async (q) => [q, await q.getFailedCount()] as const));
    const total = counts.reduce((n, [, c]) => n + c, 0);
    if (total === 0) {
      io.out(`no dead letters in ${queues.map((q) => q.name).join(', ')}`);
      return 0;
    }
    if (!options.yes) {
      for (const [q, c] of counts) if (c > 0) io.err(`would remove ${c} dead letter(s) of ${q.name}`);
      io.err('nothing removed: add --yes to remove them for good');
      return 1;
    }
    for (const [queue, count] of counts) {
      if (count === 0) continue;
      let removed = 0;
      // clean() removes in batches; repeat until the failed set is empty.
      for (
        let batch = await queue.clean(0, 1000, 'failed');
        batch.length > 0;
        batch = await queue.clean(0, 1000, 'failed')
      )
        removed += batch.length;
      io.out(`removed ${removed} dead letter(s) of ${queue.name}`);
    }
    return 0;
  });
}

/** The reason an abandoned job's dead letter and its call's timeline give. */
function abandonReason(queue: string): string {
  const sink = sinkNameFromQueue(queue);
  const endpoint = endpointFromQueue(queue);
  const what = sink === null ? 'it' : endpoint === null ? `sink ${sink}` : `endpoint ${endpoint} of sink ${sink}`;
  return `abandoned by callsync dlq abandon: ${what} is not in this configuration and no worker runs queue ${queue}`;
}

/**
 * `dlq abandon`: the jobs still to run (waiting, delayed) of queues this configuration lacks and no
 * live worker runs — a sink taken out of the configuration (docs/operations.md, "A sink taken out of
 * the configuration") — become dead letters with the reason, each call's timeline says so, and
 * retention removes them like any other (FAILED_JOB_RETENTION_SECONDS); `dlq retry --queue` puts them back
 * once a worker runs the queue again. Taken one by one through BullMQ's own fetch and failure (a
 * worker of this process with no processor), so a job a worker elsewhere takes meanwhile is not
 * touched. Active jobs (their worker died holding them) are left: BullMQ's stalled check of a worker
 * gives them back once their lock has expired.
 */
export async function dlqAbandon(config: Config, redis: RedisClient, options: DlqOptions, io: CliIo): Promise<number> {
  const { names, foundOnly } = await resolveQueues(config, redis, options.queue);
  if (options.queue !== undefined) {
    const configured = names.filter((name) => !foundOnly.has(name));
    if (configured.length > 0)
      throw new CliFailure(
        `${configured.join(', ')}: in this configuration, its worker runs its jobs: nothing abandoned (only the queues of sinks taken out of the configuration can be)`,
      );
  }
  const candidates = names.filter((name) => foundOnly.has(name));
  const keys = redisKeys(config.redis);
  const stranded = await strandedOf(redis, keys, candidates);
  if (options.queue !== undefined && stranded.length === 0) {
    const [name] = candidates;
    const queue = new Queue(name!, { connection: redis, prefix: keys.queuePrefix(name!) });
    queue.on('error', () => undefined);
    try {
      const c = await queue.getJobCounts('waiting', 'prioritized', 'delayed', 'active');
      const toRun = (c.waiting ?? 0) + (c.prioritized ?? 0) + (c.delayed ?? 0) + (c.active ?? 0);
      if (toRun > 0)
        throw new CliFailure(
          `${name}: a live worker runs it (another process's configuration has its sink): nothing abandoned`,
        );
    } finally {
      await queue.close().catch(() => undefined);
    }
  }
  if (stranded.length === 0) {
    io.out(
      candidates.length === 0
        ? 'no queue to abandon: every queue in Redis is in this configuration'
        : `no jobs to abandon in ${candidates.join(', ')}`,
    );
    return 0;
  }
  if (options.dryRun) {
    for (const q of stranded)
      io.out(
        `would abandon ${q.waiting + q.delayed} job(s) of ${q.queue} (${q.waiting} waiting, ${q.delayed} delayed)${q.active > 0 ? `; ${q.active} active left` : ''}`,
      );
    return 0;
  }
  const timeline = new CallTimeline(redis, keys, config.timeline);
  // A connection of its own for the worker (BullMQ's workers need maxRetriesPerRequest null).
  const connection =
    redis instanceof Cluster
      ? redis.duplicate(undefined, { redisOptions: { ...redis.options.redisOptions, maxRetriesPerRequest: null } })
      : redis.duplicate({ maxRetriesPerRequest: null });
  try {
    for (const q of stranded) {
      const reason = abandonReason(q.queue);
      const queue = new Queue(q.queue, { connection, prefix: keys.queuePrefix(q.queue) });
      const worker = new Worker(q.queue, null, { connection, prefix: keys.queuePrefix(q.queue), autorun: false });
      queue.on('error', () => undefined);
      worker.on('error', () => undefined);
      const token = randomUUID();
      let abandoned = 0;
      try {
        // Delayed jobs (next attempt later, or a Retry-After) wait no longer; a pause (credentials
        // rejected, an endpoint disabled) holds nothing back any more, its marker gone with it: no
        // worker would ever resume it.
        await queue.promoteJobs();
        if (await queue.isPaused()) await enableQueue(queue);
        for (
          let job = await worker.getNextJob(token, { block: false });
          job;
          job = await worker.getNextJob(token, { block: false })
        ) {
          await job.moveToFailed(new UnrecoverableError(reason), token, false);
          const data = job.data as { call?: { key?: unknown } } | undefined;
          const key = data?.call?.key;
          if (typeof key === 'string' && job.id) {
            const sink = sinkNameFromQueue(q.queue);
            const endpoint = endpointFromQueue(q.queue);
            await timeline.append(timelineIdOf(job.id, { key }), {
              event: 'dead-lettered',
              jobId: job.id,
              ...(sink ? { sink } : {}),
              ...(endpoint ? { endpoint } : {}),
              kind: 'permanent',
              reason,
            });
          }
          abandoned++;
        }
      } finally {
        await worker.close().catch(() => undefined);
        await queue.close().catch(() => undefined);
      }
      io.out(
        `abandoned ${abandoned} job(s) of ${q.queue}: dead letters now (callsync dlq list --queue ${q.queue})${q.active > 0 ? `; ${q.active} active left (their worker died holding them: a worker's stalled check gives them back once their lock expires)` : ''}`,
      );
    }
    return 0;
  } finally {
    connection.disconnect();
  }
}
