// A slow-header flood from addresses not on the allow list (issue 23, item 2), over real sockets on
// loopback (127.0.0.2 … reach a server on 127.0.0.1 over Linux' loopback): the flood may hold only a
// small share of HTTP_MAX_CONNECTIONS and is refused at accept time beyond it, so the allowed sender
// gets every webhook through meanwhile. Before, the flood filled the cap and the sender's
// connections were dropped. And a peer not yet known good has a few seconds for its headers, not
// the full HTTP_HEADERS_TIMEOUT_MS.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { minimalPayload } from './support/calls.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';

const CAP = 40;
const FLOOD_ADDRESSES = ['127.0.0.2', '127.0.0.3', '127.0.0.4', '127.0.0.5', '127.0.0.6', '127.0.0.7'];
/** Flood connections held open at once (far beyond the cap), and the most ever opened in the test. */
const FLOOD_SIZE = 240;
const FLOOD_MAX_OPENED = 6000;
const SENDS = 20;

let cs: OpsCallsync;
let port: number;
before(async () => {
  cs = await startOpsCallsync({
    CALLSYNC_ROLE: 'ingress',
    SPOOL_ENABLED: 'false',
    WEBHOOK_ALLOWED_IPS: '127.0.0.1',
    HTTP_MAX_CONNECTIONS: String(CAP),
    // Long, so that the shorter limit for peers not yet known good shows (second test).
    HTTP_HEADERS_TIMEOUT_MS: '60000',
    WEBHOOK_REQUEST_TIMEOUT_MS: '60000',
  });
  port = Number(new URL(cs.url).port);
});
after(async () => {
  await cs.stop();
});

/** A slowloris connection: the start of a request's headers, then one more byte now and then. */
function slowConnection(from: string): Socket {
  const socket = connect({ port, host: '127.0.0.1', localAddress: from });
  socket.on('error', () => undefined);
  socket.once('connect', () => {
    socket.write('POST /webhooks/ai-agent HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
    const drip = setInterval(() => (socket.destroyed ? clearInterval(drip) : socket.write('a')), 500);
    socket.once('close', () => clearInterval(drip));
  });
  return socket;
}

/** One webhook from `from` on a new connection: the status, or the error's code. */
function postWebhook(from: string, callId: string): Promise<number | string> {
  const body = JSON.stringify(minimalPayload(callId));
  return new Promise((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        path: '/webhooks/ai-agent/agent-1',
        method: 'POST',
        localAddress: from,
        agent: false,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end(body);
  });
}

test('a slow-header flood from addresses not on the allow list leaves room for the allowed sender', async () => {
  const open = new Set<Socket>();
  let opened = 0;
  let flooding = true;
  const refill = () => {
    while (flooding && open.size < FLOOD_SIZE && opened < FLOOD_MAX_OPENED) {
      const socket = slowConnection(FLOOD_ADDRESSES[opened % FLOOD_ADDRESSES.length]!);
      opened++;
      open.add(socket);
      socket.once('close', () => {
        open.delete(socket);
        // The attacker comes back at once.
        setImmediate(refill);
      });
    }
  };
  refill();
  try {
    // Let the flood take what it can before the sender starts.
    await sleep(500);
    const results: (number | string)[] = [];
    for (let i = 0; i < SENDS; i++) {
      results.push(await postWebhook('127.0.0.1', `flood-${i}`));
      await sleep(100);
    }
    assert.deepEqual(
      results,
      Array.from({ length: SENDS }, () => 202),
      `the allowed sender's webhooks during the flood: ${results.join(' ')}`,
    );
    assert.ok(opened > FLOOD_SIZE, 'the flood kept reconnecting');
  } finally {
    flooding = false;
    for (const s of open) s.destroy();
  }
  const line = cs.logs.find((l) =>
    String(l.msg).startsWith('connection refused: its peer is not on WEBHOOK_ALLOWED_IPS'),
  );
  assert.ok(line, 'the refusals are logged');
  // A peer not on the list still reaches /healthz (a load balancer's probe) once the flood is over.
  await sleep(200);
  const probe = await new Promise<number | string>((resolve) => {
    const req = request(
      { host: '127.0.0.1', port, path: '/healthz', localAddress: '127.0.0.4', agent: false },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    req.end();
  });
  assert.equal(probe, 200);
});

test('a peer not yet known good gets a short time for its headers (408, closed), not HTTP_HEADERS_TIMEOUT_MS', async () => {
  const socket = connect({ port, host: '127.0.0.1', localAddress: '127.0.0.8' });
  let received = '';
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => (received += d));
  socket.on('error', () => undefined);
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.once('connect', () => socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n'));
  // Bounded far below the 60 s headers timeout configured: only the shorter limit closes it in time.
  const outcome = await Promise.race([closed.then(() => 'closed'), sleep(20_000).then(() => 'still open')]);
  socket.destroy();
  assert.equal(outcome, 'closed');
  assert.match(received, /^HTTP\/1\.1 408 /);
  const body = JSON.parse(received.slice(received.indexOf('\r\n\r\n') + 4)) as {
    errors: { status: number; detail: string; source: { pointer: string } }[];
  };
  assert.deepEqual(
    body.errors.map((e) => [e.status, e.detail, e.source.pointer]),
    [[408, 'the request headers did not arrive in time', '/']],
  );
});
