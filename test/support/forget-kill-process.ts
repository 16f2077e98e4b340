// `callsync forget <number>` as a process that kills itself with SIGKILL at one point of its run
// (test/privacy-forget-faults.redis.test.ts). FORGET_KILL_AT=<step>:<n>: after the n-th item of that
// step (src/privacy/forget.ts ForgetStep); FORGET_KILL_AT=lookup-gone: right after the timeline's
// lookup of the number (`…:calls:number:<keyed hash>`) was erased. Exit 3 when the point was never
// reached. The configuration comes from the environment, the Redis connection is the CLI's.
import pino from 'pino';
import { loadConfig } from '../../src/config/index.js';
import { connectRedis } from '../../src/cli/redis.js';
import { forget, forgetRegion } from '../../src/privacy/forget.js';
import { parseTarget } from '../../src/model/number-words.js';
import { CallTimeline } from '../../queues/timeline.js';
import { redisKeys } from '../../queues/keys.js';

const at = process.env.FORGET_KILL_AT ?? '';
const config = loadConfig(process.env);
const redis = await connectRedis(config);
const target = parseTarget(process.argv[2]!, forgetRegion(config));
const timeline = new CallTimeline(redis, redisKeys(config.redis), config.timeline);
const lookup = target.kind === 'number' ? timeline.numberKey(await timeline.numberHmac(target.e164)) : '';
const [step, nth] = at.split(':') as [string, string];
let seen = 0;
await forget(config, redis, pino({ level: 'silent' }), {
  target,
  dryRun: false,
  crm: false,
  onStep: async (done) => {
    const kill =
      at === 'lookup-gone'
        ? done === 'key' && (await redis.exists(lookup)) === 0
        : done === step && ++seen === Number(nth);
    if (kill) process.kill(process.pid, 'SIGKILL');
  },
});
redis.disconnect();
process.exit(3);
