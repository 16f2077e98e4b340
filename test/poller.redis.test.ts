// The channel poller against the loopback fake API and real Redis: pages stored in the inbound log
// exactly once,
// cursor resumed after a crash with no gap, one active poller per channel, failures handled. On the
// shared Redis, or with TEST_REDIS_CLUSTER=1 on a Redis Cluster with spread keys (npm run test:cluster):
// each channel's lock and cursor in a slot of its own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import {
  type RedisClient,
  type RedisKeys,
  INBOUND_QUEUE,
  POLL_DEAD_LETTER_QUEUE,
  sinkQueueName,
  type CallReceivedJob,
  type PollDeadLetterJob,
  type SinkDeliverJob,
} from '../queues/index.js';
import { InboundLog } from '../queues/inbound.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { callHash } from '../src/model/call.js';
import { createTelephonyClient, type TelephonyClientOptions } from '../src/telephony/client.js';
import type { PollerSettings } from '../src/config/index.js';
import { cursorKey, lockKey } from '../queues/poller-state.js';
import { startPoller, type PollerEvents, type RunningPoller } from '../workers/poller.js';
import { combineEvents, pollerMetrics } from '../workers/metric-events.js';
import { metrics } from '../src/metrics.js';
import { assertSpread, memoryLog, startTestCallsync } from './support/callsync.js';
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';
import { testRedis, waitFor, type TestRedis } from './support/redis.js';
import { archivedRecords } from './support/s3.js';
import { pollerRunner } from './support/poller.js';

const runner = pollerRunner;

/** Redis connections, the inbound log and an acceptor on one test prefix (in the key layout of the file's Redis). */
class Harness {
  readonly keys: RedisKeys;
  readonly producer: RedisClient;
  readonly inbound: InboundLog;
  readonly acceptor: InboundAcceptor;
  private readonly extra: RedisClient[] = [];
  private readonly pollers: RunningPoller[] = [];
  readonly logs = memoryLog('debug');

  /** A harness on `prefix`, or on a new prefix named `name`. */
  static async open(options: { prefix?: string; name?: string }): Promise<Harness> {
    const target = await testRedis();
    return new Harness(target, options.prefix ?? (await target.prefix(options.name ?? 'poll')));
  }

  private constructor(
    readonly target: TestRedis,
    readonly prefix: string,
  ) {
    this.keys = target.keys(prefix);
    this.producer = target.connect('producer');
    this.inbound = new InboundLog(this.producer, this.keys);
    this.acceptor = new InboundAcceptor(this.inbound, { dedupeWindowMs: 3_600_000, timeoutMs: 2000 });
  }

  /** A poller with connections and a client of its own, as a separate process would have. */
  poller(
    api: FakeTelephony,
    settings: Partial<PollerSettings> = {},
    options: { events?: PollerEvents; client?: Partial<TelephonyClientOptions>; instanceId?: string } = {},
  ): RunningPoller {
    const redis = this.target.connect('producer');
    const workerConnection = this.target.connect('worker');
    this.extra.push(redis, workerConnection);
    const running = startPoller({
      settings: {
        channelIds: ['ch1'],
        intervalMs: 200,
        pageSize: 50,
        maxBackoffMs: 1000,
        lockTtlMs: 1000,
        ...settings,
      },
      client: createTelephonyClient({
        baseUrl: api.url,
        auth: api.basicAuth,
        retryMinDelayMs: 20,
        retryMaxDelayMs: 100,
        ...options.client,
      }),
      acceptor: new InboundAcceptor(new InboundLog(redis, this.keys), { dedupeWindowMs: 3_600_000, timeoutMs: 2000 }),
      redis,
      workerConnection,
      prefix: this.keys,
      log: this.logs.log,
      runner,
      events: options.events,
      instanceId: options.instanceId,
    });
    this.pollers.push(running);
    return running;
  }

  /** Call keys of every entry in the inbound log (all that was queued while no fan-out runs). */
  async inboundKeys(): Promise<string[]> {
    const entries = await this.inbound.entries();
    // An unreadable entry shows up as such (and fails the comparisons), instead of being skipped.
    return entries.map((e) => e.call?.key ?? `<unreadable entry ${e.entryId}: ${e.text}>`);
  }

  async close(): Promise<void> {
    for (const p of this.pollers) await p.close();
    await Promise.all([this.producer, ...this.extra].map((r) => r.quit().catch(() => undefined)));
    await this.target.cleanup(this.prefix);
  }
}

function events(count: number, from = 0, channelId = 'ch1'): Record<string, unknown>[] {
  return Array.from({ length: count }, (_, i) => channelEvent({ eventId: `ev-${from + i}`, channelId }));
}

const allKeys = (count: number, channelId = 'ch1') =>
  Array.from({ length: count }, (_, i) => `channel:${channelId}:ev-${i}`).sort();

describe('poller: 1,000 events through the whole pipeline', () => {
  let api: FakeTelephony;
  let dir: string;
  before(async () => {
    api = await FakeTelephony.start({ maxPageSize: 100 });
    dir = await mkdtemp(join(tmpdir(), 'poller-archive-'));
  });
  after(async () => {
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('queues and archives every event once, reading full pages back to back', async () => {
    api.addEvents('ch1', events(1000));
    const configFile = join(dir, 'callsync.yaml');
    await writeFile(
      configFile,
      [
        'sinks:',
        '  archive:',
        '    type: archive',
        `    dir: ${join(dir, 'archive')}`,
        'routes:',
        '  - name: channel-calls',
        '    when: { source: channel }',
        '    to: archive',
        '',
      ].join('\n'),
    );
    const completed = new Map<string, string[]>();
    const fanned = { entries: 0, jobs: 0, deadLetters: 0 };
    const cs = await startTestCallsync(
      { CALLSYNC_CONFIG: configFile, CALLSYNC_ROLE: 'worker', WORKER_CONCURRENCY: '16' },
      {
        runnerEvents: {
          completed(queue, job) {
            completed.set(queue, [...(completed.get(queue) ?? []), String(job.id)]);
          },
        },
        fanOutEvents: {
          fannedOut(entries, jobs) {
            fanned.entries += entries;
            fanned.jobs += jobs;
          },
          deadLettered() {
            fanned.deadLetters++;
          },
        },
      },
    );
    const h = await Harness.open({ prefix: cs.prefix });
    try {
      // Full pages are read at once, not one per POLL_INTERVAL_MS: with an interval of ten minutes,
      // the ten pages arrive within the wait only if the poller goes on after each full page.
      h.poller(api, { pageSize: 100, intervalMs: 600_000 });
      await waitFor(() => (completed.get(sinkQueueName('archive'))?.length ?? 0) >= 1000, {
        timeoutMs: 120_000,
        what: '1000 archived calls',
      });
      await new Promise((r) => setTimeout(r, 500));
      const archived = completed.get(sinkQueueName('archive')) ?? [];
      assert.equal(archived.length, 1000, 'each event archived once');
      assert.equal(new Set(archived).size, 1000);
      // Each event fanned out once: the log is empty (every entry acknowledged and deleted), the
      // fan-out handled 1000 entries into 1000 sink jobs, and each event has exactly one archive job.
      assert.equal(await h.inbound.length(), 0, 'every log entry fanned out');
      assert.equal(await h.inbound.pending(), 0, 'no log entry left unacknowledged');
      assert.deepEqual(fanned, { entries: 1000, jobs: 1000, deadLetters: 0 }, 'each event fanned out once');
      assert.equal(completed.get(INBOUND_QUEUE)?.length ?? 0, 0, 'no call went through the dead-letter queue');
      const archive = new Queue<SinkDeliverJob>(sinkQueueName('archive'), {
        connection: h.producer,
        prefix: h.keys.queuePrefix(sinkQueueName('archive')),
      });
      const inbound = new Queue<CallReceivedJob>(INBOUND_QUEUE, {
        connection: h.producer,
        prefix: h.keys.queuePrefix(INBOUND_QUEUE),
      });
      try {
        const sinkJobs = await archive.getJobs([
          'waiting',
          'active',
          'completed',
          'failed',
          'delayed',
          'prioritized',
          'waiting-children',
        ]);
        assert.equal(sinkJobs.length, 1000, 'one archive job per event');
        assert.deepEqual(sinkJobs.map((j) => j.data.call.key).sort(), allKeys(1000));
        assert.deepEqual(
          new Set(sinkJobs.map((j) => j.id)),
          new Set(allKeys(1000).map(callHash)),
          'archive job ids are the call hashes',
        );
        const dead = await inbound.getJobCounts();
        assert.equal(
          Object.values(dead).reduce((a, b) => a + b, 0),
          0,
          `no inbound dead letters: ${JSON.stringify(dead)}`,
        );
      } finally {
        await Promise.all([archive.close(), inbound.close()]);
      }
      const files = archivedRecords(await readdir(join(dir, 'archive'), { recursive: true }));
      assert.equal(files.length, 1000);
      const served = api.inboxRequests('ch1').filter((r) => (r.eventsServed ?? 0) > 0);
      assert.equal(served.length, 10, 'ten pages of 100');
      // On the cluster: the inbound shards the poller appended to are on more than one master.
      await assertSpread(cs);
    } finally {
      await h.close();
      await cs.stop();
    }
  });
});

describe('poller: guarantees', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start();
  });
  after(() => api.close());

  it('resumes from the stored position after a crash, with no gap, and takes over within the lock TTL', async () => {
    const h = await Harness.open({ name: 'poll-crash' });
    const channel = 'crash';
    api.addEvents(channel, events(1000, 0, channel));
    // Slow pages, so the crash lands mid-run.
    api.inject({ on: 'events', channelId: channel, delayMs: 40, times: Infinity });
    const child = spawn(process.execPath, ['--import', 'tsx', 'test/support/poller-process.ts'], {
      env: {
        ...process.env,
        ...h.target.env(),
        POLL_TEST_PREFIX: h.prefix,
        TELEPHONY_API_URL: api.url,
        POLL_CHANNEL_IDS: channel,
        POLL_LOCK_TTL_MS: '1000',
        POLL_PAGE_SIZE: '50',
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await waitFor(async () => (await h.inbound.length()) >= 300, {
        timeoutMs: 20_000,
        what: 'the child to queue 300 events',
      });
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      const killedAt = Date.now();
      // Read where this layout keeps them: on the cluster the channel's own slot, so a child that
      // ignored the layout would fail here.
      const stored = await h.producer.get(cursorKey(h.keys, channel));
      assert.ok(stored, 'the child stored a position');
      assert.ok(await h.producer.get(lockKey(h.keys, channel)), 'the crashed child left its lock behind');
      const requestsBefore = api.inboxRequests(channel).length;

      let tookOverAt = 0;
      h.poller(
        api,
        { channelIds: [channel], lockTtlMs: 1000 },
        { events: { lock: (_c, held) => void (held && !tookOverAt && (tookOverAt = Date.now())) } },
      );
      await waitFor(() => tookOverAt > 0, { timeoutMs: 5000, what: 'takeover' });
      assert.ok(tookOverAt - killedAt <= 1000 + 334 + 500, `taken over after ${tookOverAt - killedAt} ms`);
      // The lock is taken just before the first request: wait for that request to arrive.
      const firstAfter = await waitFor(() => api.inboxRequests(channel)[requestsBefore], {
        timeoutMs: 5000,
        what: 'the first request after the takeover',
      });
      assert.equal(firstAfter.query.position, stored, 'resumed from the stored position');

      await waitFor(async () => new Set(await h.inboundKeys()).size >= 1000, {
        timeoutMs: 30_000,
        what: 'all 1000 events',
      });
      await new Promise((r) => setTimeout(r, 300));
      const keys = await h.inboundKeys();
      assert.equal(keys.length, 1000, 'no event queued twice (a page re-read after the crash is deduplicated)');
      assert.deepEqual(keys.sort(), allKeys(1000, channel), 'no gap');
    } finally {
      child.kill('SIGKILL');
      api.clearFaults();
      await h.close();
    }
  });

  it('two pollers at once: one polls, the other stands by and takes over on a clean stop; each event queued once', async () => {
    const h = await Harness.open({ name: 'poll-two' });
    const channel = 'two';
    api.addEvents(channel, events(1000, 0, channel));
    api.inject({ on: 'events', channelId: channel, delayMs: 10, times: Infinity });
    const holders = new Set<string>();
    let overlap = false;
    const track = (name: string): PollerEvents => ({
      lock: (_c, held) => {
        if (held) {
          if (holders.size > 0) overlap = true;
          holders.add(name);
        } else holders.delete(name);
      },
    });
    try {
      const a = h.poller(api, { channelIds: [channel] }, { events: track('a'), instanceId: 'a' });
      const b = h.poller(api, { channelIds: [channel] }, { events: track('b'), instanceId: 'b' });
      await waitFor(async () => (await h.inbound.length()) >= 400, { timeoutMs: 20_000, what: '400 events' });
      // Stop whichever polls: the other takes the channel over from the stored position.
      const [active, standby] = a.pollers[0]!.holdsLock ? [a, b] : [b, a];
      assert.equal(standby.pollers[0]!.state, 'standby');
      await active.close();
      await waitFor(async () => new Set(await h.inboundKeys()).size >= 1000, {
        timeoutMs: 30_000,
        what: 'all 1000 events',
      });
      await new Promise((r) => setTimeout(r, 300));
      const keys = await h.inboundKeys();
      assert.equal(keys.length, 1000);
      assert.deepEqual(keys.sort(), allKeys(1000, channel));
      assert.equal(overlap, false, 'never two lock holders at once');
      const nonEmpty = api
        .inboxRequests(channel)
        .filter((r) => (r.eventsServed ?? 0) > 0)
        .map((r) => r.query.position ?? '');
      // At most the page in flight at the handover is read again (the stopped poller abandons a read
      // it has not queued; its position was never stored), and its events are deduplicated above.
      assert.ok(
        nonEmpty.length - new Set(nonEmpty).size <= 1,
        `pages read twice: ${nonEmpty.length - new Set(nonEmpty).size}`,
      );
    } finally {
      api.clearFaults();
      await h.close();
    }
  });
});

describe('poller: failures', () => {
  let api: FakeTelephony;
  before(async () => {
    api = await FakeTelephony.start();
  });
  after(() => api.close());

  it('waits for Retry-After, backs off over 5xx bursts, dead-letters malformed events and goes on', async () => {
    const h = await Harness.open({ name: 'poll-faults' });
    const channel = 'faults';
    const list: unknown[] = events(120, 0, channel);
    list.splice(10, 0, {
      eventId: 'bad-1',
      type: 'CALL',
      call: { direction: 'INCOMING', startedAt: '2025-01-01T00:00:00Z' },
    });
    list.splice(60, 0, 'not an object');
    list.splice(90, 0, {
      eventId: 'bad-3',
      type: 'CALL',
      call: { callSid: 'x', direction: 'SIDEWAYS', startedAt: '2025-01-01T00:00:00Z' },
    });
    list.push({ eventId: 'sms-1', type: 'SMS' });
    api.addEvents(channel, list);
    api.inject({ on: 'events', channelId: channel, status: 429, retryAfter: '1', times: 1 });
    api.inject({ on: 'events', channelId: channel, status: 500, times: 8 });
    const failures: string[] = [];
    try {
      h.poller(
        api,
        { channelIds: [channel], maxBackoffMs: 400 },
        { events: { failed: (_c, err) => failures.push(err.message) }, client: { retries: 2 } },
      );
      await waitFor(async () => new Set(await h.inboundKeys()).size >= 120, {
        timeoutMs: 30_000,
        what: '120 valid events',
      });
      assert.deepEqual((await h.inboundKeys()).sort(), allKeys(120, channel));
      assert.ok(
        failures.some((m) => /answered 500/.test(m)),
        'the 5xx burst outlasted the client retries and the poller backed off',
      );
      const status = api.inboxRequests(channel).map((r) => r.status);
      assert.equal(status.filter((s) => s === 429).length, 1);
      assert.equal(status.filter((s) => s === 500).length, 8);

      const deadLetters = new Queue<PollDeadLetterJob>(POLL_DEAD_LETTER_QUEUE, {
        connection: h.producer,
        prefix: h.keys.queuePrefix(POLL_DEAD_LETTER_QUEUE),
      });
      try {
        const failed = await waitFor(
          async () => {
            const jobs = await deadLetters.getFailed();
            return jobs.length === 3 ? jobs : null;
          },
          { what: 'three dead letters' },
        );
        const reasons = failed.map((j) => j.failedReason).sort();
        assert.match(reasons[0] ?? '', /channel faults: ChannelEvent \(no eventId\): expected an object, got string/);
        assert.match(reasons[1] ?? '', /ChannelEvent bad-1: call\.callSid: required field missing/);
        assert.match(reasons[2] ?? '', /ChannelEvent bad-3: call\.direction/);
        assert.ok(failed.every((j) => j.data.channelId === channel));
        assert.ok(
          failed.some((j) => j.data.event === 'not an object'),
          'the event is kept verbatim',
        );
      } finally {
        await deadLetters.close();
      }
    } finally {
      api.clearFaults();
      await h.close();
    }
  });

  it('401 stops the channel with a clear error and a metric, without hammering the API', async () => {
    const h = await Harness.open({ name: 'poll-401' });
    const channel = 'denied';
    api.addEvents(channel, events(5, 0, channel));
    api.inject({ on: 'events', channelId: channel, status: 401, detail: 'token revoked', times: Infinity });
    const stopped: string[] = [];
    try {
      // Two processes: whichever takes the lock first meets the 401 and stops; the other stands by.
      const events = () => ({
        events: combineEvents<PollerEvents>(pollerMetrics(), { stopped: (_c, r) => stopped.push(r) }),
      });
      const first = h.poller(api, { channelIds: [channel], lockTtlMs: 600 }, events());
      const second = h.poller(api, { channelIds: [channel], lockTtlMs: 600 }, events());
      await waitFor(() => stopped.length > 0, { what: 'the stop' });
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(
        api.inboxRequests(channel).length,
        1,
        'one request, not a retry loop, and the other process does not take over',
      );
      assert.equal(stopped.length, 1, 'one process stopped');
      assert.deepEqual([first.pollers[0]!.state, second.pollers[0]!.state].sort(), ['standby', 'stopped']);
      assert.match(stopped[0]!, /answered 401: Unauthorized: token revoked/);
      const gauge = await metrics.pollerStopped.get();
      assert.equal(gauge.values.find((v) => v.labels.channel === channel)?.value, 1);
      const line = h.logs.lines.find((l) => typeof l.msg === 'string' && l.msg.includes('rejected the credentials'));
      assert.ok(line, 'an error is logged');
      assert.equal(line.level, 50);
      assert.equal(await h.inbound.length(), 0);
    } finally {
      api.clearFaults();
      await h.close();
    }
  });

  it('queues an event with optional fields it cannot read (not a dead letter); counts and logs the fields', async () => {
    const h = await Harness.open({ name: 'poll-unread' });
    const channel = 'odd';
    const odd = (eventId: string) =>
      channelEvent({
        eventId,
        channelId: channel,
        createdAt: '',
        recordings: [{ downloadUrl: '/r/1', type: 'new_kind' }],
        call: { establishedAt: 'n/a', forwarding: 'none', from: { number: '+4921112345' } },
      });
    api.addEvents(channel, [odd('ev-0'), odd('ev-1')]);
    const deadLettered: string[] = [];
    try {
      h.poller(
        api,
        { channelIds: [channel] },
        {
          events: combineEvents<PollerEvents>(pollerMetrics(), { deadLettered: (_c, r) => deadLettered.push(r) }),
        },
      );
      await waitFor(async () => (await h.inbound.length()) === 2, { what: 'both odd events queued' });
      assert.deepEqual(deadLettered, []);
      const counted = await metrics.pollerFieldsUnread.get();
      const count = (field: string) => counted.values.find((v) => v.labels.field === field)?.value ?? 0;
      assert.ok(count('recordings.*.type') >= 2 && count('call.forwarding') >= 2 && count('call.from') >= 2);
      const warned = h.logs.lines.filter((l) => typeof l.msg === 'string' && l.msg.includes('cannot read'));
      assert.equal(warned.length, 1, 'each field logged once');
      assert.doesNotMatch(JSON.stringify(h.logs.lines), /4921112345/, 'no phone number in the logs');
    } finally {
      await h.close();
    }
  });

  it('an empty inbox is polled every POLL_INTERVAL_MS, and new events are picked up', async () => {
    const h = await Harness.open({ name: 'poll-empty' });
    const channel = 'quiet';
    api.addEvents(channel, []);
    try {
      h.poller(api, { channelIds: [channel], intervalMs: 300 });
      // Polled again and again, never more often than the interval (a loaded machine may poll later,
      // so only the lower bound of the gap is asserted).
      const polls = await waitFor(() => (api.inboxRequests(channel).length >= 3 ? api.inboxRequests(channel) : null), {
        timeoutMs: 10_000,
        what: 'three polls',
      });
      const gaps = polls.slice(1).map((r, i) => r.at - polls[i]!.at);
      assert.ok(
        gaps.every((g) => g >= 250),
        `gaps between polls of an empty inbox: ${gaps.join(', ')} ms (interval 300 ms)`,
      );
      assert.ok(await h.producer.get(cursorKey(h.keys, channel)), 'the position of an empty inbox is stored too');
      api.addEvents(channel, events(3, 0, channel));
      await waitFor(async () => (await h.inbound.length()) === 3, { timeoutMs: 2000, what: 'the new events' });
    } finally {
      await h.close();
    }
  });
});

describe('poller settings', () => {
  it('reads POLL_* with defaults and reports bad values, as a section of the one configuration', async () => {
    const { loadConfig } = await import('../src/config/index.js');
    const base = {
      ARCHIVE_DIR: '/tmp/callsync-poll-config',
      TELEPHONY_API_URL: 'https://api.example.com/v2',
      TELEPHONY_ACCESS_TOKEN: 'at',
    };
    assert.deepEqual(loadConfig({ ...base, POLL_CHANNEL_IDS: ' a, b ,,a' }).poll, {
      channelIds: ['a', 'b'],
      intervalMs: 5000,
      pageSize: 100,
      maxBackoffMs: 300_000,
      lockTtlMs: 30_000,
    });
    assert.throws(
      () => loadConfig({ ...base, POLL_INTERVAL_MS: 'soon', POLL_PAGE_SIZE: '0' }),
      /Invalid configuration:[\s\S]*POLL_INTERVAL_MS: expected a whole number >= 10[\s\S]*POLL_PAGE_SIZE/,
    );
  });
});
