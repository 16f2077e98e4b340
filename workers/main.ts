// Runs the roles named by CALLSYNC_ROLE (default all) until SIGTERM / SIGINT.
import { ConfigError, loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/log.js';
import { runUntilSignalled } from './run.js';

async function main(): Promise<void> {
  let config;
  try {
    config = loadConfig(process.env);
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(err.message);
      process.exit(2);
    }
    throw err;
  }
  const log = createLogger({ level: config.env.LOG_LEVEL });
  // Metrics, dashboard, request ids, ops server and graceful shutdown (workers/run.ts).
  await runUntilSignalled(config, log);
}

void main();
