// Starts callsync in this process against real Redis, with a unique prefix and fast retries.
import { Writable } from 'node:stream';
import { loadConfig } from '../../src/config/index.js';
import { createLogger } from '../../src/log.js';
import { startCallsync, type Callsync, type CallsyncOptions } from '../../workers/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './redis.js';

export interface TestCallsync extends Callsync {
  prefix: string;
  /** Every log line written, parsed. */
  logs: Record<string, unknown>[];
  stop(): Promise<void>;
}

/** Collects log lines in memory (and proves what was, or was not, logged). */
export function memoryLog(level = 'info') {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { lines, log: createLogger({ level, destination }) };
}

/** Environment for a test instance: real Redis, a free port on loopback, fast retries and takeovers. */
export function testEnv(prefix: string, env: Record<string, string> = {}): Record<string, string> {
  return {
    REDIS_URL,
    QUEUE_PREFIX: prefix,
    PORT: '0',
    HOST: '127.0.0.1',
    WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
    JOB_BACKOFF_MS: '50',
    JOB_MAX_BACKOFF_MS: '500',
    WORKER_STALLED_INTERVAL_MS: '1000',
    WORKER_LOCK_DURATION_MS: '2000',
    ...env,
  };
}

export async function startTestCallsync(env: Record<string, string> = {}, options: Partial<CallsyncOptions> = {}): Promise<TestCallsync> {
  const prefix = env.QUEUE_PREFIX ?? uniquePrefix('cs');
  const config = loadConfig(testEnv(prefix, env));
  const { lines, log } = memoryLog(process.env.TEST_LOG_LEVEL ?? 'info');
  const app = await startCallsync(config, { log, ...options });
  return {
    ...app,
    prefix,
    logs: lines,
    async stop() {
      await app.close();
      await cleanupPrefix(prefix);
    },
  };
}

export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON; keep the text
  }
  return { status: res.status, body: parsed, headers: res.headers };
}
