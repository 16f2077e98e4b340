// The fan-out reads the inbound log in counts that follow the size of the calls in it: a few entries
// at its start, doubled while reads come back full of small calls, cut to what its read budget holds
// of large ones. Before, every read asked for 200 entries whatever they were: after a crash, a backlog
// of the largest calls (8 MiB each) came back as one reply of 1.6 GB — more than the process could
// hold, at every restart. Here with a budget of 1 MiB and calls of ~300 KB: no read brings more than
// 4 of them (each read's count seen as the shard is asked for it), and all of them reach the sink;
// then small calls grow the count back to the batch.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createLogger } from '../src/log.js';
import { InboundLog, InboundShard } from '../queues/inbound.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { startLogFanOut } from '../workers/fanout.js';
import { sampleCall } from './support/calls.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { uniquePrefix, waitFor } from './support/redis.js';

let redis: PrivateRedis;
before(async () => {
  redis = await startPrivateRedis({ appendonly: false });
});
after(async () => {
  await redis?.destroy();
});

test('read counts follow the calls’ size: large calls a few at a time, small ones up to the batch', async () => {
  const prefix = uniquePrefix('fanout-read-size');
  const producer = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  const worker = new Redis(redis.url, { maxRetriesPerRequest: null });
  const blocking = new Redis(redis.url, { maxRetriesPerRequest: null });
  const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: worker, prefix });
  const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: worker, prefix });
  const counts: number[] = [];
  const read = InboundShard.prototype.read;
  InboundShard.prototype.read = function (this: InboundShard, consumer, count, ...rest) {
    counts.push(count);
    return read.call(this, consumer, count, ...rest);
  };
  const inbound = new InboundLog(producer, prefix);
  const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 5000 });
  let fanOut: ReturnType<typeof startLogFanOut> | undefined;
  try {
    // A backlog of 20 large calls (~300 KB of transcript each) before the fan-out starts.
    const big = 'Caller: this is a long call. '.repeat(10_000);
    for (let i = 0; i < 20; i++)
      await acceptor.accept(
        sampleCall(`big-${i}`, { patch: (p) => ((p.assist.transcription as { content: string }).content = big) }),
      );
    fanOut = startLogFanOut({
      inbound: new InboundLog(worker, prefix),
      blocking,
      deadLetters,
      routes: [{ when: [{}], to: ['archive'] }],
      sinkQueues: new Map([['archive', archive]]),
      log: createLogger({ level: 'silent' }),
      blockMs: 100,
      batch: 50,
      readBudgetChars: 1024 * 1024,
    });
    await waitFor(async () => ((await archive.getJobCounts('waiting')).waiting === 20 ? true : null), {
      timeoutMs: 30_000,
      what: 'the 20 large calls fanned out',
    });
    const whileLarge = [...counts];
    assert.ok(whileLarge.length >= 5, `reads: ${whileLarge.join(',')}`);
    assert.ok(
      whileLarge.every((c) => c <= 8),
      `no read asked for more than the first 8 or what 1 MiB holds of them: ${whileLarge.join(',')}`,
    );
    assert.ok(
      whileLarge.slice(1).every((c) => c <= 4),
      `then at most 4 (1 MiB / ~300 KB): ${whileLarge.join(',')}`,
    );
    // Small calls: full reads double the count, up to the batch.
    for (let round = 0; round < 6; round++)
      await Promise.all(Array.from({ length: 60 }, (_, i) => acceptor.accept(sampleCall(`small-${round}-${i}`))));
    await waitFor(async () => ((await archive.getJobCounts('waiting')).waiting === 380 ? true : null), {
      timeoutMs: 30_000,
      what: 'the small calls fanned out',
    });
    assert.ok(counts.includes(50), `the count grew back to the batch: ${counts.join(',')}`);
  } finally {
    InboundShard.prototype.read = read;
    await fanOut?.close();
    for (const q of [archive, deadLetters]) await q.close();
    for (const c of [producer, worker, blocking]) c.disconnect();
  }
});
