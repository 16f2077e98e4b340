// A benchmark target, run as its own process: BENCH_TARGET=bare is a bare Hono handler that reads
// the body and answers 202 (the ceiling); BENCH_TARGET=ingress is callsync's ingress as `callsync
// start` runs it (CALLSYNC_ROLE=ingress, config from the environment, with request ids, the access
// log, metrics and the shutdown gate); BENCH_TARGET=ingress-core is the ingress without those
// (startCallsync alone); parse, normalize and app-no-redis are parts of the ingress (see below);
// BENCH_TARGET=handwritten is a hand-written receiver: bare Hono + BullMQ Queue.add, no validation.
// Prints `READY {"url": ...}` when listening.
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/log.js';
import { startWithOperations } from '../workers/run.js';
import { startCallsync } from '../workers/callsync.js';

async function main(): Promise<void> {
  const target = process.env.BENCH_TARGET ?? 'bare';
  if (target === 'parse' || target === 'normalize' || target === 'app-no-redis') {
    // Parts of the ingress, to see where its time goes: the body read as callsync reads it and
    // parsed; then normalized; then the whole ingress app with an acceptor that stores nothing.
    const { normalizeWebhook } = await import('../src/model/webhook.js');
    const { createIngressApp } = await import('../src/ingress/app.js');
    const { createLogger } = await import('../src/log.js');
    let n = 0;
    let app: Hono;
    if (target === 'app-no-redis') {
      const webhook = {
        allowedIps: ['127.0.0.1', '::1'],
        trustProxyHops: 0,
        authHeader: undefined,
        authTokens: [],
        bodyLimitBytes: 1 << 20,
        dedupeWindowMs: 60_000,
        enqueueTimeoutMs: 2000,
      };
      app = createIngressApp({
        webhook,
        acceptor: { accept: async () => ({ id: String(++n), duplicate: false }) },
        ready: async () => true,
        log: createLogger({ level: 'warn' }),
      });
    } else {
      app = new Hono();
      app.post('/webhooks/ai-agent/:agentId?', async (c) => {
        const body: unknown = JSON.parse(Buffer.from(await c.req.arrayBuffer()).toString('utf8'));
        if (target === 'normalize')
          normalizeWebhook(body, { agentId: c.req.param('agentId') ?? null, receivedAt: new Date() });
        return c.json({ id: String(++n), duplicate: false }, 202);
      });
    }
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
      console.log(`READY ${JSON.stringify({ url: `http://127.0.0.1:${info.port}` })}`);
    });
    process.on('SIGTERM', () => server.close(() => process.exit(0)));
    return;
  }
  if (target === 'handwritten') {
    // What one would write by hand: bare Hono, the body parsed, one BullMQ Queue.add — no
    // validation, no deduplication, no inbound log. The ingress' CPU per webhook is held against it.
    const { Queue } = await import('bullmq');
    const { Redis } = await import('ioredis');
    const connection = new Redis(process.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
    const queue = new Queue('handwritten', {
      connection,
      prefix: `${process.env.QUEUE_PREFIX ?? 'bench'}-handwritten`,
    });
    const app = new Hono();
    app.post('/webhooks/ai-agent/:agentId?', async (c) => {
      const body: unknown = JSON.parse(await c.req.text());
      const job = await queue.add('call', body, { removeOnComplete: true });
      return c.json({ id: job.id, duplicate: false }, 202);
    });
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
      console.log(`READY ${JSON.stringify({ url: `http://127.0.0.1:${info.port}` })}`);
    });
    process.on('SIGTERM', () =>
      server.close(() => void queue.close().then(() => (connection.disconnect(), process.exit(0)))),
    );
    return;
  }
  if (target === 'bare-node') {
    // The bare handler on node:http alone (no Hono, no @hono/node-server): what those two cost per
    // request, against `bare`.
    const { createServer } = await import('node:http');
    let n = 0;
    const server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (chunk: Buffer) => chunks.push(chunk));
      req.on('end', () => {
        Buffer.concat(chunks).toString('utf8');
        const body = JSON.stringify({ id: String(++n), duplicate: false });
        res.writeHead(202, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
        res.end(body);
      });
    });
    server.listen(0, '127.0.0.1', () => {
      const address = server.address() as { port: number };
      console.log(`READY ${JSON.stringify({ url: `http://127.0.0.1:${address.port}` })}`);
    });
    process.on('SIGTERM', () => server.close(() => process.exit(0)));
    return;
  }
  if (target === 'bare') {
    const app = new Hono();
    let n = 0;
    app.post('/webhooks/ai-agent/:agentId?', async (c) => {
      await c.req.text();
      return c.json({ id: String(++n), duplicate: false }, 202);
    });
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, (info) => {
      console.log(`READY ${JSON.stringify({ url: `http://127.0.0.1:${info.port}` })}`);
    });
    server.on('listening', () => undefined);
    process.on('SIGTERM', () => server.close(() => process.exit(0)));
    return;
  }
  const config = loadConfig({
    ...process.env,
    CALLSYNC_ROLE: 'ingress',
    PORT: '0',
    HOST: '127.0.0.1',
    OPS_PORT: 'off',
  });
  const log = createLogger({ level: config.logLevel });
  if (target === 'ingress-layers') {
    // The ingress with the operations wired (their Redis connection, queue handles, metrics) and only
    // the per-request layers named in BENCH_LAYERS (context, gate, readyz, ops, metrics; `/` between
    // them in a BENCH_TARGETS entry): which of them costs what, against `ingress` and `ingress-core`.
    const layers = new Set((process.env.BENCH_LAYERS ?? '').split(/[,/]/).filter(Boolean));
    // Each layer by the name of the function workers/operations.ts makes, in the order it runs them.
    const names: Record<string, string> = {
      context: 'requestContextMiddleware',
      gate: 'shutdownGate',
      readyz: 'readyzWarningsMiddleware',
      ops: 'opsRoutesMiddleware',
      metrics: '',
    };
    const unknown = [...layers].filter((l) => !(l in names));
    if (unknown.length > 0)
      throw new Error(`BENCH_LAYERS: unknown ${unknown.join(', ')} (known: ${Object.keys(names).join(', ')})`);
    const { createOperations } = await import('../workers/operations.js');
    const operations = createOperations({ config, log });
    await operations.listen();
    const all = operations.hooks.ingressBefore ?? [];
    for (const [layer, fn] of Object.entries(names))
      if (fn && !all.some((mw) => mw.name === fn))
        throw new Error(`layer ${layer} (${fn}) not among the operations' layers`);
    const wanted = new Set([...layers].map((l) => names[l]));
    const cs = await startCallsync(config, {
      log,
      ingressBefore: all.filter((mw) => wanted.has(mw.name)),
      ...(layers.has('metrics') ? { ingressEvents: operations.hooks.ingressEvents } : {}),
    });
    console.log(`READY ${JSON.stringify({ url: cs.url })}`);
    process.on('SIGTERM', () => void cs.close().then(() => operations.close().then(() => process.exit(0))));
    return;
  }
  if (target === 'ingress-core') {
    const cs = await startCallsync(config, { log });
    console.log(`READY ${JSON.stringify({ url: cs.url })}`);
    process.on('SIGTERM', () => void cs.close().then(() => process.exit(0)));
    return;
  }
  const running = await startWithOperations({ config, log });
  console.log(`READY ${JSON.stringify({ url: running.callsync.url })}`);
  process.on('SIGTERM', () => void running.shutdown('SIGTERM').then(() => process.exit(0)));
}

void main();
