// While an accepted call waits for Redis, the spool wrapper (src/ingress/spool.ts) keeps its
// record, not the call: the parsed payload can be collected at once (fewer live objects across
// scavenges while requests wait: docs/performance.md, round 9). Redis here is a TCP server that
// takes the connection and never answers, so the append waits for as long as the test needs
// (ioredis holds it in its queue: the connection never gets ready).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Redis } from 'ioredis';
import { InboundAcceptor, type AcceptResult } from '../src/ingress/accept.js';
import { SpoolingAcceptor } from '../src/ingress/spool.js';
import { createLogger } from '../src/log.js';
import { InboundLog } from '../queues/inbound.js';
import { sampleCall } from './support/calls.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

describe('the spool wrapper while a call waits for Redis', () => {
  let server: Server;
  const sockets: Socket[] = [];
  let redis: Redis;
  let dir: string;
  before(async () => {
    server = createServer((socket) => {
      sockets.push(socket);
      socket.resume();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    redis = new Redis({ port, host: '127.0.0.1', enableReadyCheck: false, maxRetriesPerRequest: null });
    dir = await mkdtemp(join(tmpdir(), 'callsync-spool-holds-'));
  });
  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  test('holds the record, not the call and its parsed payload', async () => {
    const inner = new InboundAcceptor(new InboundLog(redis, 'spool-holds'), {
      dedupeWindowMs: 60_000,
      timeoutMs: 60_000,
    });
    const spool = new SpoolingAcceptor(inner, { dir, log: createLogger({ level: 'silent' }) });
    await spool.open();
    // Accepted from a function of its own, as the ingress does: nothing here keeps the call.
    const start = (): { payload: WeakRef<object>; pending: Promise<AcceptResult> } => {
      const call = sampleCall('spool-holds-1');
      return {
        payload: new WeakRef(call.raw as object),
        pending: spool.accept(call, { rawJson: JSON.stringify(call.raw) }),
      };
    };
    const { payload, pending } = start();
    // The batch is sent (the next turn of the event loop) and waits for an answer that never comes.
    for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
    assert.equal(inner.inFlight > 0, true, 'the call is on its way to Redis');
    gc();
    assert.equal(payload.deref(), undefined, 'the parsed payload was collected while the call waits for Redis');
    // Redis goes away: the call, rebuilt from its record, is spooled (and acknowledged) all the same.
    redis.disconnect();
    const result = await pending;
    assert.equal(result.spooled, true);
    assert.equal(spool.pending, 1);
    await spool.close();
  });
});
