// The Push API's settings and the parsing of its events, without Redis: PUSH_API_VERIFY=false is
// warned about at every start, a key that is not PEM stops the start, one-line PEM (`\n`) works;
// form bodies with repeated `user[]` fields, `origCallId`, and what is refused.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, loadConfig, type Config } from '../src/config/index.js';
import { assemblePushCall, parsePushEvent, unreadPushFields } from '../src/model/push.js';
import { InvalidPayloadError } from '../src/model/webhook.js';
import { pushPublicKey, subscribeXml, verifyPushSignature, type PushSettings } from '../src/sources/push.js';
import { newCall, sign, testKeyPair } from './support/fake-push.js';

const base = { ARCHIVE_DIR: '/tmp/callsync-push-config' };
/** The Push API source's settings: a section of the configuration built by its source type. */
const push = (config: Config) => config.sources.push as PushSettings;

test('defaults: signatures checked with the platform key, 6 h timeout, no warning about verification', () => {
  const config = loadConfig(base);
  assert.equal(push(config).verify, true);
  assert.equal(push(config).publicKeyPem, undefined);
  assert.equal(push(config).timeoutMs, 6 * 3600 * 1000);
  assert.ok(!config.warnings.some((w) => w.includes('PUSH_API_VERIFY')));
  // The shipped key parses and is RSA.
  assert.equal(pushPublicKey(undefined).asymmetricKeyType, 'rsa');
});

test('PUSH_API_VERIFY=false is a start warning; a PUSH_API_PUBLIC_KEY that is not PEM is a config error', () => {
  const config = loadConfig({ ...base, PUSH_API_VERIFY: 'false' });
  assert.equal(push(config).verify, false);
  assert.ok(config.warnings.some((w) => /PUSH_API_VERIFY=false/.test(w)));
  assert.throws(
    () => loadConfig({ ...base, PUSH_API_PUBLIC_KEY: 'not a key' }),
    (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.startsWith('PUSH_API_PUBLIC_KEY')),
  );
  assert.throws(() => loadConfig({ ...base, PUSH_API_PUBLIC_URL: 'callsync.example.com' }), ConfigError);
  assert.throws(() => loadConfig({ ...base, PUSH_CALL_TIMEOUT_SECONDS: '0' }), ConfigError);
});

test('a one-line PEM (\\n escaped, as .env files hold it) verifies what its key signed', () => {
  const keys = testKeyPair();
  const oneLine = keys.publicKeyPem.replace(/\n/g, '\\n');
  assert.equal(push(loadConfig({ ...base, PUSH_API_PUBLIC_KEY: oneLine })).publicKeyPem, oneLine);
  const body = newCall('c-1');
  assert.equal(verifyPushSignature(pushPublicKey(oneLine), Buffer.from(body), sign(keys, body)), true);
  assert.equal(verifyPushSignature(pushPublicKey(oneLine), Buffer.from(`${body}&x=1`), sign(keys, body)), false);
  assert.equal(verifyPushSignature(pushPublicKey(oneLine), Buffer.from(body), null), false);
});

test('form bodies: repeated [] fields become lists, origCallId is read, bad events are refused', () => {
  const e = parsePushEvent(
    'event=newCall&callId=c1&origCallId=c0&user%5B%5D=A&user%5B%5D=B&userId%5B%5D=w0&userId%5B%5D=w1&direction=out',
  );
  assert.equal(e.event, 'newCall');
  assert.deepEqual(e.lists.user, ['A', 'B']);
  assert.deepEqual(e.lists.userId, ['w0', 'w1']);
  assert.equal(e.fields.originalCallId, 'c0');
  for (const bad of ['', 'event=newCall', 'callId=c1', 'event=&callId=c1', 'event=newCall&callId=a%20b'])
    assert.throws(() => parsePushEvent(bad), InvalidPayloadError, bad);
});

test('an event callsync does not know is taken and not stored, reported unread: it identifies no call of ours', () => {
  // Before: 400 for `event=ring` — an event type the platform adds (or one of another product)
  // was answered as an error on every call.
  const e = parsePushEvent('event=ringing&callId=c1&direction=sideways');
  assert.equal(e.event, 'other');
  assert.equal(e.callId, 'c1');
  assert.equal(e.fields.event, 'ringing', 'kept as sent');
  assert.deepEqual(unreadPushFields(e), [
    { field: 'event', pointer: '/event', detail: 'expected newCall, answer, hangup or dtmf; not stored' },
  ]);
});

test('a direction callsync cannot read does not refuse the event: read as absent (in), reported unread, kept as sent', () => {
  // Before: 400 for `direction=IN` — a hangup refused that way leaves its call open until
  // PUSH_CALL_TIMEOUT_SECONDS, then closed as outcome unknown.
  for (const [value, direction, unread] of [
    ['IN', 'in', 0],
    ['Out', 'out', 0],
    ['outgoing', 'out', 0],
    ['sideways', 'in', 1],
    ['', 'in', 1],
  ] as const) {
    const e = parsePushEvent(`event=hangup&callId=c9&cause=normalClearing&direction=${value}&from=492111234567`);
    assert.equal(unreadPushFields(e).length, unread, value);
    if (unread)
      assert.deepEqual(unreadPushFields(e)[0], {
        field: 'direction',
        pointer: '/direction',
        detail: 'expected in or out',
      });
    const call = assemblePushCall('c9', { hangup: { at: Date.parse('2026-12-06T10:00:00Z'), event: e } }, new Date())!;
    assert.equal(call.direction, direction, value);
    assert.equal((call.raw as { hangup: Record<string, string> }).hangup.direction, value, 'kept as sent');
  }
  assert.deepEqual(unreadPushFields(parsePushEvent('event=dtmf&callId=c9&direction=x')), []);
});

test("a hangup's cause callsync does not know is reported unread: the outcome is unknown, the cause kept as sent", () => {
  const newCall = parsePushEvent('event=newCall&callId=c8&direction=in&from=492111234567');
  const outcome = (cause: string) => {
    const hangup = parsePushEvent(`event=hangup&callId=c8&cause=${cause}`);
    const call = assemblePushCall(
      'c8',
      { newCall: { at: 0, event: newCall }, hangup: { at: 5000, event: hangup } },
      new Date(5000),
    )!;
    assert.equal((call.raw as { hangup: Record<string, string> }).hangup.cause, cause, 'kept as sent');
    return [call.outcome, unreadPushFields(hangup).map((u) => u.field)];
  };
  assert.deepEqual(outcome('callRejected'), ['unknown', ['cause']]);
  assert.deepEqual(outcome(''), ['unknown', ['cause']]);
  assert.deepEqual(outcome('toString'), ['unknown', ['cause']]);
  for (const [cause, known] of [
    ['normalClearing', 'answered'],
    ['busy', 'busy'],
    ['cancel', 'missed'],
    ['noAnswer', 'missed'],
    ['congestion', 'failed'],
    ['notFound', 'failed'],
    ['forwarded', 'transferred'],
  ] as const)
    assert.deepEqual(outcome(cause), [known, []], cause);
  assert.deepEqual(unreadPushFields(parsePushEvent('event=hangup&callId=c8')), [], 'no cause: absent, not unread');
  assert.deepEqual(unreadPushFields(parsePushEvent('event=answer&callId=c8&cause=x')), [], 'only a hangup has one');
});

test('an open call is no call yet; anonymous numbers have no E.164; out calls keep their direction', () => {
  const ev = parsePushEvent('event=newCall&callId=c2&direction=out&from=anonymous&to=4921100000');
  const state = { newCall: { at: 0, event: ev } };
  assert.equal(assemblePushCall('c2', state, new Date(0)), null);
  const closed = assemblePushCall(
    'c2',
    { ...state, hangup: { at: 5000, event: parsePushEvent('event=hangup&callId=c2&cause=noAnswer') } },
    new Date(5000),
  )!;
  assert.equal(closed.direction, 'out');
  assert.equal(closed.from, null);
  assert.equal(closed.fromRaw, 'anonymous');
  assert.equal(closed.to, '+4921100000');
  assert.equal(closed.outcome, 'missed');
});

test('an answer naming its user as a [] list still names the answering user', () => {
  const newCallEvent = parsePushEvent('event=newCall&callId=c3&user%5B%5D=A&userId%5B%5D=w0');
  const answerEvent = parsePushEvent('event=answer&callId=c3&user%5B%5D=Bob&userId%5B%5D=w1');
  const call = assemblePushCall(
    'c3',
    {
      newCall: { at: 0, event: newCallEvent },
      answer: { at: 1000, event: answerEvent },
      hangup: { at: 11_000, event: parsePushEvent('event=hangup&callId=c3&cause=normalClearing') },
    },
    new Date(11_000),
  )!;
  assert.deepEqual(
    call.users.map((u) => [u.userId, u.fullName]),
    [['w1', 'Bob']],
  );
  assert.equal(call.durationSec, 10);
  assert.equal(call.outcome, 'answered');
});

test('the newCall answer escapes the URL for XML', () => {
  assert.match(
    subscribeXml('https://x.example/a?b=1&c="2"'),
    /onAnswer="https:\/\/x\.example\/a\?b=1&amp;c=&quot;2&quot;"/,
  );
});

test("the platform's documented Push API requests are read whole: no field refused or unread", () => {
  // Read 2026-12-06 from the stored copies of the platform's public documentation:
  // - sipgate.io's Push API page, "Inspect incoming network traffic" (a captured newCall);
  // - github.com/sipgate-io/io-labs-webhook-who-is-calling README, "What is a webhook?" (its example
  //   payload, shown converted to JSON; here as the form it is sent as, `user` as `user[]`).
  const documented = [
    'event=newCall&direction=in&from=anonymous&to=445603000514&callId=4932215337270853042',
    'event=newCall&direction=in&from=492111234567&to=4915791234567&callId=12345678&origCallId=12345678&user%5B%5D=Alice&xcid=123abc456def789&diversion=1a2b3d4e5f',
  ];
  for (const body of documented) {
    const e = parsePushEvent(body);
    assert.equal(e.event, 'newCall');
    assert.deepEqual(unreadPushFields(e), [], body);
    const hangup = parsePushEvent(`event=hangup&callId=${e.callId}&cause=normalClearing`);
    const call = assemblePushCall(
      e.callId,
      { newCall: { at: 0, event: e }, hangup: { at: 60_000, event: hangup } },
      new Date(60_000),
    )!;
    assert.equal(call.direction, 'in', body);
    assert.equal(call.fromRaw, e.fields.from);
  }
});
