// A burst of 40 revisions of one call (each an update), then a late retry of the first: a duplicate of
// the first delivery, and the archive keeps the newest (README, "Resends and corrections": the same
// content as any revision already accepted is a duplicate). Before, the inbound log remembered the
// last 32 contents only: the retry was stored as a new update and the archive overwritten with
// revision 0. (The cap itself, now 1,000: test/inbound-log.redis.test.ts.)
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callKey, callKeySegment } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';

let cs: TestCallsync;
let dir: string;
before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'revisions-burst-'));
  cs = await startTestCallsync({ ARCHIVE_DIR: dir, SPOOL_ENABLED: 'false' });
});
after(async () => {
  await cs.stop();
  await rm(dir, { recursive: true, force: true });
});

const CALL = 'revisions-burst-1';
const rev = (i: number) => webhookPayload(CALL, (p) => (p.assist.summary.content = `revision ${i}`));
const archivedSummary = async (): Promise<string | null> => {
  const base = callKeySegment({ key: callKey('ai-agent', 'burst', CALL), callId: CALL });
  for (const e of await readdir(dir, { recursive: true, withFileTypes: true }))
    if (e.isFile() && e.name === `${base}.json`) {
      const doc = JSON.parse(await readFile(join(e.parentPath, e.name), 'utf8'));
      return doc.call?.summary?.content ?? null;
    }
  return null;
};

test('a retry of an earlier revision, after a burst of 40 revisions, is a duplicate and leaves the newest archived', async () => {
  const url = `${cs.url}/webhooks/ai-agent/burst`;
  const first = await postJson(url, rev(0));
  assert.equal(first.status, 202);
  for (let i = 1; i < 40; i++) {
    const r = await postJson(url, rev(i));
    assert.equal(r.status, 202);
    assert.equal(r.body.update, true, `revision ${i} is an update`);
  }
  await waitFor(async () => ((await archivedSummary()) === 'revision 39' ? true : null), {
    what: 'newest revision archived',
    timeoutMs: 30_000,
  });
  // The platform retries revision 0 (e.g. its first delivery timed out on its side).
  const retry = await postJson(url, rev(0));
  assert.equal(retry.status, 202);
  // Had it been stored, its fan-out and archive would follow within a few seconds.
  await new Promise((r) => setTimeout(r, 4000));
  const archived = await archivedSummary();
  assert.deepEqual(
    { body: retry.body, archived },
    { body: { id: first.body.id, duplicate: true }, archived: 'revision 39' },
    'a revision already accepted is a duplicate (README), and the archive keeps the newest',
  );
});
