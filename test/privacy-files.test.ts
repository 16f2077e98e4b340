// Files with call data on the local disk — the ingress spool (whole call records) and the archive
// folder (records, transcripts, recordings) — are readable by callsync's own user only: folders it
// creates 0700, files 0600, whatever the process' umask lets through (docs/privacy.md, "Files and
// objects"). A umask of 022, the common default, made them readable by every user of the machine.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { QueueUnavailableError, type CallAcceptor } from '../src/ingress/accept.js';
import { SpoolingAcceptor, spoolDirWritable } from '../src/ingress/spool.js';
import { eraseFromSpool } from '../src/ingress/spool-forget.js';
import { createLogger } from '../src/log.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { sampleCall } from './support/calls.js';

const modeOf = async (path: string) => ((await stat(path)).mode & 0o777).toString(8);

/** Runs `work` under the common umask 022 (the test must not depend on the runner's own). */
async function withUmask<T>(work: () => Promise<T>): Promise<T> {
  const before = process.umask(0o022);
  try {
    return await work();
  } finally {
    process.umask(before);
  }
}

/** Redis away: every call is spooled. */
const redisAway: CallAcceptor = {
  accept: () => Promise.reject(new QueueUnavailableError(new Error('connection refused'))),
};

test('the spool: its folder 0700, its segments and lock 0600, also after forget rewrote a segment', async () => {
  const root = await mkdtemp(join(tmpdir(), 'callsync-spool-mode-'));
  try {
    await withUmask(async () => {
      const dir = join(root, 'spool', 'callsync');
      // The ingress asks first whether the folder can be written (creating it), then opens the spool.
      assert.equal(await spoolDirWritable(dir), true);
      const spool = new SpoolingAcceptor(redisAway, { dir, log: createLogger({ level: 'silent' }) });
      await spool.open();
      try {
        for (const id of ['mode-1', 'mode-2']) assert.equal((await spool.accept(sampleCall(id))).spooled, true);
        const names = await readdir(dir);
        const segment = names.find((n) => n.endsWith('.jsonl'));
        assert.ok(segment, names.join(', '));
        assert.deepEqual(
          {
            root: await modeOf(join(root, 'spool')),
            dir: await modeOf(dir),
            segment: await modeOf(join(dir, segment)),
            lock: await modeOf(join(dir, 'LOCK')),
          },
          { root: '700', dir: '700', segment: '600', lock: '600' },
        );
      } finally {
        await spool.close();
      }
      // `callsync forget` cuts a call's line out of a segment: the rewritten segment is as private.
      const erased = await eraseFromSpool(dir, (line) => line.includes('mode-1'), { dryRun: false, waitMs: 0 });
      assert.equal(erased.removed, 1);
      const [segment] = (await readdir(dir)).filter((n) => n.endsWith('.jsonl'));
      assert.equal(await modeOf(join(dir, segment!)), '600');
    });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});

test('the archive folder: the folders it creates 0700, records, texts and recordings 0600', async () => {
  const root = await mkdtemp(join(tmpdir(), 'callsync-archive-mode-'));
  try {
    await withUmask(async () => {
      const archive = join(root, 'archive');
      const store = new LocalFolderStore(archive);
      await store.put('transcripts/2026/04/08/c-1-abc.json', '{"from":"+492116355340"}');
      await store.put('transcripts/2026/04/08/c-1-abc.txt', Buffer.from('Caller: my account number'));
      await store.putStream('recordings/2026/04/08/c-1-abc-call_recorder-1.mp3', Readable.from([Buffer.alloc(1024)]));
      for (const folder of [archive, 'transcripts', 'transcripts/2026/04/08', 'recordings/2026/04/08'])
        assert.equal(await modeOf(folder === archive ? archive : join(archive, folder)), '700', folder);
      const keys: string[] = [];
      for await (const key of store.list('')) keys.push(key);
      assert.equal(keys.length, 3, keys.join(', '));
      for (const key of keys) assert.equal(await modeOf(join(archive, key)), '600', key);
    });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
});
