// `callsync forget <+number | callId> [--dry-run] [--crm] [--json]`: erases one caller or one call
// from every store (src/privacy/forget.ts, docs/privacy.md). Prints a receipt of counts per store;
// the audit line (stderr, JSON) names neither the number nor the call.
import { Writable } from 'node:stream';
import type { Config } from '../config/index.js';
import { createLogger } from '../log.js';
import {
  forget,
  ForgetIncompleteError,
  forgetRegion,
  type ForgetOptions,
  type ForgetReceipt,
} from '../privacy/forget.js';
import { SpoolBusyError } from '../ingress/spool-forget.js';
import { table, UsageError, type CliIo } from './io.js';
import { targetOfWords } from './number-words.js';
import { parseCommandLine } from './args.js';
import { CliFailure, connectRedis } from './redis.js';

export const forgetHelp = `Usage: callsync forget <+number | callId> [--dry-run] [--crm] [--json]

Erases every trace callsync holds of one caller — the number in every format (E.164, national,
digits only, with or without spaces, and read out in a transcript: "oh one five one, twelve
thirty-four …", "null eins fünf eins …") — or of one call (its call id): archive objects (both key
layouts, recordings too; S3 and folders), jobs of every queue in every state (an active one is
waited for), dead letters, the inbound log, the spool, dedupe, revision and state keys, Push
assemblies, and every other key under QUEUE_PREFIX that names the call. The notification ledger
and the opt-out list keep only a keyed hash (keyed with PRIVACY_HMAC_SECRET, else with the key
kept in Redis) of what "never twice" and the opt-out need. Idempotent; safe while other calls flow.
Exit 1 when it could not finish (an active job, a CRM, Redis stopping midway: the receipt says what
it erased) or when a call of the target was accepted while it ran: run it again. See docs/privacy.md.

A number starts with + (or 00, also after tel:), or is a valid national number in
PHONE_DEFAULT_REGION; anything else is a call id. A number may be given unquoted in several words
(callsync forget +49 151 1234 5678), read as \`opt-out\` reads them; a call id is one word, and
several words must make one number.

Options:
  --dry-run     count what would be erased; change nothing
  --crm         also delete the call records callsync created in HubSpot and Pipedrive
  --json        print the receipt as JSON
  -h, --help    show this help`;

/** The receipt as lines: counts per store, nothing personal. */
function receiptLines(receipt: ForgetReceipt): string[] {
  const rows = Object.entries(receipt.stores)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([store, n]) => [store, String(n)]);
  const head = `${receipt.dryRun ? 'would erase' : 'erased'}: ${receipt.calls} call(s) of this ${receipt.target === 'number' ? 'number' : 'call id'}`;
  return [head, ...(rows.length === 0 ? ['nothing found'] : table([['store', 'items'], ...rows]))];
}

/**
 * How long forget waits for one Redis command: a Redis that stops answering without closing the
 * connection (frozen, a network black hole) stops forget with the receipt, instead of hanging it.
 * Generous: the longest command is the rewrite of a large stream.
 */
const COMMAND_TIMEOUT_MS = 60_000;

/** `hooks`: called during the run; `commandTimeoutMs` (tests): instead of COMMAND_TIMEOUT_MS. */
export async function forgetCommand(
  args: string[],
  io: CliIo,
  config: () => Config,
  hooks: Pick<ForgetOptions, 'onStep'> & { commandTimeoutMs?: number } = {},
): Promise<number> {
  const { values, positionals } = parseCommandLine(args, {
    'dry-run': { type: 'boolean' },
    crm: { type: 'boolean' },
    json: { type: 'boolean' },
  });
  if (values.help) return (io.out(forgetHelp), 0);
  if (positionals.length === 0) throw new UsageError('expected a phone number or a call id');
  const cfg = config();
  const target = targetOfWords(positionals, forgetRegion(cfg), 'forget');
  // The audit line goes to stderr, so --json's stdout stays one document.
  const audit = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) io.err(line);
      done();
    },
  });
  const log = createLogger({ level: cfg.logLevel, destination: audit });
  const { commandTimeoutMs = COMMAND_TIMEOUT_MS, ...during } = hooks;
  const redis = await connectRedis(cfg, io, { commandTimeoutMs });
  try {
    const receipt = await forget(cfg, redis, log, {
      target,
      dryRun: values['dry-run'] === true,
      crm: values.crm === true,
      ...during,
    });
    if (values.json) io.out(JSON.stringify(receipt));
    else for (const line of receiptLines(receipt)) io.out(line);
    return 0;
  } catch (err) {
    if (err instanceof ForgetIncompleteError) {
      if (values.json) io.out(JSON.stringify({ ...err.receipt, incomplete: err.message }));
      else for (const line of receiptLines(err.receipt)) io.out(line);
      throw new CliFailure(err.message);
    }
    if (err instanceof SpoolBusyError) throw new CliFailure(err.message);
    // An archive or Redis failure midway: what is erased stays erased; a second run finds the rest.
    throw new CliFailure(
      `stopped before it finished (${err instanceof Error ? `${err.name}: ${err.message.split('\n')[0]!.slice(0, 300)}` : String(err)}); run forget again once that is fixed`,
    );
  } finally {
    redis.disconnect();
  }
}
