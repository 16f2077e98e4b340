// `npm start`: runs the roles named by CALLSYNC_ROLE (default all) until SIGTERM / SIGINT.
import { ConfigError, loadConfig } from '../src/config/index.js';
import { createLogger } from '../src/log.js';
import { startCallsync } from './callsync.js';

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
  for (const warning of config.warnings) log.warn(warning);
  const app = await startCallsync(config, { log });
  log.info({ role: config.role }, 'callsync started');

  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down');
    const force = setTimeout(() => {
      log.error('shutdown grace period over: exiting');
      process.exit(1);
    }, config.worker.shutdownGraceMs + 5000);
    force.unref();
    void app.close().then(() => {
      log.info('stopped');
      process.exit(0);
    });
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}

void main();
