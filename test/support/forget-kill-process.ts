// `callsync forget <number>` as a process that kills itself with SIGKILL at one point of its run
// (test/privacy-forget-faults.redis.test.ts): FORGET_KILL_AT=<step>:<n> — after the n-th item of
// that step (src/privacy/forget.ts ForgetStep). The configuration comes from the environment, the
// Redis connection is the CLI's.
import pino from 'pino';
import { loadConfig } from '../../src/config/index.js';
import { connectRedis } from '../../src/cli/redis.js';
import { forget, forgetRegion } from '../../src/privacy/forget.js';
import { parseTarget } from '../../src/model/number-words.js';

const [step, nth] = (process.env.FORGET_KILL_AT ?? '').split(':') as [string, string];
const config = loadConfig(process.env);
const redis = await connectRedis(config);
let seen = 0;
await forget(config, redis, pino({ level: 'silent' }), {
  target: parseTarget(process.argv[2]!, forgetRegion(config)),
  dryRun: false,
  crm: false,
  onStep: (at) => {
    if (at === step && ++seen === Number(nth)) process.kill(process.pid, 'SIGKILL');
  },
});
redis.disconnect();
// Not killed: the step was not reached as often as asked.
process.exit(3);
