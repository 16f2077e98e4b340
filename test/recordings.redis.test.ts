// Recordings of channel calls: downloaded with the API's auth and streamed by the archive sink into
// a local folder or S3 (s3rver, multipart), content type kept, memory far below the file size.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GetObjectCommand, HeadObjectCommand } from '@aws-sdk/client-s3';
import type { Readable } from 'node:stream';
import { callKeySegment } from '../src/model/call.js';
import { normalizeChannelEvent } from '../src/model/channel-event.js';
import { ArchiveSink } from '../src/sinks/archive/index.js';
import { recordingExtension } from '../src/sinks/archive/recordings.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { PermanentError, TransientError } from '../src/errors.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { memoryLog } from './support/callsync.js';
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';
import { startS3, TEST_CREDENTIALS, type TestS3 } from './support/s3.js';
import { S3Store } from '../src/sinks/archive/s3-store.js';

const MB = 1024 * 1024;
const { log } = memoryLog('warn');
const ctx = () => ({ jobId: 'j', attempt: 1, log, signal: new AbortController().signal });

async function sha256(stream: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

describe('recordings in the archive', () => {
  let api: FakeTelephony;
  let dir: string;
  let s3: TestS3;
  before(async () => {
    api = await FakeTelephony.start();
    dir = await mkdtemp(join(tmpdir(), 'recordings-'));
    s3 = await startS3('recordings-test');
  });
  after(async () => {
    await api.close();
    await s3.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  it('streams each recording beside the transcript: call id and type in the key, content type kept', async () => {
    const vm = api.addRecording('vm-1', { size: 300_000, contentType: 'audio/wav', seed: 2 });
    const cr = api.addRecording('cr-1', { size: 1_200_000, contentType: 'audio/mpeg', seed: 3 });
    const call = normalizeChannelEvent(
      channelEvent({
        eventId: 'rec-1',
        call: { callSid: 'sid-rec-1', startedAt: '2025-03-04T10:00:00Z' },
        recordings: [
          { downloadUrl: vm, type: 'voicemail' },
          { downloadUrl: cr, type: 'call_recorder' },
        ],
      }),
      new Date(),
      { channelId: 'c' },
    );
    const telephony = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth });
    const sink = new ArchiveSink('archive', new LocalFolderStore(dir), 'callsync/', telephony);
    const result = await sink.deliver(call, ctx());
    const name = callKeySegment(call); // `sid-rec-1-<16 hex of sha256(channel:c:rec-1)>`
    assert.match(name, /^sid-rec-1-[0-9a-f]{16}$/);
    assert.equal(result.refs?.recording1, `callsync/recordings/2025/03/04/${name}-voicemail-1.wav`);
    assert.equal(result.refs?.recording2, `callsync/recordings/2025/03/04/${name}-call_recorder-2.mp3`);
    assert.equal(await sha256(createReadStream(join(dir, result.refs!.recording1!))), api.recordingSha256('vm-1'));
    assert.equal(await sha256(createReadStream(join(dir, result.refs!.recording2!))), api.recordingSha256('cr-1'));
    const files = (await readdir(join(dir, 'callsync'), { recursive: true })).filter((f) => f.includes('.')).sort();
    assert.deepEqual(files, [
      `recordings/2025/03/04/${name}-call_recorder-2.mp3`,
      `recordings/2025/03/04/${name}-voicemail-1.wav`,
      `transcripts/2025/03/04/${name}.json`,
      `transcripts/2025/03/04/${name}.txt`,
      `transcripts/2025/03/04/${name}.vcon.json`,
    ]);
    const auth = api.requests.filter((r) => r.path.startsWith('/v2/recordings/')).map((r) => r.authorization);
    assert.ok(
      auth.every((a) => a?.startsWith('Basic ')),
      'downloads carry the API credentials',
    );
  });

  it('a 50 MB recording goes to S3 as a multipart upload; the memory it holds does not grow with the size (50 vs 150 MB, measured in a child process)', async () => {
    const size = 50 * MB;
    const big = api.addRecording('big-1', { size, contentType: 'audio/wav', seed: 9 });
    const small = api.addRecording('warm-1', { size: 10_000, contentType: 'audio/wav' });
    const event = channelEvent({
      eventId: 'big',
      call: { callSid: 'sid-big', startedAt: '2025-03-05T10:00:00Z' },
      recordings: [{ downloadUrl: big, type: 'call_recorder' }],
    });
    const warmup = channelEvent({
      eventId: 'warm',
      call: { callSid: 'sid-warm', startedAt: '2025-03-05T09:00:00Z' },
      recordings: [{ downloadUrl: small, type: 'voicemail' }],
    });
    const huge = api.addRecording('huge-1', { size: 3 * size, contentType: 'audio/wav', seed: 11 });
    const hugeEvent = channelEvent({
      eventId: 'huge',
      call: { callSid: 'sid-huge', startedAt: '2025-03-05T11:00:00Z' },
      recordings: [{ downloadUrl: huge, type: 'call_recorder' }],
    });
    const measure = async (mode: 'retained' | 'raw', archived = event) => {
      const child = spawn(
        process.execPath,
        ['--expose-gc', '--import', 'tsx', 'test/support/recording-memory-process.ts'],
        {
          env: {
            ...process.env,
            MEASURE: mode,
            TELEPHONY_API_URL: api.url,
            S3_ENDPOINT: s3.endpoint,
            S3_BUCKET: s3.bucket,
            EVENT_JSON: JSON.stringify(archived),
            WARMUP_EVENT_JSON: JSON.stringify(warmup),
          },
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString('utf8')));
      const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
      assert.equal(code, 0, out);
      return JSON.parse(out.trim().split('\n').at(-1)!) as {
        ms: number;
        refs: Record<string, string>;
        s3Calls: Record<string, number>;
        growth: Record<string, number>;
      };
    };
    const key = `callsync/recordings/2025/03/05/${callKeySegment(normalizeChannelEvent(event, new Date(), { channelId: 'mem' }))}-call_recorder-1.wav`;
    const toMB = (n: number) => Math.round((n / MB) * 10) / 10;
    const retained = await measure('retained');
    assert.equal(retained.refs.recording1, key);
    // A multipart upload of 5 MiB parts: ten parts, never one 50 MB PUT.
    assert.equal(retained.s3Calls.CreateMultipartUploadCommand, 1);
    assert.equal(retained.s3Calls.UploadPartCommand, 10);
    assert.equal(retained.s3Calls.CompleteMultipartUploadCommand, 1);
    const raw = await measure('raw');
    const retainedHuge = await measure('retained', hugeEvent);
    assert.equal(retainedHuge.s3Calls.UploadPartCommand, 30);
    for (const [name, r] of [
      ['50 MB, retained', retained],
      ['50 MB, raw', raw],
      ['150 MB, retained', retainedHuge],
    ] as const) {
      console.log(
        `# recording archived to S3 in ${r.ms} ms; ${name} growth: rss ${toMB(r.growth.rss!)} MB, heap ${toMB(r.growth.heapUsed!)} MB, arrayBuffers ${toMB(r.growth.arrayBuffers!)} MB`,
      );
    }
    // What the process holds while it streams: one 5 MiB part uploading while the next is read and
    // assembled, plus the HTTP layers' buffers — 15-28 MB seen here, whatever the size: three times
    // the file is not three times the memory. RSS also keeps the allocator's high-water mark (freed
    // pages are not always returned), hence its looser bound.
    for (const [name, r] of [
      ['50 MB', retained],
      ['150 MB', retainedHuge],
    ] as const) {
      assert.ok(r.growth.rss! < 45 * MB, `${name}: rss grew ${toMB(r.growth.rss!)} MB`);
      assert.ok(r.growth.arrayBuffers! < 40 * MB, `${name}: buffers grew ${toMB(r.growth.arrayBuffers!)} MB`);
      assert.ok(r.growth.heapUsed! < 25 * MB, `${name}: heap grew ${toMB(r.growth.heapUsed!)} MB`);
    }
    // The raw numbers are only reported: they include freed buffers V8 collects lazily (its
    // external-memory trigger lets tens of MB pile up), which says nothing about what is held.

    const head = await s3.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: key }));
    assert.equal(head.ContentLength, size);
    assert.equal(head.ContentType, 'audio/wav');
    const object = await s3.client.send(new GetObjectCommand({ Bucket: s3.bucket, Key: key }));
    assert.equal(await sha256(object.Body as Readable), api.recordingSha256('big-1'));
  });

  it('a missing recording is a permanent failure; a 5xx before the body is retried', async () => {
    const telephony = createTelephonyClient({
      baseUrl: api.url,
      auth: api.basicAuth,
      retryMinDelayMs: 10,
      retryMaxDelayMs: 20,
    });
    const sink = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, telephony);
    const missing = normalizeChannelEvent(
      channelEvent({ eventId: 'gone', recordings: [{ downloadUrl: '/recordings/none', type: 'voicemail' }] }),
      new Date(),
      { channelId: 'c' },
    );
    const err = await sink.deliver(missing, ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError);
    assert.equal(err.status, 404);

    const url = api.addRecording('flaky', { size: 5000 });
    api.inject({ on: 'recording', status: 503, times: 2 });
    const flaky = normalizeChannelEvent(
      channelEvent({ eventId: 'flaky', recordings: [{ downloadUrl: url, type: 'in_call_feature' }] }),
      new Date(),
      { channelId: 'c' },
    );
    const result = await sink.deliver(flaky, ctx());
    assert.match(result.refs?.recording1 ?? '', /call-flaky-[0-9a-f]{16}-in_call_feature-1\.wav$/);
  });

  it('a download that never ends (a trickle under the idle limit) fails the attempt at recordingTimeoutMs, as transient, on disk and on S3', async () => {
    // The platform's recording endpoint sends 1 KiB every 50 ms, forever (no Content-Length).
    const endless = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'audio/wav' });
      const timer = setInterval(() => res.write(Buffer.alloc(1024, 1)), 50);
      res.on('close', () => clearInterval(timer));
    });
    await new Promise<void>((resolve) => endless.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = endless.address() as AddressInfo;
      const telephony = createTelephonyClient({
        baseUrl: `http://127.0.0.1:${port}/v2`,
        auth: api.basicAuth,
        downloadIdleTimeoutMs: 500,
      });
      const call = normalizeChannelEvent(
        channelEvent({
          eventId: 'endless',
          recordings: [{ downloadUrl: '/recordings/endless', type: 'call_recorder' }],
        }),
        new Date(),
        { channelId: 'c' },
      );
      for (const store of [
        new LocalFolderStore(dir),
        new S3Store({
          bucket: s3.bucket,
          region: 'us-east-1',
          endpoint: s3.endpoint,
          forcePathStyle: true,
          credentials: TEST_CREDENTIALS,
        }),
      ]) {
        const sink = new ArchiveSink('archive', store, undefined, telephony, null, { recordingTimeoutMs: 1500 });
        const started = Date.now();
        const outcome = await Promise.race([
          sink.deliver(call, ctx()).then(
            () => 'done',
            (e: unknown) => e,
          ),
          new Promise((resolve) => setTimeout(() => resolve('still running after 8 s'), 8000).unref()),
        ]);
        assert.ok(
          outcome instanceof TransientError,
          `${store.location}: expected a TransientError, got ${String(outcome)}`,
        );
        assert.match(outcome.message, /recording 1 of 1 .*did not finish within 1500 ms/);
        assert.ok(Date.now() - started < 6000);
      }
      // Nothing half-written is left as an object.
      const files = await readdir(join(dir, 'recordings'), { recursive: true }).catch(() => [] as string[]);
      assert.deepEqual(
        files.filter((f) => /endless/.test(f) && /\.(wav|tmp)$/.test(f)),
        [],
      );
    } finally {
      endless.closeAllConnections();
      await new Promise<void>((resolve) => endless.close(() => resolve()));
    }
  });

  it('recordings without a configured telephony API are a permanent failure naming the setting', async () => {
    const sink = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, null);
    const call = normalizeChannelEvent(
      channelEvent({ eventId: 'noapi', recordings: [{ downloadUrl: '/recordings/x', type: 'voicemail' }] }),
      new Date(),
      { channelId: 'c' },
    );
    const err = await sink.deliver(call, ctx()).catch((e: unknown) => e);
    assert.ok(err instanceof PermanentError);
    assert.match(err.message, /TELEPHONY_API_URL/);
  });

  it('picks the extension from the content type, else the URL', () => {
    assert.equal(recordingExtension('audio/x-wav', '/r/1'), 'wav');
    assert.equal(recordingExtension('audio/mpeg; charset=binary', '/r/1'), 'mp3');
    assert.equal(recordingExtension('application/octet-stream', '/r/1.ogg?sig=1'), 'ogg');
    assert.equal(recordingExtension('application/octet-stream', '/r/1'), 'bin');
  });
});
