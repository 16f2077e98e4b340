// One key for every keyed hash of a phone number (queues/privacy-key.ts, docs/privacy.md "The keyed
// hash"): PRIVACY_HMAC_SECRET, else a key generated once and kept in Redis. A real callsync with an
// SMS sink (cooldown on) texts a caller through the fake platform API: with no secret configured no
// state it keeps names the number in any format; the "never twice" marker, the cooldown and the
// timeline's number index (`callsync call +49…`) all use the one key, generated or configured; a
// marker an earlier version wrote in clear is still honoured; two processes end with the same key.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { Queue } from 'bullmq';
import { parsePhoneNumberFromString } from 'libphonenumber-js/max';
import { sinkQueueName } from '../queues/registry.js';
import { redisKeys } from '../queues/keys.js';
import { PRIVACY_KEY_BYTES, storedPrivacyKey } from '../queues/privacy-key.js';
import { CallTimeline } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { recipientHash } from '../src/sinks/notify/ledger.js';
import { runCli } from '../src/cli/index.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { jobIn } from './support/jobs.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const N = '+491701234567';
const LEGACY = '+491761234599';
const AGENT = 'agent-1';

/** A number in every format a person or a sender may write it. */
function numberForms(e164: string): string[] {
  const p = parsePhoneNumberFromString(e164)!;
  const digits = `${p.countryCallingCode}${p.nationalNumber}`;
  return [
    p.number,
    `00${digits}`,
    digits,
    p.formatNational(),
    p.formatNational().replace(/\D/g, ''),
    p.formatInternational(),
    String(p.nationalNumber),
  ];
}

function call(callId: string, from: string): Record<string, unknown> {
  return webhookPayload(callId, (p) => {
    p.call.from = from;
  });
}

/** Every key under `pattern` with its name, DUMP and value by type. */
async function everyKey(redis: Redis, pattern: string): Promise<{ key: string; text: string }[]> {
  const out: { key: string; text: string }[] = [];
  let cursor = '0';
  do {
    const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
    cursor = next;
    for (const key of keys) {
      const type = await redis.type(key);
      const dump = (await redis.dumpBuffer(key)) ?? Buffer.alloc(0);
      let value: unknown = null;
      if (type === 'string') value = await redis.get(key);
      else if (type === 'hash') value = await redis.hgetall(key);
      else if (type === 'list') value = await redis.lrange(key, 0, -1);
      else if (type === 'set') value = await redis.smembers(key);
      else if (type === 'zset') value = await redis.zrange(key, 0, -1, 'WITHSCORES');
      else if (type === 'stream') value = await redis.xrange(key, '-', '+');
      out.push({ key, text: `${key}\n${dump.toString('latin1')}\n${JSON.stringify(value)}` });
    }
  } while (cursor !== '0');
  return out;
}

/** The timeline's index name of a number: HMAC-SHA256 keyed with `key`, hex (the test's own computation). */
const indexHmac = (key: Buffer | string, number: string) =>
  createHmac('sha256', key).update(number).digest('hex').slice(0, 40);

describe('one privacy key: PRIVACY_HMAC_SECRET, else generated once and kept in Redis', () => {
  let api: FakeTelephony;
  let dir: string;
  const redis = new Redis(REDIS_URL);
  const running: TestCallsync[] = [];

  /** A callsync with one SMS sink (cooldown 12 h) texting the caller of every call, on its own prefix. */
  async function start(
    prefix: string,
    extra: Record<string, string> = {},
  ): Promise<{ cs: TestCallsync; env: Record<string, string> }> {
    const configPath = join(dir, `${prefix}.yaml`);
    await writeFile(
      configPath,
      'sinks:\n  sms:\n    type: sms\n    smsId: s0\n    to: caller\n    cooldown: 12h\n    message: "Thanks for calling."\nroutes:\n  - to: [sms]\n',
    );
    const env = testEnv(prefix, {
      REDIS_URL,
      CALLSYNC_CONFIG: configPath,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      ...extra,
    });
    const cs = await startTestCallsync(env);
    running.push(cs);
    return { cs, env };
  }

  /** Posts a call and waits until its SMS job has ended; returns its result. */
  async function deliver(cs: TestCallsync, callId: string, from: string): Promise<{ status: string; reason?: string }> {
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, call(callId, from))).status, 202);
    const queue = new Queue(sinkQueueName('sms'), { connection: redis, prefix: cs.prefix });
    try {
      const id = callHash(callKey('ai-agent', AGENT, callId));
      const job = await waitFor(() => jobIn(queue, id, 'completed'), {
        what: `the SMS job of ${callId} done`,
        timeoutMs: 30_000,
      });
      return job.returnvalue as { status: string; reason?: string };
    } finally {
      await queue.close();
    }
  }

  before(async () => {
    api = await FakeTelephony.start();
    dir = await mkdtemp(join(tmpdir(), 'privacy-key-'));
  });
  after(async () => {
    for (const cs of running) await cs.stop();
    await api?.close();
    await rm(dir, { recursive: true, force: true });
    redis.disconnect();
  });

  test('no secret configured: after an SMS and its cooldown, no state under the prefix holds the number in any format; the ledger, the cooldown and the number index share the generated key', async () => {
    const { cs, env } = await start(uniquePrefix('pkey'));
    assert.equal(env.PRIVACY_HMAC_SECRET, undefined);
    const done = await deliver(cs, 'pk-1', N);
    assert.equal(done.status, 'done', JSON.stringify(done));
    assert.ok(
      api.sms.some((s) => s.recipient === N),
      'the SMS went out',
    );

    const key = Buffer.from((await redis.get(`${cs.prefix}:privacy-key`)) ?? '', 'base64');
    assert.equal(key.length, PRIVACY_KEY_BYTES, 'a generated key of 32 bytes is kept in Redis');
    const state = `${cs.prefix}:state:sms:`;
    const marker = `${state}sent:${callHash(callKey('ai-agent', AGENT, 'pk-1'))}:${recipientHash(key, N)}`;
    assert.equal(
      JSON.parse((await redis.get(marker)) ?? '{}').state,
      'sent',
      'the "never twice" marker names the number by its keyed hash',
    );
    assert.ok(
      (await redis.get(`${state}cooldown:${recipientHash(key, N)}`)) !== null,
      'the cooldown names the number by its keyed hash',
    );
    // The timeline's number index: the same key (the HMAC computed here, not by the product).
    const indexKey = `${cs.prefix}:calls:number:${indexHmac(key, N)}`;
    await waitFor(async () => (await redis.zcard(indexKey)) > 0, { what: 'the number index entry', timeoutMs: 10_000 });
    assert.equal(
      await new CallTimeline(redis, redisKeys(cs.config.redis), { ttlDays: 30 }).numberHmac(N),
      indexHmac(key, N),
    );
    const out: string[] = [];
    assert.equal(
      await runCli(['call', N, '--json'], { env, out: (l) => out.push(l), err: (l) => out.push(l) }),
      0,
      out.join('\n'),
    );
    assert.ok(
      (JSON.parse(out.join('\n')) as { calls: { callId: string }[] }).calls.some((c) => c.callId === 'pk-1'),
      'callsync call +49… finds the call',
    );

    // Everything callsync keeps beyond the delivery: the queues' jobs and the inbound log carry the
    // call until it is delivered (and are erased by retention and forget); nothing else may name N.
    const kept = (await everyKey(redis, `${cs.prefix}:*`)).filter(
      ({ key: k }) => !k.startsWith(`${cs.prefix}:sink-sms:`) && !/:inbound-(log|parked)$/.test(k),
    );
    assert.ok(
      kept.some((k) => k.key === marker) &&
        kept.some((k) => k.key.startsWith(`${state}cooldown:`)) &&
        kept.some((k) => k.key === indexKey),
      'the search sees the marker, the cooldown and the index',
    );
    const forms = numberForms(N);
    const found = kept.flatMap(({ key: k, text }) => forms.filter((f) => text.includes(f)).map((f) => `${k}: ${f}`));
    assert.deepEqual(found, [], 'no key or value holds the number');
  });

  test('a "never twice" marker an earlier version wrote in clear is still honoured', async () => {
    const { cs } = await start(uniquePrefix('pkey-legacy'));
    const sent = api.sms.length;
    await redis.set(
      `${cs.prefix}:state:sms:sent:${callHash(callKey('ai-agent', AGENT, 'pk-old'))}:${LEGACY}`,
      JSON.stringify({ state: 'sent', at: new Date().toISOString(), ref: 'sms-earlier' }),
      'PX',
      3_600_000,
    );
    const result = await deliver(cs, 'pk-old', LEGACY);
    assert.equal(result.status, 'skipped');
    assert.match(result.reason ?? '', /already sent/);
    assert.equal(api.sms.length, sent, 'not texted again');
  });

  test('PRIVACY_HMAC_SECRET set: the ledger, the cooldown and the number index all use it, and no key is generated', async () => {
    const secret = 'configured-privacy-secret-0123456789';
    const { cs } = await start(uniquePrefix('pkey-set'), { PRIVACY_HMAC_SECRET: secret });
    assert.equal((await deliver(cs, 'pk-set', N)).status, 'done');
    const state = `${cs.prefix}:state:sms:`;
    assert.ok(
      (await redis.get(
        `${state}sent:${callHash(callKey('ai-agent', AGENT, 'pk-set'))}:${recipientHash(secret, N)}`,
      )) !== null,
      'the marker',
    );
    assert.ok((await redis.get(`${state}cooldown:${recipientHash(secret, N)}`)) !== null, 'the cooldown');
    await waitFor(async () => (await redis.zcard(`${cs.prefix}:calls:number:${indexHmac(secret, N)}`)) > 0, {
      what: 'the number index keyed with the secret',
      timeoutMs: 10_000,
    });
    assert.equal(await redis.exists(`${cs.prefix}:privacy-key`), 0);
  });

  test('two processes asking at once end with one generated key', async () => {
    const prefix = uniquePrefix('pkey-race');
    const module = pathToFileURL(join(import.meta.dirname, '..', 'queues', 'privacy-key.ts')).href;
    const script = `import { Redis } from 'ioredis'; const { storedPrivacyKey } = await import(${JSON.stringify(module)}); const r = new Redis(${JSON.stringify(REDIS_URL)}); const k = await storedPrivacyKey(r, ${JSON.stringify(prefix)}); process.stdout.write(k.toString('base64')); r.disconnect();`;
    const run = () =>
      promisify(execFile)(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
        cwd: join(import.meta.dirname, '..'),
        timeout: 60_000,
      });
    try {
      const [a, b] = await Promise.all([run(), run()]);
      assert.equal(Buffer.from(a.stdout, 'base64').length, PRIVACY_KEY_BYTES);
      assert.equal(a.stdout, b.stdout, 'both processes use the same key');
      assert.equal(await redis.get(`${prefix}:privacy-key`), a.stdout, 'the one kept in Redis');
      assert.equal((await storedPrivacyKey(redis, prefix)).toString('base64'), a.stdout, 'and a third reads it too');
    } finally {
      await cleanupPrefix(prefix);
    }
  });
});
