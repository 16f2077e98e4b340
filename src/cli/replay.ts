// `callsync replay`: the calls archived in a range of days, queued again to one sink (e.g. a newly
// connected CRM). It reads the archive's JSON records (`<prefix>transcripts/YYYY/MM/DD/*.json`,
// in S3 or a folder) and adds a job per call to `sink-<NAME>` with a deterministic id, so the
// sink's worker, retries and rate limits apply, and a second replay adds nothing.
import type { RedisClient } from '../../queues/connection.js';
import type { Config } from '../config/index.js';
import { CALL_SOURCES, callKey, type CanonicalCall, type CallSource } from '../model/call.js';
import { createObjectStore, type ArchiveOptions } from '../sinks/archive/index.js';
import { normalizePrefix } from '../sinks/archive/keys.js';
import type { ObjectStore } from '../sinks/archive/store.js';
import { UsageError, type CliIo } from './io.js';
import { Progress, type ProgressOut } from './progress.js';
import { CliFailure } from './redis.js';
import { SinkQueuer } from './sink-queue.js';

export interface ReplayOptions {
  /** YYYY-MM-DD, inclusive. */
  from: string;
  to: string;
  sink: string;
  /** The archive sink to read; default the only one configured. */
  archive?: string;
  agent?: string;
  dryRun: boolean;
}

/**
 * The days from..to (inclusive) as `YYYY/MM/DD`.
 * @internal Exported for its tests only (test/history-replay.test.ts).
 */
export function daysOf(from: string, to: string): string[] {
  const days: string[] = [];
  for (let t = Date.parse(`${from}T00:00:00Z`); t <= Date.parse(`${to}T00:00:00Z`); t += 86_400_000) {
    days.push(new Date(t).toISOString().slice(0, 10).replace(/-/g, '/'));
  }
  return days;
}

/** The version the archive writes (render.ts renderArchiveJson); a record without one is older still. */
const ARCHIVE_SCHEMA = 'callsync.archive.v1';

/**
 * The canonical call of an archived JSON record: `{ schema, call, original }` as the archive writes
 * it (render.ts), whatever its object's name (`<readable>-<hash>.json`, or `<callId>.json` of the
 * older layout). A record without a call key (written before keys existed) gets the key its source
 * gives it. Null when the text is not such a record, or one of another version (its fields may mean other things).
 * @internal Exported for its tests only (test/history-replay.test.ts, test/ingress-edge.redis.test.ts).
 */
export function archivedCall(text: string): CanonicalCall | null {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return null;
  }
  if (doc === null || typeof doc !== 'object') return null;
  const schema = (doc as { schema?: unknown }).schema;
  if (schema !== undefined && schema !== ARCHIVE_SCHEMA) return null;
  const record = (doc as { call?: unknown }).call;
  if (record === null || typeof record !== 'object') return null;
  const call = record as Partial<CanonicalCall>;
  if (typeof call.callId !== 'string' || typeof call.startedAt !== 'string') return null;
  if (typeof call.source !== 'string' || !(CALL_SOURCES as readonly string[]).includes(call.source)) return null;
  const source = call.source as CallSource;
  const key =
    typeof call.key === 'string' && call.key !== ''
      ? call.key
      : callKey(source, source === 'channel' ? (call.channelId ?? null) : (call.agentId ?? null), call.callId);
  const { revision: _revision, ...rest } = call;
  return { ...(rest as CanonicalCall), key, raw: (doc as { original?: unknown }).original ?? null };
}

function archiveSinkOf(config: Config, name: string | undefined): { name: string; options: ArchiveOptions } {
  const archives = Object.entries(config.sinks).filter(([, s]) => s.type === 'archive');
  if (name !== undefined) {
    const found = archives.find(([n]) => n === name);
    if (!found) throw new UsageError(`--archive: no archive sink "${name}" in this configuration`);
    return { name, options: found[1].options as ArchiveOptions };
  }
  if (archives.length === 0) throw new CliFailure('no archive sink in this configuration: replay reads the archive');
  if (archives.length > 1)
    throw new UsageError(
      `more than one archive sink (${archives.map(([n]) => n).join(', ')}): name one with --archive`,
    );
  return { name: archives[0]![0], options: archives[0]![1].options as ArchiveOptions };
}

/**
 * The record's text, or null when it was deleted after the listing (the retention sweep, `forget`):
 * the folder's ENOENT, S3's 404 (s3-store.ts errorFromS3). Any other failure ends the replay (a
 * second run queues nothing twice).
 */
async function readUnlessGone(store: ObjectStore, key: string): Promise<string | null> {
  try {
    return await store.get(key);
  } catch (err) {
    const failure = err as { code?: unknown; status?: unknown };
    if (failure.code === 'ENOENT' || failure.status === 404) return null;
    throw err;
  }
}

export async function replay(
  config: Config,
  redis: RedisClient | null,
  options: ReplayOptions,
  io: CliIo,
  progressOut: ProgressOut,
  store?: ObjectStore,
): Promise<number> {
  const archive = archiveSinkOf(config, options.archive);
  const source = store ?? (await createObjectStore(archive.options));
  const prefix = normalizePrefix(archive.options.prefix);
  // The record objects of the range, listed first so the progress bar knows its total.
  const keys: string[] = [];
  for (const day of daysOf(options.from, options.to)) {
    for await (const key of source.list(`${prefix}transcripts/${day}/`)) {
      if (key.endsWith('.json') && !key.endsWith('.vcon.json')) keys.push(key);
    }
  }
  const queuer = redis !== null && !options.dryRun ? new SinkQueuer(redis, config, options.sink, 'replay') : null;
  const counts = { queued: 0, already: 0, otherAgent: 0, unreadable: 0, gone: 0 };
  const progress = new Progress(progressOut, options.dryRun ? 'replay (dry run)' : 'replay');
  try {
    for (const [i, key] of keys.entries()) {
      const text = await readUnlessGone(source, key);
      const call = text === null ? null : archivedCall(text);
      if (text === null) {
        counts.gone++;
        io.err(`skipped ${key}: gone since it was listed (retention or \`callsync forget\`)`);
      } else if (call === null) {
        counts.unreadable++;
        io.err(`skipped ${key}: not an archived call record (${ARCHIVE_SCHEMA})`);
      } else if (options.agent !== undefined && call.agentId !== options.agent) {
        counts.otherAgent++;
      } else if (queuer === null) {
        counts.queued++;
      } else if (await queuer.add(call)) {
        counts.queued++;
      } else {
        counts.already++;
      }
      // A line per 100 records off a terminal; the bar on one.
      if (progressOut.isTTY || (i + 1) % 100 === 0 || i + 1 === keys.length)
        progress.update(i + 1, keys.length, `(${counts.queued} queued)`);
    }
  } finally {
    progress.finish();
    await queuer?.close();
  }
  const agent = options.agent !== undefined ? `, ${counts.otherAgent} of other agents left out` : '';
  const unreadable = `${counts.unreadable ? `, ${counts.unreadable} unreadable` : ''}${counts.gone ? `, ${counts.gone} gone` : ''}`;
  io.out(
    options.dryRun
      ? `dry run: ${counts.queued} archived calls of ${options.from} .. ${options.to} in ${source.location} would be queued to sink ${options.sink}${agent}${unreadable}; nothing queued`
      : `replay done: ${keys.length} records read from ${source.location}, ${counts.queued} queued to sink ${options.sink}, ${counts.already} replayed before${agent}${unreadable}`,
  );
  return 0;
}
