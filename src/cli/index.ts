// The `callsync` command line: one entry, a subcommand per job of the person on call.
import { ConfigError, loadConfig, type Config } from '../config/index.js';
import { createLogger } from '../log.js';
import { decimal } from '../env-values.js';
import type { Logger } from 'pino';
import { liveProcesses, printConfig } from './check-config.js';
import { dlqAbandon, dlqList, dlqPurge, dlqRetry, type DlqOptions } from './dlq.js';
import { UsageError, type CliIo } from './io.js';
import { closest, parseCommandLine } from './args.js';
import { packageVersion } from './version.js';
import { backfill, isoOption } from './backfill.js';
import { optOut } from './opt-out.js';
import { resume } from './resume.js';
import { progressOf } from './progress.js';
import { replay } from './replay.js';
import { checkBackfillRoutes, checkSink } from './sink-queue.js';
import { CliFailure, connectRedis, connectRedisTo, reachRedis } from './redis.js';
import { migrateKeys, sourceSettings } from './migrate-keys.js';
import { sendSample } from './send-sample.js';
import { sampleOptions, urlOption } from './sample.js';
import { NoRedisError } from '../../queues/private-redis.js';
import { forgetCommand, forgetHelp } from './forget.js';
import { retentionCheckLines, retentionCommand, retentionHelp } from './retention.js';
import { callCommand, callsCommand, callsHelp, refusedCommand } from './calls.js';
import { pollerHelp, pollerStatus } from './poller.js';

const ROLES = ['ingress', 'worker', 'poller', 'all'] as const;

/** @internal Exported for its tests only (test/cli-commands.redis.test.ts, test/cli-process.redis.test.ts …). */
export const help = {
  main: `callsync: telephony call data in, CRM / archive / notifications out.

Usage: callsync <command> [options]

Commands:
  start [--role ingress|worker|poller|all]   run callsync until SIGTERM / SIGINT
  check-config [--json]                      validate the environment and config file, print the routes
  dlq list|retry|purge|abandon [--queue Q] [--id ID] [--call CALL] [--limit N] [--json] [--yes] [--dry-run]
                                             inspect and act on the dead letters (failed jobs)
  resume [--queue Q]                         list paused queues, or resume one (re-enables a disabled webhook endpoint)
  call <callId|jobId|number> [--json]        what happened to a call: its timeline, every sink attempt
  calls --since 2h [--until T] [--sink S] [--status failed|skipped|pending|retrying|paused|done] [--number N] [--limit N] [--json]
                                             list the calls of a time range with each sink's state
  refused --since 2h [--until T] [--limit N] [--json]
                                             the webhooks refused (4xx) and channel events dead-lettered, by call id, and why
  poller [--json]                            each polled channel: who polls it, its state, cursor and last poll
  send-sample [--url URL] [--from N] [--to N] [--direction in|out] [--outcome O]
                                             post a sample call to a running callsync
  opt-out add|remove|list [NUMBER...]        numbers that never get an SMS
  backfill --from ISO --to ISO [--sink NAME] [--dry-run] [--page-size N]
                                             accept the platform's call history of a range
  replay --from DATE --to DATE --sink NAME [--archive NAME] [--agent ID] [--dry-run]
                                             queue archived calls of a range to one sink
  migrate-keys --from-url URL | --from-cluster-nodes H:P,… [--from-prefix PREFIX] [--dry-run] [--force]
                                             copy an old deployment's state into this key layout
  forget <+number | callId> [--dry-run] [--crm] [--json]
                                             erase one caller or one call from every store
  retention apply|sweep [--json]             S3 lifecycle rule for ARCHIVE_RETENTION_DAYS; one retention sweep now

Options:
  -h, --help                                 this help
  -v, --version                              print callsync's version

Configuration comes from the environment (README.md, "Configuration", lists every variable) and
CALLSYNC_CONFIG.
Run \`callsync <command> --help\` for a command's options.`,
  start: `Usage: callsync start [--role ingress|worker|poller|all]

Runs the given roles (default: CALLSYNC_ROLE, else all) until SIGTERM or SIGINT, then shuts down
gracefully: new requests get 503, requests and active jobs finish within SHUTDOWN_GRACE_MS, exit 0.

Options:
  --role ROLE   ingress, worker, poller or all (overrides CALLSYNC_ROLE)
  -h, --help    show this help`,
  'check-config': `Usage: callsync check-config [--json]

Validates the environment and the config file (CALLSYNC_CONFIG) and prints the effective setup:
roles, endpoints, sinks (secrets redacted, each with where it comes from) and routes, and connects
to the Redis callsync would use, saying which (configured, local 127.0.0.1:6379, or the private
one; never starting it). Exits 2 and lists every problem when the configuration is invalid or that
Redis does not answer.

Options:
  --json        print the effective sinks and routes as JSON
  -h, --help    show this help`,
  dlq: `Usage: callsync dlq list|retry|purge|abandon [--queue NAME] [--id ID] [--call CALL] [--limit N] [--json] [--yes] [--dry-run]

The dead letters of a queue are its failed jobs: permanent errors, or all attempts used up.

  list    show dead letters (newest first) with their error
  retry   put dead letters back into their queue for a whole new round of attempts (their
          attempt counts start again, with the usual backoff; the call's timeline says so)
  purge   remove dead letters for good (more than one needs --yes)
  abandon make dead letters of the jobs still to run (waiting, delayed) of queues this
          configuration lacks that no live worker runs (a sink taken out): each with the
          reason, each call's timeline saying so; retry --queue puts them back

Options:
  --queue NAME  one queue: inbound, sink-<name>, sink-<name>.<endpoint> (a signed webhook's
                endpoint), poll-dead-letters, or a sink name (all of its queues; default: all of
                this configuration and every queue found in Redis under QUEUE_PREFIX; retry
                without --queue or --id leaves the queues no sink here works)
  --id ID       the job with this id in every queue in scope: one call's sink jobs share it, so
                retry and purge act on each of its dead letters (a line per job) and exit 1 only
                when none of them is one, saying where the id is and in which state
  --call CALL   list: the dead letters of this call id (the CALL column), in every queue or --queue
  --limit N     list at most N per queue (default 50)
  --json        list as JSON
  --yes         confirm purging more than one job
  --dry-run     abandon: say what would be abandoned, change nothing
  -h, --help    show this help`,
  resume: `Usage: callsync resume [--queue NAME]

A queue is paused when its remote rejected the credentials (401/403), and disabled — paused, with
the reason — when a signed-webhook endpoint answered 410 Gone or a redirect. Jobs wait in it.

Without --queue: lists the paused queues and why. With it: resumes them once the cause is fixed
(a disabled endpoint is re-enabled). The dashboard's resume button does the same.

Options:
  --queue NAME  a queue (sink-<name>, sink-<name>.<endpoint>) or a sink name (all its queues)
  -h, --help    show this help`,
  'send-sample': `Usage: callsync send-sample [--url URL] [--from NUMBER] [--to NUMBER] [--direction in|out] [--outcome OUTCOME]

Posts a sample call-data webhook (synthetic data, with summary and transcript) to a running
callsync, so you can watch it travel through the queues to the sinks. Prints the job id in each
sink queue and how to follow it (\`callsync call <callId>\`, and the dashboard /admin/queues when
it is on), says when the ingress only spooled the call to local disk (Redis unavailable), and where
each archive sink writes it (run it with the server's environment and config file).

The sample's caller is a landline (+4930901820) calling +4940809010, answered: to try rules on the
number, direction or outcome (an SMS to a mobile caller after a missed call), choose them:

  callsync send-sample --from +4915112345678 --outcome missed

Options:
  --url URL           webhook URL, http:// or https:// (default
                      http://127.0.0.1:$PORT/webhooks/ai-agent/sample-agent)
  --from NUMBER       the caller, as the ingress reads numbers: +4915112345678, +49 151 1234 5678,
                      004915112345678 or 4915112345678 (with the country code), or anonymous
  --to NUMBER         the number called, likewise
  --direction DIR     in (default) or out (inbound, outbound too); for out, --from is your number
  --outcome OUTCOME   answered (default), missed, busy, transferred, failed or unknown. A webhook
                      call is always answered; the others are sent as the Push API's events of
                      such a call (newCall, hangup with its cause) to /webhooks/push, which takes
                      them only from an instance started with PUSH_API_VERIFY=false (they carry no
                      platform signature). Not rejected: only channel events (the poller)
                      report a rejected call
  -h, --help          show this help`,
  'opt-out': `Usage: callsync opt-out add|remove|list [NUMBER...]

Numbers on the opt-out list never get an SMS from a notification sink. Numbers are E.164
(+4915112345678) or national (0151 12345678, read in PHONE_DEFAULT_REGION, default DE), quoted or
not: the words of one number are joined (a word with + or a leading 0 begins the next number).
They are stored in E.164 in Redis under <QUEUE_PREFIX>:optout.

Example: callsync opt-out add 0151 12345678 +49 30 901820

Options:
  -h, --help    show this help`,
  backfill: `Usage: callsync backfill --from ISO --to ISO [--sink NAME] [--dry-run] [--page-size N]

Pages through the platform's call history (GET /history, type CALL, created in [from, to)) and
accepts each entry as a call of source "history" through the inbound log, deduplicated like every
other source and routed like them (refused when a route would send them to an sms or email sink
without maxAge). An interrupted run continues where it stopped (a cursor per
range in Redis under <QUEUE_PREFIX>:backfill:...); a finished range can be run again (its calls
are then duplicates within DEDUPE_WINDOW_SECONDS). Needs the telephony API (TELEPHONY_API_URL).
A progress bar on a terminal, a line per page otherwise.

Options:
  --from ISO      start of the range, inclusive: a day (2026-10-01, UTC) or a time with its
                  zone (2026-10-01T00:00:00Z, 2026-10-01T02:00+02:00)
  --to ISO        end of the range, exclusive
  --sink NAME     queue the calls to this sink only, skipping the routes (an sms or email sink
                  only with maxAge)
  --dry-run       read the history and count; write nothing
  --page-size N   entries per history request (default 100)
  -h, --help      show this help`,
  replay: `Usage: callsync replay --from DATE --to DATE --sink NAME [--archive NAME] [--agent ID] [--dry-run]

Reads the calls archived in the range (transcripts/YYYY/MM/DD/*.json of an archive sink, in S3 or
a folder) and queues them to the named sink, e.g. to fill a newly connected CRM with last month's
calls. Jobs go through the sink's own queue and worker, so its rate limits and retries hold; a
call replayed to a sink before is not queued again. A progress bar on a terminal.

Options:
  --from DATE     first day, inclusive (YYYY-MM-DD, UTC)
  --to DATE       last day, inclusive
  --sink NAME     the sink to queue to (an sms or email sink only with maxAge)
  --archive NAME  the archive sink to read (default: the only archive sink configured)
  --agent ID      only calls of this AI agent
  --dry-run       list and count; queue nothing
  -h, --help      show this help`,
  'migrate-keys': `Usage: callsync migrate-keys --from-url URL | --from-cluster-nodes H:P,… [--from-prefix PREFIX] [--dry-run] [--force]

Copies callsync's long-lived state from an old deployment whose keys are in one slot (a single
Redis, or a Redis Cluster with a {hash-tag} QUEUE_PREFIX) into the key layout of this environment
(the target: REDIS_URL / REDIS_CLUSTER_NODES, QUEUE_PREFIX, INBOUND_SHARDS, as the new deployment
will run): every sink's state, the poller cursors, the opt-out list, the backfill cursors and
replay markers, the telephony API's stored OAuth refresh token, and the dedupe keys (each into its
shard, so a resend stays a duplicate), each with its remaining TTL. Not copied: queues (dead letters, job history), the inbound log, Push calls
being assembled, locks. A key the target has already is kept (the opt-out list is merged), so a
second run copies nothing twice. Prints counts only, never values.

Refuses (exit 1, writing nothing) while the source still has undelivered work: calls in the inbound
log, jobs waiting, active or delayed in a queue. Stop the ingress and pollers and let the workers
drain first (docs/operations.md "Moving to the spread layout"). Lists the dead letters that stay
behind.

Options:
  --from-url URL            the old single Redis (its password, else REDIS_PASSWORD; rediss:// for TLS)
  --from-cluster-nodes H:P  nodes of the old Redis Cluster (REDIS_PASSWORD and REDIS_TLS apply);
                            the same cluster as the target works too
  --from-prefix PREFIX      the old QUEUE_PREFIX (default: of "{callsync}" and "callsync" — the
                            target's QUEUE_PREFIX without braces, with and without — the one that
                            holds callsync keys in the source)
  --dry-run                 count what would be copied; write nothing
  --force                   copy although the source still has undelivered work (it stays behind)
  -h, --help                show this help`,
  forget: forgetHelp,
  retention: retentionHelp,
  ...callsHelp,
  poller: pollerHelp,
} as const;

type Command = keyof typeof help;

/** A `YYYY-MM-DD` day option, or a usage error. */
function dayOption(name: string, value: string | undefined): string {
  if (value === undefined) throw new UsageError(`--${name} is required`);
  if (
    !/^\d{4}-\d{2}-\d{2}$/.test(value) ||
    Number.isNaN(Date.parse(`${value}T00:00:00Z`)) ||
    new Date(`${value}T00:00:00Z`).toISOString().slice(0, 10) !== value
  ) {
    throw new UsageError(`--${name} must be a day YYYY-MM-DD`);
  }
  return value;
}

/** An error's message on one line. */
export function oneLine(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.replace(/\s*\n\s*/g, ' ').trim() || 'unknown error';
}

function configFrom(env: NodeJS.ProcessEnv, overrides: Record<string, string> = {}): Config {
  return loadConfig({ ...env, ...overrides });
}

/** What the command line runs but does not own: `start` is the process entry (workers/run.ts). */
export interface CliRunners {
  start?: (config: Config, log: Logger) => Promise<void>;
}

/**
 * Runs one command line. Resolves with the exit code, or `running` for `start` (the process then
 * lives until a signal). Never calls process.exit itself.
 */
export async function runCli(argv: string[], io: CliIo, runners: CliRunners = {}): Promise<number | 'running'> {
  const [name, ...rest] = argv;
  if (name === '--version' || name === '-v') return (io.out(packageVersion()), 0);
  if (name === undefined || name === '-h' || name === '--help' || name === 'help') {
    (name === undefined ? io.err : io.out)(help.main);
    return name === undefined ? 2 : 0;
  }
  if (!(name in help) || name === 'main') {
    const guess = closest(
      name,
      Object.keys(help).filter((c) => c !== 'main'),
    );
    io.err(`callsync: unknown command "${name}"${guess ? ` (did you mean ${guess}?)` : ''}`);
    io.err('see callsync --help');
    return 2;
  }
  const command = name as Command;
  try {
    return await dispatch(command, rest, io, runners);
  } catch (err) {
    if (err instanceof UsageError) {
      // One line and where the help is: the whole help after it buried the line (10–30 lines).
      io.err(`callsync ${command}: ${err.message}`);
      io.err(`see callsync ${command} --help`);
      return 2;
    }
    if (err instanceof ConfigError) {
      // `start` says it in one line (one log event for the orchestrator); check-config lists them.
      io.err(command === 'start' ? `callsync start: ${err.oneLine}` : err.message);
      return 2;
    }
    if (err instanceof NoRedisError) {
      // Nothing to connect to and nothing to start: a set-up problem, exit 2 in one line.
      io.err(`callsync ${command}: ${err.message}`);
      return 2;
    }
    if (err instanceof CliFailure) {
      io.err(`callsync ${command}: ${err.message}`);
      return 1;
    }
    if (command === 'start') {
      // The start failed after the configuration was read (a taken port, ...); what it had opened
      // is closed. One line, no stack trace.
      io.err(`callsync start: start failed: ${oneLine(err)}`);
      return 1;
    }
    throw err;
  }
}

async function dispatch(command: Command, args: string[], io: CliIo, runners: CliRunners): Promise<number | 'running'> {
  switch (command) {
    case 'start': {
      const { values, positionals } = parseCommandLine(args, { role: { type: 'string' } });
      if (values.help) return (io.out(help.start), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const role = values.role as string | undefined;
      if (role !== undefined && !(ROLES as readonly string[]).includes(role))
        throw new UsageError(`--role must be one of ${ROLES.join(', ')}`);
      const config = configFrom(io.env, role ? { CALLSYNC_ROLE: role } : {});
      if (!runners.start) throw new CliFailure('this entry point cannot start callsync (run bin/callsync.js)');
      const log = createLogger({ level: config.logLevel });
      await runners.start(config, log);
      return 'running';
    }
    case 'check-config': {
      const { values, positionals } = parseCommandLine(args, { json: { type: 'boolean' } });
      if (values.help) return (io.out(help['check-config']), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const config = configFrom(io.env);
      // The Redis it would use, connected to (configured, local, or the private one; never started
      // here), and the worker processes live on this prefix with their routing fingerprints.
      const reach = await reachRedis(config, io);
      const live = reach.problem
        ? { unavailable: reach.problem }
        : await liveProcesses(config, () => connectRedis(config, io));
      printConfig(config, io, values.json === true, live, reach);
      if (values.json !== true && !reach.problem) for (const line of await retentionCheckLines(config)) io.out(line);
      return reach.problem ? 2 : 0;
    }
    case 'dlq': {
      const { values, positionals } = parseCommandLine(args, {
        queue: { type: 'string' },
        id: { type: 'string' },
        call: { type: 'string' },
        limit: { type: 'string' },
        json: { type: 'boolean' },
        yes: { type: 'boolean' },
        'dry-run': { type: 'boolean' },
      });
      if (values.help) return (io.out(help.dlq), 0);
      const [action, ...extra] = positionals;
      if (action === undefined || !['list', 'retry', 'purge', 'abandon'].includes(action))
        throw new UsageError('expected list, retry, purge or abandon');
      if (action === 'abandon' && (values.id !== undefined || values.call !== undefined))
        throw new UsageError(
          'abandon takes --queue (default: every queue no sink of this configuration works), not --id or --call',
        );
      if (values['dry-run'] === true && action !== 'abandon') throw new UsageError('--dry-run is for dlq abandon');
      if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
      const limit = values.limit === undefined ? 50 : decimal(values.limit as string);
      if (!Number.isInteger(limit) || limit < 1) throw new UsageError('--limit must be a whole number >= 1');
      const call = values.call as string | undefined;
      if (call !== undefined && action !== 'list')
        throw new UsageError(
          `--call is for dlq list; ${action} takes --id (the job ids dlq list --call shows) or --queue`,
        );
      if (call !== undefined && values.id !== undefined) throw new UsageError('give --id or --call, not both');
      if (call !== undefined && call.trim() === '') throw new UsageError('--call needs a call id');
      const options: DlqOptions = {
        queue: values.queue as string | undefined,
        id: values.id as string | undefined,
        ...(call !== undefined ? { call } : {}),
        limit,
        json: values.json === true,
        yes: values.yes === true,
        dryRun: values['dry-run'] === true,
      };
      const config = configFrom(io.env);
      const redis = await connectRedis(config, io);
      try {
        if (action === 'list') return await dlqList(config, redis, options, io);
        if (action === 'retry') return await dlqRetry(config, redis, options, io);
        if (action === 'abandon') return await dlqAbandon(config, redis, options, io);
        return await dlqPurge(config, redis, options, io);
      } finally {
        redis.disconnect();
      }
    }
    case 'resume': {
      const { values, positionals } = parseCommandLine(args, { queue: { type: 'string' } });
      if (values.help) return (io.out(help.resume), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const config = configFrom(io.env);
      const redis = await connectRedis(config, io);
      try {
        return await resume(config, redis, values.queue as string | undefined, io);
      } finally {
        redis.disconnect();
      }
    }
    case 'send-sample': {
      const { values, positionals } = parseCommandLine(args, {
        url: { type: 'string' },
        from: { type: 'string' },
        to: { type: 'string' },
        direction: { type: 'string' },
        outcome: { type: 'string' },
      });
      if (values.help) return (io.out(help['send-sample']), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const sample = sampleOptions(values as { from?: string; to?: string; direction?: string; outcome?: string });
      const url = urlOption(values.url as string | undefined);
      return sendSample(configFrom(io.env), url, io, sample);
    }
    case 'opt-out': {
      const { values, positionals } = parseCommandLine(args, {});
      if (values.help) return (io.out(help['opt-out']), 0);
      const [action, ...numbers] = positionals;
      if (action === undefined || !['add', 'remove', 'list'].includes(action))
        throw new UsageError('expected add, remove or list');
      if (action === 'list' && numbers.length > 0) throw new UsageError('opt-out list takes no NUMBER');
      const config = configFrom(io.env);
      const redis = await connectRedis(config, io);
      try {
        return await optOut(config, redis, action, numbers, io);
      } finally {
        redis.disconnect();
      }
    }
    case 'backfill': {
      const { values, positionals } = parseCommandLine(args, {
        from: { type: 'string' },
        to: { type: 'string' },
        sink: { type: 'string' },
        'dry-run': { type: 'boolean' },
        'page-size': { type: 'string' },
      });
      if (values.help) return (io.out(help.backfill), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const from = isoOption('from', values.from as string | undefined);
      const to = isoOption('to', values.to as string | undefined);
      const pageSize = values['page-size'] === undefined ? 100 : decimal(values['page-size'] as string);
      if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 1000)
        throw new UsageError('--page-size must be a whole number from 1 to 1000');
      const config = configFrom(io.env);
      const sink = values.sink === undefined ? undefined : checkSink(config, values.sink as string, 'backfill');
      if (sink === undefined) checkBackfillRoutes(config);
      const dryRun = values['dry-run'] === true;
      const redis = dryRun ? null : await connectRedis(config, io);
      try {
        return await backfill(config, redis, { from, to, sink, dryRun, pageSize }, io, progressOf(io));
      } finally {
        redis?.disconnect();
      }
    }
    case 'replay': {
      const { values, positionals } = parseCommandLine(args, {
        from: { type: 'string' },
        to: { type: 'string' },
        sink: { type: 'string' },
        archive: { type: 'string' },
        agent: { type: 'string' },
        'dry-run': { type: 'boolean' },
      });
      if (values.help) return (io.out(help.replay), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const from = dayOption('from', values.from as string | undefined);
      const to = dayOption('to', values.to as string | undefined);
      if (from > to) throw new UsageError('--from must not be after --to');
      if (values.sink === undefined) throw new UsageError('--sink is required');
      const config = configFrom(io.env);
      const sink = checkSink(config, values.sink as string, 'replay');
      const dryRun = values['dry-run'] === true;
      const redis = dryRun ? null : await connectRedis(config, io);
      try {
        return await replay(
          config,
          redis,
          {
            from,
            to,
            sink,
            archive: values.archive as string | undefined,
            agent: values.agent as string | undefined,
            dryRun,
          },
          io,
          progressOf(io),
        );
      } finally {
        redis?.disconnect();
      }
    }
    case 'migrate-keys': {
      const { values, positionals } = parseCommandLine(args, {
        'from-url': { type: 'string' },
        'from-cluster-nodes': { type: 'string' },
        'from-prefix': { type: 'string' },
        'dry-run': { type: 'boolean' },
        force: { type: 'boolean' },
      });
      if (values.help) return (io.out(help['migrate-keys']), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const config = configFrom(io.env);
      const fromPrefix = values['from-prefix'] as string | undefined;
      const from = sourceSettings(config, {
        fromUrl: values['from-url'] as string | undefined,
        fromClusterNodes: values['from-cluster-nodes'] as string | undefined,
        fromPrefix,
      });
      const source = await connectRedisTo(from, 'the source Redis', '--from-url or REDIS_PASSWORD');
      try {
        const target = await connectRedis(config, io);
        try {
          return await migrateKeys(
            config,
            target,
            source,
            from,
            { fromPrefix, dryRun: values['dry-run'] === true, force: values.force === true },
            io,
          );
        } finally {
          target.disconnect();
        }
      } finally {
        source.disconnect();
      }
    }
    case 'poller': {
      const { values, positionals } = parseCommandLine(args, { json: { type: 'boolean' } });
      if (values.help) return (io.out(help.poller), 0);
      if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
      const config = configFrom(io.env);
      return pollerStatus(config, () => connectRedis(config, io), values.json === true, io);
    }
    case 'forget':
      return forgetCommand(args, io, () => configFrom(io.env));
    case 'retention':
      return retentionCommand(args, io, () => configFrom(io.env));
    case 'call':
    case 'calls':
    case 'refused': {
      if (args.includes('-h') || args.includes('--help')) return (io.out(help[command]), 0);
      const config = configFrom(io.env);
      const run = command === 'call' ? callCommand : command === 'calls' ? callsCommand : refusedCommand;
      return run(config, () => connectRedis(config, io), args, io);
    }
    default:
      throw new UsageError(`unknown command "${String(command)}"`);
  }
}
