// The `sms` notification sink against the fake platform API on loopback (through the real API
// client) and real Redis: exact SendWebSmsRequests, quiet hours by a controllable clock, cooldown,
// opt-out, unusable numbers, permanent errors, unknown outcomes and redelivery.
import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, test } from 'node:test';
import { Writable } from 'node:stream';
import { Redis } from 'ioredis';
import { createLogger } from '../src/log.js';
import type { CanonicalCall } from '../src/model/call.js';
import { PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { NotificationLedger } from '../src/sinks/notify/ledger.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import { smsSinkType } from '../src/sinks/notify/sms.js';

/** What the SMS sink type builds its sinks with (SinkDeps with its settings). */
type NotifySinkDeps = Parameters<typeof smsSinkType.create>[2];
import { smsLength } from '../src/sinks/notify/sms-length.js';
import { zonedTimeToUtc, zonedParts } from '../src/sinks/notify/time.js';
import type { Sink, SinkContext } from '../src/sinks/types.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import type { TelephonyClient } from '../src/telephony/types.js';
import { sampleCall } from './support/calls.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';

const MOBILE = '+4915112345678';
const OTHER_MOBILE = '+4917612345678';
const LANDLINE = '+492116355340';

const logLines: string[] = [];
const log = createLogger({
  level: 'debug',
  destination: new Writable({
    write(chunk: Buffer, _enc, done) {
      logLines.push(chunk.toString('utf8'));
      done();
    },
  }),
});

function ctx(jobId = 'job-1', attempt = 1): SinkContext {
  return { jobId, attempt, log, signal: new AbortController().signal };
}

/** A call from the fixture, with `patch` applied. */
function call(id: string, patch: Partial<CanonicalCall> = {}): CanonicalCall {
  return { ...sampleCall(id), from: MOBILE, fromRaw: MOBILE, ...patch };
}

/** The next instant, after the real clock, at which Berlin shows `hour:00` (the client checks sendAt against the real clock). */
function nextBerlin(hour: number): Date {
  const now = new Date();
  const p = zonedParts(now, 'Europe/Berlin');
  for (let dayOffset = 0; dayOffset < 3; dayOffset++) {
    const day = new Date(Date.UTC(p.year, p.month - 1, p.day + dayOffset));
    const at = zonedTimeToUtc(
      { year: day.getUTCFullYear(), month: day.getUTCMonth() + 1, day: day.getUTCDate(), hour, minute: 0 },
      'Europe/Berlin',
    );
    if (at.getTime() > now.getTime()) return at;
  }
  throw new Error('unreachable');
}

let api: FakeTelephony;
let client: TelephonyClient;
let redis: Redis;
let prefix: string;
let optOut: OptOutList;
let clock: Date;

before(async () => {
  api = await FakeTelephony.start();
  client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, timeoutMs: 300 });
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
});

after(async () => {
  await api.close();
  redis.disconnect();
});

beforeEach(async () => {
  if (prefix) await cleanupPrefix(prefix);
  prefix = uniquePrefix('notify-sms');
  optOut = new OptOutList(redis, prefix);
  api.sms.length = 0;
  api.smsAttempts.length = 0;
  api.requests.length = 0;
  api.clearFaults();
  logLines.length = 0;
  clock = new Date('2026-04-08T10:05:00Z'); // 12:05 in Berlin
});

after(async () => {
  if (prefix) await cleanupPrefix(prefix);
});

const state = (name: string) => new RedisKeyValueStore(redis, `${prefix}:state:`).scoped(name);

function sink(name: string, options: Record<string, unknown>, deps: Partial<NotifySinkDeps> = {}): Sink {
  const parsed = smsSinkType.options.parse(options);
  const state = new RedisKeyValueStore(redis, `${prefix}:state:`).scoped(name);
  return smsSinkType.create(name, parsed, {
    log,
    state,
    telephony: client,
    now: () => clock,
    settings: {},
    optOut,
    ...deps,
  } as NotifySinkDeps);
}

const missedCall = () =>
  sink('missed-sms', {
    smsId: 's0',
    to: 'caller',
    message: 'Sorry we missed your call on {{date}} at {{time}}. We will call you back.',
    timeZone: 'Europe/Berlin',
    cooldown: '12h',
  });

describe('sms sink: what the platform receives', () => {
  test('a missed call sends the exact SendWebSmsRequest to the caller, with the API auth', async () => {
    const result = await missedCall().deliver(call('c-missed', { outcome: 'missed' }), ctx());
    assert.equal(result.status, 'done');
    assert.deepEqual(api.sms, [
      {
        smsId: 's0',
        recipient: MOBILE,
        message: 'Sorry we missed your call on 2026-04-08 at 12:00. We will call you back.',
      },
    ]);
    const req = api.requests.find((r) => r.path === '/v2/sessions/sms');
    assert.equal(req?.method, 'POST');
    assert.equal(req?.authorization, `Basic ${Buffer.from('token-id:token-secret').toString('base64')}`);
    // Neither the text nor the full number reaches the logs.
    const logged = logLines.join('');
    assert.ok(!logged.includes('Sorry we missed'), 'message text logged');
    assert.ok(!logged.includes(MOBILE), 'full phone number logged');
  });

  test('the summary SMS of an appointment call is cut cleanly at maxLength, staying GSM-7', async () => {
    const s = sink('appointment-sms', {
      smsId: 's1',
      message: 'Thanks for calling! Here is what we agreed: {{summary}}',
      maxLength: 70,
    });
    await s.deliver(call('c-appt'), ctx());
    assert.equal(api.sms.length, 1);
    const message = api.sms[0]!.message;
    assert.equal(message, 'Thanks for calling! Here is what we agreed: The caller asked to...');
    assert.ok([...message].length <= 70);
    assert.equal(smsLength(message).encoding, 'gsm7');
  });

  test('a long plain-text SMS is cut to its segments (default 3) and stays GSM-7: no "…" turning it into UCS-2', async () => {
    const long =
      'The caller asked to move her dentist appointment to Friday morning and to get a confirmation by SMS. '.repeat(8);
    const s = sink('summary-sms', { smsId: 's1', message: 'Agreed: {{summary}}' });
    await s.deliver(call('c-long', { summary: { ...sampleCall().summary!, content: long } }), ctx());
    const message = api.sms[0]!.message;
    const { encoding, segments } = smsLength(message);
    assert.equal(encoding, 'gsm7', `ends with ${JSON.stringify(message.slice(-5))}`);
    assert.ok(segments <= 3, `${segments} segments`);
    assert.ok(message.endsWith('...') && message.length > 400, `${message.length} characters`);
    // A text with a character outside GSM is UCS-2 anyway: cut to its segments of 67 with "…".
    api.sms.length = 0;
    await sink('summary-sms-2', { smsId: 's1', message: 'Вы договорились: {{summary}}', maxSegments: 2 }).deliver(
      call('c-long-2', { summary: { ...sampleCall().summary!, content: long } }),
      ctx(),
    );
    const ucs2 = smsLength(api.sms[0]!.message);
    assert.deepEqual([ucs2.encoding, ucs2.segments], ['ucs2', 2]);
    assert.ok(api.sms[0]!.message.endsWith('…'));
  });

  test('fixed recipients each get the text; outgoing calls text the callee when `to` is caller', async () => {
    await sink('team-sms', {
      smsId: 's0',
      to: [OTHER_MOBILE, '+447911123456'],
      message: 'Call from {{caller}}: {{outcome}}',
    }).deliver(call('c-team'), ctx());
    assert.deepEqual(
      api.sms.map((m) => [m.recipient, m.message]),
      [
        [OTHER_MOBILE, `Call from ${MOBILE}: answered`],
        ['+447911123456', `Call from ${MOBILE}: answered`],
      ],
    );
    api.sms.length = 0;
    await sink('out-sms', { smsId: 's0', message: 'We tried to reach you.' }).deliver(
      call('c-out', {
        direction: 'out',
        from: LANDLINE,
        fromRaw: LANDLINE,
        to: OTHER_MOBILE,
        toRaw: OTHER_MOBILE,
        outcome: 'missed',
      }),
      ctx(),
    );
    assert.deepEqual(api.sms, [{ smsId: 's0', recipient: OTHER_MOBILE, message: 'We tried to reach you.' }]);
  });
});

describe('sms sink: quiet hours', () => {
  const quiet = { start: '21:00', end: '08:00', timeZone: 'Europe/Berlin' };

  test('an SMS due at 23:00 is handed over with sendAt at 08:00 the next morning', async () => {
    clock = nextBerlin(23);
    const eight = nextBerlin(8);
    const expectedSendAt =
      (eight.getTime() > clock.getTime() ? eight : new Date(eight.getTime() + 24 * 3600_000)).getTime() / 1000;
    const result = await sink('quiet-sms', { smsId: 's0', message: 'Sorry we missed you.', quietHours: quiet }).deliver(
      call('c-night'),
      ctx(),
    );
    assert.equal(result.status, 'done');
    assert.deepEqual(api.sms, [
      { smsId: 's0', recipient: MOBILE, message: 'Sorry we missed you.', sendAt: expectedSendAt },
    ]);
    assert.equal(zonedParts(new Date(api.sms[0]!.sendAt! * 1000), 'Europe/Berlin').hour, 8);
  });

  test('outside quiet hours no sendAt is set', async () => {
    clock = nextBerlin(12);
    await sink('quiet-sms', { smsId: 's0', message: 'Hello', quietHours: quiet }).deliver(call('c-noon'), ctx());
    assert.deepEqual(api.sms, [{ smsId: 's0', recipient: MOBILE, message: 'Hello' }]);
  });

  test('quietHoursMode delay keeps the job waiting until 08:00, then sends without sendAt', async () => {
    const s = sink('delay-sms', { smsId: 's0', message: 'Hello', quietHours: quiet, quietHoursMode: 'delay' });
    clock = new Date('2026-04-08T21:00:00Z'); // 23:00 in Berlin
    await assert.rejects(s.deliver(call('c-delay'), ctx()), (err: unknown) => {
      assert.ok(err instanceof RetryLaterError);
      assert.equal(err.scope, 'job');
      assert.equal(err.delayMs, 9 * 3600_000); // until 08:00 Berlin = 06:00Z
      return true;
    });
    assert.equal(api.smsAttempts.length, 0);
    clock = new Date('2026-04-09T06:00:00Z');
    assert.equal((await s.deliver(call('c-delay'), ctx())).status, 'done');
    assert.deepEqual(api.sms, [{ smsId: 's0', recipient: MOBILE, message: 'Hello' }]);
  });
});

describe('sms sink: who is not texted', () => {
  test('cooldown: one SMS per number and rule within 12 h', async () => {
    const s = missedCall();
    assert.equal((await s.deliver(call('c-1'), ctx())).status, 'done');
    clock = new Date(clock.getTime() + 3600_000);
    const second = await s.deliver(call('c-2'), ctx());
    assert.equal(second.status, 'skipped');
    assert.match(second.reason ?? '', /cooldown \(12 h\)/);
    // The marker taken before the cooldown said no is given back: c-2 was not texted, and may be later.
    assert.equal(await new NotificationLedger(state('missed-sms')).read(call('c-2').key, MOBILE), null);
    // Another number and another rule are not affected.
    assert.equal((await s.deliver(call('c-3', { from: OTHER_MOBILE, fromRaw: OTHER_MOBILE }), ctx())).status, 'done');
    assert.equal(
      (await sink('other-rule', { smsId: 's0', message: 'Other rule' }).deliver(call('c-4'), ctx())).status,
      'done',
    );
    // After 12 h the number may be texted again.
    clock = new Date(clock.getTime() + 12 * 3600_000);
    assert.equal((await s.deliver(call('c-5'), ctx())).status, 'done');
    assert.deepEqual(
      api.sms.map((m) => m.recipient),
      [MOBILE, OTHER_MOBILE, MOBILE, MOBILE],
    );
  });

  test('opt-out: numbers in the config and in the Redis set are never texted', async () => {
    const configured = sink('optout-sms', { smsId: 's0', message: 'Hi', optOut: [MOBILE] });
    const result = await configured.deliver(call('c-1'), ctx());
    assert.equal(result.status, 'skipped');
    assert.match(result.reason ?? '', /opted out/);

    const s = sink('shared-optout-sms', { smsId: 's0', message: 'Hi' });
    assert.equal(await optOut.add('+49 151 12345678'), 1);
    assert.deepEqual(await optOut.list(), [MOBILE]);
    const skipped = await s.deliver(call('c-2'), ctx());
    assert.equal(skipped.status, 'skipped');
    assert.match(skipped.reason ?? '', /opted out/);
    assert.equal(api.smsAttempts.length, 0);

    assert.equal(await optOut.remove(MOBILE), 1);
    assert.equal((await s.deliver(call('c-3'), ctx())).status, 'done');
    assert.equal(api.sms.length, 1);
    assert.throws(() => OptOutList.normalize('0151 12345678'), /E\.164/);
  });

  test('anonymous and <unknown> callers and landlines are skipped with the reason', async () => {
    const s = missedCall();
    const cases: [Partial<CanonicalCall>, RegExp][] = [
      [{ from: null, fromRaw: null }, /anonymous caller/],
      [{ from: null, fromRaw: 'anonymous' }, /anonymous caller/],
      [{ from: null, fromRaw: '<unknown>' }, /anonymous caller/],
      [{ from: LANDLINE, fromRaw: LANDLINE }, /landline/],
      [{ from: '+49800123456', fromRaw: '+49800123456' }, /not a valid E\.164 number/],
    ];
    for (const [i, [patch, reason]] of cases.entries()) {
      const result = await s.deliver(call(`c-skip-${i}`, patch), ctx());
      assert.equal(result.status, 'skipped');
      assert.match(result.reason ?? '', reason);
    }
    assert.equal(api.smsAttempts.length, 0);
  });
});

describe('sms sink: failures and never twice', () => {
  test('402 insufficient funds is permanent (dead letters with the reason); after a top-up a replay sends once', async () => {
    api.inject({ on: 'sms', status: 402, detail: 'insufficient funds' });
    const s = missedCall();
    await assert.rejects(s.deliver(call('c-402'), ctx()), (err: unknown) => {
      assert.ok(err instanceof PermanentError);
      assert.equal(err.status, 402);
      assert.match(err.message, /402.*insufficient funds/);
      return true;
    });
    assert.equal(api.sms.length, 0);
    // The platform said no: nothing was sent, so neither the marker nor the cooldown stays.
    assert.equal((await s.deliver(call('c-402'), ctx())).status, 'done');
    assert.equal(api.sms.length, 1);
  });

  test("one fixed recipient refused (400 on /recipient) does not keep the others from their SMS; the dead letter's retry sends to none twice", async () => {
    const third = '+447911123456';
    api.inject({ on: 'sms', status: 400, detail: 'recipient not reachable', pointer: '/recipient' });
    const s = sink('team-sms', { smsId: 's0', to: [OTHER_MOBILE, MOBILE, third], message: 'Call from {{caller}}' });
    const err = await s.deliver(call('c-team-400'), ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError, `expected a PermanentError, got ${String(err)}`);
    assert.equal(err.status, 400);
    assert.match(err.message, /recipient not reachable/);
    // The refused recipient is named masked, the others are said to be sent; no number in clear.
    assert.ok(!err.message.includes(OTHER_MOBILE) && !err.message.includes(MOBILE) && !err.message.includes(third));
    assert.match(err.message, /sent to 2 of 3/);
    assert.deepEqual(
      api.sms.map((m) => m.recipient),
      [MOBILE, third],
    );
    // The dead letter retried: the two sent are not sent again; the refused one is tried again.
    const again = await s.deliver(call('c-team-400'), ctx('job-1', 2));
    assert.equal(again.status, 'done');
    assert.deepEqual(
      api.sms.map((m) => m.recipient),
      [MOBILE, third, OTHER_MOBILE],
    );
  });

  test('a 5xx is transient and the retry sends exactly once', async () => {
    api.inject({ on: 'sms', status: 500 });
    const s = missedCall();
    await assert.rejects(s.deliver(call('c-500'), ctx()), TransientError);
    assert.equal((await s.deliver(call('c-500'), ctx())).status, 'done');
    assert.equal(api.sms.length, 1);
  });

  test('a refused connection (never sent) is transient and may be retried', async () => {
    const closed = await FakeTelephony.start();
    const url = closed.url;
    await closed.close();
    const deadClient = createTelephonyClient({ baseUrl: url, auth: api.basicAuth, timeoutMs: 300 });
    await assert.rejects(
      sink('refused-sms', { smsId: 's0', message: 'Hi' }, { telephony: deadClient }).deliver(call('c-refused'), ctx()),
      (err: unknown) => {
        assert.ok(err instanceof TransientError);
        assert.ok(!(err instanceof PermanentError));
        return true;
      },
    );
    assert.equal(
      (await sink('refused-sms', { smsId: 's0', message: 'Hi' }).deliver(call('c-refused'), ctx())).status,
      'done',
    );
    assert.equal(api.sms.length, 1);
  });

  test('a TLS handshake that fails (https:// to a server without TLS) sent nothing: transient, and the retry sends once', async () => {
    const tlsClient = createTelephonyClient({
      baseUrl: api.url.replace(/^http:/, 'https:'),
      auth: api.basicAuth,
      timeoutMs: 2000,
    });
    await assert.rejects(
      sink('tls-sms', { smsId: 's0', message: 'Hi' }, { telephony: tlsClient }).deliver(call('c-tls'), ctx()),
      (err: unknown) => {
        assert.ok(err instanceof TransientError, `expected a TransientError, got ${String(err)}`);
        return true;
      },
    );
    assert.equal(api.sms.length, 0);
    assert.equal((await sink('tls-sms', { smsId: 's0', message: 'Hi' }).deliver(call('c-tls'), ctx())).status, 'done');
    assert.equal(api.sms.length, 1);
  });

  test('a timeout after the request was sent is not resent: dead letters once, later deliveries skip', async () => {
    // The platform takes 800 ms to answer; the client gives up after 300 ms. The SMS did go out.
    api.inject({ on: 'sms', delayMs: 800 });
    const s = missedCall();
    await assert.rejects(s.deliver(call('c-timeout'), ctx()), (err: unknown) => {
      assert.ok(err instanceof PermanentError);
      assert.match(err.message, /outcome unknown/);
      assert.match(err.message, /not resent automatically/);
      return true;
    });
    const smsRequests = () => api.requests.filter((r) => r.method === 'POST' && r.path === '/v2/sessions/sms').length;
    assert.equal(smsRequests(), 1, 'the request reached the platform');
    assert.equal(api.sms.length, 1, 'and the platform sent the SMS (its answer came too late)');

    // The same job taken over (its first attempt had lost its lock, so the queue refused that
    // attempt's failure): dead-lettered as the first attempt would have been, not completed as skipped.
    await assert.rejects(s.deliver(call('c-timeout'), ctx('job-1', 2)), (err: unknown) => {
      assert.ok(err instanceof PermanentError);
      assert.match(
        err.message,
        /outcome unknown .*an earlier attempt of this job, cut short\); not resent automatically/,
      );
      return true;
    });
    // A later delivery of the call (another job): skipped.
    const again = await s.deliver(call('c-timeout'), ctx('job-2'));
    assert.equal(again.status, 'skipped');
    assert.match(again.reason ?? '', /outcome is unknown; not resent/);
    assert.equal(smsRequests(), 1, 'nothing was resent');
    assert.equal(api.sms.length, 1);

    // An operator who checked the platform and wants a resend clears the marker.
    await new NotificationLedger(new RedisKeyValueStore(redis, `${prefix}:state:`).scoped('missed-sms')).forget(
      call('c-timeout').key,
      MOBILE,
    );
    clock = new Date(clock.getTime() + 13 * 3600_000); // past the cooldown the unknown attempt kept
    assert.equal((await s.deliver(call('c-timeout'), ctx('job-3'))).status, 'done');
    assert.equal(smsRequests(), 2);
    assert.equal(api.sms.length, 2, 'the resend the operator asked for');
  });

  test('redelivery of the same call sends once, also when the deliveries overlap', async () => {
    const s = missedCall();
    const first = await s.deliver(call('c-again'), ctx());
    assert.equal(first.status, 'done');
    const second = await s.deliver(call('c-again'), ctx());
    assert.equal(second.status, 'skipped');
    assert.match(second.reason ?? '', /already sent/);

    const racing = call('c-race', { from: OTHER_MOBILE, fromRaw: OTHER_MOBILE });
    const settled = await Promise.allSettled([s.deliver(racing, ctx()), s.deliver(racing, ctx())]);
    const done = settled.filter((r) => r.status === 'fulfilled' && r.value.status === 'done');
    assert.equal(done.length, 1);
    for (const r of settled) {
      if (r.status === 'rejected') assert.ok(r.reason instanceof RetryLaterError, String(r.reason));
      else if (r.value.status === 'skipped') assert.match(r.value.reason ?? '', /already sent/);
    }
    assert.deepEqual(
      api.sms.map((m) => m.recipient),
      [MOBILE, OTHER_MOBILE],
    );
  });
});

describe('sms sink: configuration', () => {
  test('templates may only use known fields; numbers must be E.164; time zones must exist', () => {
    assert.throws(
      () => smsSinkType.options.parse({ smsId: 's0', message: 'Hi {{nmae}}' }),
      /unknown field\(s\) \{\{nmae\}\}/,
    );
    assert.throws(() => smsSinkType.options.parse({ smsId: 's0', message: 'Hi', to: ['0151 1234'] }), /E\.164/);
    assert.throws(
      () => smsSinkType.options.parse({ smsId: 's0', message: 'Hi', timeZone: 'Mars/Olympus' }),
      /time zone/,
    );
    assert.throws(
      () => smsSinkType.options.parse({ smsId: 's0', message: 'Hi', quietHours: { start: '25:00', end: '08:00' } }),
      /HH:MM/,
    );
  });

  test('the sink needs the telephony API and an SMS extension id (option or TELEPHONY_SMS_ID)', () => {
    const parsed = smsSinkType.options.parse({ message: 'Hi' });
    const state = new RedisKeyValueStore(redis, `${prefix}:state:`);
    const deps = { log, state, now: () => clock };
    assert.throws(
      () => smsSinkType.create('x', parsed, { ...deps, telephony: null, settings: { TELEPHONY_SMS_ID: 's0' } }),
      /TELEPHONY_API_URL/,
    );
    assert.throws(
      () => smsSinkType.create('x', parsed, { ...deps, telephony: client, settings: {} }),
      /TELEPHONY_SMS_ID/,
    );
    assert.equal(
      smsSinkType.create('x', parsed, { ...deps, telephony: client, settings: { TELEPHONY_SMS_ID: 's0' } }).type,
      'sms',
    );
  });
});
