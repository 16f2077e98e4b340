// The body budget's line (src/ingress/middleware/body-budget.ts): a declared body that does not fit
// waits for room before it is read, first come first in, so a large call is not passed for ever by
// the small ones that keep coming (before, it was refused with 503 until the moment nothing else was
// held); it is refused with 503 and Retry-After after WEBHOOK_BODY_WAIT_MS, when the line is full, or
// at once with a wait of 0; a sender that hangs up while it waits leaves the line.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Server } from 'node:http';
import { connect } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { ApiError, problemsBody } from '../src/ingress/errors.js';
import { bodyBudget } from '../src/ingress/middleware/body-budget.js';
import { createLogger } from '../src/log.js';
import { registry } from '../src/metrics.js';
import { combineEvents, ingressMetrics } from '../workers/metric-events.js';
import type { Config } from '../src/config/index.js';
import type { CanonicalCall } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';

const log = createLogger({ level: 'silent' });
const KB = 1024;

function webhook(bodyWaitMs: number): Config['webhook'] {
  return {
    allowedIps: ['127.0.0.1', '::1'],
    trustProxyHops: 0,
    authHeader: undefined,
    authTokens: [],
    bodyLimitBytes: 1024 * KB,
    bodyWaitMs,
    dedupeWindowMs: 60_000,
    enqueueTimeoutMs: 1000,
  };
}

/** The documented payload with call id `id`, its transcript grown so the body is about `bytes` long. */
function body(id: string, bytes: number): string {
  return JSON.stringify(
    webhookPayload(id, (p) => {
      const t = p.assist.transcription as { content: string };
      while (JSON.stringify(p).length < bytes) t.content += ' Caller: Friday morning, please.';
    }),
  );
}

/** An acceptor that holds each call (and so its body's share of the budget) until `release(id)`. */
function holdingAcceptor() {
  const entered: string[] = [];
  const gates = new Map<string, () => void>();
  return {
    entered,
    release(id: string) {
      const open = gates.get(id);
      assert.ok(open, `${id} is not held`);
      open();
    },
    acceptor: {
      accept: (call: CanonicalCall) =>
        new Promise<{ id: string; duplicate: boolean }>((resolve) => {
          entered.push(call.callId);
          gates.set(call.callId, () => resolve({ id: call.callId, duplicate: false }));
        }),
    },
  };
}

function ingress(bodyWaitMs: number, budgetBytes: number) {
  const held = holdingAcceptor();
  /** `status reason` of every refusal, as the metrics see them (callsync_webhooks_rejected_total). */
  const rejected: string[] = [];
  const app = createIngressApp({
    // The metrics' own hooks (the gauges read the budget at scrape time), and the refusals seen here.
    events: combineEvents(ingressMetrics(), { rejected: (status, reason) => rejected.push(`${status} ${reason}`) }),
    webhook: webhook(bodyWaitMs),
    acceptor: held.acceptor,
    ready: async () => true,
    log,
    remoteAddress: () => '127.0.0.1',
    bodyBudgetBytes: budgetBytes,
  });
  const post = (id: string, bytes: number) => {
    const text = body(id, bytes);
    return app.request('/webhooks/ai-agent/agent-1', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)) },
      body: text,
    });
  };
  return { ...held, post, rejected };
}

const settle = (ms = 30) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The middleware alone — by default a budget of 100 bytes (and a line of at most `maxWaiters`) — in
 * front of a handler that holds each request until its gate is opened (`gates`, in the order they
 * entered). `post(id, bytes, take)`: a body of `bytes` declared (none: 0), and `take` bytes more taken
 * by the handler, as a chunked body's reader takes them.
 */
function gatedBudget(maxWaiters?: number, options: Partial<Parameters<typeof bodyBudget>[0]> = {}) {
  const gates: (() => void)[] = [];
  const entered: string[] = [];
  const app = new Hono();
  app.use(
    '*',
    bodyBudget({
      maxBytes: 100,
      bodyLimitBytes: 1000,
      retryAfterSeconds: '5',
      maxWaitMs: 5000,
      maxWaiters,
      ...options,
    }),
  );
  app.post('/:id', async (c) => {
    entered.push(c.req.param('id'));
    const take = Number(c.req.query('take') ?? 0);
    if (take > 0) c.get('bodyBudgetTake')!(take);
    await new Promise<void>((resolve) => gates.push(resolve));
    return c.text('ok', 202);
  });
  app.onError((err, c) =>
    err instanceof ApiError
      ? c.json(problemsBody(err.status, err.problems), err.status, err.headers)
      : c.text('?', 500),
  );
  const post = (id: string, bytes: number, take = 0) =>
    app.request(`/${id}${take > 0 ? `?take=${take}` : ''}`, {
      method: 'POST',
      headers: bytes > 0 ? { 'content-length': String(bytes) } : {},
      body: 'x'.repeat(bytes),
    });
  return { app, gates, entered, post };
}

/**
 * A budget of 1 MiB whose RSS the test sets: a large body (64 KiB or more) beside others only while
 * `rss.mb` is under `crowdedRssBytes` (448 MB here).
 */
function memoryBudget(maxWaitMs = 5000) {
  const rss = { mb: 300 };
  const budget = gatedBudget(undefined, {
    maxBytes: 1024 * KB,
    bodyLimitBytes: 8192 * KB,
    maxWaitMs,
    crowdedRssBytes: 448 * 1024 * KB,
    residentBytes: () => rss.mb * 1024 * KB,
  });
  return { ...budget, rss };
}

test('a body that does not fit waits in line, and smaller ones that come after it do not pass it', async () => {
  const { entered, release, post } = ingress(5000, 20 * KB);
  const a = post('a', 12 * KB);
  await settle();
  assert.deepEqual(entered, ['a']);
  // 12 + 15 KB is beyond the 20 KB budget: b waits. c (3 KB) would fit beside a, but b came first.
  const b = post('b', 15 * KB);
  await settle();
  const c = post('c', 3 * KB);
  await settle();
  assert.deepEqual(entered, ['a'], 'b waits for room, c waits behind b');
  // The operator sees the line and what is held (/metrics).
  const scrape = await registry.metrics();
  assert.match(scrape, /^callsync_webhook_bodies_waiting 2$/m);
  const heldNow = Number(/^callsync_webhook_body_bytes_held (\d+)$/m.exec(scrape)?.[1]);
  assert.ok(heldNow > 12 * KB - 100 && heldNow < 13 * KB, `a's body is held: ${heldNow} bytes`);
  release('a');
  assert.equal((await a).status, 202);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c'], 'b goes in first, then c, which fits beside it');
  release('b');
  release('c');
  assert.deepEqual([(await b).status, (await c).status], [202, 202]);
  const after = await registry.metrics();
  assert.match(after, /^callsync_webhook_bodies_waiting 0$/m);
  assert.match(after, /^callsync_webhook_body_bytes_held 0$/m);
});

test('a body that waited WEBHOOK_BODY_WAIT_MS in vain gets 503 with Retry-After and the error body; the line is left clean', async () => {
  const { entered, release, post, rejected } = ingress(150, 20 * KB);
  const a = post('a', 12 * KB);
  await settle();
  const started = performance.now();
  const b = await post('b', 15 * KB);
  assert.ok(performance.now() - started >= 140, 'b waited for room before it was refused');
  assert.equal(b.status, 503);
  assert.equal(b.headers.get('retry-after'), '5');
  assert.equal(b.headers.get('connection'), 'close');
  const error = ((await b.json()) as { errors: { status: number; detail: string }[] }).errors[0]!;
  assert.equal(error.status, 503);
  assert.match(error.detail, /for the 150 ms this one waited: retry shortly/);
  // Counted under its own reason: an operator tells the budget's 503 from Redis' (queue-unavailable).
  assert.deepEqual(rejected, ['503 body-budget']);
  assert.deepEqual(entered, ['a'], 'the refused body was never handed on');
  release('a');
  assert.equal((await a).status, 202);
  // Nothing is left in the line: the next body goes straight in.
  const d = post('d', 15 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'd']);
  release('d');
  assert.equal((await d).status, 202);
});

test('when the head of the line gives up, those behind it that fit go in at once', async () => {
  const { entered, release, post } = ingress(150, 20 * KB);
  const a = post('a', 12 * KB);
  await settle();
  const b = post('b', 15 * KB);
  await settle(60);
  const c = post('c', 3 * KB);
  // b is refused at ~150 ms; c (3 KB beside a's 12 KB) goes in then, not at the end of its own wait.
  assert.equal((await b).status, 503);
  await settle(20);
  assert.deepEqual(entered, ['a', 'c']);
  release('c');
  release('a');
  assert.deepEqual([(await c).status, (await a).status], [202, 202]);
});

test('WEBHOOK_BODY_WAIT_MS=0: a body that does not fit is refused at once, as before the line', async () => {
  const { entered, release, post } = ingress(0, 20 * KB);
  const a = post('a', 12 * KB);
  await settle();
  const b = await post('b', 15 * KB);
  assert.equal(b.status, 503);
  assert.match(
    ((await b.json()) as { errors: { detail: string }[] }).errors[0]!.detail,
    /holds as many request bodies/,
  );
  // One that fits beside a still goes in.
  const c = post('c', 3 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'c']);
  release('a');
  release('c');
  assert.deepEqual([(await a).status, (await c).status], [202, 202]);
});

test('a full line refuses at once; a body larger than the whole budget does not wait: alone or refused', async () => {
  // The middleware alone: a budget of 100 bytes, a line of at most 2.
  const { entered, gates, post } = gatedBudget(2);
  const a = post('a', 60);
  await settle();
  // 500 bytes is beyond the whole budget: refused at once while a is held, not lined up.
  const big = await post('big', 500);
  assert.equal(big.status, 503);
  assert.equal(big.headers.get('retry-after'), '5');
  const b = post('b', 50);
  const c = post('c', 10);
  await settle();
  const d = await post('d', 10); // the line (b, c) is full
  assert.equal(d.status, 503);
  assert.deepEqual(entered, ['a']);
  gates.shift()!();
  assert.equal((await a).status, 202);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c']);
  gates.shift()!();
  gates.shift()!();
  assert.deepEqual([(await b).status, (await c).status], [202, 202]);
  // Alone, the body beyond the budget is let in.
  const again = post('big', 500);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c', 'big']);
  gates.shift()!();
  assert.equal((await again).status, 202);
});

test('a chunked body (no length to reserve) takes its turn in line: it does not pass a body waiting for room', async () => {
  const { entered, gates, app, post } = gatedBudget();
  const a = post('a', 60);
  await settle();
  const b = post('b', 50);
  await settle();
  // No Content-Length: nothing reserved up front, so it would fit at once, but b came first.
  const chunked = app.request('/chunked', { method: 'POST', body: 'x'.repeat(10) });
  await settle();
  assert.deepEqual(entered, ['a']);
  gates.shift()!();
  assert.equal((await a).status, 202);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'chunked']);
  gates.shift()!();
  gates.shift()!();
  assert.deepEqual([(await b).status, (await chunked).status], [202, 202]);
});

test('a sender that hangs up while it waits leaves the line: those behind it go in at once', async () => {
  const held = holdingAcceptor();
  // A wait far longer than the test: c can only go in because b left the line when its socket closed.
  const app = createIngressApp({
    webhook: webhook(25_000),
    acceptor: held.acceptor,
    ready: async () => true,
    log,
    bodyBudgetBytes: 20 * KB,
  });
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server;
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  const port = (server.address() as { port: number }).port;
  const url = `http://127.0.0.1:${port}/webhooks/ai-agent/agent-1`;
  const post = (id: string, bytes: number) =>
    fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(id, bytes) });
  try {
    const a = post('a', 12 * KB);
    for (let i = 0; i < 100 && held.entered.length === 0; i++) await settle(10);
    assert.deepEqual(held.entered, ['a']);
    // b declares 15 KB, sends its headers only, and hangs up while it waits.
    const b = connect(port, '127.0.0.1');
    await new Promise<void>((resolve) => b.once('connect', () => resolve()));
    b.write(
      `POST /webhooks/ai-agent/agent-1 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${15 * KB}\r\n\r\n`,
    );
    await settle(100);
    const c = post('c', 3 * KB);
    await settle(100);
    assert.deepEqual(held.entered, ['a'], 'c waits behind b');
    b.destroy();
    for (let i = 0; i < 200 && held.entered.length < 2; i++) await settle(10);
    assert.deepEqual(held.entered, ['a', 'c'], 'b left the line when it hung up; c went in');
    held.release('a');
    held.release('c');
    assert.deepEqual([(await a).status, (await c).status], [202, 202]);
  } finally {
    server.close();
    server.closeAllConnections();
  }
});

test('near the memory bound (RSS over 448 MB) a large body waits for the others to be answered; small ones still go in', async () => {
  // The budget's bytes are an average (×40 of what is held); a flood on a loaded machine once took
  // an ingress to 668 MB RSS, over the 640 MB bound, with the bytes held inside the budget.
  const { rss, gates, entered, post } = memoryBudget();
  const a = post('a', 200 * KB);
  const b = post('b', 200 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'b'], 'under the bound, large bodies go in side by side');
  rss.mb = 500;
  await settle(10); // the RSS is read again after 5 ms
  const c = post('c', 200 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'b'], 'c fits the bytes, but waits while a and b are held');
  gates.shift()!();
  assert.equal((await a).status, 202);
  await settle();
  assert.deepEqual(entered, ['a', 'b'], 'c waits until nothing else is held');
  gates.shift()!();
  assert.equal((await b).status, 202);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c'], 'alone, c goes in');
  // A small body (under 64 KiB) goes in beside it, whatever the RSS.
  const d = post('d', 10 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c', 'd']);
  // A chunked body growing past 64 KiB beside others is refused at once (its chunks do not wait).
  const e = await post('e', 0, 100 * KB);
  assert.equal(e.status, 503);
  assert.equal(e.headers.get('connection'), 'close');
  assert.match(
    ((await e.json()) as { errors: { detail: string }[] }).errors[0]!.detail,
    /^the ingress is near its memory bound \(RSS 500 MB\), letting in large bodies only one at a time \(\d+ bytes held\): retry shortly$/,
  );
  // Back under the bound: large bodies side by side again.
  rss.mb = 400;
  await settle(10);
  const f = post('f', 200 * KB);
  await settle();
  assert.deepEqual(entered, ['a', 'b', 'c', 'd', 'e', 'f']);
  for (const open of gates.splice(0)) open();
  assert.deepEqual([(await c).status, (await d).status, (await f).status], [202, 202, 202]);
});

test('a large body that waits near the memory bound for WEBHOOK_BODY_WAIT_MS in vain gets 503 naming the bound', async () => {
  const { rss, gates, entered, post } = memoryBudget(100);
  rss.mb = 600;
  const a = post('a', 200 * KB);
  await settle();
  assert.deepEqual(entered, ['a'], 'alone, a large body goes in whatever the RSS');
  const b = await post('b', 200 * KB);
  assert.equal(b.status, 503);
  assert.equal(b.headers.get('retry-after'), '5');
  assert.match(
    ((await b.json()) as { errors: { detail: string }[] }).errors[0]!.detail,
    /^the ingress was near its memory bound \(RSS 600 MB\), letting in large bodies only one at a time \(\d+ bytes held\) for the 100 ms this one waited: retry shortly$/,
  );
  gates.shift()!();
  assert.equal((await a).status, 202);
});
