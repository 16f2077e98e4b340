// Start-up and shutdown in quick succession, as `callsync start` runs them (all roles, ops layer,
// dashboard): no promise may reject without a handler (Node 20 exits on an unhandled rejection, so
// a SIGTERM right after start could exit non-zero), and a webhook posted the moment start-up
// resolves is stored in Redis (202), not refused because the fail-fast producer connection was
// still connecting. Real Redis; the second test puts a TCP proxy in front of it that slows or drops
// new connections, the way a loaded machine does (connect timeouts, reconnects during set-up).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync } from './support/ops.js';

/** A TCP proxy to the test Redis; connection n is dropped or its traffic held back as `plan(n)` says. */
async function unsteadyProxy(
  plan: (n: number) => { drop: boolean; holdMs: number },
): Promise<{ url: string; close(): Promise<void> }> {
  const url = new URL(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379');
  const sockets = new Set<Socket>();
  const timers = new Set<NodeJS.Timeout>();
  let count = 0;
  const server: Server = createServer((client) => {
    const { drop, holdMs } = plan(count++);
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    if (drop) {
      client.destroy();
      return;
    }
    const upstream = connect(Number(url.port || 6379), url.hostname);
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    const openAt = Date.now() + holdMs;
    const forward = (from: Socket, to: Socket) =>
      from.on('data', (chunk) => {
        const wait = openAt - Date.now();
        if (wait <= 0) return void to.write(chunk);
        from.pause();
        const timer = setTimeout(() => {
          timers.delete(timer);
          to.write(chunk);
          from.resume();
        }, wait);
        timers.add(timer);
      });
    forward(client, upstream);
    forward(upstream, client);
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    for (const s of [client, upstream]) s.on('close', end).on('error', end);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `redis://${url.username || url.password ? `${url.username}:${url.password}@` : ''}127.0.0.1:${port}`,
    async close() {
      for (const t of timers) clearTimeout(t);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

describe('start-up and shutdown', () => {
  const unhandled: unknown[] = [];
  const record = (reason: unknown) => void unhandled.push(reason);
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-startstop-'));
    process.on('unhandledRejection', record);
  });
  after(async () => {
    process.off('unhandledRejection', record);
    await rm(dir, { recursive: true, force: true });
  });

  /** Late rejections come when the closed connections' sockets close: give them time to show. */
  const settle = () => new Promise((resolve) => setTimeout(resolve, 500));
  const describeAll = () =>
    unhandled.map((e) => (e instanceof Error ? (e.stack ?? e.message) : String(e))).join('\n---\n');

  test('a webhook posted right after start gets 202; stopping right away leaves no unhandled rejection', async () => {
    unhandled.length = 0;
    for (let i = 0; i < 8; i++) {
      const cs = await startOpsCallsync(
        { ARCHIVE_DIR: dir, ADMIN_PASSWORD: 'startstop-pass-31f0', SPOOL_ENABLED: 'false' },
        { sinks: new Map([['archive', new FlakySink()]]) },
        'warn',
      );
      try {
        const res = await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload(`startstop-${i}`));
        assert.equal(res.status, 202, `round ${i}: ${JSON.stringify(res.body)}`);
        assert.equal(res.body.spooled, undefined, 'stored in Redis, not spooled');
      } finally {
        await cs.stop();
      }
    }
    await settle();
    assert.equal(unhandled.length, 0, describeAll());
  });

  test('connections slow or dropped during set-up: start and stop still leave no unhandled rejection', async () => {
    unhandled.length = 0;
    // Every third new connection is dropped at once (a reconnect during set-up); the others are held
    // back for up to 1.5 s, so handles are still setting up when start-up ends or shutdown begins.
    const proxy = await unsteadyProxy((n) => ({ drop: n % 3 === 1, holdMs: (n * 397) % 1500 }));
    try {
      for (let i = 0; i < 8; i++) {
        const cs = await startOpsCallsync(
          { REDIS_URL: proxy.url, ARCHIVE_DIR: dir, ADMIN_PASSWORD: 'startstop-pass-31f0', SPOOL_ENABLED: 'false' },
          { sinks: new Map([['archive', new FlakySink()]]) },
          'warn',
        );
        // Stop at once, or after a moment, so shutdown meets handles at every stage of their set-up.
        if (i % 2 === 1) await new Promise((resolve) => setTimeout(resolve, (i * 211) % 1200));
        const code = await cs.shutdown('test over');
        assert.equal(code, 0, `round ${i}: shutdown exit code`);
        await cs.stop();
      }
      await settle();
    } finally {
      await proxy.close();
    }
    assert.equal(unhandled.length, 0, describeAll());
  });
});
