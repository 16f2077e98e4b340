// One webhook through every kind of sink configured from a YAML file: archive (S3), HubSpot, SMS
// through the platform API, e-mail through SMTP — each delivered once, also when redelivered.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { sinkQueueName } from '../queues/registry.js';
import { callKeySegment } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3, S3_ARCHIVE_SINK_YAML } from './support/s3.js';
import { TestSmtpServer } from './support/smtp.js';

describe('all sinks from one config file', () => {
  let s3: TestS3;
  let hubspot: FakeHubSpot;
  let api: FakeTelephony;
  let smtp: TestSmtpServer;
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    [s3, hubspot, api, smtp] = await Promise.all([
      startS3(),
      new FakeHubSpot().start(),
      FakeTelephony.start(),
      TestSmtpServer.start(),
    ]);
    hubspot.addContact({ firstname: 'Grace', lastname: 'Hopper', phone: '0170 1234567' });
    dir = await mkdtemp(join(tmpdir(), 'e2e-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
${S3_ARCHIVE_SINK_YAML}  hubspot:
    type: hubspot
    apiUrl: ${hubspot.url}
  appointment-sms:
    type: sms
    smsId: s0
    to: caller
    message: "Thanks for calling. Agreed: {{summary}}"
  team-mail:
    type: email
    from: calls@example.com
    to: [team@example.com]
    subject: "Call from {{caller}}"
routes:
  - when: [{ hasTranscript: true }, { hasSummary: true }]
    to: [archive]
  - to: [hubspot]
  - when: { topics: [appointment] }
    to: [appointment-sms]
  - when: { hasSummary: true }
    to: [team-mail]
`,
    );
    cs = await startTestCallsync({
      ...s3.env,
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      SMTP_URL: smtp.url,
    });
  });

  after(async () => {
    await cs?.stop();
    await Promise.all([s3?.destroy(), hubspot?.stop(), api?.close(), smtp?.close()]);
    await rm(dir, { recursive: true, force: true });
  });

  test('one webhook, delivered once to each routed sink, also when the platform sends it twice', async () => {
    // A mobile caller (landlines get no SMS).
    const payload = webhookPayload('e2e-1', (p) => (p.call.from = '+491701234567'));
    const first = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload);
    assert.equal(first.status, 202);
    const again = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload);
    assert.deepEqual(again.body, { id: first.body.id, duplicate: true });

    const queues = ['archive', 'hubspot', 'appointment-sms', 'team-mail'].map(
      (name) => new Queue(sinkQueueName(name), { connection: cs.redis.worker, prefix: cs.prefix }),
    );
    await waitFor(
      async () => {
        const counts = await Promise.all(queues.map((q) => q.getJobCounts('completed')));
        return counts.every((c) => c.completed === 1);
      },
      { what: 'every sink completed', timeoutMs: 30_000 },
    );

    const name = callKeySegment({ key: 'ai-agent:agent-1:e2e-1', callId: 'e2e-1' });
    assert.deepEqual(await s3.list('transcripts/'), [
      `transcripts/2026/04/08/${name}.json`,
      `transcripts/2026/04/08/${name}.txt`,
      `transcripts/2026/04/08/${name}.vcon.json`,
    ]);
    assert.equal(hubspot.calls.size, 1);
    const [call] = [...hubspot.calls.values()];
    assert.equal(call!.properties.hs_call_direction, 'INBOUND');
    assert.equal(call!.properties.hs_call_duration, '135000');
    assert.equal(call!.properties.hs_call_from_number, '+491701234567');
    assert.equal(call!.associations.length, 1, 'associated with the contact found by phone number');
    assert.deepEqual(api.sms, [
      {
        smsId: 's0',
        recipient: '+491701234567',
        message: 'Thanks for calling. Agreed: The caller asked to move her dentist appointment to Friday morning.',
      },
    ]);
    assert.equal(smtp.messages.length, 1);
    assert.deepEqual(smtp.messages[0]!.to, ['team@example.com']);
    assert.match(smtp.messages[0]!.subject, /Call from/);
    assert.match(smtp.messages[0]!.text ?? '', /dentist appointment/);
    await Promise.all(queues.map((q) => q.close()));
  });
});
