// The archive sink: the call as JSON and as a readable transcript, in S3 or a local folder.
import { join, resolve } from 'node:path';
import { z } from 'zod';
import type { CanonicalCall } from '../../model/call.js';
import { renderVcon } from '../../model/vcon.js';
import { envBool, envString, envStringOr, envEnum, type EnvShape } from '../../env-values.js';
import type { KeyValueStore } from '../../state/kv.js';
import { REVISION_MEMORY_TTL_MS, RevisionGuard, type Held } from '../revisions.js';
import type { ArchiveAccess, Sink, SinkContext, SinkResult, SinkSettings, SinkType } from '../types.js';
import type { TelephonyClient } from '../../telephony/types.js';
import { archiveAccess } from './access.js';
import { callHash } from '../../model/call.js';
import { archiveDay, archiveKeys, archiveKeysOn, recordingKeysPrefixOn } from './keys.js';
import { archiveRecordings } from './recordings.js';
import { renderArchiveJson, renderTranscriptText } from './render.js';
import { LocalFolderStore, type ObjectStore } from './store.js';

const SSE_MODES = ['AES256', 'aws:kms', 'aws:kms:dsse'] as const;

export const archiveOptionsSchema = z.strictObject({
  /** S3 bucket; without it the archive goes to `dir`. */
  bucket: z.string().min(1).optional(),
  /** Key prefix inside the bucket or folder, e.g. `callsync/`. */
  prefix: z.string().optional(),
  region: z.string().default('us-east-1'),
  /** S3-compatible endpoint (MinIO, ...). */
  endpoint: z.url({ protocol: /^https?$/, error: 'expected an http(s) URL such as http://minio:9000' }).optional(),
  forcePathStyle: z.boolean().default(false),
  sse: z.enum(SSE_MODES).optional(),
  kmsKeyId: z.string().optional(),
  /** Static credentials; default: the AWS SDK's chain (environment of the process, instance roles...). */
  accessKeyId: z.string().min(1).optional(),
  secretAccessKey: z.string().min(1).optional(),
  /** Local folder used when no bucket is set. The config sets it when the file does not: ARCHIVE_DIR, else DATA_DIR/archive. */
  dir: z.string().default('./data/archive'),
  /** Time limit of one recording, download and upload together, in ms. Default 30 minutes. */
  recordingTimeoutMs: z
    .int()
    .min(1000)
    .max(24 * 3600_000)
    .optional(),
});

export type ArchiveOptions = z.infer<typeof archiveOptionsSchema>;

/** The environment variables of the archive sink type: its shortcut (the sink `archive`). */
export const archiveEnv = {
  /** Archive to this S3 bucket (alone: every call with a transcript, summary or recording). */
  ARCHIVE_S3_BUCKET: envString,
  /** Key prefix in the bucket or folder (also the CRM sinks' transcript links). */
  ARCHIVE_S3_PREFIX: envString,
  ARCHIVE_S3_SSE: envEnum(SSE_MODES),
  ARCHIVE_S3_KMS_KEY_ID: envString,
  /** S3-compatible endpoint (MinIO, ...). */
  S3_ENDPOINT: envString,
  S3_FORCE_PATH_STYLE: envBool(false),
  AWS_REGION: envStringOr('us-east-1'),
  /** Static S3 credentials (both, or neither: then the AWS SDK's default chain). */
  AWS_ACCESS_KEY_ID: envString,
  AWS_SECRET_ACCESS_KEY: envString,
  /** Local archive folder when no bucket is set (the shortcut's, or a file's sink without `dir`). Default DATA_DIR/archive. */
  ARCHIVE_DIR: envString,
  /** callsync's local state (src/config/env.ts): the archive folder's default is in it. */
  DATA_DIR: envStringOr('./data'),
} satisfies EnvShape;

/**
 * The local archive folder when none is named: ARCHIVE_DIR, else `archive` in DATA_DIR (`./data/archive`
 * by default) — so a second instance given its own DATA_DIR does not write into the first one's.
 */
export function archiveDir(env: Pick<ArchiveSettings, 'ARCHIVE_DIR' | 'DATA_DIR'>): string {
  return env.ARCHIVE_DIR ?? `${(env.DATA_DIR ?? './data').replace(/\/+$/, '') || '/'}/archive`;
}

/** @internal Exported for its tests only (test/crm-hubspot-recordings.redis.test.ts, test/identity-keys.test.ts …). */
export class ArchiveSink implements Sink {
  readonly type = 'archive';
  private readonly revisions: RevisionGuard | null;
  private readonly state: KeyValueStore | null;
  constructor(
    readonly name: string,
    readonly store: ObjectStore,
    private readonly prefix: string | undefined,
    /** Downloads recordings (channel calls); without it a call with recordings is a permanent failure. */
    private readonly telephony: TelephonyClient | null = null,
    /**
     * The sink's state: with it, revisions of one call are written one at a time and an older one
     * never overwrites a newer (src/sinks/revisions.ts). Without it (tools, tests), last write wins.
     */
    state: KeyValueStore | null = null,
    private readonly limits: { recordingTimeoutMs?: number } = {},
  ) {
    this.revisions = state === null ? null : new RevisionGuard(state, { what: 'the archive', lockTtlMs: 120_000 });
    this.state = state;
  }

  /** What other sinks may read of this archive (recording keys and links; ./access.ts). */
  archiveAccess(): ArchiveAccess {
    return archiveAccess(this.store, this.prefix);
  }

  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const keys = archiveKeys(call, this.prefix);
    const day = archiveDay(call);
    // The day the call's objects were last filed under: an update that moves its start to another
    // day moves its objects (one call, one place; `callsync replay` of the old day finds nothing).
    const dayKey = `day:${callHash(call.key)}`;
    let movedFrom: string | null = null;
    const refs = { location: this.store.location, json: keys.json, text: keys.text, vcon: keys.vcon };
    // Without recordings the record is the last write: its result is the attempt's, and the lock's
    // release carries the attempt's timeline entries (src/sinks/revisions.ts holdToEnd).
    const final = call.recordings.length === 0;
    // An update of a call overwrites the same objects: the newest revision wins, whatever the order the jobs ran in.
    // With state, the day is read as the call's lock is taken, and written as it is released.
    const writeRecord = async (held?: Held): Promise<SinkResult> => {
      const filed = held ? (held.values[0] ?? null) : null;
      // JSON first: the text is derived from it, so a reader finding the .txt also finds the record.
      await this.store.put(keys.json, renderArchiveJson(call), { contentType: 'application/json; charset=utf-8' });
      await this.store.put(keys.text, renderTranscriptText(call), { contentType: 'text/plain; charset=utf-8' });
      // The same call as a vCon (IETF draft-ietf-vcon-vcon-core), for other conversation tools.
      await this.store.put(keys.vcon, `${JSON.stringify(renderVcon(call), null, 2)}\n`, {
        contentType: 'application/vcon+json',
      });
      // The old day's objects go only once the new ones are written; the day is remembered only once
      // they are gone, so a crash in between leaves the deletion to the job's next attempt.
      if (filed !== null && filed !== day) {
        for (const key of Object.values(archiveKeysOn(call, filed, this.prefix))) await this.store.delete(key);
        // Its recordings are archived anew beside the new day below (archiveRecordings).
        for (const key of await this.store.keysStartingWith(recordingKeysPrefixOn(call, filed, this.prefix)))
          await this.store.delete(key);
        movedFrom = filed;
      }
      if (held && filed !== day) held.set(dayKey, day, REVISION_MEMORY_TTL_MS);
      if (final) this.logArchived(ctx, keys.json, day, movedFrom);
      return final ? { status: 'done', refs } : { status: 'done' };
    };
    const record = this.revisions
      ? await this.revisions.deliver(call.key, ctx, writeRecord, [dayKey], final)
      : await writeRecord();
    if (record.status === 'skipped' || final) return record;
    // Recordings last, streamed beside the transcript (src/sinks/archive/recordings.ts).
    const recordings = await archiveRecordings(call, {
      store: this.store,
      telephony: this.telephony,
      prefix: this.prefix,
      log: ctx.log,
      signal: ctx.signal,
      timeoutMs: this.limits.recordingTimeoutMs,
    });
    this.logArchived(ctx, keys.json, day, movedFrom);
    return { status: 'done', refs: { ...refs, ...recordings } };
  }

  private logArchived(ctx: SinkContext, key: string, day: string, movedFrom: string | null): void {
    if (movedFrom !== null) ctx.log.info({ from: movedFrom, to: day, key }, 'archived call moved to its new start day');
    ctx.log.debug({ location: this.store.location, key }, 'archived call');
  }
}

/** Where an object of this archive is found: `s3://<bucket>/<key>`, or the file's absolute path. */
export function archiveObjectAddress(options: Pick<ArchiveOptions, 'bucket' | 'dir'>, key: string): string {
  return options.bucket ? `s3://${options.bucket}/${key}` : join(resolve(options.dir), key);
}

/** The S3 store when a bucket is set (the AWS SDK is loaded only then), else the local folder. */
export async function createObjectStore(options: ArchiveOptions): Promise<ObjectStore> {
  if (options.bucket) {
    const { S3Store } = await import('./s3-store.js');
    return new S3Store({
      bucket: options.bucket,
      region: options.region,
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      sse: options.sse,
      kmsKeyId: options.kmsKeyId,
      credentials:
        options.accessKeyId && options.secretAccessKey
          ? { accessKeyId: options.accessKeyId, secretAccessKey: options.secretAccessKey }
          : undefined,
    });
  }
  return new LocalFolderStore(options.dir);
}

/** The archive type's section of the configuration: its variables, parsed. */
export type ArchiveSettings = SinkSettings<typeof archiveEnv>;

export const archiveSinkType: SinkType<ArchiveOptions, ArchiveSettings> = {
  type: 'archive',
  options: archiveOptionsSchema,
  create: async (name, options, deps) =>
    new ArchiveSink(name, await createObjectStore(options), options.prefix, deps.telephony, deps.state, {
      recordingTimeoutMs: options.recordingTimeoutMs,
    }),
  env: archiveEnv,
  check(options) {
    return (options.accessKeyId === undefined) === (options.secretAccessKey === undefined)
      ? []
      : [
          "accessKeyId and secretAccessKey (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) go together; set both, or neither for the AWS SDK's default credentials",
        ];
  },
  fromEnv(env, { configFile }) {
    const bucket = env.ARCHIVE_S3_BUCKET;
    // Without a config file, `npm start` archives to a local folder so one machine works out of the box.
    if (!bucket && configFile) return null;
    const sink: { type: string } & Record<string, unknown> = { type: 'archive' };
    if (env.ARCHIVE_S3_PREFIX) sink.prefix = env.ARCHIVE_S3_PREFIX;
    if (bucket) {
      sink.bucket = bucket;
      if (env.AWS_REGION) sink.region = env.AWS_REGION;
      if (env.S3_ENDPOINT) sink.endpoint = env.S3_ENDPOINT;
      if (env.S3_FORCE_PATH_STYLE) sink.forcePathStyle = true;
      if (env.ARCHIVE_S3_SSE) sink.sse = env.ARCHIVE_S3_SSE;
      if (env.ARCHIVE_S3_KMS_KEY_ID) sink.kmsKeyId = env.ARCHIVE_S3_KMS_KEY_ID;
      if (env.AWS_ACCESS_KEY_ID) sink.accessKeyId = env.AWS_ACCESS_KEY_ID;
      if (env.AWS_SECRET_ACCESS_KEY) sink.secretAccessKey = env.AWS_SECRET_ACCESS_KEY;
    } else {
      sink.dir = archiveDir(env);
    }
    return {
      sinks: { archive: sink },
      routes: [
        {
          name: 'archive-calls-with-content',
          when: [{ hasTranscript: true }, { hasSummary: true }, { hasRecording: true }],
          to: ['archive'],
        },
      ],
    };
  },
};
