// `callsync retention apply|sweep`: ARCHIVE_RETENTION_DAYS as an S3 lifecycle rule on every S3
// archive (src/privacy/lifecycle.ts), or one retention sweep now (src/privacy/retention.ts, what the
// worker role runs every RETENTION_SWEEP_INTERVAL_SECONDS). And the lines check-config adds.
import type { Config } from '../config/index.js';
import { createLogger } from '../log.js';
import { UsageError, type CliIo } from './io.js';
import { parseCommandLine } from './args.js';
import { CliFailure, connectRedis } from './redis.js';

export const retentionHelp = `Usage: callsync retention apply|sweep [--json]

  apply   set ARCHIVE_RETENTION_DAYS as a lifecycle rule (callsync-archive-retention) on the prefix
          of every S3 archive sink: objects expire after that many days, noncurrent versions a
          day after they became noncurrent, incomplete uploads after a day; other rules are kept
  sweep   run one retention sweep now, as the worker role does every
          RETENTION_SWEEP_INTERVAL_SECONDS: completed jobs, dead letters, parked entries and folder
          archives older than their retention are removed; prints counts and the oldest item per store

Options:
  --json        print the result as JSON
  -h, --help    show this help

See docs/privacy.md "Retention".`;

export async function retentionCommand(args: string[], io: CliIo, config: () => Config): Promise<number> {
  const { values, positionals } = parseCommandLine(args, { json: { type: 'boolean' } });
  if (values.help) return (io.out(retentionHelp), 0);
  const [action, ...extra] = positionals;
  if (action !== 'apply' && action !== 'sweep') throw new UsageError('expected apply or sweep');
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  const cfg = config();
  if (action === 'apply') {
    // The AWS SDK is loaded only here.
    const { applyLifecycle, LIFECYCLE_RULE_ID } = await import('../privacy/lifecycle.js');
    let applied;
    try {
      applied = await applyLifecycle(cfg);
    } catch (err) {
      throw new CliFailure((err as Error).message);
    }
    if (values.json)
      io.out(
        JSON.stringify(
          applied.map(({ bucket, before }) => ({
            sink: bucket.sink,
            bucket: bucket.bucket,
            prefix: bucket.prefix,
            before: before.state,
            days: cfg.retention.archiveDays,
          })),
        ),
      );
    else if (applied.length === 0)
      io.out('no archive sink writes to S3: nothing to apply (folder archives are pruned by the retention sweeper)');
    else
      for (const { bucket, before } of applied)
        io.out(
          `archive "${bucket.sink}" (s3://${bucket.bucket}/${bucket.prefix}): ${before.state === 'in-place' ? 'already in place' : `lifecycle rule ${LIFECYCLE_RULE_ID} set`}: objects expire after ${cfg.retention.archiveDays} days`,
        );
    return 0;
  }
  const { sweepRetention } = await import('../privacy/retention.js');
  const redis = await connectRedis(cfg, io);
  try {
    const result = await sweepRetention(cfg, redis, createLogger({ level: 'silent' }));
    if (values.json) io.out(JSON.stringify(result));
    else {
      const removed = Object.entries(result.removed);
      io.out(removed.length === 0 ? 'removed nothing' : `removed: ${removed.map(([s, n]) => `${s} ${n}`).join(', ')}`);
      io.out(
        `oldest (seconds): ${Object.entries(result.oldestSeconds)
          .map(([s, n]) => `${s} ${n}`)
          .join(', ')}`,
      );
    }
    return 0;
  } finally {
    redis.disconnect();
  }
}

/** What check-config adds with ARCHIVE_RETENTION_DAYS set: whether each S3 archive has its lifecycle rule. */
export async function retentionCheckLines(config: Config): Promise<string[]> {
  if (config.retention.archiveDays === undefined) return [];
  if (
    !Object.values(config.sinks).some(
      (s) => s.type === 'archive' && typeof (s.options as { bucket?: unknown }).bucket === 'string',
    )
  )
    return [];
  const { lifecycleLines } = await import('../privacy/lifecycle.js');
  return lifecycleLines(config);
}
