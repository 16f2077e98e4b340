// A benchmark target, run as its own process: BENCH_TARGET=bare is a bare Hono handler that reads
// the body and answers 202 (the ceiling); BENCH_TARGET=ingress is callsync's ingress as `callsync
// start` runs it (CALLSYNC_ROLE=ingress, config from the environment, with request ids, the access
// log, metrics and the shutdown gate); BENCH_TARGET=ingress-core is the ingress without those
// (startCallsync alone). Prints `READY {"url": ...}` when listening.
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/log.js';
import { startWithOperations } from '../src/ops/run.js';
import { startCallsync } from '../workers/callsync.js';

async function main(): Promise<void> {
  const target = process.env.BENCH_TARGET ?? 'bare';
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
  const config = loadConfig({ ...process.env, CALLSYNC_ROLE: 'ingress', PORT: '0', HOST: '127.0.0.1', OPS_PORT: 'off' });
  const log = createLogger({ level: config.env.LOG_LEVEL });
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
