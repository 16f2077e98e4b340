// The inbound log (queues/inbound.ts) with its acceptor and fan-out, against real Redis: batched
// appends keep order and deduplicate (also inside one batch), the fan-out turns entries into sink
// jobs and removes them, takes over what a dead fan-out left, and dead-letters what it cannot read.
import { after, describe, test } from 'node:test';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import assert from 'node:assert/strict';
import { Queue, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { InboundAcceptor, serializeCall } from '../src/ingress/accept.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { createLogger } from '../src/log.js';
import { callHash, callKeySegment, contentHash } from '../src/model/call.js';
import {
  FANOUT_GROUP,
  inboundSeenPrefix,
  InboundLog,
  InboundShard,
  MAX_REMEMBERED_REVISIONS,
} from '../queues/inbound.js';
import { INBOUND_QUEUE, sinkQueueName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';
import { createFanOutProcessor, startLogFanOut } from '../workers/fanout.js';
import { deepWebhookBody, sampleCall, webhookPayload } from './support/calls.js';
import { startTestCallsync } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const log = createLogger({ level: 'silent' });

describe('inbound log', () => {
  const prefixes: string[] = [];
  const conns: Redis[] = [];
  const connect = (producer = false) => {
    const r = producer
      ? new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false })
      : new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    conns.push(r);
    return r;
  };
  const fresh = (name: string) => {
    const prefix = uniquePrefix(name);
    prefixes.push(prefix);
    return prefix;
  };
  /** A log under a fresh prefix on a producer connection (fails fast, as the ingress'), and its acceptor. */
  const store = async (name: string, dedupeWindowMs: number) => {
    const prefix = fresh(name);
    const redis = connect(true);
    await new Promise((r) => redis.once('ready', r));
    const inbound = new InboundLog(redis, prefix);
    return { prefix, redis, inbound, acceptor: new InboundAcceptor(inbound, { dedupeWindowMs, timeoutMs: 2000 }) };
  };
  after(async () => {
    for (const c of conns) c.disconnect();
    for (const p of prefixes) await cleanupPrefix(p);
  });

  test('calls accepted in one turn are stored in one batch, in order, duplicates (also within the batch) once', async () => {
    const { inbound, acceptor } = await store('log-batch', 60_000);
    const calls = Array.from({ length: 300 }, (_, i) => sampleCall(`batch-${i}`));
    // The 300 plus a repeat of call 7 in the same turn.
    const results = await Promise.all([...calls, calls[7]!].map((c) => acceptor.accept(c)));
    assert.equal(results.filter((r) => r.duplicate).length, 1);
    assert.deepEqual(results[300], { id: results[7]!.id, duplicate: true });
    const entries = await inbound.entries();
    assert.equal(entries.length, 300);
    assert.deepEqual(
      entries.map((e) => e.call?.callId),
      calls.map((c) => c.callId),
      'the log keeps the order calls were accepted in',
    );
    assert.deepEqual(
      entries.map((e) => e.id),
      results.slice(0, 300).map((r) => r.id),
      'each entry carries the id its 202 answered',
    );
    // A later delivery inside the window is a duplicate with the first id; the record is unchanged.
    const again = await acceptor.accept(calls[0]!);
    assert.deepEqual(again, { id: results[0]!.id, duplicate: true });
    assert.equal(await inbound.length(), 300);
  });

  test('the request body is stored as received, as the same JSON value as the parsed payload', () => {
    for (const text of [
      JSON.stringify(webhookPayload('raw-1')),
      JSON.stringify(webhookPayload('raw-2'), null, 2),
      '{"version":"v1","call":{"id":"raw-3","from":"+492116355340","to":"+4921155550100","startTime":1775642400000,"endTime":1775642460000,"duration":60,"direction":"in","users":[]},"x":"\\u00e9\\"}"}',
    ]) {
      const call = normalizeWebhook(JSON.parse(text), { agentId: 'a-1', receivedAt: new Date('2026-04-08T10:00:00Z') });
      assert.deepEqual(JSON.parse(serializeCall(call, text)), JSON.parse(JSON.stringify(call)));
    }
  });

  test('a turn with more calls than one batch holds (by count or size) is stored in several, still in order', async () => {
    const { inbound } = await store('log-split', 60_000);
    for (const limits of [{ maxBatch: 7 }, { maxBatchChars: 20_000 }]) {
      const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000, ...limits });
      const tag = Object.keys(limits)[0]!;
      const calls = Array.from({ length: 50 }, (_, i) => sampleCall(`split-${tag}-${i}`));
      const results = await Promise.all(calls.map((c) => acceptor.accept(c)));
      assert.ok(results.every((r) => !r.duplicate));
      const stored = (await inbound.entries()).filter((e) => e.call?.callId.startsWith(`split-${tag}-`));
      assert.deepEqual(
        stored.map((e) => e.id),
        results.map((r) => r.id),
        tag,
      );
    }
  });

  test('the log and its dedupe keys live outside every queue: obliterating the queue `inbound` leaves them', async () => {
    const { prefix, redis, inbound, acceptor } = await store('log-apart', 60_000);
    const first = await acceptor.accept(sampleCall('apart-1'));
    const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: connect(), prefix });
    await deadLetters.add('call.received', { kind: 'call.received', call: null, reason: 'test' }, { jobId: 'dl-1' });
    await deadLetters.obliterate({ force: true });
    await deadLetters.close();
    assert.equal(await inbound.length(), 1);
    assert.equal(
      (await redis.get(`${inboundSeenPrefix(prefix)}${callHash(sampleCall('apart-1').key)}`))?.split(' ')[0],
      first.id,
    );
    assert.equal((await acceptor.accept(sampleCall('apart-1'))).duplicate, true);
  });

  test('after the deduplication window the same call is accepted again', async () => {
    const { inbound, acceptor } = await store('log-window', 100);
    const first = await acceptor.accept(sampleCall('window-1'));
    assert.equal((await acceptor.accept(sampleCall('window-1'))).duplicate, true);
    await new Promise((r) => setTimeout(r, 150));
    const later = await acceptor.accept(sampleCall('window-1'));
    assert.equal(later.duplicate, false);
    assert.notEqual(later.id, first.id);
    assert.equal(await inbound.length(), 2);
  });

  test('a reused id (the spool drainer) is kept; Redis away rejects the whole batch as unavailable', async () => {
    const { prefix, inbound, acceptor } = await store('log-id', 60_000);
    assert.deepEqual(await acceptor.accept(sampleCall('reuse-1'), { jobId: 'spooled-id-1' }), {
      id: 'spooled-id-1',
      duplicate: false,
    });
    assert.equal((await inbound.find('spooled-id-1'))?.call?.callId, 'reuse-1');

    const away = new Redis('redis://127.0.0.1:1', {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      lazyConnect: true,
      retryStrategy: () => 200,
    });
    away.on('error', () => undefined);
    const down = new InboundAcceptor(new InboundLog(away, prefix), { dedupeWindowMs: 60_000, timeoutMs: 500 });
    const outcomes = await Promise.allSettled([down.accept(sampleCall('down-1')), down.accept(sampleCall('down-2'))]);
    for (const o of outcomes) {
      assert.equal(o.status, 'rejected');
      assert.equal((o as PromiseRejectedResult).reason.name, 'QueueUnavailableError');
    }
    away.disconnect();
  });

  describe('a call sent again with other content (an update)', () => {
    const withSummary = (callId: string, summary: string) =>
      sampleCall(callId, { patch: (p) => (p.assist.summary.content = summary) });

    test('is stored as an update with a new id; the same content again, of either revision, stays a duplicate of the first id', async () => {
      const { prefix, redis, inbound, acceptor } = await store('log-update', 60_000);
      const first = await acceptor.accept(sampleCall('upd-1', { patch: (p) => delete p.assist.summary }));
      assert.deepEqual(first, { id: first.id, duplicate: false });
      const update = await acceptor.accept(withSummary('upd-1', 'Summary finished later.'));
      assert.deepEqual(update, { id: update.id, duplicate: false, update: true });
      assert.notEqual(update.id, first.id);
      assert.ok(update.id.startsWith(`${callHash(sampleCall('upd-1').key)}-`));
      assert.deepEqual(await acceptor.accept(withSummary('upd-1', 'Summary finished later.')), {
        id: first.id,
        duplicate: true,
      });
      assert.deepEqual(await acceptor.accept(sampleCall('upd-1', { patch: (p) => delete p.assist.summary })), {
        id: first.id,
        duplicate: true,
      });
      const third = await acceptor.accept(withSummary('upd-1', 'Summary corrected once more.'));
      assert.equal(third.update, true);

      const entries = await inbound.entries();
      assert.deepEqual(
        entries.map((e) => e.id),
        [first.id, update.id, third.id],
      );
      assert.deepEqual(
        entries.map((e) => e.call?.revision?.update),
        [false, true, true],
      );
      assert.deepEqual(
        entries.map((e) => e.call?.revision?.stamp),
        entries.map((e) => e.entryId),
        'each revision is stamped with its entry id',
      );
      assert.equal(new Set(entries.map((e) => e.call?.revision?.content)).size, 3);
      assert.equal(entries[1]!.call?.summary?.content, 'Summary finished later.');
      const key = `${inboundSeenPrefix(prefix)}${callHash(sampleCall('upd-1').key)}`;
      assert.equal((await redis.get(key))?.split(' ').length, 4, 'the key holds the first id and three content hashes');
    });

    test('what is not content: the time it was received, and fields callsync does not read (kept in `raw`) — a duplicate', async () => {
      const { inbound, acceptor } = await store('log-notcontent', 60_000);
      const first = await acceptor.accept(sampleCall('nc-1'));
      const later = normalizeWebhook(
        webhookPayload('nc-1', (p) => (p.deliveryAttempt = 2)),
        { agentId: 'agent-1', receivedAt: new Date('2026-04-08T11:00:00Z') },
      );
      assert.deepEqual(await acceptor.accept(later), { id: first.id, duplicate: true });
      // The extra `channel` object is content, whatever order its keys come in.
      const a = await acceptor.accept(
        sampleCall('nc-2', { patch: (p) => (p.channel = { id: 'ch-1', name: 'Sales', tags: { b: 1, a: 2 } }) }),
      );
      const b = await acceptor.accept(
        sampleCall('nc-2', { patch: (p) => (p.channel = { tags: { a: 2, b: 1 }, name: 'Sales', id: 'ch-1' }) }),
      );
      assert.deepEqual(b, { id: a.id, duplicate: true });
      const c = await acceptor.accept(
        sampleCall('nc-2', { patch: (p) => (p.channel = { id: 'ch-1', name: 'Support' }) }),
      );
      assert.equal(c.update, true);
      assert.equal(await inbound.length(), 3);
    });

    test('a resend of any of the last MAX_REMEMBERED_REVISIONS revisions is a duplicate; of an older one, an update', async () => {
      const { acceptor } = await store('log-update-many', 60_000);
      const first = await acceptor.accept(withSummary('upd-many', 'revision 0'));
      // Many revisions, a batch of them at a time (as a burst of requests in one turn of the loop).
      for (let from = 1; from <= MAX_REMEMBERED_REVISIONS; from += 250)
        await Promise.all(
          Array.from({ length: Math.min(250, MAX_REMEMBERED_REVISIONS + 1 - from) }, (_, i) =>
            acceptor.accept(withSummary('upd-many', `revision ${from + i}`)),
          ),
        );
      // Revision 0 is the one forgotten (1,001 revisions); revision 1 and the newest are remembered.
      for (const i of [1, 40, MAX_REMEMBERED_REVISIONS])
        assert.deepEqual(await acceptor.accept(withSummary('upd-many', `revision ${i}`)), {
          id: first.id,
          duplicate: true,
        });
      assert.equal((await acceptor.accept(withSummary('upd-many', 'revision 0'))).update, true);
    });

    test('two revisions in one batch behave as in two: the second is an update, repeats of each are duplicates', async () => {
      const { inbound, acceptor } = await store('log-update-batch', 60_000);
      const v1 = sampleCall('ub-1', { patch: (p) => delete p.assist.summary });
      const v2 = withSummary('ub-1', 'Summary finished later.');
      // One turn: one script call.
      const results = await Promise.all([v1, v2, v1, v2].map((c) => acceptor.accept(c)));
      assert.deepEqual(results.slice(1), [
        { id: results[1]!.id, duplicate: false, update: true },
        { id: results[0]!.id, duplicate: true },
        { id: results[0]!.id, duplicate: true },
      ]);
      const entries = await inbound.entries();
      assert.deepEqual(
        entries.map((e) => [e.id, e.call?.revision?.update]),
        [
          [results[0]!.id, false],
          [results[1]!.id, true],
        ],
      );
    });

    test('an update keeps the window of the first delivery', async () => {
      const { prefix, redis, acceptor } = await store('log-update-window', 600);
      await acceptor.accept(sampleCall('uw-1', { patch: (p) => delete p.assist.summary }));
      await new Promise((r) => setTimeout(r, 300));
      assert.equal((await acceptor.accept(withSummary('uw-1', 'Later.'))).update, true);
      const left = await redis.pttl(`${inboundSeenPrefix(prefix)}${callHash(sampleCall('uw-1').key)}`);
      assert.ok(left > 0 && left <= 310, `the window was not restarted: ${left} ms left`);
      await new Promise((r) => setTimeout(r, 400));
      const fresh = await acceptor.accept(withSummary('uw-1', 'Later.'));
      assert.deepEqual(fresh, { id: fresh.id, duplicate: false }, 'after the window: a first delivery again');
    });

    test('a dedupe key written by the previous version (the id alone): a changed call is an update, an identical one too (content unknown), and after that duplicates', async () => {
      const { prefix, redis, inbound, acceptor } = await store('log-compat', 60_000);
      const call = sampleCall('compat-1');
      const key = `${inboundSeenPrefix(prefix)}${callHash(call.key)}`;
      await redis.set(key, 'old-first-id', 'PX', 50_000);
      const again = await acceptor.accept(call);
      assert.deepEqual(
        again,
        { id: again.id, duplicate: false, update: true },
        'stored: an old key cannot tell, and a dropped correction would be lost',
      );
      assert.deepEqual(
        await acceptor.accept(call),
        { id: 'old-first-id', duplicate: true },
        'from then on the key knows the content',
      );
      assert.equal((await acceptor.accept(withSummary('compat-1', 'Changed.'))).update, true);
      assert.ok((await redis.pttl(key)) <= 50_000, 'the old window is kept');
      assert.equal((await redis.get(key))?.split(' ')[0], 'old-first-id');
      assert.equal(await inbound.length(), 2);
    });

    test('an item appended without a content hash is deduplicated by the call alone, as before', async () => {
      const { inbound } = await store('log-nocontent', 60_000);
      const text = JSON.stringify(sampleCall('nh-1'));
      assert.deepEqual(
        await inbound.append(
          [
            { dedupeId: 'nh', id: 'nh-a', call: text },
            { dedupeId: 'nh', id: 'nh-b', call: text.replace('agent-1', 'agent-9') },
          ],
          60_000,
        ),
        [
          { stored: true, update: false },
          { stored: false, firstId: 'nh-a' },
        ],
      );
    });
  });

  test('two take-overs racing for one entry: the loser leaves it pending with the winner', async () => {
    const prefix = fresh('log-race');
    const a = new InboundShard(connect(), prefix);
    const bConn = connect();
    const b = new InboundShard(bConn, prefix);
    await a.ensureGroup();
    await a.append([{ dedupeId: 'h1', id: 'race-1', call: JSON.stringify(sampleCall('race-1')) }], 60_000);
    await a.read('died', 10, 10);
    await new Promise((r) => setTimeout(r, 150));
    // A claims the entry between B's look at the pending list and B's XCLAIM.
    const xclaim = bConn.xclaim.bind(bConn);
    let raced = false;
    (bConn as unknown as { xclaim: unknown }).xclaim = async (...args: unknown[]) => {
      if (!raced) {
        raced = true;
        assert.equal((await a.claimStale('A', 100, 10)).length, 1);
      }
      return (xclaim as (...x: unknown[]) => Promise<unknown>)(...args);
    };
    assert.deepEqual(await b.claimStale('B', 100, 10), []);
    assert.equal(await a.pending(), 1, 'still pending (with A), not acknowledged by B');
    // A dies too: the entry is taken over again later.
    await new Promise((r) => setTimeout(r, 150));
    const again = await b.claimStale('C', 100, 10);
    assert.equal(again[0]?.entry.id, 'race-1');
    assert.equal(again[0]?.deliveries, 2);
  });

  describe('fan-out', () => {
    const setup = async (name: string, options: { claimIdleMs?: number; maxDeliveries?: number } = {}) => {
      const prefix = fresh(name);
      const producer = connect(true);
      const worker = connect();
      const blocking = connect();
      await new Promise((r) => producer.once('ready', r));
      const inbound = new InboundLog(producer, prefix);
      const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 2000 });
      const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), { connection: worker, prefix });
      const crm = new Queue<SinkDeliverJob>(sinkQueueName('crm'), { connection: worker, prefix });
      const deadLetters = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: worker, prefix });
      const start = () =>
        startLogFanOut({
          inbound: new InboundLog(worker, prefix),
          blocking,
          deadLetters,
          // Every call to the archive; calls of agent-crm also to the CRM.
          routes: [
            { when: [{}], to: ['archive'] },
            { when: [{ agent: ['agent-crm'] }], to: ['crm'] },
          ],
          sinkQueues: new Map([
            ['archive', archive],
            ['crm', crm],
          ]),
          // The CRM does not read the original payload: its jobs go without it.
          withoutRaw: new Set(['crm']),
          log,
          blockMs: 200,
          ...options,
        });
      const close = async () => Promise.all([archive.close(), crm.close(), deadLetters.close()]);
      return { prefix, producer, worker, inbound, acceptor, archive, crm, deadLetters, start, close };
    };

    test('each entry becomes one job per routed sink (id = call hash, original payload only where read), then leaves the log', async () => {
      const s = await setup('fan-basic');
      const fanOut = s.start();
      const calls = Array.from({ length: 120 }, (_, i) =>
        sampleCall(`fan-${i}`, { agentId: i % 3 === 0 ? 'agent-crm' : 'agent-1' }),
      );
      await Promise.all(calls.map((c) => s.acceptor.accept(c)));
      await waitFor(async () => (await s.inbound.length()) === 0, { timeoutMs: 10_000, what: 'the log to drain' });
      await fanOut.close();
      const archived = await s.archive.getJobs(['waiting'], 0, -1, true);
      const crm = await s.crm.getJobs(['waiting'], 0, -1, true);
      assert.equal(archived.length, 120);
      assert.equal(crm.length, 40);
      assert.deepEqual(
        archived.map((j) => j.data.call.callId),
        calls.map((c) => c.callId),
        'sink jobs in the order the calls were accepted',
      );
      for (const j of [...archived, ...crm]) assert.equal(j.id, callHash(j.data.call.key));
      assert.ok(
        archived.every((j) => j.data.call.raw !== null && typeof j.data.call.raw === 'object'),
        'the archive gets the original payload',
      );
      assert.ok(
        crm.every((j) => j.data.call.raw === null),
        'sinks that do not read it get the call without it',
      );
      assert.equal(await s.inbound.pending(), 0);
      assert.equal(await s.deadLetters.count(), 0);
      // The consumer left the group on a clean stop.
      const consumers = (await s.worker.xinfo('CONSUMERS', s.inbound.key, FANOUT_GROUP)) as unknown[];
      assert.equal(consumers.length, 0);
      await s.close();
    });

    test('an update becomes sink jobs of its own (id = call hash + content hash); fanning either revision out again adds nothing', async () => {
      const s = await setup('fan-update');
      const v1 = sampleCall('fu-1', { agentId: 'agent-crm', patch: (p) => delete p.assist.summary });
      const v2 = sampleCall('fu-1', { agentId: 'agent-crm', patch: (p) => (p.assist.summary.content = 'Later.') });
      await s.acceptor.accept(v1);
      assert.equal((await s.acceptor.accept(v2)).update, true);
      const entries = await s.inbound.entries();
      const fanOut = s.start();
      await waitFor(async () => (await s.inbound.length()) === 0, { timeoutMs: 10_000, what: 'the log to drain' });
      await fanOut.close();
      const base = callHash(v1.key);
      for (const q of [s.archive, s.crm]) {
        const jobs = await q.getJobs(['waiting'], 0, -1, true);
        assert.deepEqual(
          jobs.map((j) => j.id),
          [base, `${base}-${contentHash(v2)}`],
          q.name,
        );
        assert.deepEqual(
          jobs.map((j) => j.data.call.revision?.stamp),
          entries.map((e) => e.entryId),
          `${q.name}: each job carries its revision`,
        );
        assert.equal(jobs[1]!.data.call.summary?.content, 'Later.');
      }
      // Both revisions fanned out again (here through the inbound dead-letter path, with the
      // revision the log gave them): no new jobs.
      const fan = createFanOutProcessor({
        routes: [
          { when: [{}], to: ['archive'] },
          { when: [{ agent: ['agent-crm'] }], to: ['crm'] },
        ],
        sinkQueues: new Map([
          ['archive', s.archive],
          ['crm', s.crm],
        ]),
      });
      for (const e of entries) await fan({ data: { kind: 'call.received', call: e.call } } as Job<CallReceivedJob>);
      for (const q of [s.archive, s.crm]) assert.equal(await q.count(), 2, `${q.name}: still one job per revision`);
      await s.close();
    });

    test('a log that vanished under a running fan-out (Redis restarted without persistence) is recreated, and new calls flow', async () => {
      const s = await setup('fan-vanished');
      const fanOut = s.start();
      await s.acceptor.accept(sampleCall('before-1'));
      await waitFor(async () => (await s.inbound.length()) === 0, {
        timeoutMs: 10_000,
        what: 'the first call fanned out',
      });
      // What a Redis that lost its data looks like to the fan-out: no stream, no group.
      await s.producer.del(s.inbound.key);
      await s.acceptor.accept(sampleCall('after-1'));
      await waitFor(
        async () => (await s.archive.getJobs(['waiting'], 0, -1)).some((j) => j.data.call.callId === 'after-1'),
        { timeoutMs: 10_000, what: 'the call after the loss fanned out' },
      );
      await waitFor(async () => (await s.inbound.length()) === 0, { timeoutMs: 10_000, what: 'the log drained again' });
      await fanOut.close();
      await s.close();
    });

    test('entries a dead fan-out read and never acknowledged are taken over, without duplicate sink jobs', async () => {
      const s = await setup('fan-takeover', { claimIdleMs: 300 });
      const calls = Array.from({ length: 30 }, (_, i) => sampleCall(`take-${i}`));
      await Promise.all(calls.map((c) => s.acceptor.accept(c)));
      // A fan-out that reads ten entries, adds the sink job of the first five, then dies.
      await s.inbound.shards[0]!.ensureGroup();
      const taken = await s.inbound.shards[0]!.read('dead-consumer', 10, 100);
      assert.equal(taken.length, 10);
      for (const e of taken.slice(0, 5))
        await s.archive.add(
          'sink.deliver',
          { kind: 'sink.deliver', sink: 'archive', call: e.call! },
          { jobId: callHash(e.call!.key) },
        );
      const fanOut = s.start();
      await waitFor(async () => (await s.inbound.length()) === 0, {
        timeoutMs: 10_000,
        what: 'the log to drain, taken-over entries included',
      });
      await fanOut.close();
      const jobs = await s.archive.getJobs(['waiting'], 0, -1);
      assert.equal(jobs.length, 30, 'one job per call, none twice');
      assert.deepEqual(new Set(jobs.map((j) => j.data.call.callId)), new Set(calls.map((c) => c.callId)));
      assert.equal(await s.inbound.pending(), 0);
      await s.close();
    });

    test('an unreadable entry, or one redelivered too often, goes to the inbound dead letters; the rest flows', async () => {
      const s = await setup('fan-dead', { claimIdleMs: 200, maxDeliveries: 2 });
      await s.acceptor.accept(sampleCall('ok-1'));
      await s.producer.xadd(s.inbound.key, '*', 'id', 'garbage-1', 'call', '{"not": "a call"');
      await s.acceptor.accept(sampleCall('ok-2'));
      await s.inbound.shards[0]!.ensureGroup();
      // A poison entry: read and abandoned three times (delivery count 3 > maxDeliveries 2).
      await s.acceptor.accept(sampleCall('poison-1'));
      const [poison] = (await s.inbound.entries()).slice(-1);
      for (let i = 0; i < 3; i++) {
        if (i === 0) await s.inbound.shards[0]!.read('crashing', 10, 100);
        else await s.worker.xclaim(s.inbound.key, FANOUT_GROUP, 'crashing', 0, poison!.entryId);
      }
      // The other entries were read by "crashing" once: they are taken over and fanned out.
      const fanOut = s.start();
      await waitFor(async () => (await s.inbound.length()) === 0, { timeoutMs: 10_000, what: 'the log to drain' });
      await fanOut.close();
      const archived = (await s.archive.getJobs(['waiting'], 0, -1)).map((j) => j.data.call.callId).sort();
      assert.deepEqual(archived, ['ok-1', 'ok-2']);
      const dead = await s.deadLetters.getJobs(['waiting'], 0, -1);
      const byId = new Map(dead.map((j) => [j.id, j.data]));
      assert.equal(byId.size, 2);
      assert.equal(byId.get('garbage-1')?.call, null);
      assert.match(byId.get('garbage-1')?.reason ?? '', /not a readable call record/);
      assert.equal(byId.get(poison!.id)?.call?.callId, 'poison-1');
      assert.match(byId.get(poison!.id)?.reason ?? '', /delivered to the fan-out 3 times/);
      await s.close();
    });

    test('a poison entry (a call too deep to serialize as a job) goes to the inbound dead letters as its stored text; the calls around it flow', async () => {
      const s = await setup('fan-poison');
      // Calls before, the poison written straight into the log (as an older ingress, or one whose
      // edge limits were bypassed, would have stored it), calls after: all in one batch.
      const before = Array.from({ length: 5 }, (_, i) => sampleCall(`pre-${i}`));
      const afterIt = Array.from({ length: 5 }, (_, i) =>
        sampleCall(`post-${i}`, { agentId: i % 2 ? 'agent-crm' : 'agent-1' }),
      );
      await Promise.all(before.map((c) => s.acceptor.accept(c)));
      const body = deepWebhookBody('poison-deep');
      const poisonCall = normalizeWebhook(JSON.parse(body), {
        agentId: 'agent-crm',
        receivedAt: new Date('2026-04-08T10:03:00Z'),
      });
      const text = serializeCall(poisonCall, body);
      await s.producer.xadd(s.inbound.key, '*', 'id', 'poison-entry-1', 'call', text);
      await Promise.all(afterIt.map((c) => s.acceptor.accept(c)));
      const fanOut = s.start();
      try {
        await waitFor(async () => (await s.archive.getJobs(['waiting'], 0, -1)).length === 10, {
          timeoutMs: 15_000,
          what: 'the calls after the poison fanned out',
        });
        await waitFor(async () => (await s.inbound.length()) === 0, {
          timeoutMs: 10_000,
          what: 'the log to drain, the poison included',
        });
      } finally {
        await fanOut.close();
      }
      const archived = (await s.archive.getJobs(['waiting'], 0, -1, true)).map((j) => j.data.call.callId);
      assert.deepEqual(
        archived,
        [...before, ...afterIt].map((c) => c.callId),
        'every other call, in log order',
      );
      // The CRM's jobs go without the original payload: the poison's could be stored, and it was.
      assert.deepEqual(
        (await s.crm.getJobs(['waiting'], 0, -1, true)).map((j) => j.data.call.callId),
        ['poison-deep', 'post-1', 'post-3'],
      );
      const dead = await s.deadLetters.getJobs(['waiting'], 0, -1);
      assert.equal(dead.length, 1);
      const letter = dead[0]!;
      assert.equal(letter.id, 'poison-entry-1', 'the id its 202 answered');
      assert.equal(letter.data.call, null);
      assert.equal(letter.data.text, text, 'the text stored in the log, whole');
      assert.match(letter.data.reason ?? '', /Maximum call stack size exceeded/);
      assert.match(letter.data.reason ?? '', /poison-deep/, 'the reason names the call');
      assert.equal(await s.inbound.pending(), 0);
      await s.close();
    });

    test('an unreadable entry with an id BullMQ refuses as a job id (an integer, a colon) is dead-lettered under its log id, with its text; the rest flows', async () => {
      const s = await setup('fan-bad-id');
      await s.acceptor.accept(sampleCall('id-ok-1'));
      const first = await s.producer.xadd(s.inbound.key, '*', 'id', '42', 'call', 'not json at all');
      const second = await s.producer.xadd(s.inbound.key, '*', 'id', 'a:b', 'call', '{"call":{"id":"half');
      await s.acceptor.accept(sampleCall('id-ok-2'));
      const fanOut = s.start();
      try {
        await waitFor(async () => (await s.inbound.length()) === 0, { timeoutMs: 10_000, what: 'the log to drain' });
      } finally {
        await fanOut.close();
      }
      assert.deepEqual(
        (await s.archive.getJobs(['waiting'], 0, -1, true)).map((j) => j.data.call.callId),
        ['id-ok-1', 'id-ok-2'],
      );
      const dead = new Map((await s.deadLetters.getJobs(['waiting'], 0, -1)).map((j) => [j.id, j.data]));
      assert.deepEqual([...dead.keys()].sort(), [`log-${first}`, `log-${second}`].sort());
      assert.equal(dead.get(`log-${first}`)?.text, 'not json at all', 'what was stored is kept');
      assert.equal(dead.get(`log-${second}`)?.text, '{"call":{"id":"half');
      assert.match(dead.get(`log-${first}`)?.reason ?? '', /not a readable call record/);
      await s.close();
    });
  });
});

describe('the queue `inbound`', () => {
  test('its worker fans out what is there (a retried dead letter, or a call queued by a version before the log) and dead-letters what it cannot read', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-inbound-queue-'));
    const cs = await startTestCallsync({ ARCHIVE_DIR: dir, CALLSYNC_ROLE: 'worker' });
    const queue = new Queue<CallReceivedJob>(INBOUND_QUEUE, { connection: cs.redis.worker, prefix: cs.prefix });
    try {
      const call = sampleCall('queued-before-1');
      await queue.add('call.received', { kind: 'call.received', call }, { jobId: 'old-job-1' });
      await queue.add(
        'call.received',
        { kind: 'call.received', call: null, reason: 'inbound entry is not a readable call record' },
        { jobId: 'old-job-2' },
      );
      const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), {
        connection: cs.redis.worker,
        prefix: cs.prefix,
      });
      await waitFor(async () => (await archive.getJob(callHash(call.key)))?.finishedOn, {
        timeoutMs: 10_000,
        what: 'the archive job of the queued call',
      });
      await archive.close();
      const files = await readdir(dir, { recursive: true });
      assert.ok(
        files.some((f) => f.endsWith(`${callKeySegment(call)}.json`)),
        `archived: ${files.join(', ')}`,
      );
      const failed = await waitFor(async () => (await queue.getFailed()).find((j) => j.id === 'old-job-2'), {
        what: 'the unreadable one in the dead letters',
      });
      assert.match(failed.failedReason, /not a readable call record/);
      assert.equal(failed.attemptsMade, 1, 'a permanent failure is not retried');
    } finally {
      await queue.close();
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
