// Child process for test/startup-failure.redis.test.ts: starts every role of callsync against real Redis
// on a port the parent holds, so the start fails at listen, half-way through. It prints the error
// and then does nothing more: the process ends by itself only if the failed start closed every
// connection and timer it had opened.
import { loadConfig } from '../../src/config/index.js';
import { startCallsync } from '../../workers/callsync.js';
import { memoryLog, testEnv } from './callsync.js';
import { uniquePrefix } from './redis.js';

const { log } = memoryLog('fatal');
const config = loadConfig(
  testEnv(uniquePrefix('failstart'), { PORT: process.env.TAKEN_PORT ?? '1', SPOOL_ENABLED: 'false' }),
);
try {
  await startCallsync(config, { log });
  console.log('started');
} catch (err) {
  console.log(`start failed: ${(err as Error).message}`);
}
