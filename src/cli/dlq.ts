// `callsync dlq list|retry|purge`: the dead letters of every queue are its BullMQ failed set.
import { Queue, type Job } from 'bullmq';
import type { Redis } from 'ioredis';
import type { Config } from '../config/index.js';
import { queueNames, sinkQueueNames } from '../ops/index.js';
import { table, UsageError, type CliIo } from './io.js';
import { CliFailure } from './redis.js';

export interface DlqOptions {
  queue?: string;
  id?: string;
  limit: number;
  json: boolean;
  yes: boolean;
}

/** `--queue` takes a queue name (`sink-crm`, `sink-hooks.erp`) or a sink name (`crm`: all of its queues). */
export function resolveQueues(config: Config, queue: string | undefined): string[] {
  const known = queueNames(config);
  if (queue === undefined) return known;
  if (known.includes(queue)) return [queue];
  const sink = config.sinks[queue];
  if (sink) return sinkQueueNames(sink);
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

async function withQueues<T>(config: Config, redis: Redis, names: string[], fn: (queues: Queue[]) => Promise<T>): Promise<T> {
  const queues = names.map((name) => new Queue(name, { connection: redis, prefix: config.redis.prefix }));
  for (const q of queues) q.on('error', () => undefined);
  try {
    return await fn(queues);
  } finally {
    await Promise.all(queues.map((q) => q.close().catch(() => undefined)));
  }
}

/** Finds a dead letter by id in the given queues; it must be in the failed state. */
async function findDeadLetter(queues: Queue[], id: string): Promise<{ queue: Queue; job: Job }> {
  for (const queue of queues) {
    const job = await queue.getJob(id);
    if (!job) continue;
    const state = await job.getState();
    if (state !== 'failed') throw new CliFailure(`job ${id} in queue ${queue.name} is ${state}, not a dead letter`);
    return { queue, job };
  }
  throw new CliFailure(`no job ${id} in ${queues.map((q) => q.name).join(', ')}`);
}

export async function dlqList(config: Config, redis: Redis, options: DlqOptions, io: CliIo): Promise<number> {
  return withQueues(config, redis, resolveQueues(config, options.queue), async (queues) => {
    const rows: { queue: string; id: string; failedAt: string; attempts: number; call: string; reason: string }[] = [];
    let total = 0;
    for (const queue of queues) {
      const jobs = options.id ? [(await findDeadLetter([queue], options.id).catch(() => null))?.job].filter((j): j is Job => !!j) : await queue.getFailed(0, options.limit - 1);
      total += options.id ? jobs.length : await queue.getFailedCount();
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
    if (options.id && rows.length === 0) throw new CliFailure(`no dead letter ${options.id} in ${queues.map((q) => q.name).join(', ')}`);
    if (options.json) {
      io.out(JSON.stringify(rows, null, 2));
      return 0;
    }
    if (rows.length === 0) {
      io.out(`no dead letters in ${queues.map((q) => q.name).join(', ')}`);
      return 0;
    }
    const lines = table([['QUEUE', 'ID', 'FAILED AT', 'TRIES', 'CALL', 'REASON'], ...rows.map((r) => [r.queue, r.id, r.failedAt, String(r.attempts), r.call, r.reason])]);
    for (const line of lines) io.out(line);
    if (total > rows.length) io.out(`(${rows.length} of ${total} shown; --limit N shows more per queue)`);
    return 0;
  });
}

export async function dlqRetry(config: Config, redis: Redis, options: DlqOptions, io: CliIo): Promise<number> {
  return withQueues(config, redis, resolveQueues(config, options.queue), async (queues) => {
    if (options.id) {
      const { queue, job } = await findDeadLetter(queues, options.id);
      await job.retry('failed');
      io.out(`retrying ${queue.name} job ${options.id}`);
      return 0;
    }
    let total = 0;
    for (const queue of queues) {
      const count = await queue.getFailedCount();
      if (count === 0) continue;
      await queue.retryJobs({ state: 'failed', count: 1000 });
      io.out(`retrying ${count} dead letter(s) of ${queue.name}`);
      total += count;
    }
    if (total === 0) io.out(`no dead letters in ${queues.map((q) => q.name).join(', ')}`);
    return 0;
  });
}

export async function dlqPurge(config: Config, redis: Redis, options: DlqOptions, io: CliIo): Promise<number> {
  return withQueues(config, redis, resolveQueues(config, options.queue), async (queues) => {
    if (options.id) {
      const { queue, job } = await findDeadLetter(queues, options.id);
      await job.remove();
      io.out(`removed ${queue.name} job ${options.id}`);
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
      for (let batch = await queue.clean(0, 1000, 'failed'); batch.length > 0; batch = await queue.clean(0, 1000, 'failed')) removed += batch.length;
      io.out(`removed ${removed} dead letter(s) of ${queue.name}`);
    }
    return 0;
  });
}
