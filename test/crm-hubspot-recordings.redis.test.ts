// hs_call_recording_url: the HubSpot sink links a call's recording once the archive sink stored it,
// through the archive's door (src/sinks/archive/access.ts): a real archive (local folder, and S3 on
// s3rver) fed by the fake telephony API, and the fake HubSpot checking the property as HubSpot does
// (https only). End to end: a polled channel event with a recording, archived and linked.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, beforeEach, describe, it, test } from 'node:test';
import { RetryLaterError } from '../src/errors.js';
import type { CanonicalCall } from '../src/model/call.js';
import { normalizeChannelEvent } from '../src/model/channel-event.js';
import { lazyArchiveAccess } from '../src/sinks/archive/access.js';
import { ArchiveSink, createObjectStore } from '../src/sinks/archive/index.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { HubSpotSink, hubspotSinkType } from '../src/sinks/crm/hubspot.js';
import type { ArchiveAccess } from '../src/sinks/types.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { startTestCallsync } from './support/callsync.js';
import { crmTestDeps, type CrmTestDeps } from './support/crm-deps.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';
import { waitFor } from './support/redis.js';
import { startS3, TEST_CREDENTIALS, type TestS3 } from './support/s3.js';

const BASE = 'https://files.example.com/archive/';

describe('hubspot: link to the archived recording', () => {
  let fake: FakeHubSpot;
  let api: FakeTelephony;
  let s3: TestS3;
  let dir: string;
  let deps: CrmTestDeps;

  before(async () => {
    [fake, api, s3] = await Promise.all([new FakeHubSpot().start(), FakeTelephony.start(), startS3('hs-recordings')]);
  });
  after(async () => {
    await Promise.all([fake.stop(), api.close(), s3.destroy()]);
  });
  beforeEach(async () => {
    fake.reset();
    deps = crmTestDeps({ HUBSPOT_ACCESS_TOKEN: 'pat-test-token', HUBSPOT_API_URL: fake.url });
    fake.now = () => deps.clock.now;
    dir = await mkdtemp(join(tmpdir(), 'hs-rec-'));
  });
  afterEach(async () => {
    await deps.close();
    await rm(dir, { recursive: true, force: true });
  });

  const telephony = () => createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth });
  /** A polled call with recordings, received at the test clock's now. */
  function channelCall(eventId: string, recordings: { downloadUrl: string; type: string }[]): CanonicalCall {
    return normalizeChannelEvent(channelEvent({ eventId, channelId: 'ch-1', recordings }), new Date(deps.clock.now), {
      channelId: 'ch-1',
    });
  }
  function hubspot(options: Record<string, unknown> = {}): HubSpotSink {
    return new HubSpotSink('hubspot', hubspotSinkType.options.parse(options), deps);
  }
  const stored = () => [...fake.calls.values()].map((c) => c.properties.hs_call_recording_url);

  it('waits for the archive, then links the stored recording under archive.baseUrl (extension from its content type)', async () => {
    const rec = api.addRecording('hr-1', { size: 20_000, contentType: 'audio/mpeg' });
    const call = channelCall('hr-1', [{ downloadUrl: rec, type: 'call_recorder' }]);
    const archive = new ArchiveSink('archive', new LocalFolderStore(dir), 'callsync/', telephony());
    deps.archive = archive.archiveAccess();
    const sink = hubspot({ archive: { baseUrl: BASE } });

    const early = await sink.deliver(call, deps.ctx()).catch((e: unknown) => e);
    assert.ok(early instanceof RetryLaterError, 'the recording is not archived yet');
    assert.equal(early.scope, 'job', 'only this call waits');
    assert.equal(early.delayMs, 1000);
    assert.equal(fake.calls.size, 0);

    const archived = await archive.deliver(call, deps.ctx());
    deps.clock.advance(1000);
    const done = await sink.deliver(call, deps.ctx());
    assert.equal(done.status, 'done');
    assert.equal(archived.refs?.recording1?.endsWith('-call_recorder-1.mp3'), true);
    assert.deepEqual(stored(), [`${BASE}${archived.refs?.recording1}`]);
  });

  it('gives up after recordingUrl.waitForArchiveMs: the call is written without the link, with a warning', async () => {
    const rec = api.addRecording('hr-2', { size: 1000, contentType: 'audio/wav' });
    const call = channelCall('hr-2', [{ downloadUrl: rec, type: 'voicemail' }]);
    deps.archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, telephony()).archiveAccess();
    const sink = hubspot({ archive: { baseUrl: BASE }, recordingUrl: { waitForArchiveMs: 60_000 } });
    deps.clock.advance(20_000);
    const wait = await sink.deliver(call, deps.ctx()).catch((e: unknown) => e);
    assert.ok(wait instanceof RetryLaterError && wait.delayMs === 20_000, 'waits as long again as it waited so far');
    deps.clock.advance(40_000);
    const done = await sink.deliver(call, deps.ctx());
    assert.equal(done.status, 'done');
    assert.deepEqual(stored(), [undefined]);
    assert.ok(deps.logs.some((l) => String(l.msg).includes('not in the archive')));
  });

  it('no link and no waiting without a way to link (no baseUrl, no signing store); an http baseUrl is not sent (HubSpot takes https only)', async () => {
    const rec = api.addRecording('hr-3', { size: 1000, contentType: 'audio/wav' });
    const call = channelCall('hr-3', [{ downloadUrl: rec, type: 'voicemail' }]);
    const archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, telephony());
    deps.archive = archive.archiveAccess();
    await hubspot().deliver(call, deps.ctx()); // not archived, yet no wait: nothing could link it
    await archive.deliver(call, deps.ctx());
    await hubspot({ archive: { baseUrl: 'http://files.internal/archive/' } }).deliver(call, deps.ctx());
    assert.deepEqual(stored(), [undefined]);
    assert.ok(deps.logs.some((l) => String(l.msg).includes('https recording URLs only')));
    // The fake refuses it as HubSpot does, so sending it would have dead-lettered the call.
    const res = await fetch(`${fake.url}/crm/objects/2026-09/calls`, {
      method: 'POST',
      headers: { authorization: 'Bearer pat-test-token', 'content-type': 'application/json' },
      body: JSON.stringify({
        properties: { hs_timestamp: '2026-04-08T10:00:00Z', hs_call_recording_url: 'http://files.internal/a.wav' },
      }),
    });
    assert.equal(res.status, 400);
  });

  it('a store that signs URLs gets the configured lifetime; the pre-signed URL is what HubSpot stores', async () => {
    const rec = api.addRecording('hr-4', { size: 1000, contentType: 'audio/wav' });
    const call = channelCall('hr-4', [{ downloadUrl: rec, type: 'call_recorder' }]);
    const archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, telephony());
    await archive.deliver(call, deps.ctx());
    const signed: [string, number][] = [];
    const access: ArchiveAccess = {
      recordingKeys: (c) => archive.archiveAccess().recordingKeys(c),
      presignGet: async (key, expiresInSec) => {
        signed.push([key, expiresInSec]);
        return `https://bucket.s3.example.com/${key}?X-Amz-Expires=${expiresInSec}&X-Amz-Signature=abc`;
      },
    };
    deps.archive = access;
    await hubspot({ archive: { baseUrl: BASE }, recordingUrl: { expiresInSec: 3600 } }).deliver(call, deps.ctx());
    assert.equal(signed.length, 1);
    assert.equal(signed[0]![1], 3600);
    assert.match(signed[0]![0], /recordings\/2025\/01\/01\/call-hr-4-[0-9a-f]{16}-call_recorder-1\.wav$/);
    assert.deepEqual(stored(), [
      `https://bucket.s3.example.com/${signed[0]![0]}?X-Amz-Expires=3600&X-Amz-Signature=abc`,
    ]);
    assert.doesNotMatch(JSON.stringify(deps.logs), /X-Amz-Signature/, 'signed URLs stay out of the logs');
    assert.throws(
      () => hubspotSinkType.options.parse({ recordingUrl: { expiresInSec: 604_801 } }),
      'S3 signs for 7 days at most',
    );
  });

  it("the door reads the archive as stored: S3 (ListObjectsV2 on s3rver) and a folder (temp files left out); in the call's order, up to the first missing", async () => {
    const first = api.addRecording('hr-5a', { size: 2000, contentType: 'audio/ogg' });
    const second = api.addRecording('hr-5b', { size: 2000, contentType: 'audio/mpeg' });
    const call = channelCall('hr-5', [
      { downloadUrl: first, type: 'voicemail' },
      { downloadUrl: second, type: 'call_recorder' },
    ]);
    const store = await createObjectStore({
      bucket: s3.bucket,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      region: 'us-east-1',
      dir: '',
      ...TEST_CREDENTIALS,
    });
    const archive = new ArchiveSink('archive', store, 'cs/', telephony());
    assert.deepEqual(await archive.archiveAccess().recordingKeys(call), []);
    const refs = (await archive.deliver(call, deps.ctx())).refs!;
    assert.deepEqual(await archive.archiveAccess().recordingKeys(call), [refs.recording1, refs.recording2]);
    assert.match(refs.recording1!, /\.ogg$/);

    const onDisk = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, telephony());
    const localRefs = (await onDisk.deliver(call, deps.ctx())).refs!;
    await writeFile(join(dir, `${localRefs.recording1}.5c0ffee0.tmp`), 'half');
    assert.deepEqual(await onDisk.archiveAccess().recordingKeys(call), [localRefs.recording1, localRefs.recording2]);
    // A recording still being written (only its temp file) does not count, nor do the ones after it.
    await rm(join(dir, localRefs.recording1!));
    assert.deepEqual(await onDisk.archiveAccess().recordingKeys(call), []);
    assert.deepEqual(
      await lazyArchiveAccess(() => undefined).recordingKeys(call),
      [],
      'no archive configured: no recordings',
    );
  });
});

test('end to end: a polled call with a recording is archived and its HubSpot call links the recording', async () => {
  const [hs, api] = await Promise.all([new FakeHubSpot().start(), FakeTelephony.start()]);
  const dir = await mkdtemp(join(tmpdir(), 'hs-rec-e2e-'));
  const recording = api.addRecording('e2e-rec', { size: 50_000, contentType: 'audio/mpeg' });
  api.addEvents('ch-9', [
    channelEvent({
      eventId: 'ev-91',
      channelId: 'ch-9',
      recordings: [{ downloadUrl: recording, type: 'call_recorder' }],
    }),
  ]);
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    `
sinks:
  archive:
    type: archive
    dir: ${join(dir, 'archive')}
  hubspot:
    type: hubspot
    apiUrl: ${hs.url}
    archive: { baseUrl: "${BASE}" }
routes:
  - when: { hasRecording: true }
    to: [archive]
  - to: [hubspot]
`,
  );
  const cs = await startTestCallsync({
    CALLSYNC_CONFIG: configPath,
    HUBSPOT_ACCESS_TOKEN: hs.token,
    TELEPHONY_API_URL: api.url,
    TELEPHONY_TOKEN_ID: 'token-id',
    TELEPHONY_TOKEN: 'token-secret',
    POLL_CHANNEL_IDS: 'ch-9',
    POLL_INTERVAL_MS: '200',
  });
  try {
    const call = await waitFor(() => [...hs.calls.values()][0] ?? null, {
      what: 'the HubSpot call',
      timeoutMs: 60_000,
    });
    const files = (await readdir(join(dir, 'archive'), { recursive: true }))
      .map(String)
      .filter((f) => f.endsWith('.mp3'));
    assert.equal(files.length, 1);
    assert.equal(call.properties.hs_call_recording_url, `${BASE}${files[0]}`);
  } finally {
    await cs.stop();
    await Promise.all([hs.stop(), api.close()]);
    await rm(dir, { recursive: true, force: true });
  }
});
