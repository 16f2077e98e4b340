// The bare loop of `bench:e2e` (issue 26, item 2): the external work of the worker's three sinks for
// each call, written by hand, no Redis, no BullMQ, no callsync runtime — the call's three archive
// objects (JSON, transcript, vCon: rendered as the archive renders them) PUT with the AWS SDK
// (S3Client configured as the archive's) to the same s3rver, the same signed webhook POSTed to the
// same fake CRM receiver and the same SMS POSTed to the same fake platform API (node:http on a
// keep-alive agent). BENCH_CONCURRENCY calls at once. Prints `READY {json}` with its own CPU per call
// (process.cpuUsage over the loop only: module loading and setup left out), then exits.
//
// Env: the sink servers' (S3_ENDPOINT, ARCHIVE_S3_BUCKET, AWS_*), BARE_CRM_URL, BARE_SECRET,
// BARE_SMS_URL, BARE_TOKEN_ID, BARE_TOKEN, BARE_CALL_FILE (the call as JSON), BARE_N (calls), BARE_CONCURRENCY, BARE_WARMUP (calls first, not measured).
import { createHmac, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { renderVcon } from '../src/model/vcon.js';
import { renderArchiveJson, renderTranscriptText } from '../src/sinks/archive/render.js';
import type { CanonicalCall } from '../src/model/call.js';

const env = process.env;
const N = Number(env.BARE_N ?? 2000);
const WARMUP = Number(env.BARE_WARMUP ?? 200);
const CONCURRENCY = Number(env.BARE_CONCURRENCY ?? 32);
/** The share of calls the worker sent an SMS for in the run (its cooldown and ledger skip some): the same here. */
const SMS_SHARE = Number(env.BARE_SMS_SHARE ?? 1);
const bucket = env.ARCHIVE_S3_BUCKET!;
const s3 = new S3Client({
  region: env.AWS_REGION ?? 'us-east-1',
  endpoint: env.S3_ENDPOINT,
  forcePathStyle: true,
  credentials: { accessKeyId: env.AWS_ACCESS_KEY_ID!, secretAccessKey: env.AWS_SECRET_ACCESS_KEY! },
  maxAttempts: 2,
  requestChecksumCalculation: 'WHEN_REQUIRED',
  responseChecksumValidation: 'WHEN_REQUIRED',
});
const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY });
const hmacKey = Buffer.from(env.BARE_SECRET!.slice('whsec_'.length), 'base64');
const smsAuth = `Basic ${Buffer.from(`${env.BARE_TOKEN_ID}:${env.BARE_TOKEN}`).toString('base64')}`;
const tag = randomBytes(3).toString('hex');
// One call's content, as bench:e2e posts it (a mobile caller), as JSON as the sink jobs carry it
// (BARE_CALL_FILE, written by bench/e2e.ts); each loop call gets its own id.
const template = JSON.parse(readFileSync(env.BARE_CALL_FILE!, 'utf8')) as CanonicalCall;

function post(url: string, body: string, headers: Record<string, string>): Promise<void> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request(
      {
        hostname: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers },
      },
      (res) => {
        res.resume();
        res.once('end', () =>
          res.statusCode! >= 200 && res.statusCode! < 300 ? resolve() : reject(new Error(`${url}: ${res.statusCode}`)),
        );
      },
    );
    req.once('error', reject);
    req.end(body);
  });
}

async function oneCall(i: number): Promise<void> {
  const id = `${tag}-${i}`;
  const call = { ...template, key: `${template.key}-${id}`, callId: id };
  const put = (key: string, body: string, contentType: string) =>
    s3.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: body, ContentType: contentType }));
  await put(`bare/${id}.json`, renderArchiveJson(call), 'application/json; charset=utf-8');
  await put(`bare/${id}.txt`, renderTranscriptText(call), 'text/plain; charset=utf-8');
  await put(`bare/${id}.vcon.json`, `${JSON.stringify(renderVcon(call), null, 2)}\n`, 'application/vcon+json');
  // The signed webhook (Standard Webhooks), the call in an envelope.
  const { raw: _raw, ...data } = call;
  const body = JSON.stringify({ type: 'call.completed', timestamp: call.endedAt ?? call.startedAt, data });
  const msgId = `msg_${id}`;
  const ts = Math.floor(Date.now() / 1000);
  const signature = `v1,${createHmac('sha256', hmacKey).update(`${msgId}.${ts}.${body}`).digest('base64')}`;
  await post(env.BARE_CRM_URL!, body, {
    'webhook-id': msgId,
    'webhook-timestamp': String(ts),
    'webhook-signature': signature,
  });
  if (Math.floor((i + 1) * SMS_SHARE) === Math.floor(i * SMS_SHARE)) return;
  await post(
    `${env.BARE_SMS_URL}/sessions/sms`,
    JSON.stringify({
      smsId: 's0',
      recipient: '+491701234567',
      message: `Thanks for calling. Agreed: ${call.summary?.content ?? ''}`.slice(0, 300),
    }),
    { authorization: smsAuth, accept: 'application/json' },
  );
}

async function run(from: number, count: number): Promise<number> {
  let next = from;
  let failed = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next < from + count) {
        const i = next++;
        await oneCall(i).catch(() => failed++);
      }
    }),
  );
  return failed;
}

async function main(): Promise<void> {
  await run(0, WARMUP);
  const cpu = process.cpuUsage();
  const started = performance.now();
  const failed = await run(WARMUP, N);
  const seconds = (performance.now() - started) / 1000;
  const used = process.cpuUsage(cpu);
  const cpuMsPerCall = (used.user + used.system) / 1000 / N;
  console.log(
    `READY ${JSON.stringify({ calls: N, failed, seconds, callsPerSecond: N / seconds, cpuMsPerCall, rssMb: process.memoryUsage().rss / 2 ** 20 })}`,
  );
  s3.destroy();
  agent.destroy();
}

void main();
