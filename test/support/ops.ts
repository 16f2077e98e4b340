// Starts callsync in this process the way `callsync start` does (metrics, request ids, dashboard,
// shutdown gate, ops server), against real Redis with a unique prefix.
import { loadConfig } from '../../src/config/index.js';
import { startWithOperations, type RunningCallsync, type StartOptions } from '../../workers/run.js';
import { memoryLog, testEnv } from './callsync.js';
import { cleanupPrefix, uniquePrefix } from './redis.js';

export interface OpsCallsync extends RunningCallsync {
  prefix: string;
  logs: Record<string, unknown>[];
  /** The log lines as written. */
  rawLogs: string[];
  /** The ingress URL (or the ops server's when there is no ingress). */
  url: string;
  stop(): Promise<void>;
}

export async function startOpsCallsync(
  env: Record<string, string> = {},
  options: Partial<StartOptions> = {},
  logLevel = 'info',
): Promise<OpsCallsync> {
  const prefix = env.QUEUE_PREFIX ?? uniquePrefix('ops');
  const config = loadConfig(testEnv(prefix, { SHUTDOWN_GRACE_MS: '10000', ...env }));
  const { lines, raw, log } = memoryLog(logLevel);
  const running = await startWithOperations({ config, log, ...options });
  let stopped = false;
  return {
    ...running,
    prefix,
    logs: lines,
    rawLogs: raw,
    url: running.callsync.url ?? running.operations.url ?? '',
    async stop() {
      if (stopped) return;
      stopped = true;
      await running.shutdown('test over');
      await cleanupPrefix(prefix);
    },
  };
}

/** The first call `GET /api/calls/<ref>` names, as the test reads it; undefined when none (or not 200). */
export async function apiCallOf<T>(url: string, ref: string, headers: Record<string, string>): Promise<T | undefined> {
  const res = await fetch(`${url}/api/calls/${encodeURIComponent(ref)}`, { headers });
  if (res.status !== 200) return undefined;
  return ((await res.json()) as { calls: T[] }).calls[0];
}
