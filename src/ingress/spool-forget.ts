// Erasing calls from the ingress spool (`callsync forget`, docs/privacy.md). The spool's segments
// (src/ingress/spool.ts: `<dir>/<seq>.jsonl`, one JSON line per call) are the ingress process's:
// while a live process holds the folder's LOCK, its drainer hands every line to Redis as soon as
// Redis answers, so this waits for the matching lines to be drained (and erased there afterwards)
// instead of writing under the running process. Without a live holder it takes the lock itself and
// rewrites each segment without the matching lines (temp file, fsync, rename; an emptied segment is
// deleted), so an ingress started meanwhile waits for the lock rather than reading half a rewrite.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { open, readdir, readFile, rename, rm, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { LOCK_FILE, SEGMENT, SPOOL_FILE_MODE, pidAlive } from './spool.js';

export interface SpoolErasure {
  /** Lines removed from the segments (with `dryRun`: that would be removed). */
  removed: number;
  /** Matching lines a running ingress drained into Redis while this waited (erased there by the caller). */
  drained: number;
}

export class SpoolBusyError extends Error {
  constructor(dir: string, pid: number, left: number) {
    super(
      `the spool folder ${dir} of running process ${pid} still holds ${left} matching call(s) after waiting for it to drain them into Redis; run forget again once that ingress reaches Redis`,
    );
    this.name = 'SpoolBusyError';
  }
}

/** The pid of a live process holding the folder's lock (not this one), or null. */
function liveHolder(dir: string): number | null {
  let pid: number;
  try {
    pid = Number(readFileSync(join(dir, LOCK_FILE), 'utf8').trim());
  } catch {
    return null;
  }
  return Number.isInteger(pid) && pid > 0 && pid !== process.pid && pidAlive(pid) ? pid : null;
}

async function segmentsOf(dir: string): Promise<string[]> {
  try {
    return (await readdir(dir)).filter((n) => SEGMENT.test(n)).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
}

/** A segment's rewrite that a forget killed before its rename left (`<segment>.forget.tmp`). */
const LEFTOVER = /\.forget\.tmp$/;

/**
 * The rewrites killed runs left: each a copy of a segment's other callers' lines, which the segment
 * itself still holds (the rename never came). Redundant, but nothing drains them: a later forget of
 * one of those callers must not leave its lines there.
 */
async function leftoversOf(dir: string): Promise<string[]> {
  return (await readdir(dir).catch(() => [] as string[])).filter((n) => LEFTOVER.test(n));
}

async function countMatching(
  dir: string,
  matches: (line: string) => boolean,
  leftovers: readonly string[] = [],
): Promise<number> {
  let n = 0;
  for (const name of [...(await segmentsOf(dir)), ...leftovers]) {
    const text = await readFile(join(dir, name), 'utf8').catch(() => '');
    for (const line of text.split('\n')) if (line.trim() !== '' && matches(line)) n++;
  }
  return n;
}

function takeLock(dir: string): boolean {
  const path = join(dir, LOCK_FILE);
  for (let tries = 0; tries < 2; tries++) {
    try {
      const fd = openSync(path, 'wx', SPOOL_FILE_MODE);
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      if (liveHolder(dir) !== null) return false;
      rmSync(path, { force: true });
    }
  }
  return false;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Removes the lines `matches` accepts from the spool in `dir` (see above). A live holder gets up
 * to `waitMs` to drain them; `SpoolBusyError` when some are still there then.
 */
export async function eraseFromSpool(
  dir: string,
  matches: (line: string) => boolean,
  options: {
    dryRun: boolean;
    waitMs: number;
    /** Called after a segment's temporary file is written, before it replaces the segment (tests: a kill there). */
    onWritten?: () => void | Promise<void>;
  },
): Promise<SpoolErasure> {
  const deadline = Date.now() + options.waitMs;
  let seenWhileHeld = 0;
  for (;;) {
    const holder = liveHolder(dir);
    if (holder !== null) {
      const left = await countMatching(dir, matches);
      seenWhileHeld = Math.max(seenWhileHeld, left);
      if (options.dryRun) return { removed: left, drained: 0 };
      // Drained into the inbound log: the caller erases them from Redis.
      if (left === 0) return { removed: 0, drained: seenWhileHeld };
      if (Date.now() >= deadline) throw new SpoolBusyError(dir, holder, left);
      await sleep(200);
      continue;
    }
    const leftovers = await leftoversOf(dir);
    if (options.dryRun) return { removed: await countMatching(dir, matches, leftovers), drained: 0 };
    if ((await segmentsOf(dir)).length === 0 && leftovers.length === 0) return { removed: 0, drained: seenWhileHeld };
    if (!takeLock(dir)) continue;
    try {
      // Under the lock, no rewrite is under way: what a killed one left goes first (its matching
      // lines counted). Lines a holder that stopped meanwhile drained are not here any more; the
      // rest are removed.
      let removed = 0;
      for (const name of await leftoversOf(dir)) {
        const path = join(dir, name);
        removed += (await readFile(path, 'utf8').catch(() => ''))
          .split('\n')
          .filter((l) => l.trim() !== '' && matches(l)).length;
        await rm(path, { force: true });
      }
      return { removed: removed + (await rewrite(dir, matches, options.onWritten)), drained: 0 };
    } finally {
      rmSync(join(dir, LOCK_FILE), { force: true });
    }
  }
}

async function rewrite(
  dir: string,
  matches: (line: string) => boolean,
  onWritten?: () => void | Promise<void>,
): Promise<number> {
  let removed = 0;
  for (const name of await segmentsOf(dir)) {
    const path = join(dir, name);
    const text = await readFile(path, 'utf8');
    const lines = text.split('\n');
    const kept = lines.filter((line) => line.trim() === '' || !matches(line));
    const gone = lines.length - kept.length;
    if (gone === 0) continue;
    removed += gone;
    if (kept.every((line) => line.trim() === '')) {
      await unlink(path);
      continue;
    }
    const tmp = `${path}.forget.tmp`;
    const handle = await open(tmp, 'w', SPOOL_FILE_MODE);
    try {
      await handle.writeFile(kept.join('\n'));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await onWritten?.();
    await rename(tmp, path).catch(async (err: unknown) => {
      await rm(tmp, { force: true });
      throw err;
    });
  }
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
  return removed;
}
