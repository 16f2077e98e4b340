// The `email` notification sink against a real SMTP server on loopback (STARTTLS + AUTH, like a
// submission port) and real Redis: subject, text and HTML as received, escaping, never twice,
// SMTP refusals and quiet hours.
import assert from 'node:assert/strict';
import { z } from 'zod';
import { after, afterEach, before, beforeEach, describe, test } from 'node:test';
import { Redis } from 'ioredis';
import { createLogger } from '../src/log.js';
import { callHash, type CanonicalCall } from '../src/model/call.js';
import { PermanentError, RetryLaterError, TransientError } from '../src/errors.js';
import { emailSinkType } from '../src/sinks/notify/email.js';
import { smtpOutcomeUnknown } from '../src/sinks/notify/mailer.js';
import { createSmtpMailer } from '../src/sinks/notify/smtp.js';
import { SMTPServer } from 'smtp-server';
import type { AddressInfo } from 'node:net';
import type { Sink, SinkContext } from '../src/sinks/types.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { sampleCall } from './support/calls.js';
import { parsedSinkSettings } from './support/crm-deps.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { TestSmtpServer } from './support/smtp.js';

const log = createLogger({ level: 'silent' });
const ctx = (): SinkContext => ({ jobId: 'job-1', attempt: 1, log, signal: new AbortController().signal });

let smtp: TestSmtpServer;
let redis: Redis;
let prefix: string;
let clock: Date;
const sinks: Sink[] = [];

before(async () => {
  smtp = await TestSmtpServer.start({ user: 'mailer', pass: 's3cret p@ss' });
  redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
});

after(async () => {
  await smtp.close();
  redis.disconnect();
});

beforeEach(() => {
  prefix = uniquePrefix('notify-mail');
  smtp.messages.length = 0;
  smtp.rejectData = undefined;
  smtp.rejectRcpt = undefined;
  clock = new Date('2026-04-08T10:05:00Z');
});

afterEach(async () => {
  for (const s of sinks.splice(0)) await s.close?.();
  await cleanupPrefix(prefix);
});

async function sink(name: string, options: Record<string, unknown>, env: Record<string, string> = {}): Promise<Sink> {
  const parsed = emailSinkType.options.parse(options);
  const state = new RedisKeyValueStore(redis, `${prefix}:state:`).scoped(name);
  const s = await emailSinkType.create(name, parsed, {
    log,
    state,
    telephony: null,
    now: () => clock,
    settings: parsedSinkSettings({ SMTP_URL: smtp.url, ...env }),
  });
  sinks.push(s);
  return s;
}

function call(id: string, patch: Partial<CanonicalCall> = {}): CanonicalCall {
  return { ...sampleCall(id), ...patch };
}

const summaryMail = () =>
  sink('summary-mail', {
    from: 'Callsync <calls@example.com>',
    to: ['team@example.com', 'lead@example.com'],
    timeZone: 'Europe/Berlin',
  });

describe('email sink: what the SMTP server receives', () => {
  test('the default summary mail: envelope, subject, text and HTML, over STARTTLS with AUTH', async () => {
    const result = await (await summaryMail()).deliver(call('c-mail'), ctx());
    assert.equal(result.status, 'done');
    assert.equal(smtp.messages.length, 1);
    const m = smtp.messages[0]!;
    assert.equal(m.secure, true, 'STARTTLS was used');
    assert.equal(m.user, 'mailer');
    assert.equal(m.from, 'calls@example.com');
    assert.deepEqual(m.to, ['team@example.com', 'lead@example.com']);
    assert.equal(m.subject, 'Call +492116355340 → +4921155550100 (answered, 2026-04-08 12:00)');
    assert.equal(m.headers['message-id'], `<${callHash('ai-agent:agent-1:c-mail')}.summary-mail@example.com>`);
    assert.equal(result.refs?.messageId, m.headers['message-id']);
    assert.equal(
      m.text?.replace(/\r\n/g, '\n').trim(),
      [
        'incoming call from +492116355340 to +4921155550100',
        'When: 2026-04-08 12:00 (Europe/Berlin), duration 2 min 15 s',
        'Outcome: answered',
        'Agent: agent-1',
        '',
        'Summary:',
        'The caller asked to move her dentist appointment to Friday morning.',
        '',
        'Key points:',
        '• Appointment moved to Friday 9:00',
        '• Caller prefers SMS confirmation',
        '',
        'Topics: appointment, rescheduling',
      ].join('\n'),
    );
    assert.match(m.html ?? '', /white-space: pre-wrap">incoming call from \+492116355340/);
    assert.match(m.html ?? '', /• Caller prefers SMS confirmation/);
  });

  test('the default text has no empty headings: a summary without key points or topics, a call without agent', async () => {
    const s = await summaryMail();
    const base = sampleCall('c-bare');
    await s.deliver(call('c-bare', { agentId: null, summary: { ...base.summary!, keyPoints: [], topics: [] } }), ctx());
    await s.deliver(call('c-nothing', { summary: null }), ctx());
    const [withSummary, without] = smtp.messages.map((m) => m.text?.replace(/\r\n/g, '\n').trim());
    assert.equal(
      withSummary,
      [
        'incoming call from +492116355340 to +4921155550100',
        'When: 2026-04-08 12:00 (Europe/Berlin), duration 2 min 15 s',
        'Outcome: answered',
        '',
        'Summary:',
        base.summary!.content,
      ].join('\n'),
    );
    assert.doesNotMatch(without ?? '', /Summary:|Key points:|Topics:/);
    assert.match(without ?? '', /^Agent: agent-1$/m);
  });

  test("the default subject leads with the call's headline when it has one (assist.callHeadline)", async () => {
    const s = await summaryMail();
    await s.deliver(call('c-title', { title: 'Customer moves the appointment' }), ctx());
    assert.equal(
      smtp.messages[0]!.subject,
      'Customer moves the appointment — +492116355340 → +4921155550100 (answered, 2026-04-08 12:00)',
    );
    const own = await sink('own-subject', {
      from: 'calls@example.com',
      to: ['team@example.com'],
      subject: 'Call {{callId}}',
    });
    await own.deliver(call('c-title-2', { title: 'Ignored here' }), ctx());
    assert.equal(smtp.messages[1]!.subject, 'Call c-title-2', 'a configured subject is used as written');
  });

  test('an HTML template keeps its markup and escapes every value', async () => {
    const s = await sink('html-mail', {
      from: 'calls@example.com',
      to: 'team@example.com',
      subject: 'Summary: {{summary}}',
      text: '{{summary}}\n{{keyPoints}}',
      html: '<h1>Call from {{caller}}</h1><p>{{summary}}</p><div>{{keyPoints}}</div>',
    });
    const evil = call('c-evil', {
      summary: { content: 'Bob & <script>alert("x")</script> said \'hi\'', keyPoints: ['one <b>', 'two'], topics: [] },
    });
    await s.deliver(evil, ctx());
    const m = smtp.messages[0]!;
    assert.equal(m.subject, 'Summary: Bob & <script>alert("x")</script> said \'hi\'');
    assert.equal(
      m.text?.replace(/\r\n/g, '\n').trim(),
      'Bob & <script>alert("x")</script> said \'hi\'\n- one <b>\n- two',
    );
    assert.equal(
      m.html?.replace(/\r\n/g, '\n'),
      '<h1>Call from +492116355340</h1><p>Bob &amp; &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; said &#39;hi&#39;</p><div>- one &lt;b&gt;<br>\n- two</div>',
    );
  });

  test('the subject is one line of at most 250 characters: control and bidi characters go, a long one is cut between characters', async () => {
    const s = await sink('hostile-subject', {
      from: 'calls@example.com',
      to: 'team@example.com',
      subject: 'S: {{summary}}',
    });
    const content = `a\u0000b\u001b[31mc\u0085d\u2028e\u202e ${'word '.repeat(46)}😀😀 ${'x'.repeat(5000)}`;
    await s.deliver(call('c-hostile', { summary: { content, keyPoints: [], topics: [] } }), ctx());
    const subject = smtp.messages[0]!.subject;
    assert.ok(subject.startsWith('S: a b [31mc d e word word'), JSON.stringify(subject.slice(0, 40)));
    // eslint-disable-next-line no-control-regex -- none may be left
    assert.doesNotMatch(subject, /[\u0000-\u001f\u007f-\u009f\u2028\u202a-\u202e\ufffd]/);
    assert.equal(subject.length, 250);
    assert.ok(subject.endsWith(' word 😀…'), JSON.stringify(subject.slice(-12)));
    assert.match(smtp.messages[0]!.text ?? '', /\u0085/, 'the text part keeps the text as it is');
  });

  test('the sender defaults to SMTP_FROM', async () => {
    await (
      await sink('env-from', { to: 'team@example.com' }, { SMTP_FROM: 'noreply@example.org' })
    ).deliver(call('c-from'), ctx());
    assert.equal(smtp.messages[0]?.from, 'noreply@example.org');
  });
});

describe('email sink: never twice, failures, quiet hours', () => {
  test('redelivery of the same call sends one mail', async () => {
    const s = await summaryMail();
    assert.equal((await s.deliver(call('c-twice'), ctx())).status, 'done');
    const again = await s.deliver(call('c-twice'), ctx());
    assert.equal(again.status, 'skipped');
    assert.match(again.reason ?? '', /already sent/);
    // Another rule sends its own mail of the same call.
    assert.equal(
      (await (await sink('other-mail', { from: 'a@example.com', to: 'b@example.com' })).deliver(call('c-twice'), ctx()))
        .status,
      'done',
    );
    assert.equal(smtp.messages.length, 2);
  });

  test("with the attempt's timeline entries: the sent marker and the entries written together, once the mail went out", async () => {
    const s = await summaryMail();
    const list = `${prefix}:timeline`;
    const written: unknown[] = [];
    const withEntries = (): SinkContext => ({
      ...ctx(),
      outcome: {
        entries: (r) => ({ key: list, values: [JSON.stringify({ event: r.status })], max: 200, ttlMs: 60_000 }),
        written: (r) => void written.push(r),
      },
    });
    const result = await s.deliver(call('c-entries'), withEntries());
    assert.equal(result.status, 'done');
    assert.deepEqual(written, [result]);
    assert.deepEqual(await redis.lrange(list, 0, -1), ['{"event":"done"}']);
    const [marker] = await redis.keys(`${prefix}:state:summary-mail:sent:*`);
    assert.equal((JSON.parse((await redis.get(marker!))!) as { state: string }).state, 'sent');
    // Not sent again, and a refusal writes no entries of the sink's own (the attempt writes them).
    assert.match((await s.deliver(call('c-entries'), withEntries())).reason ?? '', /already sent/);
    smtp.rejectData = { code: 550, message: 'mailbox unavailable' };
    await assert.rejects(s.deliver(call('c-entries-refused'), withEntries()), PermanentError);
    assert.equal(written.length, 1);
    assert.equal(smtp.messages.length, 1, 'one mail went out; the refused one was not taken');
  });

  test('a 5xx refusal is permanent (dead letters with the reason), a 4xx is transient; neither keeps the marker', async () => {
    const s = await summaryMail();
    smtp.rejectData = { code: 550, message: 'mailbox unavailable' };
    await assert.rejects(s.deliver(call('c-550'), ctx()), (err: unknown) => {
      assert.ok(err instanceof PermanentError);
      assert.equal(err.status, 550);
      assert.match(err.message, /mailbox unavailable/);
      return true;
    });
    smtp.rejectData = { code: 451, message: 'try again later' };
    await assert.rejects(s.deliver(call('c-550'), ctx()), TransientError);
    smtp.rejectData = undefined;
    assert.equal((await s.deliver(call('c-550'), ctx())).status, 'done');
    assert.equal(smtp.messages.length, 1);
  });

  test('a recipient the server refuses (RCPT 550 or 450) is named in the result, masked; the others get the mail once', async () => {
    const s = await sink('three-mail', {
      from: 'a@example.com',
      to: ['team@example.com', 'lead@example.com', 'boss@example.com'],
    });
    smtp.rejectRcpt = {
      'lead@example.com': { code: 550, message: '5.1.1 <lead@example.com>: mailbox unavailable' },
      'boss@example.com': { code: 450, message: '4.2.1 mailbox busy, try later' },
    };
    const result = await s.deliver(call('c-rcpt'), ctx());
    assert.equal(result.status, 'done');
    assert.deepEqual(
      smtp.messages.map((m) => m.to),
      [['team@example.com']],
    );
    assert.match(result.reason ?? '', /^sent to 1 of 3 recipients; refused: /);
    assert.match(result.reason ?? '', /550 5\.1\.1 <\*\*\*@example\.com>: mailbox unavailable/);
    assert.match(result.reason ?? '', /450 4\.2\.1 mailbox busy/);
    assert.ok(!(result.reason ?? '').includes('lead@'), 'the refused address is masked');
    // A redelivery sends nothing again.
    assert.equal((await s.deliver(call('c-rcpt'), ctx())).reason, 'already sent');
    assert.equal(smtp.messages.length, 1);
  });

  test('wrong SMTP credentials pause the queue (AuthError), and no mail is marked sent', async () => {
    const url = smtp.url.replace('s3cret%20p%40ss', 'wrong');
    const s = await sink('auth-mail', { from: 'a@example.com', to: 'b@example.com' }, { SMTP_URL: url });
    await assert.rejects(s.deliver(call('c-auth'), ctx()), (err: unknown) => (err as Error).name === 'AuthError');
    assert.equal(
      (await (await sink('auth-mail', { from: 'a@example.com', to: 'b@example.com' })).deliver(call('c-auth'), ctx()))
        .status,
      'done',
    );
  });

  test('quiet hours delay the job until they end', async () => {
    const s = await sink('quiet-mail', {
      from: 'a@example.com',
      to: 'b@example.com',
      quietHours: { start: '20:00', end: '07:30', timeZone: 'Europe/Berlin' },
    });
    clock = new Date('2026-04-08T20:00:00Z'); // 22:00 in Berlin
    await assert.rejects(s.deliver(call('c-quiet'), ctx()), (err: unknown) => {
      assert.ok(err instanceof RetryLaterError);
      assert.equal(err.delayMs, 9.5 * 3600_000); // 22:00 -> 07:30
      return true;
    });
    assert.equal(smtp.messages.length, 0);
  });

  test('a server that hangs after DATA: the mailer gives up after its timeout, and the outcome counts as unknown (never resent)', async () => {
    // Takes the message, never answers it.
    const hanging = new SMTPServer({
      logger: false,
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      closeTimeout: 100,
      onData(stream) {
        stream.resume();
      },
    });
    await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', () => resolve()));
    const { port } = hanging.server.address() as AddressInfo;
    const mailer = createSmtpMailer(`smtp://127.0.0.1:${port}`, { timeoutMs: 1000 });
    try {
      const started = Date.now();
      const outcome = await Promise.race([
        mailer
          .send({
            from: 'a@example.com',
            to: ['b@example.com'],
            subject: 's',
            text: 't',
            html: '<p>t</p>',
            messageId: '<hang@example.com>',
          })
          .then(
            () => 'sent',
            (e: unknown) => e,
          ),
        new Promise((resolve) => setTimeout(() => resolve('no answer after 8 s'), 8000).unref()),
      ]);
      assert.ok(outcome instanceof TransientError, `expected the timeout's error, got ${String(outcome)}`);
      assert.ok(Date.now() - started < 6000);
      assert.equal(smtpOutcomeUnknown(outcome), true);
    } finally {
      await mailer.close();
      await new Promise<void>((resolve) => hanging.close(() => resolve()));
    }
  });

  test('a certificate the mailer does not trust fails before anything is sent: retried, not "outcome unknown"; once trusted the mail goes out', async () => {
    const untrusted = smtp.url.replace('&tls.rejectUnauthorized=false', '');
    const s = await sink('tls-mail', { from: 'a@example.com', to: 'b@example.com' }, { SMTP_URL: untrusted });
    const err = await s.deliver(call('c-tls'), ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof TransientError, `expected a TransientError, got ${String(err)}`);
    assert.match(err.message, /certificate/);
    assert.equal(smtp.messages.length, 0);
    // The certificate fixed (here: trusted): the retry sends, nothing was marked unknown.
    const fixed = await sink('tls-mail', { from: 'a@example.com', to: 'b@example.com' });
    assert.equal((await fixed.deliver(call('c-tls'), ctx())).status, 'done');
    assert.equal(smtp.messages.length, 1);
  });

  test('which SMTP failures leave the outcome unknown', () => {
    const e = (code: string, extra: Record<string, unknown> = {}) => Object.assign(new Error(code), { code, ...extra });
    assert.equal(smtpOutcomeUnknown(e('EENVELOPE')), false);
    assert.equal(smtpOutcomeUnknown(e('EMESSAGE', { responseCode: 550 })), false);
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'ECONNREFUSED' })), false);
    assert.equal(smtpOutcomeUnknown(e('ETIMEDOUT', { timeoutType: 'GREETING_TIMEOUT' })), false);
    assert.equal(smtpOutcomeUnknown(e('ETIMEDOUT', { timeoutType: 'SOCKET_TIMEOUT' })), true);
    assert.equal(smtpOutcomeUnknown(e('ECONNECTION')), true);
    // TLS handshake failures: no message command went over the connection.
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'CERT_HAS_EXPIRED' })), false);
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'DEPTH_ZERO_SELF_SIGNED_CERT' })), false);
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'ERR_TLS_CERT_ALTNAME_INVALID' })), false);
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'ERR_SSL_WRONG_VERSION_NUMBER' })), false);
    assert.equal(smtpOutcomeUnknown(e('ESOCKET', { originalCode: 'ECONNRESET' })), true);
  });
});

describe('email sink: configuration', () => {
  test('options are checked; the environment shortcut mails every call with a summary', () => {
    assert.throws(() => emailSinkType.options.parse({ to: 'not-an-address' }), /e-mail address/);
    assert.throws(() => emailSinkType.options.parse({ to: 'a@example.com', subject: '{{callr}}' }), /unknown field/);
    // fromEnv reads the parsed environment (the sink type's variables, through its schema).
    const env = (raw: Record<string, string>) => z.object(emailSinkType.env!).parse(raw);
    const shortcut = emailSinkType.fromEnv?.(
      env({ SMTP_URL: 'smtp://localhost:25', NOTIFY_EMAIL_TO: 'a@example.com, b@example.com' }),
      { configFile: false },
    );
    assert.deepEqual(shortcut, {
      sinks: { email: { type: 'email', to: ['a@example.com', 'b@example.com'] } },
      routes: [{ name: 'summary e-mail', when: { hasSummary: true }, to: 'email' }],
    });
    assert.equal(emailSinkType.fromEnv?.(env({ NOTIFY_EMAIL_TO: 'a@example.com' }), { configFile: false }), null);
  });
});
