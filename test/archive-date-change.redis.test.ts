// An update that moves a call's start to another day (issue 23, item 5), end to end over a real port
// into a local folder and into S3 (s3rver): the archive's objects are filed by the start day, so the
// update's objects are written under the new day and the first revision's under the old day are
// deleted — one call, one place — and `callsync replay` of the old day finds nothing to send.
// Before, the stale first revision stayed beside the update and replay sent it.
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { replay } from '../src/cli/replay.js';
import type { CliIo } from '../src/cli/io.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';
import { LocalFolderStore, type ObjectStore } from '../src/sinks/archive/store.js';

const DAY = 86_400_000;
const CORRECTED = 'The start was a day later than first reported (corrected).';

interface Backend {
  env: Record<string, string>;
  /** Every object key under the archive prefix. */
  list(): Promise<string[]>;
  read(key: string): Promise<string>;
  store(): Promise<ObjectStore>;
  close(): Promise<void>;
}

async function folder(): Promise<Backend> {
  const dir = await mkdtemp(join(tmpdir(), 'archive-date-'));
  return {
    env: { ARCHIVE_DIR: dir, ARCHIVE_S3_PREFIX: 'callsync/' },
    async list() {
      return (
        (await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => []))
          // Not a file being written (`<key>.<uuid>.tmp`, renamed once whole): on a loaded machine the
          // listing caught one as the third object of a day, before the vCon.
          .filter((e) => e.isFile() && !e.name.endsWith('.tmp'))
          .map((e) => join(e.parentPath, e.name).slice(dir.length + 1))
          .sort()
      );
    },
    read: (key) => readFile(join(dir, key), 'utf8'),
    store: async () => new LocalFolderStore(dir),
    close: () => rm(dir, { recursive: true, force: true }),
  };
}

async function s3(): Promise<Backend> {
  const server: TestS3 = await startS3('archive-date');
  const { createObjectStore } = await import('../src/sinks/archive/index.js');
  return {
    env: { ...server.env, ARCHIVE_S3_PREFIX: 'callsync/' },
    list: async () => (await server.list('callsync/')).sort(),
    read: async (key) => (await server.get(key)).body,
    store: () =>
      createObjectStore({
        bucket: server.bucket,
        endpoint: server.env.S3_ENDPOINT,
        forcePathStyle: true,
        region: 'us-east-1',
        dir: '',
        accessKeyId: server.env.AWS_ACCESS_KEY_ID,
        secretAccessKey: server.env.AWS_SECRET_ACCESS_KEY,
      }),
    close: () => server.destroy(),
  };
}

for (const [name, open] of [
  ['a local folder', folder],
  ['S3 (s3rver)', s3],
] as const) {
  describe(`an update that changes the start day: ${name}`, () => {
    let backend: Backend;
    let cs: TestCallsync;
    before(async () => {
      backend = await open();
      cs = await startTestCallsync(backend.env);
    });
    after(async () => {
      await cs.stop();
      await backend.close();
    });

    test('the objects move to the new day; the old day holds nothing, and replay of it sends nothing', async () => {
      const callId = `u-Z-${name.length}`;
      const first = webhookPayload(callId);
      const moved = webhookPayload(callId, (p) => {
        p.call.startTime += DAY;
        p.call.endTime += DAY;
        p.assist.summary.content = CORRECTED;
      });
      const oldDay = new Date(first.call.startTime).toISOString().slice(0, 10).replaceAll('-', '/');
      const newDay = new Date(moved.call.startTime).toISOString().slice(0, 10).replaceAll('-', '/');
      assert.notEqual(oldDay, newDay);

      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, first)).status, 202);
      const firstKeys = await waitFor(
        async () => {
          const keys = (await backend.list()).filter((k) => k.includes(`/${oldDay}/`));
          return keys.length === 3 ? keys : null;
        },
        { timeoutMs: 30_000, what: 'the first revision archived under its day' },
      );
      assert.ok(firstKeys.some((k) => k.endsWith('.vcon.json')));

      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, moved);
      assert.equal(res.status, 202);
      assert.equal(res.body.update, true, 'accepted as an update of the same call');
      const record = await waitFor(
        async () => {
          const json = (await backend.list()).find(
            (k) => k.includes(`/${newDay}/`) && k.endsWith('.json') && !k.endsWith('.vcon.json'),
          );
          return json === undefined ? null : json;
        },
        { timeoutMs: 30_000, what: 'the update archived under the new day' },
      );
      assert.match(await backend.read(record), /corrected/);
      await waitFor(async () => (await backend.list()).every((k) => !k.includes(`/${oldDay}/`)), {
        timeoutMs: 30_000,
        what: 'the old day emptied',
      });

      // One call, one place: three objects (record, text, vCon), all under the new day.
      const all = await backend.list();
      assert.deepEqual(
        all.map((k) => k.replace(/\.(vcon\.json|json|txt)$/, '')).filter((v, i, a) => a.indexOf(v) === i).length,
        1,
        all.join('\n'),
      );
      assert.equal(all.length, 3, all.join('\n'));
      assert.ok(all.every((k) => k.includes(`/${newDay}/`)));

      // `callsync replay` of the old day reads nothing; of the new day, the corrected revision.
      const lines: string[] = [];
      const io: CliIo = { env: {}, out: (l) => lines.push(l), err: (l) => lines.push(l) };
      const quiet = { write: () => undefined };
      const store = await backend.store();
      const day = (d: string) => d.replaceAll('/', '-');
      await replay(
        cs.config,
        null,
        { from: day(oldDay), to: day(oldDay), sink: 'archive', dryRun: true },
        io,
        quiet,
        store,
      );
      assert.match(lines.join('\n'), /dry run: 0 archived calls/, lines.join('\n'));
      lines.length = 0;
      await replay(
        cs.config,
        null,
        { from: day(newDay), to: day(newDay), sink: 'archive', dryRun: true },
        io,
        quiet,
        store,
      );
      assert.match(lines.join('\n'), /dry run: 1 archived calls/, lines.join('\n'));
      assert.ok(
        cs.logs.some(
          (l) => l.msg === 'archived call moved to its new start day' && l.from === oldDay && l.to === newDay,
        ),
      );
    });
  });
}
