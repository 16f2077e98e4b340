// The poller role as `npm start` runs it: POLL_CHANNEL_IDS + TELEPHONY_* env only, the default
// archive route, recordings streamed beside the call's record.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';
import { startTestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

test('channel events with recordings are polled, queued and archived with their recordings', async () => {
  const api = await FakeTelephony.start();
  const dir = await mkdtemp(join(tmpdir(), 'poll-role-'));
  const recording = api.addRecording('rec-1', { size: 300_000, contentType: 'audio/mpeg' });
  api.addEvents('ch-1', [
    channelEvent({
      eventId: 'ev-1',
      channelId: 'ch-1',
      recordings: [{ downloadUrl: recording, type: 'voicemail' }],
      call: { state: 'MISSED', owner: null },
    }),
    channelEvent({ eventId: 'ev-2', channelId: 'ch-1' }),
  ]);
  const cs = await startTestCallsync({
    ARCHIVE_DIR: dir,
    TELEPHONY_API_URL: api.url,
    TELEPHONY_TOKEN_ID: 'token-id',
    TELEPHONY_TOKEN: 'token-secret',
    POLL_CHANNEL_IDS: 'ch-1',
    POLL_INTERVAL_MS: '200',
  });
  try {
    const day = join(dir, 'recordings');
    const files = await waitFor(
      async () => {
        const all = await readdir(day, { recursive: true }).catch(() => [] as string[]);
        const mp3 = all.filter((f) => String(f).endsWith('.mp3'));
        return mp3.length === 1 ? mp3 : null;
      },
      { what: 'archived recording', timeoutMs: 20_000 },
    );
    const path = join(day, String(files[0]));
    assert.match(path, /call-ev-1-[0-9a-f]{16}-voicemail-1\.mp3$/);
    assert.equal((await stat(path)).size, 300_000);
    // The record of the missed call with the recording is archived too; the plain call without
    // recording, transcript or summary is not (default route).
    const records = archivedRecords((await readdir(join(dir, 'transcripts'), { recursive: true })).map(String));
    assert.equal(records.length, 1);
    const doc = JSON.parse(await readFile(join(dir, 'transcripts', records[0]!), 'utf8'));
    assert.equal(doc.call.source, 'channel');
    assert.equal(doc.call.outcome, 'missed');
    assert.equal(doc.call.channelId, 'ch-1');
  } finally {
    await cs.stop();
    await api.close();
    await rm(dir, { recursive: true, force: true });
  }
});
