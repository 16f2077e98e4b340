// ARCHIVE_RETENTION_DAYS for archives in S3: a bucket lifecycle rule on the archive's prefix, which
// S3 itself enforces (`callsync retention apply` sets it; `check-config` says whether it is in
// place). The rule `callsync-archive-retention` expires objects under the prefix after the days,
// expires noncurrent versions a day after they became noncurrent (a versioned bucket keeps deleted
// objects otherwise) and aborts incomplete multipart uploads after a day. Other rules of the bucket
// are kept as they are.
import {
  GetBucketLifecycleConfigurationCommand,
  PutBucketLifecycleConfigurationCommand,
  S3ServiceException,
  type LifecycleRule,
} from '@aws-sdk/client-s3';
import type { Config } from '../config/index.js';
import { archiveOptionsSchema, createObjectStore } from '../sinks/archive/index.js';
import { normalizePrefix } from '../sinks/archive/keys.js';
import { S3Store } from '../sinks/archive/s3-store.js';

export const LIFECYCLE_RULE_ID = 'callsync-archive-retention';

export interface ArchiveBucket {
  sink: string;
  bucket: string;
  prefix: string;
  store: S3Store;
}

/** The archive sinks that write to S3. */
async function archiveBuckets(config: Config): Promise<ArchiveBucket[]> {
  const out: ArchiveBucket[] = [];
  for (const sink of Object.values(config.sinks)) {
    if (sink.type !== 'archive') continue;
    const options = archiveOptionsSchema.parse(sink.options);
    if (!options.bucket) continue;
    const store = await createObjectStore(options);
    if (store instanceof S3Store)
      out.push({ sink: sink.name, bucket: options.bucket, prefix: normalizePrefix(options.prefix), store });
  }
  return out;
}

/** callsync's rule for `prefix` and `days`. */
function retentionRule(prefix: string, days: number): LifecycleRule {
  return {
    ID: LIFECYCLE_RULE_ID,
    Status: 'Enabled',
    Filter: { Prefix: prefix },
    Expiration: { Days: days },
    NoncurrentVersionExpiration: { NoncurrentDays: 1 },
    AbortIncompleteMultipartUpload: { DaysAfterInitiation: 1 },
  };
}

/** The bucket's rules with callsync's rule put in (replacing an earlier one of callsync), the others kept. */
function withRetentionRule(existing: readonly LifecycleRule[], prefix: string, days: number): LifecycleRule[] {
  return [...existing.filter((r) => r.ID !== LIFECYCLE_RULE_ID), retentionRule(prefix, days)];
}

/** The bucket's lifecycle rules; [] when it has none. */
async function rulesOf(b: ArchiveBucket): Promise<LifecycleRule[]> {
  try {
    const res = await b.store.client.send(new GetBucketLifecycleConfigurationCommand({ Bucket: b.bucket }));
    return res.Rules ?? [];
  } catch (err) {
    if (err instanceof S3ServiceException && err.name === 'NoSuchLifecycleConfiguration') return [];
    throw err;
  }
}

export type LifecycleState =
  | { state: 'in-place'; days: number }
  | { state: 'other-days'; days: number | null }
  | { state: 'missing' }
  | { state: 'unreadable'; error: string };

/** Whether callsync's rule is in place on the archive's prefix with ARCHIVE_RETENTION_DAYS. */
async function lifecycleState(b: ArchiveBucket, days: number | undefined): Promise<LifecycleState> {
  let rules: LifecycleRule[];
  try {
    rules = await rulesOf(b);
  } catch (err) {
    return { state: 'unreadable', error: describe(err) };
  }
  const ours = rules.find(
    (r) => r.ID === LIFECYCLE_RULE_ID && r.Status === 'Enabled' && (r.Filter?.Prefix ?? r.Prefix ?? '') === b.prefix,
  );
  if (!ours) return { state: 'missing' };
  const set = ours.Expiration?.Days ?? null;
  return set !== null && set === days ? { state: 'in-place', days: set } : { state: 'other-days', days: set };
}

/** Sets callsync's rule on every S3 archive; answers what each bucket had before. */
export async function applyLifecycle(config: Config): Promise<{ bucket: ArchiveBucket; before: LifecycleState }[]> {
  const days = config.retention.archiveDays;
  if (days === undefined) throw new Error('ARCHIVE_RETENTION_DAYS is not set: nothing to apply');
  const out: { bucket: ArchiveBucket; before: LifecycleState }[] = [];
  for (const b of await archiveBuckets(config)) {
    const before = await lifecycleState(b, days);
    if (before.state === 'unreadable')
      throw new Error(
        `archive "${b.sink}" (s3://${b.bucket}/${b.prefix}): cannot read the bucket's lifecycle configuration: ${before.error}`,
      );
    if (before.state !== 'in-place') {
      try {
        await b.store.client.send(
          new PutBucketLifecycleConfigurationCommand({
            Bucket: b.bucket,
            LifecycleConfiguration: { Rules: withRetentionRule(await rulesOf(b), b.prefix, days) },
          }),
        );
      } catch (err) {
        throw new Error(
          `archive "${b.sink}" (s3://${b.bucket}/${b.prefix}): cannot set the lifecycle rule: ${describe(err)}`,
          { cause: err },
        );
      }
    }
    out.push({ bucket: b, before });
  }
  return out;
}

function describe(err: unknown): string {
  if (err instanceof S3ServiceException) return `${err.name} (HTTP ${err.$metadata.httpStatusCode ?? '?'})`;
  return err instanceof Error ? err.message.split('\n')[0]!.slice(0, 200) : String(err);
}

/** One line per S3 archive for check-config: whether the rule is in place. */
export async function lifecycleLines(config: Config): Promise<string[]> {
  const days = config.retention.archiveDays;
  const lines: string[] = [];
  for (const b of await archiveBuckets(config)) {
    const where = `archive "${b.sink}" (s3://${b.bucket}/${b.prefix})`;
    const s = await lifecycleState(b, days);
    if (s.state === 'in-place')
      lines.push(
        `retention: ${where}: lifecycle rule ${LIFECYCLE_RULE_ID} in place, objects expire after ${s.days} days`,
      );
    else if (s.state === 'other-days')
      lines.push(
        `retention: ${where}: lifecycle rule ${LIFECYCLE_RULE_ID} expires after ${s.days ?? '?'} days, ARCHIVE_RETENTION_DAYS is ${days ?? 'not set'}: run callsync retention apply`,
      );
    else if (s.state === 'missing')
      lines.push(
        `retention: ${where}: no lifecycle rule${days === undefined ? ' (ARCHIVE_RETENTION_DAYS not set: objects are kept)' : ': run callsync retention apply'}`,
      );
    else lines.push(`retention: ${where}: cannot read the lifecycle configuration: ${s.error}`);
  }
  return lines;
}
