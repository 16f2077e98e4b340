// The poller against a hostile API: Retry-After values of 0, in the past, negative or huge (never a
// tight request loop, never a wait past POLL_MAX_BACKOFF_MS: a timer past 2^31 ms fires at once), and
// full pages whose position goes back to one already read in this run (never read back to back forever).
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { type RedisClient } from '../queues/index.js';
import { InboundLog } from '../queues/inbound.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { startPoller, type RunningPoller } from '../workers/poller.js';
import { memoryLog } from './support/callsync.js';
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';
import { testRedis, type TestRedis } from './support/redis.js';
import { pollerRunner } from './support/poller.js';

const runner = pollerRunner;

/**
 * Runs a poller of one channel for `ms`, or until `enough` says so of the requests counted so far;
 * its log and how long it polled.
 */
async function pollUntil(
  target: TestRedis,
  o: {
    channel: string;
    client: ReturnType<typeof createTelephonyClient>;
    settings: { pageSize: number; intervalMs: number; maxBackoffMs: number };
    requests: () => number;
    ms: number;
    enough?: (requests: number) => boolean;
  },
) {
  const prefix = await target.prefix(`poll-ra-${o.channel}`);
  const keys = target.keys(prefix);
  const redis: RedisClient = target.connect('producer');
  const worker: RedisClient = target.connect('worker');
  const logs = memoryLog('debug');
  let running: RunningPoller | undefined;
  try {
    running = startPoller({
      settings: { channelIds: [o.channel], lockTtlMs: 1000, ...o.settings },
      client: o.client,
      acceptor: new InboundAcceptor(new InboundLog(redis, keys), { dedupeWindowMs: 3_600_000, timeoutMs: 2000 }),
      redis,
      workerConnection: worker,
      prefix: keys,
      log: logs.log,
      runner,
    });
    const started = Date.now();
    while (Date.now() - started < o.ms && !o.enough?.(o.requests())) await new Promise((r) => setTimeout(r, 20));
    return { logs, elapsedMs: Date.now() - started };
  } finally {
    await running?.close();
    await Promise.all([redis, worker].map((r) => r.quit().catch(() => undefined)));
    await target.cleanup(prefix);
  }
}

describe('poller: hostile Retry-After', () => {
  let api: FakeTelephony;
  let target: TestRedis;
  before(async () => {
    api = await FakeTelephony.start();
    target = await testRedis();
  });
  after(() => api.close());

  /** Polls the fake API's channel for `ms`, or until `enough` says so. */
  async function pollFor(
    channel: string,
    ms: number,
    settings: { intervalMs: number; maxBackoffMs: number },
    enough?: (requests: number) => boolean,
  ) {
    const polled = await pollUntil(target, {
      channel,
      client: createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth }),
      settings: { pageSize: 50, ...settings },
      requests: () => api.inboxRequests(channel).length,
      ms,
      enough,
    });
    return { ...polled, requests: api.inboxRequests(channel) };
  }

  for (const [name, value] of [
    ['0', '0'],
    ['a date in the past', 'Thu, 01 Jan 1970 00:00:00 GMT'],
    ['a negative number', '-5'],
  ] as const) {
    it(`Retry-After ${name} on every 429 does not make the poller hammer the API`, async () => {
      const channel = `ra-${name.replace(/\W+/g, '-')}`;
      api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
      api.inject({ on: 'events', channelId: channel, status: 429, retryAfter: value, times: Infinity });
      try {
        const { requests } = await pollFor(channel, 1500, { intervalMs: 200, maxBackoffMs: 1000 });
        // With a 200 ms interval, a sane poller makes a handful of requests in 1.5 s.
        assert.ok(requests.length <= 12, `${requests.length} inbox requests in 1.5 s`);
      } finally {
        api.clearFaults();
      }
    });
  }

  it('a Retry-After longer than POLL_MAX_BACKOFF_MS (even past the 2^31 ms timer limit) waits POLL_MAX_BACKOFF_MS', async () => {
    const channel = 'ra-huge';
    api.addEvents(channel, [channelEvent({ eventId: 'ev-1', channelId: channel })]);
    // 30 years: past setTimeout's limit of 2^31-1 ms, which Node turns into 1 ms.
    api.inject({ on: 'events', channelId: channel, status: 429, retryAfter: '999999999', times: Infinity });
    try {
      const { requests, logs, elapsedMs } = await pollFor(
        channel,
        20_000,
        { intervalMs: 200, maxBackoffMs: 800 },
        (n) => n >= 2,
      );
      // Read again, after POLL_MAX_BACKOFF_MS (before: 789 requests in 2.5 s).
      assert.ok(requests.length >= 2, `read again after POLL_MAX_BACKOFF_MS: ${requests.length} request(s)`);
      assert.ok(elapsedMs >= 750, `the second request ${elapsedMs} ms after the start, with an 800 ms cap`);
      const line = logs.lines.find((l) => typeof l.msg === 'string' && /asked to wait/.test(l.msg));
      assert.ok(line, 'the wait is logged');
      assert.equal(line.waitMs, 800, 'the wait logged is the one taken');
    } finally {
      api.clearFaults();
    }
  });
});

describe('poller: a position that cycles', () => {
  it('full pages whose position returns to one already read in this run wait POLL_INTERVAL_MS instead of looping', async () => {
    const target = await testRedis();
    // Always a full page of the same two events; the position alternates A -> B -> A ...
    let requests = 0;
    const server = createServer((req, res) => {
      requests += 1;
      const position = new URL(req.url ?? '/', 'http://x').searchParams.get('position');
      const next = position === 'A' ? 'B' : 'A';
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          events: [
            channelEvent({ eventId: 'ev-1', channelId: 'cyc' }),
            channelEvent({ eventId: 'ev-2', channelId: 'cyc' }),
          ],
          limit: 2,
          position: next,
        }),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    try {
      // Five requests take at least one wait of POLL_INTERVAL_MS (A, B, then A again is a cycle);
      // before: 675 requests in 1.5 s.
      const { logs, elapsedMs } = await pollUntil(target, {
        channel: 'cyc',
        client: createTelephonyClient({
          baseUrl: `http://127.0.0.1:${port}/v2`,
          auth: { kind: 'bearer', accessToken: 't' },
        }),
        settings: { pageSize: 2, intervalMs: 300, maxBackoffMs: 1000 },
        requests: () => requests,
        ms: 20_000,
        enough: (n) => n >= 5,
      });
      assert.ok(requests >= 5, `${requests} request(s)`);
      assert.ok(elapsedMs >= 250, `${requests} inbox requests in ${elapsedMs} ms with a 300 ms interval`);
      assert.ok(
        logs.lines.some((l) => typeof l.msg === 'string' && /already read/.test(l.msg)),
        'the cycle is logged',
      );
    } finally {
      await new Promise((r) => server.close(r));
    }
  });
});
