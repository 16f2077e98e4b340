// No personal data where it is not needed (issue 25, item 3): the jobs of sinks that do not read the
// transcript (SMS, e-mail, HubSpot, Pipedrive) carry no transcript text — only that there is one, so
// the CRM note still links the archived transcript — while the archive and the signed webhook, which
// send it on, get it whole. None of them but the webhook with `includeRaw` gets the raw payload. With
// PRIVACY_HMAC_SECRET the SMS sink's ledger marker and cooldown name the number by its keyed hash.
// The same holds for the jobs `callsync replay --sink` and `backfill --sink` queue straight to a sink.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { callHash, callKey } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { runCli } from '../src/cli/index.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { waitFor } from './support/redis.js';
import { TestSmtpServer } from './support/smtp.js';

const SENTENCE = 'My account number is 55-1234 and the code word is heron.';
// Parts of the call the SMS and e-mail templates below do not use: their jobs leave them out (the
// CRMs' default templates read the answers and the headline, not the user names or the channel).
const UNREAD = ['Lovelace', 'Answer-Kestrel', 'Headline-Osprey', 'Channel-Wren'];

describe('sink jobs carry the transcript only where it is read', () => {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  let hubspot: FakeHubSpot;
  let pipedrive: FakePipedrive;
  let receiver: FakeWebhookReceiver;
  let api: FakeTelephony;
  let smtp: TestSmtpServer;
  let cs: TestCallsync;
  let dir: string;
  let env: Record<string, string>;

  before(async () => {
    [hubspot, pipedrive, receiver, api, smtp] = await Promise.all([
      new FakeHubSpot().start(),
      new FakePipedrive().start(),
      new FakeWebhookReceiver(secret).start(),
      FakeTelephony.start(),
      TestSmtpServer.start(),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'jobdata-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
  archive: { type: archive, dir: ${join(dir, 'archive')} }
  hubspot: { type: hubspot, apiUrl: "${hubspot.url}" }
  pipedrive: { type: pipedrive, apiUrl: "${pipedrive.url}" }
  hooks: { type: webhook, endpoints: [{ name: r, url: "${receiver.url}" }] }
  sms: { type: sms, smsId: s0, to: caller, message: "Thanks: {{summary}}", cooldown: 1h, maxAge: 3650d }
  mail: { type: email, from: calls@example.com, to: [team@example.com], subject: "Call from {{caller}}" }
routes:
  - to: [archive, hubspot, pipedrive, hooks, sms, mail]
`,
    );
    env = {
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      PIPEDRIVE_API_TOKEN: pipedrive.token,
      CRM_WEBHOOK_SECRET: secret,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      SMTP_URL: smtp.url,
      SPOOL_ENABLED: 'false',
      PRIVACY_HMAC_SECRET: 'job-data-secret',
    };
    cs = await startTestCallsync(env);
  });
  after(async () => {
    await cs?.stop();
    await Promise.all([hubspot?.stop(), pipedrive?.stop(), receiver?.stop(), api?.close(), smtp?.close()]);
    await rm(dir, { recursive: true, force: true });
  });

  test('SMS, e-mail, HubSpot and Pipedrive jobs: no transcript text; archive and webhook: the transcript', async () => {
    const payload = webhookPayload('jd-1', (p) => {
      p.call.from = '+491701234567';
      p.assist.transcription.content = `Caller: ${SENTENCE}`;
      p.assist.transcription.chunks[0].content = SENTENCE;
      p.assist.callScenarios[0].smartAnswers[0].setItems[0].answer = 'Answer-Kestrel';
      p.assist.callHeadline = 'Headline-Osprey';
      p.call.channel = { id: 'ch-1', name: 'Channel-Wren' };
    });
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    const id = callHash(callKey('ai-agent', 'agent-1', 'jd-1'));
    const queues: [string, string | undefined][] = [
      ['archive', undefined],
      ['hubspot', undefined],
      ['pipedrive', undefined],
      ['hooks', 'r'],
      ['sms', undefined],
      ['mail', undefined],
    ];
    const data = new Map<string, string>();
    for (const [sink, endpoint] of queues) {
      const queue = new Queue<SinkDeliverJob>(sinkQueueName(sink, endpoint), {
        connection: cs.redis.worker,
        prefix: cs.prefix,
      });
      try {
        const job = await waitFor(
          async () => {
            const j = await queue.getJob(id);
            return j && (await j.isCompleted()) ? j : null;
          },
          { what: `${sink} delivered`, timeoutMs: 30_000 },
        );
        data.set(sink, JSON.stringify(job.data));
      } finally {
        await queue.close();
      }
    }
    for (const sink of ['archive', 'hooks'])
      assert.ok(data.get(sink)!.includes(SENTENCE), `${sink} gets the transcript`);
    for (const sink of ['hubspot', 'pipedrive', 'sms', 'mail']) {
      assert.ok(!data.get(sink)!.includes(SENTENCE), `${sink}'s job carries no transcript text`);
      assert.match(
        data.get(sink)!,
        /"transcript":\{"content":"","chunks":\[\],"omitted":true\}/,
        `${sink}'s job says there is one`,
      );
      assert.match(data.get(sink)!, /"raw":null/, `${sink}'s job carries no raw payload`);
    }
    // The SMS ("Thanks: {{summary}}") and the e-mail (subject "Call from {{caller}}", the default
    // text: numbers, times, summary, key points, topics) read no user names, smart answers, headline
    // or channel: their jobs hold none; the sinks that may read them get them.
    for (const sink of ['sms', 'mail']) {
      for (const text of UNREAD) assert.ok(!data.get(sink)!.includes(text), `${sink}'s job holds no ${text}`);
      assert.ok(data.get(sink)!.includes('dentist appointment'), `${sink}'s job keeps the summary it sends`);
    }
    // HubSpot and Pipedrive read what their templates read: the defaults use the headline (the
    // title), the summary and the smart answers (the note), never user names or the channel.
    for (const sink of ['hubspot', 'pipedrive']) {
      for (const text of ['Lovelace', 'Channel-Wren'])
        assert.ok(!data.get(sink)!.includes(text), `${sink}'s job holds no ${text}`);
      for (const text of ['Answer-Kestrel', 'Headline-Osprey', 'dentist appointment'])
        assert.ok(data.get(sink)!.includes(text), `${sink}'s job keeps ${text}`);
    }
    for (const sink of ['archive', 'hooks'])
      for (const text of UNREAD) assert.ok(data.get(sink)!.includes(text), `${sink}'s job keeps ${text}`);
    assert.ok(
      api.sms.some((m) => m.message.includes('dentist appointment')),
      'the SMS says the summary',
    );
    assert.match(smtp.messages[0]?.text ?? '', /dentist appointment/, 'the e-mail has the summary');
    // With PRIVACY_HMAC_SECRET no key names the number: the "never twice" marker and the cooldown hold its keyed hash.
    assert.ok(
      api.sms.some((m) => m.recipient === '+491701234567'),
      'the SMS went out',
    );
    const keys = await cs.redis.worker.keys(`${cs.prefix}*`);
    assert.ok(
      keys.some((k) => /:sent:[0-9a-f]{32}:h1\./.test(k)) && keys.some((k) => /:cooldown:h1\./.test(k)),
      keys.join('\n'),
    );
    assert.deepEqual(
      keys.filter((k) => k.includes('491701234567')),
      [],
    );
    // The CRM note still links the archived transcript.
    const [record] = [...hubspot.calls.values()];
    assert.match(String(record!.properties.hs_call_body), /Transcript: transcripts\/2026\/04\/08\/jd-1-/);
  });

  test('replay --sink: the jobs queued straight to a sink carry what the fan-out gives it, no more', async () => {
    // jd-1 was archived by the test above (its day: 2026-04-08).
    const lines: string[] = [];
    const io = { env: testEnv(cs.prefix, env), out: (l: string) => lines.push(l), err: (l: string) => lines.push(l) };
    for (const sink of ['sms', 'hubspot', 'hooks'])
      assert.equal(
        await runCli(['replay', '--from', '2026-04-08', '--to', '2026-04-08', '--sink', sink], io),
        0,
        lines.join('\n'),
      );
    const replayed = async (queueName: string) => {
      const queue = new Queue<SinkDeliverJob>(queueName, { connection: cs.redis.worker, prefix: cs.prefix });
      try {
        const jobs = (await queue.getJobs(['waiting', 'active', 'completed', 'failed', 'delayed'])).filter((j) =>
          j?.id?.startsWith('replay-'),
        );
        assert.equal(jobs.length, 1, `${queueName}: one replayed job`);
        return JSON.stringify(jobs[0]!.data);
      } finally {
        await queue.close();
      }
    };
    for (const text of UNREAD)
      assert.ok(!(await replayed(sinkQueueName('sms'))).includes(text), `the replayed SMS job holds no ${text}`);
    for (const text of ['Lovelace', 'Channel-Wren'])
      assert.ok(
        !(await replayed(sinkQueueName('hubspot'))).includes(text),
        `the replayed HubSpot job holds no ${text}`,
      );
    for (const sink of ['sms', 'hubspot']) {
      const data = await replayed(sinkQueueName(sink));
      assert.ok(!data.includes(SENTENCE), `${sink}'s replayed job carries no transcript text`);
      assert.match(data, /"transcript":\{"content":"","chunks":\[\],"omitted":true\}/, `${sink}: there is one`);
      assert.match(data, /"raw":null/, `${sink}'s replayed job carries no raw payload`);
    }
    // The webhook sends the transcript on: its replayed job (handed over to its endpoint's queue) keeps it.
    assert.ok((await replayed(sinkQueueName('hooks'))).includes(SENTENCE), 'the webhook gets the transcript');
  });
});
