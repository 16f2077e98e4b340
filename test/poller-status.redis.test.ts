// What an operator sees of the poller: each channel's state record in Redis (written by the poller
// on every change and after each poll) and `callsync poller [--json]` reading it with the lock
// holder and the cursor — against the loopback fake API and real Redis.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { type RedisClient, type RedisKeys } from '../queues/index.js';
import { InboundLog } from '../queues/inbound.js';
import { channelStateKey, type ChannelStateRecord } from '../queues/poller-state.js';
import { runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createTelephonyClient, type TelephonyClientOptions } from '../src/telephony/client.js';
import { startPoller, type RunningPoller } from '../workers/poller.js';
import { memoryLog } from './support/callsync.js';
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';
import { testRedis, waitFor, type TestRedis } from './support/redis.js';
import { pollerRunner } from './support/poller.js';

const runner = pollerRunner;

describe('callsync poller: the state of each polled channel', () => {
  let api: FakeTelephony;
  let target: TestRedis;
  let redis: RedisClient;
  before(async () => {
    api = await FakeTelephony.start();
    target = await testRedis();
    redis = target.connect('producer');
  });
  after(async () => {
    await redis.quit().catch(() => undefined);
    await api.close();
  });

  /** A poller of `channels` on a fresh prefix, as `callsync start --role poller` would run it. */
  async function setUp(
    name: string,
    channels: string[],
    client: Partial<TelephonyClientOptions> = {},
    wrap: (redis: RedisClient) => RedisClient = (r) => r,
  ) {
    const prefix = await target.prefix(`poll-status-${name}`);
    const keys = target.keys(prefix);
    const producer = target.connect('producer');
    const worker = target.connect('worker');
    const logs = memoryLog('debug');
    let running: RunningPoller | null = startPoller({
      settings: { channelIds: channels, intervalMs: 200, pageSize: 50, maxBackoffMs: 60_000, lockTtlMs: 1000 },
      client: createTelephonyClient({
        baseUrl: api.url,
        auth: api.basicAuth,
        retryMinDelayMs: 20,
        retryMaxDelayMs: 50,
        ...client,
      }),
      acceptor: new InboundAcceptor(new InboundLog(producer, keys), { dedupeWindowMs: 3_600_000, timeoutMs: 2000 }),
      redis: wrap(producer),
      workerConnection: worker,
      prefix: keys,
      log: logs.log,
      runner,
      instanceId: `test-host:4711:${name}`,
    });
    return {
      prefix,
      keys,
      logs,
      inbound: new InboundLog(producer, keys),
      /** `callsync poller …` with this prefix and channels configured. */
      cli: (argv: string[], env: Record<string, string> = {}) =>
        cli(['poller', ...argv], {
          ...target.env(),
          QUEUE_PREFIX: prefix,
          POLL_CHANNEL_IDS: channels.join(','),
          TELEPHONY_API_URL: api.url,
          TELEPHONY_TOKEN_ID: 'token-id',
          TELEPHONY_TOKEN: 'token-secret',
          ...env,
        }),
      record: (channel: string) => readRecord(redis, keys, channel),
      async stop() {
        await running?.close();
        running = null;
      },
      async close() {
        await running?.close();
        await Promise.all([producer, worker].map((r) => r.quit().catch(() => undefined)));
        await target.cleanup(prefix);
      },
    };
  }

  it('a normal poll shows polling, by whom, the last poll time and the page counts; exit 0', async () => {
    const channel = 'st-ok';
    api.addEvents(channel, [
      channelEvent({ eventId: 'ev-1', channelId: channel }),
      channelEvent({ eventId: 'ev-2', channelId: channel }),
      { eventId: 'sms-1', type: 'SMS' },
    ]);
    const s = await setUp('ok', [channel]);
    try {
      const started = Date.now();
      const record = await waitFor(async () => {
        const r = await s.record(channel);
        return r?.lastPage && r.lastPage.events > 0 ? r : null;
      });
      assert.equal(record.state, 'polling');
      assert.equal(record.reason, null);
      assert.equal(record.instance, 'test-host:4711:ok');
      assert.equal(record.lastOutcome, 'ok');
      assert.ok(Date.parse(record.lastPollAt!) >= started - 1000, 'the last poll time is now');
      assert.ok(record.nextPollAt !== null, 'the next poll is planned');
      assert.deepEqual(
        { ...record.lastPage, at: undefined },
        { events: 3, accepted: 2, duplicates: 0, deadLettered: 0, ignored: 1, at: undefined },
      );
      // Polls keep the record fresh: its TTL reaches past the next poll.
      const ttl = await redis.pttl(channelStateKey(s.keys, channel));
      assert.ok(ttl > 0 && ttl <= 60_000 + 3000, `TTL ${ttl} ms`);

      const r = await s.cli([]);
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /^channel st-ok$/m);
      assert.match(r.out, /polled by +test-host:4711:ok \(lock expires in \d+ s/);
      assert.match(r.out, /state +polling since /);
      assert.match(r.out, /last poll +\d{4}-\d\d-\d\dT[\d:]+Z \(.*\): ok/);
      assert.match(r.out, /last page .*: 3 event\(s\), 2 accepted, 0 duplicate\(s\), 0 dead-lettered, 1 not calls/);
      assert.match(r.out, /cursor +\S+/);
    } finally {
      await s.close();
    }
  });

  it('a 429 with Retry-After shows rate-limited with the reason and the next poll time', async () => {
    const channel = 'st-429';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    api.inject({ on: 'events', channelId: channel, status: 429, retryAfter: '30', times: Infinity });
    // The client hands a Retry-After over 100 ms to the poller instead of waiting itself.
    const s = await setUp('429', [channel], { maxRetryAfterMs: 100 });
    try {
      const before = Date.now();
      // The record of the first poll's outcome (the one written as the poll starts says `polling`).
      const record = await waitFor(async () => {
        const r = await s.record(channel);
        return r?.lastOutcome ? r : null;
      });
      assert.equal(record.state, 'rate-limited');
      assert.equal(record.lastOutcome, 'rate-limited');
      assert.match(record.reason ?? '', /answered 429/);
      const next = Date.parse(record.nextPollAt!);
      assert.ok(
        next >= before + 29_000 && next <= Date.now() + 31_000,
        `next poll ${record.nextPollAt}: in about 30 s`,
      );
      assert.ok((await redis.pttl(channelStateKey(s.keys, channel))) > 30_000, 'kept past the next poll');

      const r = await s.cli([]);
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /state +rate-limited since /);
      assert.match(r.out, /reason +.*answered 429/);
      assert.match(r.out, /next poll +\S+ \(in (29|30) s\)/);
    } finally {
      api.clearFaults();
      await s.close();
    }
  });

  it('a 500 shows backing-off with the failures in a row', async () => {
    const channel = 'st-500';
    api.inject({ on: 'events', channelId: channel, status: 500, times: Infinity });
    const s = await setUp('500', [channel], { retries: 0 });
    try {
      const record = await waitFor(async () => {
        const r = await s.record(channel);
        return r?.state === 'backing-off' && r.failures >= 2 ? r : null;
      });
      assert.equal(record.lastOutcome, 'failed');
      assert.match(record.reason ?? '', /answered 500/);
      assert.ok(record.nextPollAt !== null);
      const r = await s.cli([]);
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /state +backing-off since /);
      assert.match(r.out, /failures +\d+ in a row/);
    } finally {
      api.clearFaults();
      await s.close();
    }
  });

  it('a 401 shows stopped with the redacted reason, and the command exits 1', async () => {
    const channel = 'st-401';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    api.inject({
      on: 'events',
      channelId: channel,
      status: 401,
      detail: 'token revoked for +4915112345678 (Bearer abcdefghijklmnopqrstuvwxyz0123)',
      times: Infinity,
    });
    const s = await setUp('401', [channel, 'st-401-other']);
    try {
      const record = await waitFor(async () => {
        const r = await s.record(channel);
        return r?.state === 'stopped' ? r : null;
      });
      assert.equal(record.lastOutcome, 'rejected');
      assert.equal(record.nextPollAt, null);
      assert.match(record.reason ?? '', /answered 401: Unauthorized: token revoked for \+\*\*\*\*678/);
      for (const secret of ['15112345678', 'abcdefghijklmnopqrstuvwxyz0123', 'token-secret'])
        assert.ok(!JSON.stringify(record).includes(secret), `no ${secret} in the record`);

      const r = await s.cli([]);
      assert.equal(r.code, 1, 'a stopped channel makes the command exit 1');
      assert.match(r.out, /state +stopped since /);
      assert.match(r.out, /reason +.*answered 401: Unauthorized: token revoked for \+\*\*\*\*678/);
      assert.match(r.out, /next poll +none until the process restarts/);
      assert.match(r.out, /^stopped: st-401 \(credentials rejected/m);
      assert.ok(!r.out.includes('15112345678') && !r.out.includes('abcdefghijklmnop'));
      const json = await s.cli(['--json']);
      assert.equal(json.code, 1);
      assert.deepEqual(JSON.parse(json.out).stopped, [channel]);
    } finally {
      api.clearFaults();
      await s.close();
    }
  });

  it('a free lock shows nobody polling; a channel no poller wrote shows never polled', async () => {
    const channel = 'st-free';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    const s = await setUp('free', [channel]);
    try {
      await waitFor(async () => (await s.record(channel))?.lastPage);
      await s.stop(); // gives the lock back, as a poller shut down does
      const r = await s.cli([], { POLL_CHANNEL_IDS: `${channel},st-never` });
      assert.equal(r.code, 0, r.err);
      const [free, never] = r.out.split(/\n\n/);
      assert.match(free!, /polled by +nobody: no poller running/);
      assert.match(free!, /state +polling since .*written by test-host:4711:free, which does not hold the lock now/);
      assert.match(never!, /^channel st-never$/m);
      assert.match(never!, /polled by +nobody: no poller running/);
      assert.match(never!, /cursor +none/);
      assert.match(never!, /state +never polled/);
    } finally {
      await s.close();
    }
  });

  it('--json: every configured channel with its lock, cursor and state record', async () => {
    const channel = 'st-json';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    const s = await setUp('json', [channel]);
    try {
      await waitFor(async () => (await s.record(channel))?.lastPage);
      const r = await s.cli(['--json'], { POLL_CHANNEL_IDS: `${channel},st-json-never` });
      assert.equal(r.code, 0, r.err);
      const out = JSON.parse(r.out) as {
        channels: {
          channel: string;
          lock: { holder: string; expiresInMs: number } | null;
          cursor: string | null;
          state: ChannelStateRecord | null;
        }[];
        stopped: string[];
      };
      assert.deepEqual(Object.keys(out).sort(), ['channels', 'stopped']);
      assert.deepEqual(out.stopped, []);
      assert.deepEqual(
        out.channels.map((c) => c.channel),
        [channel, 'st-json-never'],
      );
      const [polled, never] = out.channels;
      assert.equal(polled!.lock?.holder, 'test-host:4711:json');
      assert.ok(polled!.lock.expiresInMs > 0 && polled!.lock.expiresInMs <= 1000);
      assert.equal(typeof polled!.cursor, 'string');
      assert.deepEqual(Object.keys(polled!.state!).sort(), [
        'failures',
        'instance',
        'lastOutcome',
        'lastPage',
        'lastPollAt',
        'nextPollAt',
        'reason',
        'since',
        'state',
      ]);
      assert.equal(polled!.state!.state, 'polling');
      assert.deepEqual(never, { channel: 'st-json-never', lock: null, cursor: null, state: null });
    } finally {
      await s.close();
    }
  });

  it('a state record that cannot be written never stops polling: warned once, events still queued', async () => {
    const channel = 'st-nowrite';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    // Redis refuses the record's writes only (as an OOM or an ACL would); locks and cursors work.
    const refuseRecord = (r: RedisClient): RedisClient =>
      new Proxy(r, {
        get(t, p) {
          if (p === 'set')
            return (key: string, ...rest: unknown[]) =>
              key.includes('poller:status:')
                ? Promise.reject(new Error('OOM command not allowed when used memory > maxmemory'))
                : (t.set as (...a: unknown[]) => unknown)(key, ...rest);
          const v = Reflect.get(t, p) as unknown;
          return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(t) : v;
        },
      });
    const s = await setUp('nowrite', [channel], {}, refuseRecord);
    try {
      await waitFor(async () => (await s.inbound.length()) === 1, { what: 'the event queued' });
      api.addEvents(channel, [channelEvent({ eventId: 'ev-2', channelId: channel })]);
      await waitFor(async () => (await s.inbound.length()) === 2, { what: 'the next page queued too' });
      const warned = s.logs.lines.filter(
        (l) => typeof l.msg === 'string' && l.msg.startsWith('could not write the channel state record'),
      );
      assert.ok(warned.length >= 2, 'every failed write is logged');
      assert.equal(warned.filter((l) => l.level === 40).length, 1, 'warned once, then at debug');
      assert.equal(await s.record(channel), null);
    } finally {
      await s.close();
    }
  });

  it('no channels configured: says so and exits 0', async () => {
    const r = await cli(['poller'], { ...target.env(), POLL_CHANNEL_IDS: '' });
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /no channels configured \(POLL_CHANNEL_IDS is empty\)/);
    const json = await cli(['poller', '--json'], { ...target.env() });
    assert.deepEqual(JSON.parse(json.out), { channels: [] });
  });

  it('an unknown option or an argument exits 2 with the message and where the help is', async () => {
    const r = await cli(['poller', '--channel', 'x'], { ...target.env() });
    assert.equal(r.code, 2);
    assert.match(r.err, /callsync poller: .*--channel/);
    assert.match(r.err, /\nsee callsync poller --help$/);
    const extra = await cli(['poller', 'list'], { ...target.env() });
    assert.equal(extra.code, 2);
    assert.match(extra.err, /unexpected argument "list"/);
    const h = await cli(['poller', '--help'], { ...target.env() });
    assert.equal(h.code, 0);
    assert.match(h.out, /^Usage: callsync poller \[--json\]/);
    assert.match((await cli(['--help'])).out, /^ {2}poller \[--json\] +each polled channel/m);
  });
});

async function cli(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { env, out: (l) => out.push(l), err: (l) => err.push(l) };
  const code = await runCli(argv, io);
  return { code, out: out.join('\n'), err: err.join('\n') };
}

async function readRecord(redis: RedisClient, keys: RedisKeys, channel: string): Promise<ChannelStateRecord | null> {
  const raw = await redis.get(channelStateKey(keys, channel));
  return raw === null ? null : (JSON.parse(raw) as ChannelStateRecord);
}
