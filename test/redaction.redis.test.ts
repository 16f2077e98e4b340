// Personal data in remote error texts: a CRM, a webhook receiver, the telephony API, an SMTP server
// or S3 that echoes what callsync sent (numbers, names, summary sentences) in its error answer must
// not carry that into log lines or a dead letter's reason — while the status, the vendor's code and
// category and the field names stay. Real servers on loopback, real queues on real Redis.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Queue, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import {
  defaultJobOptions,
  JobName,
  sinkQueueName,
  type RetryPolicy,
  type SinkDeliverJob,
} from '../queues/registry.js';
import { PermanentError } from '../src/errors.js';
import { clipText, MAX_REMOTE_TEXT, redactRemoteText, scrubEchoes } from '../src/redact.js';
import { maskPhone } from '../src/log.js';
import type { CanonicalCall } from '../src/model/call.js';
import { S3Store } from '../src/sinks/archive/s3-store.js';
import { createSmtpMailer } from '../src/sinks/notify/smtp.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import { smsSinkType } from '../src/sinks/notify/sms.js';

/** What the SMS sink type builds its sinks with (SinkDeps with its settings). */
type NotifySinkDeps = Parameters<typeof smsSinkType.create>[2];
import { RedisKeyValueStore } from '../src/state/kv.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { createDeliverProcessor, scrubCallEchoes } from '../workers/deliver.js';
import { runWorker } from '../workers/runner.js';
import { sampleCall, webhookPayload } from './support/calls.js';
import { memoryLog, postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { TestSmtpServer } from './support/smtp.js';

// What the fixture call holds (test/fixtures/webhook-v2.json) and what must never come back.
const NUMBER = '+492116355340';
const NAME = 'Ada Lovelace';
const SENTENCE = 'The caller asked to move her dentist appointment to Friday morning.';
const MOBILE = '+4917612345678';
/** Pieces of the personal data, in the forms a remote might write them. */
const FORBIDDEN = [
  '492116355340',
  '2116355340',
  '6355340',
  '635 53 40',
  'Lovelace',
  'Ada ',
  'dentist appointment',
  'move her dentist',
  'Friday morning',
];

function assertClean(text: string, where: string, more: string[] = []): void {
  for (const piece of [...FORBIDDEN, ...more])
    assert.ok(!text.includes(piece), `${where} contains "${piece}": ${text}`);
}

describe('redactRemoteText', () => {
  test('masks phone-like digit runs (keeping the last digits), e-mail addresses, query values and tokens', () => {
    const text = redactRemoteText(
      'Contact anna.schmidt@example.com (+49 151 1234 5678, 0211-6355340, (0211) 635 53 40) rejected; see https://x.example/p?api_token=abc123&term=x Authorization: Bearer abcdefghijklmnopqrstu',
    );
    assert.equal(
      text,
      'Contact ***@example.com (+****678, ****340, ****340) rejected; see https://x.example/p?api_token=…&term=… Authorization: Bearer …',
    );
  });

  test('keeps what an operator needs: codes, categories, field names, dates, addresses, quantities, short numbers', () => {
    const hubspot =
      'Property values were not valid: [{"isValid":false,"message":"hs_call_body is too long","error":"INVALID_VALUE","name":"hs_call_body"}] [VALIDATION_ERROR]';
    assert.equal(redactRemoteText(hubspot), hubspot);
    const kept =
      'at 2026-04-08T10:03:00.000Z and 2026-04-08 10:03, retry in 86400 s, max 65536 bytes, connect 192.168.100.200:587, error 40001, id a1b2c3d4-1234-5678-9abc-def012345678';
    assert.equal(redactRemoteText(kept), kept);
    // A run of 7 or more digits before a unit is masked: `4917612349876 sec` is a number too.
    assert.equal(redactRemoteText('retry in 86400000 ms'), 'retry in ****00 ms');
  });

  test('is one line, cut to 300 characters keeping the end (where HubSpot puts the category), and idempotent', () => {
    const long = `first line\n${'word '.repeat(120)} +4915112345678 [VALIDATION_ERROR]`;
    const out = redactRemoteText(long);
    assert.equal(out.length, MAX_REMOTE_TEXT);
    assert.ok(!out.includes('\n'));
    assert.ok(out.startsWith('first line word'));
    assert.ok(out.endsWith('+****678 [VALIDATION_ERROR]'), out);
    assert.equal(redactRemoteText(out), out);
    assert.equal(clipText('short'), 'short');
  });
});

describe('scrubEchoes', () => {
  test('removes runs of 4 words of the call texts, name words and the numbers; leaves the vendor words', () => {
    const out = scrubEchoes(
      `Note for Ada Lovelace (${NUMBER}): ${SENTENCE.slice(0, 40)} rejected: INVALID_VALUE on hs_call_body`,
      {
        texts: [SENTENCE],
        names: [NAME],
        numbers: [NUMBER],
      },
    );
    // A word cut in half by the remote stays (`app`): it is no longer the sentence.
    assert.equal(out, 'Note for … (+****340): … app rejected: INVALID_VALUE on hs_call_body');
  });

  test("a delivery error loses the call's texts from its message and from a stack already read", () => {
    const err = new PermanentError(`HubSpot answered 400: ${SENTENCE} (${NAME}, ${NUMBER})`);
    assert.ok(err.stack?.includes(SENTENCE), 'the stack was formatted with the old message');
    assert.equal(scrubCallEchoes(err, sampleCall('c-echo')), err, 'the same error, its class kept');
    assert.equal(err.message, 'HubSpot answered 400: …, +****340)');
    assertClean(err.message, 'the message');
    assertClean(err.stack ?? '', 'the stack');
    assert.ok(err.stack?.startsWith('PermanentError: HubSpot answered 400: …'), err.stack);
  });

  test("a speaker's label the call keeps (a name, often) is scrubbed like the users' names", () => {
    const call = sampleCall('c-echo-label', {
      patch: (p) => (p.assist.transcription.chunks[0].speaker = 'Grace Hopper'),
    });
    assert.equal(call.transcript?.chunks[0]?.speakerLabel, 'Grace Hopper');
    const err = new PermanentError('HubSpot answered 400: speaker Grace Hopper is not a contact');
    scrubCallEchoes(err, call);
    assert.ok(!/Grace|Hopper/.test(err.message), err.message);
  });

  test('maskPhone keeps at least 3 digits of a short number hidden', () => {
    assert.equal(maskPhone('6355340'), '6****340');
    assert.equal(maskPhone('+492116355400'), '+49211****400');
  });
});

/** HubSpot's 400 for a call whose properties it refused, echoing what it was sent (as HubSpot does). */
function hubspotEcho(status: number) {
  const inner = `Note for ${NAME} (+49 211 635 53 40): ${SENTENCE} is not a valid value`;
  return {
    status,
    body: {
      status: 'error',
      message: `Property values were not valid: [{"isValid":false,"message":"${inner}","error":"INVALID_VALUE","name":"hs_call_body"}] caller ${NUMBER}`,
      correlationId: 'a1b2c3d4-1234-5678-9abc-def012345678',
      category: 'VALIDATION_ERROR',
    },
  };
}

/** Every log line and everything BullMQ keeps of a failed job, as one text. */
async function evidence(cs: TestCallsync, job: Job): Promise<{ logs: string; reason: string; stack: string }> {
  return { logs: JSON.stringify(cs.logs), reason: job.failedReason, stack: (job.stacktrace ?? []).join('\n') };
}

describe('a CRM and a webhook receiver echoing the call in their error answers', () => {
  let hubspot: FakeHubSpot;
  let receiver: Server;
  let receiverUrl: string;
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    hubspot = await new FakeHubSpot().start();
    // A receiver that refuses every call, quoting back who called and what was said.
    receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const { data } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { data: CanonicalCall };
        res.writeHead(400, { 'content-type': 'text/plain' });
        res.end(
          `record refused: caller ${data.from} (${data.users[0]?.fullName}) said "${data.summary?.content}" - contact ops@receiver.example`,
        );
      });
    });
    await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
    receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hooks`;
    dir = await mkdtemp(join(tmpdir(), 'callsync-redaction-'));
    // HubSpot's note names the call's users (a HubSpot job carries only the parts its templates
    // read: with the default note it would hold no name for HubSpot to echo).
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
  archive: { type: archive, dir: ${join(dir, 'archive')} }
  hubspot: { type: hubspot, apiUrl: "${hubspot.url}", bodyTemplate: "Note for {{users}}: {{summary}}" }
  webhook: { type: webhook, endpoints: [{ name: hooks, url: "${receiverUrl}" }] }
routes:
  - to: [archive, hubspot, webhook]
`,
    );
    cs = await startTestCallsync(
      {
        CALLSYNC_CONFIG: configPath,
        HUBSPOT_ACCESS_TOKEN: 'pat-test-token',
        CRM_WEBHOOK_SECRET: `whsec_${Buffer.alloc(32, 7).toString('base64')}`,
        JOB_ATTEMPTS: '2',
      },
      {},
    );
  });
  after(async () => {
    await cs.stop();
    await hubspot.stop();
    await new Promise((resolve) => receiver.close(resolve));
    await rm(dir, { recursive: true, force: true });
  });

  async function deadLetter(queueName: string, callId: string): Promise<Job> {
    // A signed webhook has a queue per endpoint (`sink-webhook.<endpoint>`): the one endpoint's here.
    const queue = [...cs.queues.values()].find((q) => q.name.startsWith(`${queueName}.`)) ?? cs.queues.get(queueName);
    assert.ok(queue, `queue ${queueName}`);
    return waitFor(
      async () => {
        const failed = await queue.getFailed(0, 100);
        return failed.find((j) => (j.data as SinkDeliverJob).call.callId === callId) ?? null;
      },
      { timeoutMs: 20_000, what: `${callId} dead-lettered in ${queueName}` },
    );
  }

  test('HubSpot 400 (permanent): neither the logs nor the dead letter hold the number, the name or the sentence', async () => {
    hubspot.enqueue({
      match: (r) => r.method === 'POST' && /^\/crm\/objects\/[^/]+\/calls$/.test(r.path),
      ...hubspotEcho(400),
    });
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('red-400'))).status, 202);
    const job = await deadLetter('sink-hubspot', 'red-400');
    const { logs, reason, stack } = await evidence(cs, job);
    assertClean(reason, 'failedReason');
    assertClean(stack, 'stacktrace');
    assertClean(logs, 'the logs');
    // What the operator needs is still there.
    assert.match(reason, /HubSpot POST \/crm\/objects\/[^/]+\/calls answered 400: Property values were not valid/);
    assert.match(reason, /INVALID_VALUE.*hs_call_body/);
    assert.match(reason, /\[VALIDATION_ERROR\]$/);
    assert.ok(
      cs.logs.some((l) => l.msg === 'permanent failure: dead-lettered' && String(l.reason).includes('INVALID_VALUE')),
      'the failure is logged',
    );
  });

  test('HubSpot 500 (transient, retried): the error BullMQ keeps (reason and stack) is clean too', async () => {
    hubspot.enqueue({
      match: (r) => r.method === 'POST' && /^\/crm\/objects\/[^/]+\/calls$/.test(r.path),
      times: 2,
      ...hubspotEcho(500),
    });
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('red-500'))).status, 202);
    const job = await deadLetter('sink-hubspot', 'red-500');
    assert.equal(job.attemptsMade, 2);
    const { logs, reason, stack } = await evidence(cs, job);
    assertClean(reason, 'failedReason');
    assertClean(stack, 'stacktrace');
    assertClean(logs, 'the logs');
    assert.match(reason, /answered 500: .*INVALID_VALUE/);
    assert.ok(cs.logs.some((l) => l.msg === 'transient failure: will retry' && l.status === 500));
  });

  test("HubSpot 400 echoing the matched contact's name (HubSpot's data, not the call's): not in the logs or the dead letter", async () => {
    // The caller is a known contact; the call's properties are rendered with its name
    // ({{contactName}}), and HubSpot quotes them back when it refuses them.
    const contactId = hubspot.addContact({ firstname: 'Grace', lastname: 'Hopper', phone: NUMBER });
    try {
      hubspot.enqueue({
        match: (r) => r.method === 'POST' && /^\/crm\/objects\/[^/]+\/calls$/.test(r.path),
        status: 400,
        body: {
          status: 'error',
          message:
            'Property values were not valid: hs_call_title "Call with Hopper" is too long (contact Grace Hopper)',
          category: 'VALIDATION_ERROR',
        },
      });
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('red-contact'))).status, 202);
      const job = await deadLetter('sink-hubspot', 'red-contact');
      const { logs, reason, stack } = await evidence(cs, job);
      for (const [text, where] of [
        [reason, 'failedReason'],
        [stack, 'stacktrace'],
        [logs, 'the logs'],
      ] as const)
        assertClean(text, where, ['Hopper', 'Grace']);
      assert.match(reason, /answered 400: Property values were not valid: hs_call_title "Call with …" is too long/);
    } finally {
      hubspot.contacts.delete(contactId);
    }
  });

  test('a webhook receiver quoting the payload back: the reason keeps the status and its words, not the data', async () => {
    const job = await deadLetter('sink-webhook', 'red-400');
    const { logs, reason, stack } = await evidence(cs, job);
    assertClean(reason, 'failedReason');
    assertClean(stack, 'stacktrace');
    assertClean(logs, 'the logs');
    assert.ok(!reason.includes('ops@receiver.example'), reason);
    assert.match(
      reason,
      /Webhook POST 127\.0\.0\.1:\d+\/hooks answered 400: record refused: caller \+\*\*\*\*340 \(…\) said "…\.?" - contact \*\*\*@receiver\.example/,
    );
  });
});

describe('the telephony API echoing an SMS', () => {
  const retry: RetryPolicy = { attempts: 1, backoffMs: 50, maxBackoffMs: 200 };
  let api: FakeTelephony;
  let connection: Redis;
  const prefix = uniquePrefix('redact-sms');

  before(async () => {
    api = await FakeTelephony.start();
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
  });
  after(async () => {
    await api.close();
    await cleanupPrefix(prefix);
    connection.disconnect();
  });

  /** An SMS job for `call` that the API refuses with `detail`: the settled job and the log lines. */
  async function refusedSms(call: CanonicalCall, detail: string): Promise<{ job: Job; logs: string }> {
    const { lines, log } = memoryLog('debug');
    const sink = smsSinkType.create(
      'missed-sms',
      smsSinkType.options.parse({ smsId: 's0', message: 'We noted: {{summary}}' }),
      {
        log,
        state: new RedisKeyValueStore(connection, `${prefix}:state:`).scoped('missed-sms'),
        telephony: createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, timeoutMs: 2000 }),
        now: () => new Date(),
        settings: {},
        optOut: new OptOutList(connection, prefix),
      } satisfies NotifySinkDeps,
    );
    const queue = new Queue<SinkDeliverJob>(sinkQueueName('missed-sms'), {
      connection,
      prefix,
      defaultJobOptions: defaultJobOptions(retry),
    });
    const running = runWorker<SinkDeliverJob>(sinkQueueName('missed-sms'), createDeliverProcessor(sink, log), {
      connection,
      prefix,
      retry,
      concurrency: 1,
      stalledIntervalMs: 1000,
      lockDurationMs: 2000,
      maxStalledCount: 1,
      log,
    });
    try {
      api.inject({ on: 'sms', status: 400, title: 'Bad Request', detail, pointer: '/recipient' });
      const jobId = call.callId;
      await queue.add(JobName.sinkDeliver, { kind: JobName.sinkDeliver, sink: 'missed-sms', call }, { jobId });
      const job = await waitFor(async () => ((await queue.getJob(jobId))?.finishedOn ? queue.getJob(jobId) : null), {
        what: 'the SMS job settled',
      });
      assert.ok(job);
      assert.equal(await job.getState(), 'failed');
      return { job, logs: JSON.stringify(lines) };
    } finally {
      await running.close();
      await queue.close();
    }
  }

  test('a 400 quoting the recipient and the text: the dead letter and the logs hold neither', async () => {
    const call: CanonicalCall = { ...sampleCall('red-sms'), from: MOBILE, fromRaw: MOBILE, outcome: 'missed' };
    const { job, logs } = await refusedSms(
      call,
      `recipient 0176 1234 5678 refused the message "We noted: ${SENTENCE}" for ${NAME}`,
    );
    const mobile = ['17612345678', '1234 5678'];
    assertClean(job.failedReason, 'failedReason', mobile);
    assertClean((job.stacktrace ?? []).join('\n'), 'stacktrace', mobile);
    assertClean(logs, 'the logs', mobile);
    assert.match(
      job.failedReason,
      /answered 400: Bad Request: recipient \*\*\*\*678 refused the message "We noted: …\.?" for … \(at \/recipient\)/,
    );
  });

  test('a 400 echoing the recipient glued to words and punctuation, national, digits only, grouped', async () => {
    const call: CanonicalCall = { ...sampleCall('red-sms-forms'), from: MOBILE, fromRaw: MOBILE, outcome: 'missed' };
    const { job, logs } = await refusedSms(
      call,
      'Empfaenger Nr.017612345678 ungueltig; Format 0176-12-34-56-78; recipient 4917612345678.Check format; ' +
        'phone_4917612345678, +4917612345678-invalid, 4917612345678s, ０１７６１２３４５６７８',
    );
    const mobile = ['17612345678', '176-12-34-56-78', '１２３４５６７８'];
    assertClean(job.failedReason, 'failedReason', mobile);
    assertClean((job.stacktrace ?? []).join('\n'), 'stacktrace', mobile);
    assertClean(logs, 'the logs', mobile);
    assert.match(
      job.failedReason,
      /answered 400: Bad Request: Empfaenger Nr\.\*\*\*\*678 ungueltig; Format \*\*\*\*678; recipient \*\*\*\*678\.Check format; phone_\*\*\*\*678, \+\*\*\*\*678-invalid, \*\*\*\*678s, \*\*\*\*678 \(at \/recipient\)/,
    );
  });

  test('a 400 echoing the form it was sent, percent-escaped: neither the recipient nor the text is left', async () => {
    // An API that quotes the request it could not parse writes it escaped: `%20` between the words,
    // the number in runs of 2 to 6 digits. Before, the summary, the name and the number all got through.
    const call: CanonicalCall = { ...sampleCall('red-sms-pct'), from: MOBILE, fromRaw: MOBILE, outcome: 'missed' };
    const form = `to=${encodeURIComponent('+49 176 1234 5678')}&text=${encodeURIComponent(`We noted: ${SENTENCE} (${NAME})`)}`;
    const message = encodeURIComponent(`We noted: ${SENTENCE} (${NAME}) +49 176 1234 5678`);
    const { job, logs } = await refusedSms(call, `cannot parse ${message} / ${form.replace(/%20/g, '+')}`);
    const pieces = ['1234%205678', '176+1234', '5678', 'dentist', 'Lovelace', 'appointment'];
    assertClean(job.failedReason, 'failedReason', pieces);
    assertClean((job.stacktrace ?? []).join('\n'), 'stacktrace', pieces);
    assertClean(logs, 'the logs', pieces);
    assert.match(
      job.failedReason,
      /answered 400: Bad Request: cannot parse We noted: …\) \+\*\*\*\*678 \/ to=\+\*\*\*\*678&text=…/,
    );
  });

  test('a 400 echoing the SMS text JSON-escaped (\\u00fc) or as HTML entities: no word of the summary is left', async () => {
    const summary = 'Frau Müller möchte ihren Vertrag kündigen, die Rechnung für März ist zu hoch.';
    const base = sampleCall('red-sms-esc');
    const call: CanonicalCall = {
      ...base,
      from: MOBILE,
      fromRaw: MOBILE,
      outcome: 'missed',
      summary: { ...base.summary!, content: summary },
    };
    const escaped = JSON.stringify(`We noted: ${summary}`).replace(
      /[\u0080-\uffff]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
    const { job, logs } = await refusedSms(
      call,
      `validation failed for message: ${escaped}; as HTML: Frau M&uuml;ller m&ouml;chte ihren Vertrag k&#252;ndigen`,
    );
    const words = ['Müller', 'M\\u00fcller', 'M&uuml;ller', 'Vertrag', 'Rechnung', 'ndigen'];
    assertClean(job.failedReason, 'failedReason', words);
    assertClean((job.stacktrace ?? []).join('\n'), 'stacktrace', words);
    assertClean(logs, 'the logs', words);
    assert.match(
      job.failedReason,
      /answered 400: Bad Request: validation failed for message: "We noted: …\.?"; as HTML: …/,
    );
  });
});

describe('an SMTP server and S3 echoing what they were sent', () => {
  test('an SMTP refusal naming the recipient and quoting the subject is redacted', async () => {
    const smtp = await TestSmtpServer.start();
    const mailer = createSmtpMailer(smtp.url.replace('?requireTLS=true&', '?'), { timeoutMs: 5000 });
    try {
      smtp.rejectData = { code: 550, message: `<ada.lovelace@example.com> mailbox full; caller ${NUMBER}` };
      const err = await mailer
        .send({
          from: 'a@example.com',
          to: ['ada.lovelace@example.com'],
          subject: 's',
          text: 't',
          html: '<p>t</p>',
          messageId: '<m@example.com>',
        })
        .catch((e: unknown) => e);
      assert.ok(err instanceof PermanentError, String(err));
      assert.equal(err.status, 550);
      assert.ok(!err.message.includes('ada.lovelace'), err.message);
      assertClean(err.message, 'the SMTP error');
      assert.match(err.message, /550 .*\*\*\*@example\.com> mailbox full; caller \+\*\*\*\*340/);
    } finally {
      await mailer.close();
      await smtp.close();
    }
  });

  test('an S3 error message quoting the object key and a number is redacted, its code kept', async () => {
    // An S3-compatible server answering every PUT with S3's XML error shape, echoing the request.
    const server = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(400, { 'content-type': 'application/xml' });
        res.end(
          `<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidArgument</Code><Message>Metadata for ${NUMBER} (contact ${NAME.replace(' ', '.').toLowerCase()}@example.com) is invalid</Message><RequestId>1</RequestId></Error>`,
        );
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const store = new S3Store({
      bucket: 'b',
      region: 'us-east-1',
      endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      forcePathStyle: true,
      credentials: { accessKeyId: 'k', secretAccessKey: 's' },
    });
    try {
      const err = await store
        .put('transcripts/x.json', '{}', { contentType: 'application/json' })
        .catch((e: unknown) => e);
      assert.ok(err instanceof PermanentError, String(err));
      assert.match(
        err.message,
        /S3 PutObject transcripts\/x\.json answered 400: InvalidArgument: Metadata for \+\*\*\*\*340 \(contact \*\*\*@example\.com\) is invalid/,
      );
      assertClean(err.message, 'the S3 error');
    } finally {
      store.client.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
