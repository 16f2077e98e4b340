// `callsync call` and `calls --number` read a number as `opt-out` and `forget` do: E.164, 00…,
// national (PHONE_DEFAULT_REGION), in one word or several; a word of digits only is looked up as a
// call id too (a platform call id may be all digits).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { callHash, callKey } from '../src/model/call.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { cli } from './support/cli.js';

const prefix = uniquePrefix('cli-call-numbers');
const env = { QUEUE_PREFIX: prefix, PRIVACY_HMAC_SECRET: 'a-test-key-of-some-length-0123456789' };
/** The sample call's caller (send-sample): a Berlin landline. */
const CALLER = '+4930901820';

/** The call ids of `callsync call … --json`, and its exit code. */
async function callIds(argv: string[]): Promise<{ code: number | 'running'; ids: string[]; err: string }> {
  const r = await cli(['call', ...argv, '--json'], env);
  const ids = r.out ? (JSON.parse(r.out) as { calls: { callId: string }[] }).calls.map((c) => c.callId) : [];
  return { code: r.code, ids, err: r.err };
}

describe('callsync call and calls --number: a number in any format forget reads', () => {
  let redis: Redis;
  before(async () => {
    redis = new Redis(REDIS_URL);
    const config = loadConfig({ REDIS_URL, ...env });
    const timeline = new CallTimeline(redis, redisKeys(config.redis), config.timeline);
    const received = async (callId: string, from: string) => {
      const call = {
        key: callKey('ai-agent', 'agent-1', callId),
        source: 'ai-agent' as const,
        callId,
        direction: 'in' as const,
        from,
        to: '+4940809010',
        startedAt: new Date().toISOString(),
      };
      await timeline.received(call, { jobId: callHash(call.key), revision: 'new' });
    };
    await received('sample-1', CALLER);
    // A platform call id of digits only that also reads as a German number, of another caller.
    await received('030901820', '+4915112345678');
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('call: E.164, 00, national and several words name the same caller', async () => {
    for (const argv of [[CALLER], ['004930901820'], ['4930901820'], ['+49', '30', '901820'], ['030', '901820']]) {
      const r = await callIds(argv);
      assert.equal(r.code, 0, `${argv.join(' ')}: ${r.err}`);
      assert.deepEqual(r.ids, ['sample-1'], argv.join(' '));
    }
  });

  test('call <digits>: the calls of that call id and of that number, the call id first', async () => {
    const r = await callIds(['030901820']);
    assert.equal(r.code, 0, r.err);
    assert.deepEqual(r.ids, ['030901820', 'sample-1']);
  });

  test('call: none found names what was looked up; several numbers are a usage error', async () => {
    const none = await cli(['call', '089', '1234567'], env);
    assert.equal(none.code, 1);
    assert.match(none.err, /^no call found for that number/);
    const digits = await cli(['call', '0891234567'], env);
    assert.equal(digits.code, 1);
    assert.match(digits.err, /^no call found for "0891234567" \(as a call id or a number\)/);
    const two = await cli(['call', '030', '901820', '0151', '12345678'], env);
    assert.equal(two.code, 2);
    assert.match(two.err, /reads as 2 phone numbers: call takes one/);
  });

  test('calls --number: national, 00 and spaced forms find the call; anything else is a usage error', async () => {
    for (const number of ['030901820', '004930901820', '+49 30 901820', '030 901820', CALLER]) {
      const r = await cli(['calls', '--since', '1h', '--number', number, '--json'], env);
      assert.equal(r.code, 0, `${number}: ${r.err}`);
      const ids = (JSON.parse(r.out) as { calls: { callId: string }[] }).calls.map((c) => c.callId);
      assert.deepEqual(ids, ['sample-1'], number);
    }
    const bad = await cli(['calls', '--since', '1h', '--number', 'abc'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /^callsync calls: --number must be one phone number .*, got "abc"/);
  });
});
