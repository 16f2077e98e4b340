// The end-to-end benchmark's remote systems, in their own process so they do not share a CPU
// thread with the load generator: an S3 server (s3rver), a signed-webhook CRM receiver and the
// platform's SMS API. Prints `READY {json}` with their addresses; GET <statsUrl> answers counts.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomBytes } from 'node:crypto';
import { FakeSmsApi, FakeWebhookReceiver } from '../test/support/fake-sink-server.js';
import { startS3 } from '../test/support/s3.js';

async function main(): Promise<void> {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const [s3, crm, sms] = await Promise.all([
    startS3('bench-archive'),
    new FakeWebhookReceiver(secret).start(),
    new FakeSmsApi().start(),
  ]);
  const stats = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        crmRecords: crm.records.size,
        crmRequests: crm.requests,
        smsRecipients: sms.byRecipient.size,
        smsRequests: sms.requests,
      }),
    );
  });
  await new Promise<void>((resolve) => stats.listen(0, '127.0.0.1', resolve));
  const statsUrl = `http://127.0.0.1:${(stats.address() as AddressInfo).port}/`;
  console.log(
    `READY ${JSON.stringify({ s3Env: s3.env, crmUrl: crm.url, secret, smsUrl: sms.url, tokenId: sms.tokenId, token: sms.token, statsUrl })}`,
  );
  process.on('SIGTERM', () => {
    void Promise.all([s3.destroy(), crm.stop(), sms.stop()]).finally(() => process.exit(0));
  });
}

void main();
