// `callsync forget`: erases every trace of one caller (a phone number, in every format) or one call
// (a call id) that callsync holds — docs/privacy.md has the map of the stores. Runs beside a live
// deployment: calls of other numbers are untouched, and a call of this number arriving afterwards is
// a new call (its dedupe keys are gone).
//
// How: the calls are found first — in the spool, in every Redis key under QUEUE_PREFIX (SCAN on
// every master: the inbound log's streams of every shard, the parked entries, every queue's jobs in
// every state, the Push assemblies, anything else) and in every archive sink's records (both key
// layouts) — as their call keys; also the timeline's lookups (queues/timeline.ts: the calls by the
// number's keyed hash, or by the call id, kept for CALL_TIMELINE_TTL_DAYS, longer than their jobs) —
// as their call hashes. Then, per store: the CRM records (with --crm, before the record
// memory is deleted), the jobs (an active one is waited for, then removed), the stream entries, the
// queues' event entries, the archive objects (json, txt, vCon, recordings, half-written temp files),
// and every other key whose name holds one of the calls' hashes or the number, or is named after the
// call id (CALL_ID_KEYS: that id the whole rest of the name, nothing else), or whose value mentions
// them (a call id only as the value of a call-id field: callIdFinder) — so keys added later under a
// call's hash (a per-call timeline) are covered too.
// The notification ledger keeps its "never twice" markers with the recipient as a keyed hash (the
// privacy key, queues/privacy-key.ts: PRIVACY_HMAC_SECRET, else the key kept in Redis), markers an
// earlier version wrote in clear included, and the opt-out list keeps the number as that hash. The
// Redis part runs again until a pass finds nothing (a call being fanned out meanwhile), at most
// MAX_PASSES times.
import { Queue, type Job, type JobType } from 'bullmq';
import type { Logger } from 'pino';
import type { CountryCode } from 'libphonenumber-js';
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys, RedisKeys } from '../../queues/keys.js';
import { callHash, callIdSegment, callKeySegment, type CanonicalCall } from '../model/call.js';
import { numberSpellings } from '../model/phone.js';
import type { NumberOrCallId } from '../model/number-words.js';
import { numberFinder } from '../redact.js';
import type { Config } from '../config/index.js';
import { phoneLibMax } from '../model/libphonenumber.js';
import { sinkTypes } from '../sinks/registry.js';
import type { Sink } from '../sinks/types.js';
import { RedisKeyValueStore } from '../state/kv.js';
import { archiveOptionsSchema, createObjectStore } from '../sinks/archive/index.js';
import { normalizePrefix, archiveKeys } from '../sinks/archive/keys.js';
import { LocalFolderStore, type ObjectStore } from '../sinks/archive/store.js';
import { recipientHash } from '../sinks/notify/ledger.js';
import { PrivacyKey } from '../../queues/privacy-key.js';
import { OptOutList } from '../sinks/notify/opt-out.js';
import { eraseFromSpool, SpoolBusyError } from '../ingress/spool-forget.js';
import { pushCallIdOfKey, pushCallKey, pushSeenKey } from '../sources/push-assembly.js';
import { eraseStreamEntries } from './stream-erase.js';
import { CALL_ID_LOOKUP_MAX, CallTimeline, callIdKey } from '../../queues/timeline.js';
import { globEscape, scanKeys } from '../../queues/scan.js';

/**
 * A Push call's events being assembled: a hash `…:push:<callId>` (src/sources/push-assembly.ts). A
 * call id may hold `:` (the Push API allows it), so whatever follows `:push:` is the id.
 */
const isPushAssembly = (key: string, type: string): boolean => type === 'hash' && /:push:./.test(key);

/** Who or what to forget. */
type ForgetTarget = NumberOrCallId;

/** Forgetting needs something that is not there (an active job that does not finish, a CRM that refuses). */
export class ForgetIncompleteError extends Error {
  constructor(
    message: string,
    readonly receipt: ForgetReceipt,
  ) {
    super(message);
    this.name = 'ForgetIncompleteError';
  }
}

/**
 * What finds the target in text: the number in every format (E.164, with `00`, digits only, national,
 * with spaces, dashes, dots or brackets between the digits, full-width digits, spoken as digit words in
 * a transcript: numberFinder), or the call id as the value of a call-id field (callIdFinder).
 */
function targetMatcher(target: ForgetTarget): (text: string) => boolean {
  if (target.kind === 'call') return callIdFinder(target.callId);
  return numberFinder(numberSpellings(target.e164))!;
}

/** JSON strings inside JSON strings read (an inbound dead letter's `data.text`, a log entry's `call` field). */
const NESTED_JSON_MAX = 3;

/**
 * Whether a text names the call id `callId` as the value of a field that holds a call id, in the
 * shapes callsync's writers store:
 * - `callId` anywhere: the canonical call (jobs, log entries, spool lines, archive records), a
 *   timeline's `received` entry, a refusal (`calls:refused`), a Push API event and its fields (the
 *   assembly's hash, a Push call's `raw`), a history entry;
 * - `callSid` anywhere: a channel event (`call.callSid`: a poller's dead letter, a channel call's `raw`);
 * - `call.id` (a string, or a number): the AI-agent webhook's payload, current and legacy (a call's `raw`);
 * - `uuid` of a vCon (an object with `vcon` or `parties`): a vCon posted as the call (a call's `raw`).
 * Call ids are compared trimmed in the payload's fields, as the normalizers trim them. A JSON string
 * value that is itself JSON is read too (NESTED_JSON_MAX deep). A text that is not JSON (a torn
 * spool line, a record cut short) names it when it holds `"callId":"<id>"` or `"callSid":"<id>"`
 * (or that escaped once more, as JSON inside it).
 *
 * Not the id as any value: a call id is any text the platform chose, and `in`, `newCall`, `local`,
 * `done` or `normalClearing` are the values of other fields of every call (`"direction":"in"`, a
 * sink's name, a timeline's event, a hangup's cause). Linear in the text: a text without the id's
 * characters (its longest run JSON writes unescaped) is not parsed at all.
 */
function callIdFinder(callId: string): (text: string) => boolean {
  // The id's longest run of characters JSON.stringify leaves as they are (not `"`, `\`, a control
  // character, a lone surrogate): in the text whatever the depth of JSON inside JSON.
  let needle = '';
  for (let i = 0, run = 0; i < callId.length; i++) {
    const c = callId.charCodeAt(i);
    const lone =
      (c >= 0xd800 && c <= 0xdbff && !(callId.charCodeAt(i + 1) >= 0xdc00 && callId.charCodeAt(i + 1) <= 0xdfff)) ||
      (c >= 0xdc00 && c <= 0xdfff && !(callId.charCodeAt(i - 1) >= 0xd800 && callId.charCodeAt(i - 1) <= 0xdbff));
    run = c === 0x22 || c === 0x5c || c < 0x20 || lone ? 0 : run + 1;
    if (run > needle.length) needle = callId.slice(i + 1 - run, i + 1);
  }
  // `"callId":"<id>"` as JSON writes it, and as JSON inside a JSON string (escaped once more).
  const source = (id: string) =>
    JSON.stringify(id)
      .slice(1, -1)
      .replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  const once = source(JSON.stringify(callId).slice(1, -1));
  const textual = new RegExp(
    `"(?:callId|callSid)"\\s*:\\s*"${source(callId)}"|\\\\"(?:callId|callSid)\\\\"\\s*:\\s*\\\\"${once}\\\\"`,
  );
  const named = (value: unknown) =>
    (typeof value === 'string' && value.trim() === callId) || (typeof value === 'number' && String(value) === callId);
  const isObject = (v: unknown): v is Record<string, unknown> =>
    v !== null && typeof v === 'object' && !Array.isArray(v);
  const looksLikeJson = (text: string) => /^\s*[[{]/.test(text);

  const holds = (text: string): boolean => {
    if (!text.includes(needle)) return false;
    if (!looksLikeJson(text)) return textual.test(text);
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return textual.test(text);
    }
    const stack: { value: unknown; depth: number }[] = [{ value: parsed, depth: 0 }];
    while (stack.length > 0) {
      const { value, depth } = stack.pop()!;
      if (typeof value === 'string') {
        if (depth < NESTED_JSON_MAX && looksLikeJson(value) && value.includes(needle)) {
          try {
            stack.push({ value: JSON.parse(value) as unknown, depth: depth + 1 });
          } catch {
            if (textual.test(value)) return true;
          }
        }
      } else if (Array.isArray(value)) {
        for (const item of value)
          if (item !== null && typeof item !== 'number' && typeof item !== 'boolean')
            stack.push({ value: item, depth });
      } else if (isObject(value)) {
        if (value.callId === callId || value.callSid === callId) return true;
        if (isObject(value.call) && named(value.call.id)) return true;
        if (named(value.uuid) && ('vcon' in value || Array.isArray(value.parties))) return true;
        for (const item of Object.values(value))
          if (item !== null && typeof item !== 'number' && typeof item !== 'boolean')
            stack.push({ value: item, depth });
      }
    }
    return false;
  };
  return holds;
}

export interface ForgetOptions {
  target: ForgetTarget;
  dryRun: boolean;
  /** Delete the call records callsync created in HubSpot and Pipedrive too. */
  crm: boolean;
  /** How long an active job of the target may run before forget gives up on it. Default 60 s. */
  activeWaitMs?: number;
  /** How long a running ingress may take to drain the target's spooled calls. Default 30 s. */
  spoolWaitMs?: number;
  /** Sinks to use instead of building them from the config (tests). */
  sinks?: ReadonlyMap<string, Sink>;
  /** Called after each item erased, by step (tests: a kill or a Redis stop at that point). */
  onStep?: (step: ForgetStep) => void | Promise<void>;
}

/** The points of a run `onStep` is called at: a spool segment's rewrite written (not yet renamed), after a job, a stream rewrite, a key, an archive object. */
type ForgetStep = 'spool' | 'job' | 'stream' | 'key' | 'archive';

/** What `forget` did: counts per store, nothing personal. */
export interface ForgetReceipt {
  target: 'number' | 'call';
  dryRun: boolean;
  /** Calls of the target found (by their call key). */
  calls: number;
  /** Items removed (with dryRun: found) per store. */
  stores: Record<string, number>;
  /** Redis passes run (a pass repeats while it still finds something). */
  passes: number;
}

const MAX_PASSES = 4;
const JOB_STATES: JobType[] = [
  'waiting',
  'prioritized',
  'delayed',
  'waiting-children',
  'active',
  'completed',
  'failed',
];
const PAGE = 500;
const CALL_HASH = /^[0-9a-f]{32}$/;
/** A call hash in a key's segment: 32 hex digits between dashes or the segment's ends (`replay-<hash>-<content hash>`). */
const HASH_IN_SEGMENT = /(?:^|-)([0-9a-f]{32})(?=-|$)/g;

interface FoundCall {
  key: string;
  callId: string;
  startedAt: string;
}

/** The spool folder of the ingress of this configuration (workers/roles/ingress.ts). */
function spoolFolder(config: Config): string {
  return config.spool.dir;
}

/** Every key of this deployment: `<QUEUE_PREFIX>:…` and, on a spread cluster, `{<QUEUE_PREFIX>:…}…`. */
async function deploymentKeys(redis: RedisClient, prefix: string): Promise<string[]> {
  const [plain, tagged] = await Promise.all([
    scanKeys(redis, `${globEscape(prefix)}:*`),
    scanKeys(redis, `{${globEscape(prefix)}:*`),
  ]);
  return [...new Set([...plain, ...tagged])].filter((k) => k.startsWith(`${prefix}:`) || k.startsWith(`{${prefix}:`));
}

/** The queues among `keys` (a BullMQ `meta` hash each), with the prefix of their keys. */
function queuesAmong(keys: readonly string[], k: RedisKeys): string[] {
  const names = new Set<string>();
  for (const key of keys) {
    if (!key.endsWith(':meta')) continue;
    const body = key.slice(0, -':meta'.length);
    const name = body.slice(body.lastIndexOf(':') + 1);
    if (name !== '' && body === `${k.queuePrefix(name)}:${name}`) names.add(name);
  }
  return [...names].sort();
}

function parseCallText(text: string): CanonicalCall | null {
  try {
    const parsed = JSON.parse(text) as unknown;
    const c = (
      parsed && typeof parsed === 'object' && 'call' in parsed ? (parsed as { call: unknown }).call : parsed
    ) as CanonicalCall | null;
    return c && typeof c === 'object' && typeof c.key === 'string' && typeof c.callId === 'string' ? c : null;
  } catch {
    return null;
  }
}

function fieldsText(fields: readonly string[]): string {
  return fields.join('\n');
}

/**
 * Whether `text` names the call key `key` whole: as a JSON string (`"callKey":"ai-agent:a:c1"`, also
 * escaped once more), or as the text or one of its lines (a stream's fields) — not as the start of
 * another call's key (`ai-agent:a:c10`).
 */
function mentionsKey(text: string, key: string): boolean {
  if (text.includes(JSON.stringify(key))) return true;
  for (let i = text.indexOf(key); i >= 0; i = text.indexOf(key, i + 1)) {
    const before = i === 0 ? '' : text[i - 1]!;
    const after = text.slice(i + key.length, i + key.length + 2);
    if (['', '"', '\n'].includes(before) && (after === '' || /^("|\n|\\")/.test(after))) return true;
  }
  return false;
}

/** The segments of a key name (between `:`, `{` and `}`). */
const segmentsOf = (key: string) => key.split(/[:{}]/).filter(Boolean);

/**
 * The keys named after a call id, each named by its writer's own function from the keys' area
 * (`RedisKeys.area`) and the id:
 * - the Push API assembly's hash of the call's events, `push:<callId>` (`push:%open` for the id
 *   `open`; src/sources/push-assembly.ts pushCallKey);
 * - its marker that the call was seen, `push-seen:<callId>` (pushSeenKey);
 * - the timeline's lookup by call id, `calls:id:<callId>` (queues/timeline.ts callIdKey), named after
 *   the id's first CALL_ID_LOOKUP_MAX characters: ids that long may share it with another that begins
 *   alike, so it is not theirs by name (the members that are their calls' hashes go: keyAction).
 * A call id is any text the platform chose (`open`, `calls`, `privacy-key`, `x:pbx:4711`): `forget
 * --call` deletes a key for its name only when the name is one of these, the id the whole rest of
 * it — not a key that merely holds the id as a segment (`P:privacy-key`, `P:calls:recent`,
 * `P:push:open`). A new key named after a call id belongs here, or forget leaves it.
 */
const CALL_ID_KEYS: readonly { area: string; name: (area: string, callId: string) => string | null }[] = [
  { area: 'push', name: pushCallKey },
  { area: 'push', name: pushSeenKey },
  { area: 'calls', name: (area, callId) => (callId.length < CALL_ID_LOOKUP_MAX ? callIdKey(area, callId) : null) },
];

/** The names of the keys of call id `callId` (CALL_ID_KEYS) in both layouts, as deploymentKeys scans both. */
function callIdKeyNames(prefix: string, callId: string): Set<string> {
  const names = new Set<string>();
  if (callId === '') return names;
  for (const layout of ['one-slot', 'spread'] as const) {
    const keys = new RedisKeys(prefix, layout, 1);
    for (const family of CALL_ID_KEYS) {
      const name = family.name(keys.area(family.area), callId);
      if (name !== null) names.add(name);
    }
  }
  return names;
}

class Forgetter {
  private readonly keys: RedisKeys;
  private readonly matches: (text: string) => boolean;
  /** For a call id: the names of its keys (CALL_ID_KEYS). */
  private readonly callIdKeys: ReadonlySet<string>;
  private readonly calls = new Map<string, FoundCall>();
  /** Hashes of the target's calls the timeline's lookups list (by number, by call id: fromTimelineIndex); their keys may be known nowhere else. */
  private readonly indexed = new Set<string>();
  private readonly counts: Record<string, number> = {};
  /** The privacy key: PRIVACY_HMAC_SECRET, else the key kept in Redis (created if no process has yet). */
  private readonly privacyKey: PrivacyKey;
  /** The key, once `run` has read it. */
  private secret: Buffer | undefined;
  private readonly activeWaitMs: number;
  private readonly queues = new Map<string, Queue>();

  constructor(
    private readonly config: Config,
    private readonly redis: RedisClient,
    private readonly log: Logger,
    private readonly options: ForgetOptions,
  ) {
    this.keys = redisKeys(config.redis);
    this.matches = targetMatcher(options.target);
    this.callIdKeys =
      options.target.kind === 'call' ? callIdKeyNames(this.keys.prefix, options.target.callId) : new Set();
    this.privacyKey = new PrivacyKey(redis, this.keys, config.privacy.hmacSecret);
    this.activeWaitMs = options.activeWaitMs ?? 60_000;
  }

  private queue(name: string): Queue {
    let queue = this.queues.get(name);
    if (!queue) {
      queue = new Queue(name, { connection: this.redis, prefix: this.keys.queuePrefix(name) });
      this.queues.set(name, queue);
    }
    return queue;
  }

  private count(store: string, n = 1): void {
    if (n > 0) this.counts[store] = (this.counts[store] ?? 0) + n;
  }

  /** A call found somewhere: remembered by its key (its hash names its keys and jobs). */
  private found(call: Pick<CanonicalCall, 'key' | 'callId' | 'startedAt'> | null): void {
    if (call && typeof call.key === 'string' && !this.calls.has(callHash(call.key)))
      this.calls.set(callHash(call.key), { key: call.key, callId: call.callId, startedAt: call.startedAt });
  }

  private callMatches(call: CanonicalCall | null): boolean {
    if (call === null) return false;
    const t = this.options.target;
    if (t.kind === 'call') return call.callId === t.callId;
    return call.from === t.e164 || call.to === t.e164 || this.matches(JSON.stringify(call));
  }

  /**
   * Whether a stored value mentions the target: the number in `text` (the value whole), or the call
   * id as the value of a call-id field in one of `parts` (the value's pieces, each read on its own:
   * a hash's values, a stream entry's fields, a job's data, result and error), callIdFinder.
   */
  private mentions(text: string, parts: readonly string[] = [text]): boolean {
    return this.options.target.kind === 'number' ? this.matches(text) : parts.some((part) => this.matches(part));
  }

  /**
   * Text that belongs to the target: it mentions the number / call id (`parts`: see mentions), or the
   * hash or key of a call found.
   */
  private related(text: string, parts?: readonly string[]): boolean {
    if (this.mentions(text, parts)) return true;
    for (const [hash, call] of this.calls) if (text.includes(hash) || mentionsKey(text, call.key)) return true;
    for (const hash of this.indexed) if (text.includes(hash)) return true;
    return false;
  }

  /** A call hash of the target's: of a call found, or listed by the timeline's number index. */
  private hashOfTarget(hash: string): boolean {
    return this.calls.has(hash) || this.indexed.has(hash);
  }

  /**
   * The calls the timeline's lookups list, by their call hashes: a number's in its number index
   * (`calls:number:<keyed hash>`), the number indexed in any of the forms a call may have carried it
   * (E.164, `00…`, digits, national); a call id's in its lookup (`calls:id:<call id>`, byCallId) — for
   * an id of CALL_ID_LOOKUP_MAX characters or more, a lookup shared by the ids that begin alike,
   * only the calls whose timeline's `received` entry names that id.
   */
  private async fromTimelineIndex(): Promise<void> {
    const target = this.options.target;
    const timeline = new CallTimeline(this.redis, this.keys, this.config.timeline);
    if (target.kind === 'call') {
      for (const hash of await timeline.byCallId(target.callId)) {
        if (!CALL_HASH.test(hash) || this.indexed.has(hash)) continue;
        if (target.callId.length < CALL_ID_LOOKUP_MAX) this.indexed.add(hash);
        else if ((await timeline.read(hash)).some((e) => e.event === 'received' && e.callId === target.callId))
          this.indexed.add(hash);
      }
      return;
    }
    const parsed = phoneLibMax().parsePhoneNumberFromString(target.e164)!;
    const digits = `${parsed.countryCallingCode}${parsed.nationalNumber}`;
    const national = parsed.formatNational().replace(/\D/g, '');
    // A payload's `+49 (0) 176…` is kept (and indexed) as `+490176…`: the trunk prefix after the country code.
    const forms = new Set([parsed.number, `00${digits}`, digits, national, `+${parsed.countryCallingCode}${national}`]);
    for (const form of forms)
      for (const hash of await timeline.byNumber(form, 100_000)) if (CALL_HASH.test(hash)) this.indexed.add(hash);
  }

  /**
   * A key name that belongs to the target: a segment holds a found call's hash between dashes or its
   * ends (the hash, a job id of it `<hash>-<content hash>`, a replay's or backfill's marker
   * `replay-<hash>`), or is the number; or it is a key named after the call id (CALL_ID_KEYS).
   */
  private keyRelated(key: string): boolean {
    for (const segment of segmentsOf(key))
      for (const [, hash] of segment.matchAll(HASH_IN_SEGMENT)) if (this.hashOfTarget(hash!)) return true;
    if (this.callIdKeys.has(key)) return true;
    if (this.options.target.kind === 'number') {
      if (this.matches(key)) return true;
      // HubSpot's contact memory and Pipedrive's person memory of an earlier version name the number by its SHA-256 (`callHash`).
      const numberHash = callHash(this.options.target.e164);
      if (segmentsOf(key).includes(numberHash)) return true;
      // The SMS cooldown and the CRM sinks' contact and person memory name it by its keyed hash (the
      // ledger's markers are kept: see keyAction).
      if (this.secret !== undefined && segmentsOf(key).includes(recipientHash(this.secret, this.options.target.e164)))
        return true;
    }
    return false;
  }

  async run(): Promise<ForgetReceipt> {
    const dryRun = this.options.dryRun;
    const spoolDir = spoolFolder(this.config);
    const spoolMatches = (line: string) => this.spoolLineMatches(line);
    let passes: number;
    try {
      // 1. Find the calls everywhere first, erasing nothing: the spool, the archives, Redis. Then the
      // CRM records (--crm), so a CRM that refuses stops forget before anything else is gone.
      // The privacy key first: the SMS cooldowns name the number by its keyed hash.
      this.secret = await this.privacyKey.get();
      const spoolFound = await eraseFromSpool(spoolDir, spoolMatches, { dryRun: true, waitMs: 0 });
      const archives = await this.archiveStores();
      const archived = new Map<ObjectStore, Set<string>>();
      for (const { store, prefix } of archives) archived.set(store, await this.findInArchive(store, prefix));
      let work = await this.collectRedis();
      passes = 1;
      if (this.options.crm) await this.eraseCrm();

      if (dryRun) {
        this.count('spool lines', spoolFound.removed);
        this.countRedis(work);
      } else {
        // 2. The spool: a running ingress drains it into the log (found in Redis next); else its files are rewritten.
        const spool = await eraseFromSpool(spoolDir, spoolMatches, {
          dryRun: false,
          waitMs: this.options.spoolWaitMs ?? 30_000,
          onWritten: () => this.options.onStep?.('spool'),
        });
        this.count('spool lines', spool.removed);
        if (spool.drained > 0) {
          work = await this.collectRedis();
          if (this.options.crm) await this.eraseCrm();
        }
        // 3. Redis, pass after pass (a call being fanned out meanwhile shows up in the next).
        for (;;) {
          if (work.total === 0) break;
          await this.eraseRedis(work);
          if (passes >= MAX_PASSES) break;
          passes++;
          work = await this.collectRedis();
          if (this.options.crm) await this.eraseCrm();
        }
      }

      // 4. The archives: what was found there, and the objects of the calls found elsewhere.
      for (const { store, prefix } of archives) {
        const objects = archived.get(store)!;
        for (const call of this.calls.values())
          for (const key of await this.objectsOfCall(store, prefix, call)) objects.add(key);
        // A call's record last: a run killed midway leaves it to name the siblings that are left to the next run.
        if (!dryRun)
          for (const key of [...objects].sort((a, b) => Number(isRecord(a)) - Number(isRecord(b)))) {
            await store.delete(key);
            await this.options.onStep?.('archive');
          }
        this.count(
          store instanceof LocalFolderStore ? 'archive objects (folder)' : 'archive objects (S3)',
          objects.size,
        );
      }

      // 5. A last look: a call of the target accepted while forget ran (after the pass that would have
      // erased it, or one every pass found again) is there now. It is kept, and said: run forget again.
      if (!dryRun) await this.checkNothingLeft(spoolDir, spoolMatches);
    } catch (err) {
      if (err instanceof ForgetIncompleteError || err instanceof SpoolBusyError) throw err;
      // Redis (or an archive) failing midway: what the receipt lists is gone, the rest is still there.
      const redisLost =
        this.redis.status !== 'ready' ||
        /MaxRetriesPerRequest|Connection is closed|Command timed out|ECONNREFUSED|ECONNRESET|ETIMEDOUT/.test(
          oneLine(err),
        );
      throw new ForgetIncompleteError(
        `${redisLost ? 'Redis stopped answering' : 'stopped'} midway (${oneLine(err)}): what the receipt lists is ${dryRun ? 'counted' : 'erased'}, the rest is left as it was (forget --dry-run counts it); run forget again once that is fixed`,
        this.receipt(),
      );
    } finally {
      // allSettled: a queue that cannot close (Redis gone) does not hide why the run stopped.
      await Promise.allSettled([...this.queues.values()].map((q) => q.close()));
    }

    const receipt: ForgetReceipt = {
      target: this.options.target.kind,
      dryRun,
      calls: this.callCount(),
      stores: { ...this.counts },
      passes,
    };
    this.log.info(
      {
        audit: 'forget',
        target: receipt.target,
        dryRun,
        crm: this.options.crm,
        calls: receipt.calls,
        stores: receipt.stores,
        passes,
      },
      dryRun ? 'forget: dry run' : 'forget: erased',
    );
    return receipt;
  }

  private async checkNothingLeft(spoolDir: string, spoolMatches: (line: string) => boolean): Promise<void> {
    const known = this.callCount();
    const left = await this.collectRedis();
    const spooled = (await eraseFromSpool(spoolDir, spoolMatches, { dryRun: true, waitMs: 0 })).removed;
    if (left.total + spooled === 0) return;
    const arrived = this.callCount() - known;
    throw new ForgetIncompleteError(
      `${left.total + spooled} item(s) of this ${this.options.target.kind === 'number' ? 'number' : 'call'} turned up while forget ran (${arrived} call(s) not seen before, ${spooled} in the spool): a call accepted meanwhile is kept; run forget again (once the caller stopped calling) — forget --dry-run counts what is left`,
      this.receipt(),
    );
  }

  private spoolLineMatches(line: string): boolean {
    try {
      const entry = JSON.parse(line) as { call?: CanonicalCall };
      if (entry.call && this.callMatches(entry.call)) {
        this.found(entry.call);
        return true;
      }
    } catch {
      // a torn line: matched as text below
    }
    return this.matches(line);
  }

  // ---------------------------------------------------------------------------------------------
  // Redis

  private async collectRedis(): Promise<RedisWork> {
    await this.fromTimelineIndex();
    const all = await deploymentKeys(this.redis, this.keys.prefix);
    const queues = queuesAmong(all, this.keys);
    const queueHeads = queues.map((q) => `${this.keys.queuePrefix(q)}:${q}:`);
    const work: RedisWork = { jobs: [], streamEntries: [], eventEntries: [], keys: [], total: 0 };

    // Jobs of every queue, every state.
    for (const name of queues) {
      const queue = this.queue(name);
      {
        for (const state of JOB_STATES) {
          for (let start = 0; ; start += PAGE) {
            const jobs = (await queue.getJobs([state], start, start + PAGE - 1, true)).filter(
              (j): j is Job => j !== undefined && j !== null,
            );
            for (const job of jobs) {
              const data = job.data as { call?: CanonicalCall | null; text?: string } | undefined;
              const call = data?.call ?? (typeof data?.text === 'string' ? parseCallText(data.text) : null);
              const parts = [
                JSON.stringify(job.data ?? null),
                JSON.stringify(job.returnvalue ?? null),
                job.failedReason ?? '',
                ...(job.stacktrace ?? []),
              ];
              const text = parts.join('\n');
              const byHash = job.id !== undefined && this.hashOfTarget(job.id.slice(0, 32));
              if (this.callMatches(call ?? null) || this.mentions(text, parts) || byHash) {
                if (call && (this.callMatches(call) || byHash)) this.found(call);
                work.jobs.push({ queue: name, id: job.id!, state });
              }
            }
            if (jobs.length < PAGE) break;
          }
        }
      }
    }

    // Every other key, by type.
    const others = all.filter((key) => !queueHeads.some((head) => key.startsWith(head)));
    const types = await this.typesOf(others);
    for (const [key, type] of types) {
      if (type === 'stream') {
        const entries = (await this.redis.xrange(key, '-', '+')) as [string, string[]][];
        const ids: string[] = [];
        for (const [id, fields] of entries) {
          const text = fieldsText(fields);
          const callField = fields.indexOf('call');
          const call = callField >= 0 ? parseCallText(fields[callField + 1] ?? '') : null;
          if (this.callMatches(call) || this.mentions(text, fields)) {
            if (call) this.found(call);
            ids.push(id);
          }
        }
        if (ids.length > 0) work.streamEntries.push({ key, ids });
        continue;
      }
      if (isPushAssembly(key, type)) {
        // A Push call being assembled: its events name the numbers.
        const values = Object.values(await this.redis.hgetall(key));
        if (this.keyRelated(key) || this.mentions(values.join('\n'), values))
          work.keys.push({ key, type, action: 'push' });
        continue;
      }
    }
    // With the calls known, the keys that name them or whose values mention them.
    for (const [key, type] of types) {
      if (type === 'stream' || isPushAssembly(key, type)) continue;
      const action = await this.keyAction(key, type);
      if (action !== null) work.keys.push({ key, type, action });
    }
    // The queues' event streams (job ids, return values, failure reasons of recent jobs).
    for (const name of queues) {
      const key = `${this.keys.queuePrefix(name)}:${name}:events`;
      const entries = (await this.redis.xrange(key, '-', '+')) as [string, string[]][];
      const ids = entries.filter(([, fields]) => this.related(fieldsText(fields), fields)).map(([id]) => id);
      if (ids.length > 0) work.eventEntries.push({ key, ids });
    }
    work.total = work.jobs.length + work.streamEntries.length + work.eventEntries.length + work.keys.length;
    return work;
  }

  private async typesOf(keys: readonly string[]): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    for (let i = 0; i < keys.length; i += 500) {
      const slice = keys.slice(i, i + 500);
      const types = await Promise.all(slice.map((k) => this.redis.type(k)));
      slice.forEach((k, j) => out.set(k, types[j]!));
    }
    return out;
  }

  /** What to do with a key that is neither a queue's nor a stream: null when it has nothing of the target. */
  private async keyAction(key: string, type: string): Promise<KeyAction | null> {
    const ledger = /:sent:([0-9a-f]{32}):(.+)$/.exec(key);
    if (ledger && type === 'string') {
      const [, hash, recipient] = ledger as unknown as [string, string, string];
      // A marker naming its recipient by a keyed hash (or `mail`) is what "never twice" keeps: never
      // deleted; a forgotten call's is only trimmed to state and time.
      if (recipient === 'mail' || recipient.startsWith('h1.'))
        return this.hashOfTarget(hash) && /"(ref|reason)"/.test((await this.redis.get(key)) ?? '') ? 'ledger' : null;
      if (this.hashOfTarget(hash) || this.matches(recipient)) return 'ledger';
    }
    if (key === `${this.keys.area('optout')}:optout`) {
      if (this.options.target.kind !== 'number') return null;
      return (await this.redis.sismember(key, this.options.target.e164)) === 1 ? 'optout' : null;
    }
    if (this.keyRelated(key)) return 'delete';
    switch (type) {
      case 'string': {
        const value = await this.redis.get(key);
        return value !== null && this.related(value) ? 'delete' : null;
      }
      case 'hash': {
        const values = await this.redis.hgetall(key);
        return this.related(Object.entries(values).flat().join('\n'), Object.values(values)) ? 'delete' : null;
      }
      case 'set': {
        const members = await this.redis.smembers(key);
        return members.some((m) => this.related(m)) ? 'members' : null;
      }
      case 'zset': {
        const members = await this.redis.zrange(key, 0, -1);
        return members.some((m) => this.memberRelated(key, m)) ? 'members' : null;
      }
      case 'list': {
        const items = await this.redis.lrange(key, 0, -1);
        return items.some((m) => this.related(m)) ? 'members' : null;
      }
      default:
        return null;
    }
  }

  private countRedis(work: RedisWork): void {
    for (const job of work.jobs) this.count(job.state === 'failed' ? 'dead letters' : `jobs (${job.state})`);
    for (const s of work.streamEntries) this.count(streamStore(s.key), s.ids.length);
    for (const e of work.eventEntries) this.count('queue events', e.ids.length);
    for (const k of work.keys)
      this.count(
        k.action === 'ledger'
          ? 'notification ledger (kept as keyed hash)'
          : k.action === 'optout'
            ? 'opt-out list (kept as keyed hash)'
            : k.action === 'push'
              ? 'push assemblies'
              : 'other keys',
      );
  }

  private async eraseRedis(work: RedisWork): Promise<void> {
    // Jobs: an active one finishes first (its worker holds a lock), then goes like the others.
    for (const ref of work.jobs) {
      if (await this.removeJob(this.queue(ref.queue), ref.id))
        this.count(ref.state === 'failed' ? 'dead letters' : `jobs (${ref.state})`);
      await this.options.onStep?.('job');
    }
    // Rewritten, not XDEL'd: XDEL leaves the fields in the stream's memory (./stream-erase.ts).
    for (const { key, ids } of work.streamEntries) {
      this.count(streamStore(key), await eraseStreamEntries(this.redis, key, ids));
      await this.options.onStep?.('stream');
    }
    for (const { key, ids } of work.eventEntries) {
      this.count('queue events', await eraseStreamEntries(this.redis, key, ids));
      await this.options.onStep?.('stream');
    }
    // The timeline's lookups last, the one that finds the target (by number, by call id) the very
    // last: after a run killed midway it still names the calls' other keys for the next run (a
    // timeline whose jobs and archive objects are gone is found through it alone).
    const finder = this.options.target.kind === 'number' ? ':calls:number:' : ':calls:id:';
    const rank = (key: string) => (key.includes(finder) ? 2 : /:calls:(number|id):/.test(key) ? 1 : 0);
    const lookupsLast = [...work.keys].sort((a, b) => rank(a.key) - rank(b.key));
    for (const { key, type, action } of lookupsLast) {
      await this.eraseKey(key, type, action);
      await this.options.onStep?.('key');
    }
  }

  private async eraseKey(key: string, type: string, action: KeyAction): Promise<void> {
    if (action === 'ledger') {
      await this.hashLedgerMarker(key);
      this.count('notification ledger (kept as keyed hash)');
    } else if (action === 'optout') {
      const list = new OptOutList(this.redis, this.keys.area('optout'), this.privacyKey);
      if (this.options.target.kind === 'number' && (await list.keepHashedOnly(this.options.target.e164)))
        this.count('opt-out list (kept as keyed hash)');
    } else if (action === 'push') {
      const callId = pushCallIdOfKey(key);
      await this.redis.zrem(`${key.slice(0, key.indexOf(':push:'))}:push:open`, callId);
      this.count('push assemblies', await this.redis.del(key));
    } else if (action === 'members') {
      this.count('other keys', await this.removeMembers(key, type));
    } else {
      this.count(storeOfKey(key), await this.redis.del(key));
    }
  }

  private async removeJob(queue: Queue, id: string): Promise<boolean> {
    const deadline = Date.now() + this.activeWaitMs;
    for (;;) {
      const job = await queue.getJob(id);
      if (!job) return false;
      try {
        await job.remove();
        // BullMQ keeps a job's log list beside it.
        return true;
      } catch (err) {
        if (!/locked/.test((err as Error).message)) throw err;
        if (Date.now() >= deadline) {
          throw new ForgetIncompleteError(
            `a job of the target in queue ${queue.name} is still active after ${Math.round(this.activeWaitMs / 1000)} s; run forget again once it finished`,
            this.receipt(),
          );
        }
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** A marker of a forgotten call: the recipient as its keyed hash, the state and time only, the TTL kept. */
  private async hashLedgerMarker(key: string): Promise<void> {
    const m = /^(.*:sent:[0-9a-f]{32}:)(.+)$/.exec(key)!;
    const recipient = m[2]!;
    const [raw, ttl] = await Promise.all([this.redis.get(key), this.redis.pttl(key)]);
    if (raw === null) return;
    let entry: { state?: string; at?: string };
    try {
      entry = JSON.parse(raw) as { state?: string; at?: string };
    } catch {
      entry = { state: 'unknown' };
    }
    const kept = JSON.stringify({ state: entry.state ?? 'unknown', at: entry.at ?? new Date(0).toISOString() });
    const target =
      recipient === 'mail' || recipient.startsWith('h1.') ? key : `${m[1]}${recipientHash(this.secret!, recipient)}`;
    if (ttl > 0) await this.redis.set(target, kept, 'PX', ttl);
    else await this.redis.set(target, kept);
    if (target !== key) await this.redis.del(key);
  }

  /**
   * A member of a set, sorted set or list that belongs to the target (related), or — the open Push
   * calls' set `push:open`, whose members are call ids — the call id itself.
   */
  private memberRelated(key: string, member: string): boolean {
    if (this.related(member)) return true;
    return this.options.target.kind === 'call' && key.endsWith(':push:open') && member === this.options.target.callId;
  }

  private async removeMembers(key: string, type: string): Promise<number> {
    const hit = (m: string) => this.memberRelated(key, m);
    if (type === 'set') {
      const members = (await this.redis.smembers(key)).filter(hit);
      return members.length === 0 ? 0 : this.redis.srem(key, ...members);
    }
    if (type === 'zset') {
      const members = (await this.redis.zrange(key, 0, -1)).filter(hit);
      return members.length === 0 ? 0 : this.redis.zrem(key, ...members);
    }
    const items = (await this.redis.lrange(key, 0, -1)).filter(hit);
    let n = 0;
    for (const item of new Set(items)) n += await this.redis.lrem(key, 0, item);
    return n;
  }

  /** The calls of the target found: by their keys, or by their hashes alone (the timeline's index). */
  private callCount(): number {
    return new Set([...this.calls.keys(), ...this.indexed]).size;
  }

  private receipt(): ForgetReceipt {
    return {
      target: this.options.target.kind,
      dryRun: this.options.dryRun,
      calls: this.callCount(),
      stores: { ...this.counts },
      passes: 0,
    };
  }

  // ---------------------------------------------------------------------------------------------
  // CRM

  /**
   * Deletes the CRM records of every call found so far, each pass again: a job of the call that was
   * delivering during an earlier pass (waited for, then removed) may have created its record since,
   * and its record memory goes with the Redis keys. A call whose memory is gone costs one read.
   */
  private async eraseCrm(): Promise<void> {
    const sinks = await this.crmSinks();
    const controller = new AbortController();
    for (const call of this.calls.values()) {
      for (const sink of sinks) {
        let n: number;
        try {
          n = await sink.eraseCall!(call.key, { dryRun: this.options.dryRun, signal: controller.signal });
        } catch (err) {
          // Before Redis: the record memory stays, so running forget again deletes what is left.
          throw new ForgetIncompleteError(
            `--crm: sink "${sink.name}" could not delete a call record (${oneLine(err)}); fix that and run forget again`,
            this.receipt(),
          );
        }
        this.count(`crm records (${sink.name})`, n);
      }
    }
  }

  private crm: Sink[] | null = null;

  private async crmSinks(): Promise<Sink[]> {
    if (this.crm !== null) return this.crm;
    const out: Sink[] = [];
    for (const sink of Object.values(this.config.sinks)) {
      if (sink.type !== 'hubspot' && sink.type !== 'pipedrive') continue;
      const given = this.options.sinks?.get(sink.name);
      const state = new RedisKeyValueStore(this.redis, this.keys.sinkState(sink.name));
      let built: Sink;
      try {
        built =
          given ??
          (await sinkTypes.get(sink.type)!.create(sink.name, sink.options as never, {
            log: this.log.child({ sink: sink.name }),
            state,
            telephony: null,
            now: () => new Date(),
            settings: this.config.sinkSettings[sink.type] ?? {},
          }));
      } catch (err) {
        throw new ForgetIncompleteError(
          `--crm: sink "${sink.name}" cannot be set up (${oneLine(err)})`,
          this.receipt(),
        );
      }
      if (built.eraseCall) out.push(built);
    }
    this.crm = out;
    return out;
  }

  // ---------------------------------------------------------------------------------------------
  // Archive

  private async archiveStores(): Promise<{ store: ObjectStore; prefix: string }[]> {
    const out: { store: ObjectStore; prefix: string }[] = [];
    for (const sink of Object.values(this.config.sinks)) {
      if (sink.type !== 'archive') continue;
      const options = archiveOptionsSchema.parse(sink.options);
      out.push({ store: await createObjectStore(options), prefix: normalizePrefix(options.prefix) });
    }
    return out;
  }

  /**
   * The archive's objects of the target: every record (`transcripts/…/*.json`, both layouts) is read
   * — for a call id only those whose name starts with it as the archive writes it (`callIdSegment`:
   * a long id cut at 100 characters) — and a matching one (its call id that one) names its siblings.
   */
  private async findInArchive(store: ObjectStore, prefix: string): Promise<Set<string>> {
    const objects = new Set<string>();
    const all: string[] = [];
    for await (const key of store.list(`${prefix}transcripts/`)) all.push(key);
    const present = new Set(all);
    // A vCon without its record (a run of an earlier version killed midway) is read as the record.
    const records = all.filter(
      (k) => isRecord(k) || (k.endsWith('.vcon.json') && !present.has(`${k.slice(0, -'.vcon.json'.length)}.json`)),
    );
    // A call id's records: those named as the archive names its calls (its first 100 characters,
    // made safe); the call id inside each tells it from another id that begins alike.
    const readable = this.options.target.kind === 'call' ? callIdSegment(this.options.target.callId) : null;
    for (const key of records) {
      const name = key.slice(key.lastIndexOf('/') + 1);
      if (readable !== null && !name.startsWith(readable)) continue;
      let text: string;
      try {
        text = await store.get(key);
      } catch {
        continue;
      }
      const call = parseCallText(text);
      if (!(this.callMatches(call) || this.matches(text) || this.vconOfCallId(key, text))) continue;
      if (call) this.found(call);
      const base = key.slice(0, -(isRecord(key) ? '.json' : '.vcon.json').length);
      for (const sibling of [`${base}.json`, `${base}.txt`, `${base}.vcon.json`])
        if (present.has(sibling)) objects.add(sibling);
      const day = base.slice(`${prefix}transcripts/`.length, base.lastIndexOf('/'));
      for (const r of await this.recordingsOf(
        store,
        `${prefix}recordings/${day}/${base.slice(base.lastIndexOf('/') + 1)}`,
      ))
        objects.add(r);
      if (store instanceof LocalFolderStore)
        for (const t of await store.temporaryFiles(`${prefix}`)) if (t.startsWith(`${base}.`)) objects.add(t);
    }
    return objects;
  }

  /**
   * For a call id: a vCon read as the record (its record gone) that the archive wrote for a call of
   * that id — it names the id only in its subject, `Call <id>` (src/model/vcon.ts renderVcon).
   */
  private vconOfCallId(key: string, text: string): boolean {
    const t = this.options.target;
    if (
      t.kind !== 'call' ||
      !key.endsWith('.vcon.json') ||
      !text.includes(JSON.stringify(`Call ${t.callId}`).slice(1, -1))
    )
      return false;
    try {
      const vcon = JSON.parse(text) as { subject?: unknown } | null;
      return vcon !== null && typeof vcon === 'object' && vcon.subject === `Call ${t.callId}`;
    } catch {
      return false;
    }
  }

  /** The objects a call found in Redis has in the archive (current layout): record, text, vCon, recordings. */
  private async objectsOfCall(store: ObjectStore, prefix: string, call: FoundCall): Promise<string[]> {
    const keys = archiveKeys(call, prefix);
    const out: string[] = [];
    for (const key of [keys.json, keys.text, keys.vcon])
      if ((await store.keysStartingWith(key, 1)).includes(key)) out.push(key);
    const day = keys.json.slice(`${prefix}transcripts/`.length, keys.json.lastIndexOf('/'));
    out.push(...(await this.recordingsOf(store, `${prefix}recordings/${day}/${callKeySegment(call)}`)));
    if (store instanceof LocalFolderStore) {
      const base = keys.json.slice(0, -'.json'.length);
      const recordingBase = `${prefix}recordings/${day}/${callKeySegment(call)}-`;
      for (const t of await store.temporaryFiles(prefix))
        if (t.startsWith(`${base}.`) || t.startsWith(recordingBase)) out.push(t);
    }
    return out;
  }

  /** Recordings `<stem>-<type>-<n>.<ext>` of the call named `stem`. */
  private async recordingsOf(store: ObjectStore, stem: string): Promise<string[]> {
    const keys = await store.keysStartingWith(`${stem}-`, 1000);
    return keys.filter((k) => /^[A-Za-z0-9_]+-\d+\.[A-Za-z0-9_]+$/.test(k.slice(stem.length + 1)));
  }
}

/** A call's archive record (`….json`, not its vCon): what names the call's other objects. */
const isRecord = (key: string): boolean => key.endsWith('.json') && !key.endsWith('.vcon.json');

type KeyAction = 'delete' | 'ledger' | 'optout' | 'push' | 'members';

interface RedisWork {
  jobs: { queue: string; id: string; state: JobType }[];
  streamEntries: { key: string; ids: string[] }[];
  eventEntries: { key: string; ids: string[] }[];
  keys: { key: string; type: string; action: KeyAction }[];
  total: number;
}

function streamStore(key: string): string {
  if (key.endsWith(':inbound-log')) return 'inbound log';
  if (key.endsWith(':inbound-parked')) return 'parked entries';
  return 'other streams';
}

function storeOfKey(key: string): string {
  if (key.includes(':inbound-seen:')) return 'dedupe keys';
  if (/:(rev|lock):[0-9a-f]{32}/.test(key)) return 'revision keys';
  if (/:(rec|pending):[0-9a-f]{32}/.test(key)) return 'crm record memory';
  return 'other keys';
}

function oneLine(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 300);
}

/** Forgets `options.target` (see above); the receipt counts what was erased per store. */
export async function forget(
  config: Config,
  redis: RedisClient,
  log: Logger,
  options: ForgetOptions,
): Promise<ForgetReceipt> {
  return new Forgetter(config, redis, log, options).run();
}

/** PHONE_DEFAULT_REGION of this configuration (national numbers of `callsync forget`). */
export function forgetRegion(config: Config): CountryCode {
  return config.privacy.defaultRegion;
}
