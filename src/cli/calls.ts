// `callsync call <callId | jobId | number>` and `callsync calls --since 2h …`: what happened to a
// call, from its timeline (queues/timeline.ts) — "Where is my call?" in docs/operations.md.
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import {
  CallQueryError,
  callsOf,
  CallTimeline,
  describeEntry,
  findCalls,
  listedCallId,
  lookupsOf,
  parseCallQuery,
  sinkLabel,
  type CallLookups,
  type CallQuery,
  type CallSummary,
  type Refusal,
} from '../../queues/timeline.js';
import type { Config } from '../config/index.js';
import { queueNames } from '../ops/index.js';
import { printable, table, UsageError, type CliIo } from './io.js';
import { describeOpenPushCall, openPushCall } from '../sources/push-assembly.js';
import { NumberWordsError } from '../model/number-words.js';
import { parseCommandLine } from './args.js';

export const callsHelp = {
  call: `Usage: callsync call <callId | jobId | number> [--json]

Prints what happened to a call, from its timeline: received (source, request id, new / duplicate /
update, spooled), fanned out (routes, sinks), and each sink attempt with its outcome — done with
what was written, skipped with the reason, retry with the error and the next attempt's time,
dead-lettered with the reason; a note for a sink the call still waits for that this configuration
lacks (its job waits in a queue no worker here runs). Numbers are masked. A call is named by its platform call id, by a
job id (the 202's id, or a sink job id from the dashboard), or by a phone number (every call with
it, newest first), read as \`forget\` reads one: +4930901820, 004930901820, national (030 901820,
in PHONE_DEFAULT_REGION, default DE), in one word or several. A word of digits only that reads as a
number is looked up as a call id too (a platform call id may be all digits): the calls of both,
the call id's first. Timelines are kept CALL_TIMELINE_TTL_DAYS (default 30). Exit 1: none found.

Options:
  --json        print the calls and their timelines as JSON
  -h, --help    show this help`,
  calls: `Usage: callsync calls --since 2h [--until TIME] [--sink NAME] [--status failed|skipped|pending|retrying|paused|done] [--number N] [--limit N] [--json]

Lists the calls received in a time range, newest first, with each sink's state: pending (waiting),
retrying (an attempt failed, the next is scheduled), paused (its job waits in a queue paused or
disabled — credentials rejected, 410 Gone, by hand —: waits for \`callsync resume\`), done, skipped,
failed (dead-lettered).
A \`*\` marks a sink this configuration lacks: its job waits for a worker whose configuration has it.
--status pending matches retrying and paused too.
A list cut short ends with the --until of the rest (none listed twice, none left out).
--status failed reads only the calls an index of dead-lettered calls names (kept since the first
worker of this version started; a range before that is read call by call, as before).

Options:
  --since D     from this long ago (30m, 2h, 7d) or this time (ISO 8601); required
  --until TIME  up to this time (ISO 8601, or a duration ago); default now
  --sink NAME   only calls routed to this sink (or endpoint, sink.endpoint): one of this configuration
                or with a queue in Redis; another is a usage error naming those
  --status S    only calls with a sink (the --sink one) in state S
  --number N    only calls from or to this number, in a form \`call\` reads (quoted when it has spaces:
                "030 901820"); looked up by its keyed hash, never stored in clear
  --limit N     at most N calls (default 50)
  --json        print as JSON
  -h, --help    show this help`,
  refused: `Usage: callsync refused --since 2h [--until TIME] [--limit N] [--json]

Lists the webhooks refused (4xx) in a time range, newest first: when, the call id (- when it could
not be read), the source, the status, the field and the reason, the request id (the X-Request-Id of
the answer and of the log line \`webhook refused\`). Nothing of such a call was stored; the platform
may send it again. Channel events the poller dead-lettered are listed too (source channel; the
status names their dead letter in poll-dead-letters). Refusals before
the sender is known (the allow list, the credentials, a Push API signature) are not kept. Kept
CALL_TIMELINE_TTL_DAYS, at most the newest 10,000.

Options:
  --since D     from this long ago (30m, 2h, 7d) or this time (ISO 8601); required
  --until TIME  up to this time (ISO 8601, or a duration ago); default now
  --limit N     at most N (default 50, at most 1000)
  --json        print as JSON
  -h, --help    show this help`,
} as const;

const iso = (ms: number | null) => (ms === null ? '-' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z'));

function timelineOf(config: Config, redis: RedisClient): CallTimeline {
  return new CallTimeline(redis, redisKeys(config.redis), { ...config.timeline, configuredQueues: queueNames(config) });
}

/** Each sink's state; `*` marks one this configuration lacks (see `CallSummary.unconfigured`). */
function sinkColumn(summary: CallSummary): string {
  return (
    [
      ...(summary.fanOutFailed ? ['fan-out:failed'] : []),
      ...(summary.fanOutPending ? ['fan-out:pending'] : []),
      ...Object.entries(summary.sinks).map(
        ([sink, state]) => `${sink}:${state}${summary.unconfigured?.[sink] ? '*' : ''}`,
      ),
    ].join(' ') || '-'
  );
}

/** What `call <ref>` looks up (lookupsOf, as the API and the Calls page read a reference); else a usage error. */
function lookupsOfWords(words: string[], config: Config): CallLookups {
  try {
    return lookupsOf(words, config.privacy.defaultRegion);
  } catch (err) {
    if (err instanceof NumberWordsError) throw new UsageError(err.message);
    throw err;
  }
}

/** Runs `use` with a connection made by `connect`, closed after. */
async function withRedis<T>(connect: () => Promise<RedisClient>, use: (redis: RedisClient) => Promise<T>): Promise<T> {
  const redis = await connect();
  try {
    return await use(redis);
  } finally {
    redis.disconnect();
  }
}

/**
 * `callsync call …`: its arguments are read (a usage error) before Redis is connected to (`connect`),
 * so a wrong one is not reported as an unreachable Redis.
 */
export async function callCommand(
  config: Config,
  connect: () => Promise<RedisClient>,
  args: string[],
  io: CliIo,
): Promise<number> {
  const { values, positionals } = parseCommandLine(args, { json: { type: 'boolean' } });
  if (values.help) return (io.out(callsHelp.call), 0);
  if (positionals.length === 0) throw new UsageError('expected one call id, job id or phone number');
  if (positionals.join('').trim() === '')
    throw new UsageError('expected one call id, job id or phone number, not an empty argument');
  const lookups = lookupsOfWords(positionals, config);
  return withRedis(connect, (redis) => printCall(config, redis, lookups, values.json === true, io));
}

async function printCall(
  config: Config,
  redis: RedisClient,
  { callId, number }: CallLookups,
  json: boolean,
  io: CliIo,
): Promise<number> {
  const timeline = timelineOf(config, redis);
  const found = await callsOf(timeline, { callId, number });
  // Webhooks refused (4xx) under this call id: why a call the platform sent is missing, or came late.
  const refused = callId === null ? [] : await timeline.refusals(callId);
  // A Push API call still being assembled (events in, no hangup): no timeline yet, but not unknown.
  const open =
    found.length === 0 && callId !== null
      ? await openPushCall(redis, redisKeys(config.redis).area('push'), callId)
      : null;
  if (json) {
    io.out(
      JSON.stringify(
        { calls: found, ...(refused.length > 0 ? { refused } : {}), ...(open ? { inProgress: open } : {}) },
        null,
        2,
      ),
    );
    return found.length > 0 || open ? 0 : 1;
  }
  if (found.length === 0) {
    if (open) io.out(printable(describeOpenPushCall(open)));
    if (refused.length > 0) {
      io.out(printable(`call "${callId}" was refused, never stored (${refused.length} refusal(s), newest first):`));
      for (const line of refusalTable(refused)) io.out(line);
      return open ? 0 : 1;
    }
    if (open) return 0;
    const named =
      callId === null ? 'that number' : number === null ? `"${callId}"` : `"${callId}" (as a call id or a number)`;
    io.err(`no call found for ${named} (timelines are kept CALL_TIMELINE_TTL_DAYS, ${config.timeline.ttlDays} days)`);
    return 1;
  }
  for (const [n, s] of found.entries()) {
    if (n > 0) io.out('');
    io.out(
      printable(
        `call ${s.callId ?? '?'} (${s.source ?? '?'}, ${s.direction ?? '?'}, ${s.from ?? 'anonymous'} → ${s.to ?? '?'})  id ${s.id}`,
      ),
    );
    io.out(printable(`sinks: ${sinkColumn(s)}`));
    if (s.fanOutFailed)
      io.out(
        printable(
          `note: its fan-out failed, no sink got a job (${s.fanOutFailed.reason}): it is an inbound dead letter — callsync dlq retry --queue inbound --id ${s.fanOutFailed.jobId} fans it out again`,
        ),
      );
    if (s.fanOutPending)
      io.out(
        'note: not fanned out yet — it waits in the inbound log for a worker (is one running? the metric callsync_inbound_log_entries counts the calls waiting); its sinks get their jobs then',
      );
    for (const sink of Object.keys(s.unconfigured ?? {}))
      io.out(printable(`note: ${s.reasons[sink]} (docs/operations.md, "A sink taken out of the configuration")`));
    // A job waiting in a paused queue (paused by another call's attempt, or by hand), or in one held
    // back for a remote's "retry later" (another call's 429): no entry of its own says so.
    for (const [sink, state] of Object.entries(s.sinks))
      if (state !== 'done' && s.reasons[sink]?.startsWith('its queue '))
        io.out(printable(`note: ${sink}: ${s.reasons[sink]}`));
    const rows = [['time', 'event', 'sink', 'try', 'detail']];
    for (const e of s.entries)
      rows.push([
        iso(e.at),
        e.event,
        e.sink ? sinkLabel(e) : '',
        e.attempt === undefined ? '' : String(e.attempt),
        describeEntry(e),
      ]);
    for (const line of table(rows)) io.out(line);
  }
  if (refused.length > 0) {
    io.out('');
    io.out(`refused before (${refused.length}, newest first):`);
    for (const line of refusalTable(refused)) io.out(line);
  }
  return 0;
}

/** Refusals as a table: when, the source, the status, the field and why, the request. */
function refusalTable(refused: readonly Refusal[]): string[] {
  return table([
    ['time', 'source', 'status', 'pointer', 'detail', 'request'],
    ...refused.map((r) => [iso(r.at), r.source, String(r.status), r.pointer, r.detail, r.requestId ?? '']),
  ]);
}

/** `callsync calls …`: its options are read before Redis is connected to (see callCommand). */
export async function callsCommand(
  config: Config,
  connect: () => Promise<RedisClient>,
  args: string[],
  io: CliIo,
): Promise<number> {
  const { values, positionals } = parseCommandLine(args, {
    since: { type: 'string' },
    until: { type: 'string' },
    sink: { type: 'string' },
    status: { type: 'string' },
    number: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
  });
  if (values.help) return (io.out(callsHelp.calls), 0);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const query = callQuery(values, config);
  return withRedis(connect, async (redis) => {
    const timeline = timelineOf(config, redis);
    if (query.sink !== undefined) await checkSinkName(timeline, query.sink);
    return printCalls(await findCalls(timeline, query), query.limit ?? 50, values.json === true, io);
  });
}

function printCalls(result: Awaited<ReturnType<typeof findCalls>>, limit: number, json: boolean, io: CliIo): number {
  if (json) {
    io.out(JSON.stringify(result, null, 2));
    return 0;
  }
  if (result.calls.length === 0) io.out('no calls match');
  else {
    const rows = [['received', 'call', 'source', 'from → to', 'sinks']];
    for (const s of result.calls)
      rows.push([
        iso(s.receivedAt),
        listedCallId(s.callId ?? s.id),
        s.source ?? '?',
        `${s.from ?? 'anonymous'} → ${s.to ?? '?'}`,
        sinkColumn(s),
      ]);
    for (const line of table(rows)) io.out(line);
    if (result.calls.some((s) => s.unconfigured))
      io.out(
        '* not in this configuration: the job waits for a worker whose configuration has it (callsync call <id> names its queue)',
      );
  }
  // `next`: the --until that lists the rest of the range, none of these again and none left out.
  if (result.more)
    io.out(
      `(stopped at --limit ${limit}: older calls of the range were not looked at; a larger --limit (up to 1000), or --until ${result.next} for the rest)`,
    );
  else if (result.truncated)
    io.out(
      `(only the newest ${result.scanned} calls of the range were looked at, the most one query reads: narrow the query (--since, --sink, --number), or --until ${result.next} for the rest)`,
    );
  return 0;
}

/**
 * `--sink`: a sink of this configuration or one with a queue in Redis (a sink taken out, whose calls
 * still show), or an endpoint of one (`hook.crm`); else a usage error naming them, as dlq's --queue.
 */
async function checkSinkName(timeline: CallTimeline, sink: string): Promise<void> {
  const known = await timeline.knownSinks();
  if (!known.includes(sink)) throw new UsageError(`unknown sink "${sink}" (known: ${known.join(', ') || 'none'})`);
}

/** The query of `calls` options (the JSON API's parameters have the same names); UsageError when one is bad. */
function callQuery(values: Record<string, string | boolean | undefined>, config: Config): CallQuery {
  try {
    return parseCallQuery(values, config.privacy.defaultRegion);
  } catch (err) {
    if (err instanceof CallQueryError) throw new UsageError(`--${err.message}`);
    throw err;
  }
}

/** `callsync refused …`: the refusals of a time range; its options are read before Redis is connected to. */
export async function refusedCommand(
  config: Config,
  connect: () => Promise<RedisClient>,
  args: string[],
  io: CliIo,
): Promise<number> {
  const { values, positionals } = parseCommandLine(args, {
    since: { type: 'string' },
    until: { type: 'string' },
    limit: { type: 'string' },
    json: { type: 'boolean' },
  });
  if (values.help) return (io.out(callsHelp.refused), 0);
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const query = callQuery(values, config);
  const { refused, total } = await withRedis(connect, (redis) =>
    timelineOf(config, redis).refusalsBetween(query.since, query.until ?? Date.now(), query.limit ?? 50),
  );
  if (values.json) {
    io.out(JSON.stringify({ refused, total }, null, 2));
    return 0;
  }
  if (refused.length === 0) {
    io.out('no refusals kept in that range');
    return 0;
  }
  for (const line of table([
    ['time', 'call', 'source', 'status', 'pointer', 'detail', 'request'],
    ...refused.map((r) => [
      iso(r.at),
      r.callId === null ? '-' : listedCallId(r.callId),
      r.source,
      String(r.status),
      r.pointer,
      r.detail,
      r.requestId ?? '',
    ]),
  ]))
    io.out(line);
  // Cut at --limit: say so, and how to see the rest.
  if (total > refused.length)
    io.out(
      `the newest ${refused.length} of ${total} in that range: a larger --limit (up to 1000) or an earlier --until for the rest`,
    );
  return 0;
}
