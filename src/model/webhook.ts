// The AI-agent call-data webhook (spec 6.1), parsed liberally and normalized into the canonical
// call record. Senders in production deviate from the spec (numbers without `+`, ISO strings for
// epoch ms, durations in ms, upper-case enums, offsets for chunk times, nulls for absent parts,
// objects where the spec has text, extra objects); all of that is normalized.
//
// Two kinds of field:
//  - the required ones (README "Required fields": version, call.id, call.from, call.to,
//    call.startTime, call.endTime or call.duration, call.direction) are checked with zod; they
//    alone can refuse a call (a 400 with one pointer per problem);
//  - every optional field callsync reads (assist.*, users, agent id, channel) is read by hand:
//    a value of a shape callsync cannot read is read as absent and reported as an `UnreadField`
//    (the ingress counts and logs it); the original keeps it verbatim. It never refuses a call.
//
// The legacy "AI Assistant Webhook" (src/model/legacy-webhook.ts) is recognised by its shape and
// read through the same code.
import { z } from 'zod';
import {
  callKey,
  joinedName,
  speakerLabelOf,
  type CallScenario,
  type CallSummary,
  type CallUser,
  type CanonicalCall,
  type Direction,
  type Speaker,
  type TranscriptChunk,
} from './call.js';
import { isLegacyWebhook, legacyAsCurrent, legacyPointer } from './legacy-webhook.js';
import { toE164 } from './phone.js';
import { parseUtc } from './utc-time.js';

/** One field that cannot be understood, with a JSON pointer to it. */
export interface PayloadProblem {
  pointer: string;
  detail: string;
}

/**
 * Fields that cannot be understood: becomes a 400 with one entry per problem. `pointer` and
 * `detail` are the first problem's.
 */
export class InvalidPayloadError extends Error {
  readonly problems: PayloadProblem[];
  constructor(
    readonly pointer: string,
    readonly detail: string,
    problems: PayloadProblem[] = [{ pointer, detail }],
  ) {
    super(`${pointer || '/'}: ${detail}${problems.length > 1 ? ` (and ${problems.length - 1} more)` : ''}`);
    this.name = 'InvalidPayloadError';
    this.problems = problems;
  }

  static of(problems: PayloadProblem[]): InvalidPayloadError {
    return new InvalidPayloadError(problems[0]!.pointer, problems[0]!.detail, problems);
  }
}

/** `['call', 'users', 0]` -> `/call/users/0` (RFC 6901). */
export function jsonPointer(path: readonly PropertyKey[]): string {
  return path.map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/**
 * An optional field callsync reads whose value it could not read: read as absent (or from the
 * part it could read), kept verbatim in the original. `field` is the field's pointer with array
 * indexes as `*` (`/assist/transcription/chunks/*\/content`): a closed set, written in this file,
 * fit for a metric label. `pointer` is the first such value's own pointer; `detail` says what was
 * expected and what came (JSON types only, never the value).
 */
export interface UnreadField {
  field: string;
  pointer: string;
  detail: string;
}

/** A path in the payload: strings are keys, numbers array indexes. */
export type Path = readonly (string | number)[];

/** Collects the unread fields of one payload, once per field (also a vCon's: ./vcon.ts). */
export class Unread {
  readonly fields: UnreadField[] = [];
  private readonly seen = new Set<string>();
  constructor(private readonly remap: (pointer: string) => string = (pointer) => pointer) {}

  add(path: Path, detail: string): void {
    const field = this.remap(path.map((p) => `/${typeof p === 'number' ? '*' : p}`).join(''));
    if (this.seen.has(field)) return;
    this.seen.add(field);
    this.fields.push({ field, pointer: this.remap(jsonPointer(path)), detail });
  }
}

/** The JSON type of a value, for details that never echo the value. */
export function jsonType(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return `a ${typeof v}`;
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

// ---- required fields: liberal scalars checked by zod -------------------------------------------

/** A string; numbers are taken as their decimal text. */
const text = z.union([z.string(), z.number().transform(String)], { error: 'expected a string' });

/** A value quoted for an error detail: at most 60 characters of it (a detail never echoes a whole transcript). */
const quoted = (v: string): string => `"${v.length > 60 ? `${v.slice(0, 60)}…` : v}"`;

/** A lone surrogate (a surrogate pair is one code point under `u`, so only unpaired halves match). */
const LONE_SURROGATE = /\p{Cs}/u;
const UNSAFE_NUMBER_ID =
  'a numeric id must be a whole number of at most 2^53-1 (a larger one has lost digits in JSON); send it as a string';
const LONE_SURROGATE_ID = 'the id is not valid Unicode text (it holds a lone surrogate, e.g. "\\ud800")';

/**
 * An identifier that becomes part of the call key (call id, agent id): a string, or a whole number
 * its decimal text spells exactly. Not an id: numbers beyond 2^53 (12345678901234567890 arrives as
 * 12345678901234567000, so two calls would share a key and one be answered as the other's duplicate)
 * and lone surrogates (they hash as U+FFFD in UTF-8, with the same effect). A call id that is not
 * one is refused (a vCon's `uuid` too: ./vcon.ts); an agent id that is not one is read as absent.
 */
export function idProblem(v: unknown): string | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) ? null : UNSAFE_NUMBER_ID;
  if (typeof v === 'string') return LONE_SURROGATE.test(v) ? LONE_SURROGATE_ID : null;
  return null;
}

const idText = z.union([z.string(), z.number()], { error: 'expected a string' }).transform((v, ctx) => {
  const problem = idProblem(v);
  if (problem) {
    ctx.addIssue({ code: 'custom', message: problem });
    return z.NEVER;
  }
  return String(v);
});

const EPOCH_MS_MIN = 1e11; // below this a number is taken as epoch seconds (1973 in ms)
const EPOCH_US_MIN = 1e14; // from this on a number is taken as epoch microseconds (5138 in ms, 1973 in µs)
const MAX_DATE_MS = 8.64e15;

/** Epoch milliseconds, seconds or microseconds, a numeric string or an ISO-8601 string -> epoch ms. */
const instant = z
  .union([z.number(), z.string()], { error: 'expected epoch milliseconds or an ISO-8601 time' })
  .transform((v, ctx) => {
    const ms = instantMs(v);
    if (ms === null) {
      ctx.addIssue({
        code: 'custom',
        message: `${quoted(String(v))} is not a time (expected epoch milliseconds or ISO-8601)`,
      });
      return z.NEVER;
    }
    return ms;
  });

/** `instant`'s reading: epoch ms (rounded), or null for what is not a time. */
function instantMs(v: number | string): number | null {
  let ms: number;
  if (typeof v === 'number' || /^\s*-?\d+(\.\d+)?\s*$/.test(v)) {
    const n = Number(v);
    ms = Math.abs(n) < EPOCH_MS_MIN ? n * 1000 : Math.abs(n) >= EPOCH_US_MIN ? n / 1000 : n;
  } else {
    ms = parseUtc(v);
  }
  // A JavaScript Date spans +-8.64e15 ms; beyond that no time can be written down (and toISOString throws).
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_DATE_MS) return null;
  return Math.round(ms);
}

const NUMERIC = /^\s*-?\d+(\.\d+)?\s*$/;

/** A duration: a number or numeric string, never negative (a call cannot last less than nothing). */
const duration = z
  .union([z.number(), z.string().regex(NUMERIC).transform(Number).pipe(z.number())], { error: 'expected a number' })
  .refine((n) => n >= 0, 'a duration cannot be negative');

/** A direction's text -> in/out, or null for what is not one. */
function directionOf(v: string): Direction | null {
  const s = v.trim().toLowerCase();
  if (['in', 'inbound', 'incoming', 'missed_incoming'].includes(s)) return 'in';
  if (['out', 'outbound', 'outgoing', 'missed_outgoing'].includes(s)) return 'out';
  return null;
}

const direction = text.transform((v, ctx): Direction => {
  const d = directionOf(v);
  if (d !== null) return d;
  ctx.addIssue({ code: 'custom', message: `${quoted(v)} is not a direction (expected in or out)` });
  return z.NEVER;
});

/** A version's text -> `v2`, `v1`, …; null when empty. */
function versionOf(v: string): string | null {
  const s = v.trim().toLowerCase();
  if (s === '') return null;
  return /^\d+$/.test(s) ? `v${s}` : s;
}

const version = text.transform((v, ctx) => {
  const s = versionOf(v);
  if (s === null) {
    ctx.addIssue({ code: 'custom', message: 'version is empty (expected v1 or v2)' });
    return z.NEVER;
  }
  return s;
});

/**
 * The fields that identify a call: README "Required fields", the only ones that can refuse a
 * webhook. Everything else is read by the readers below.
 */
/** @internal Exported for its tests only (test/webhook-fast-path.test.ts). */
export const webhookPayloadSchema = z.looseObject({
  version,
  call: z.looseObject(
    {
      id: idText.refine((v) => v.trim() !== '', 'call id is empty'),
      from: text,
      to: text,
      startTime: instant,
      endTime: instant.nullish(),
      duration: duration.nullish(),
      direction,
    },
    { error: (issue) => (issue.input === undefined ? 'required' : 'expected an object') },
  ),
});

type RequiredFields = z.infer<typeof webhookPayloadSchema>;

/** A text field as `text` reads it (a string, or a number's decimal text); null otherwise. */
const textOf = (v: unknown): string | null =>
  typeof v === 'string' ? v : typeof v === 'number' && Number.isFinite(v) ? String(v) : null;

/** An optional time as `instant.nullish()` reads it; `false` when it is not one. */
function optionalInstant(v: unknown): number | null | undefined | false {
  if (v === null || v === undefined) return v;
  if (typeof v === 'string' || (typeof v === 'number' && Number.isFinite(v))) return instantMs(v) ?? false;
  return false;
}

/** An optional duration as `duration.nullish()` reads it; `false` when it is not one. */
function optionalDuration(v: unknown): number | null | undefined | false {
  if (v === null || v === undefined) return v;
  const n = typeof v === 'number' ? v : typeof v === 'string' && NUMERIC.test(v) ? Number(v) : NaN;
  return Number.isFinite(n) && n >= 0 ? n : false;
}

/**
 * `webhookPayloadSchema`'s reading of a payload that passes it, by hand (a few µs less per webhook
 * than zod); null for anything it does not pass, which then goes through zod: zod alone builds the
 * refusal, so its problems and pointers are zod's. Each field is read by the same functions as the
 * schema's transforms.
 * @internal Exported for its tests only (test/webhook-fast-path.test.ts).
 */
export function requiredFieldsFast(fields: Record<string, unknown>): RequiredFields | null {
  const versionText = textOf(fields.version);
  const call = fields.call;
  if (versionText === null || !isObject(call)) return null;
  const v = versionOf(versionText);
  const id = call.id;
  const idOk = typeof id === 'string' ? !LONE_SURROGATE.test(id) : typeof id === 'number' && Number.isSafeInteger(id);
  const from = textOf(call.from);
  const to = textOf(call.to);
  const dirText = textOf(call.direction);
  const startTime = typeof call.startTime === 'number' || typeof call.startTime === 'string' ? call.startTime : null;
  if (v === null || !idOk || from === null || to === null || dirText === null || startTime === null) return null;
  const idString = String(id);
  const startMs = instantMs(startTime);
  const endTime = optionalInstant(call.endTime);
  const duration = optionalDuration(call.duration);
  const dir = directionOf(dirText);
  if (idString.trim() === '' || startMs === null || endTime === false || duration === false || dir === null)
    return null;
  const read: Record<string, unknown> = { ...call, id: idString, from, to, startTime: startMs, direction: dir };
  // As zod: a key the payload lacks stays absent.
  if (endTime !== undefined) read.endTime = endTime;
  if (duration !== undefined) read.duration = duration;
  return { ...fields, version: v, call: read as RequiredFields['call'] };
}

// ---- optional fields: read by hand, never refused -----------------------------------------------

/** An optional text: a string, or a number as its decimal text; null/absent -> null; other shapes unread. */
export function readText(v: unknown, path: Path, unread: Unread): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return String(v);
  unread.add(path, `expected text, got ${jsonType(v)}`);
  return null;
}

/**
 * An optional list of texts: each element read as `readText` reads a text field (an object, a list
 * or a boolean is left out and counted, never sent on as its JSON), nulls dropped; not a list ->
 * unread, empty.
 */
export function readStrings(v: unknown, path: Path, unread: Unread): string[] {
  // A string (nearly always) is taken as it is: no path is made for it.
  return readList(v, path, unread).flatMap((x, i) =>
    typeof x === 'string' ? x : (readText(x, [...path, i], unread) ?? []),
  );
}

/** An optional list: its elements, or (not a list) unread and empty. */
function readList(v: unknown, path: Path, unread: Unread): unknown[] {
  if (v === null || v === undefined) return [];
  if (!Array.isArray(v)) {
    unread.add(path, `expected a list, got ${jsonType(v)}`);
    return [];
  }
  return v;
}

/** An optional object: itself, or (another shape) unread and null. */
function readObject(v: unknown, path: Path, unread: Unread): Record<string, unknown> | null {
  if (v === null || v === undefined) return null;
  if (!isObject(v)) {
    unread.add(path, `expected an object, got ${jsonType(v)}`);
    return null;
  }
  return v;
}

/**
 * An agent id, when present, is part of the call's identity (its key): one that cannot be read as
 * an id is a refusal, never "absent" — read as absent, calls of two agents would share a key and
 * one be answered as the other's duplicate.
 */
function agentIdProblem(v: unknown, path: Path): PayloadProblem | null {
  if (v === null || v === undefined) return null;
  const problem = typeof v === 'string' || typeof v === 'number' ? idProblem(v) : `expected text, got ${jsonType(v)}`;
  return problem === null ? null : { pointer: jsonPointer(path), detail: problem };
}

/** A checked agent id's text (numbers as their decimal text), or null when absent. */
const textOrNull = (v: unknown): string | null =>
  typeof v === 'string' ? v : typeof v === 'number' ? String(v) : null;

/** `assist.callHeadline`: text, or `{content}` (the platform's current payload). */
function readHeadline(v: unknown, path: Path, unread: Unread): string | null {
  if (isObject(v) && 'content' in v) return readText(v.content, [...path, 'content'], unread);
  if (isObject(v)) {
    unread.add(path, 'expected text or an object with content, got an object without content');
    return null;
  }
  return readText(v, path, unread);
}

/**
 * `assist.provider`: text, or an object of texts (`{"llm": "AZURE"}`, the platform's current
 * payload). An object with one text value is that value (`AZURE`); with several, `key: value`
 * pairs in the sender's order, joined by `, ` (`llm: AZURE, stt: DEEPGRAM`); values that are not
 * text are left out; an object without any text value is unread.
 */
function readProvider(v: unknown, path: Path, unread: Unread): string | null {
  if (!isObject(v)) return readText(v, path, unread);
  const entries = Object.entries(v).filter(
    (e): e is [string, string | number] => typeof e[1] === 'string' || typeof e[1] === 'number',
  );
  if (entries.length === 0) {
    unread.add(path, 'expected text or an object of texts, got an object without text');
    return null;
  }
  if (entries.length === 1) return String(entries[0]![1]);
  return entries.map(([k, val]) => `${k}: ${String(val)}`).join(', ');
}

/** `assist.summary`: the spec's object, or plain text (its content). */
function readSummary(v: unknown, path: Path, unread: Unread): CallSummary | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string' || typeof v === 'number') return { content: String(v), keyPoints: [], topics: [] };
  if (!isObject(v)) {
    unread.add(path, `expected an object or text, got ${jsonType(v)}`);
    return null;
  }
  return {
    content: readText(v.content, [...path, 'content'], unread) ?? '',
    keyPoints: readStrings(v.keyPoints, [...path, 'keyPoints'], unread),
    topics: readStrings(v.topics, [...path, 'topics'], unread),
  };
}

function readScenarios(v: unknown, path: Path, unread: Unread): CallScenario[] {
  const scenarios: CallScenario[] = [];
  readList(v, path, unread).forEach((s, i) => {
    const scenario = readObject(s, [...path, i], unread);
    if (!scenario) return;
    const answersPath = [...path, i, 'smartAnswers'];
    const smartAnswers: CallScenario['smartAnswers'] = [];
    readList(scenario.smartAnswers, answersPath, unread).forEach((a, j) => {
      const set = readObject(a, [...answersPath, j], unread);
      if (!set) return;
      const itemsPath = [...answersPath, j, 'setItems'];
      const setItems = readList(set.setItems, itemsPath, unread).flatMap((it, k) => {
        const item = readObject(it, [...itemsPath, k], unread);
        if (!item) return [];
        return [
          {
            question: readText(item.question, [...itemsPath, k, 'question'], unread) ?? '',
            answer: readText(item.answer, [...itemsPath, k, 'answer'], unread) ?? '',
            title: readText(item.title, [...itemsPath, k, 'title'], unread),
          },
        ];
      });
      smartAnswers.push({ setName: readText(set.setName, [...answersPath, j, 'setName'], unread) ?? '', setItems });
    });
    scenarios.push({ name: readText(scenario.name, [...path, i, 'name'], unread) ?? '', smartAnswers });
  });
  return scenarios;
}

const USER_FIELDS = ['userId', 'accountId', 'fullUserId', 'firstName', 'lastName', 'fullName'] as const;

/** The readable users of the list: objects whose name and id fields are text (or absent); others are dropped (unread). */
function readUsers(v: unknown, path: Path, unread: Unread): CallUser[] {
  const users: CallUser[] = [];
  readList(v, path, unread).forEach((u, i) => {
    if (u === null || u === undefined) return;
    if (!isObject(u)) {
      unread.add([...path, i], `expected a user object, got ${jsonType(u)}`);
      return;
    }
    const bad = USER_FIELDS.find(
      (f) => u[f] !== null && u[f] !== undefined && typeof u[f] !== 'string' && typeof u[f] !== 'number',
    );
    if (bad) {
      unread.add([...path, i, bad], `expected text, got ${jsonType(u[bad])} (the user is left out)`);
      return;
    }
    const t = (f: (typeof USER_FIELDS)[number]) => (u[f] === null || u[f] === undefined ? null : String(u[f]));
    const firstName = t('firstName');
    const lastName = t('lastName');
    users.push({
      userId: t('userId'),
      accountId: t('accountId'),
      fullUserId: t('fullUserId'),
      firstName,
      lastName,
      fullName: t('fullName') ?? joinedName(firstName, lastName),
    });
  });
  return users;
}

/** The channel object or id as sent (`{id, name}` or a string id), and the channel id read from it. */
function readChannel(v: unknown, path: Path, unread: Unread): { channel: unknown; channelId: string | null } {
  if (v === null || v === undefined) return { channel: null, channelId: null };
  const idOf = (raw: unknown, at: Path): string | null => {
    if (typeof raw === 'string') return raw.trim() === '' ? null : raw.trim();
    if (typeof raw === 'number') return String(raw);
    if (raw !== null && raw !== undefined) unread.add(at, `expected text, got ${jsonType(raw)}`);
    return null;
  };
  if (isObject(v)) return { channel: v, channelId: idOf(v.id, [...path, 'id']) };
  if (typeof v === 'string' || typeof v === 'number') return { channel: v, channelId: idOf(v, path) };
  unread.add(path, `expected an object {id, name} or an id, got ${jsonType(v)}`);
  return { channel: null, channelId: null };
}

function speakerOf(raw: string, dir: Direction): Speaker {
  const s = raw.trim().toLowerCase();
  if (s === 'caller') return 'caller';
  if (s === 'callee') return 'callee';
  // The AI agent answers inbound calls (callee) and places outbound ones (caller).
  const agentSide: Speaker = dir === 'in' ? 'callee' : 'caller';
  const otherSide: Speaker = dir === 'in' ? 'caller' : 'callee';
  if (['agent', 'ai', 'assistant', 'bot', 'ai_agent', 'ai-agent'].includes(s)) return agentSide;
  if (['customer', 'user', 'human', 'client', 'contact'].includes(s)) return otherSide;
  return 'unknown';
}

/**
 * A chunk's speaker: the side `speakerOf` places it on. A label it cannot place (`Customer Service`,
 * `12345`, `""`) is read as `unknown` and counted unread; the record's speaker has room for the two
 * sides only, so the chunk keeps the label beside it (`speakerLabel`, for the sinks that show one).
 */
function readSpeaker(
  v: unknown,
  path: Path,
  unread: Unread,
  dir: Direction,
): { speaker: Speaker; speakerLabel?: string } {
  const raw = readText(v, path, unread);
  if (raw === null) return { speaker: 'unknown' };
  const speaker = speakerOf(raw, dir);
  if (speaker !== 'unknown') return { speaker };
  unread.add(path, 'expected caller or callee (or agent, customer, …), got other text');
  const speakerLabel = speakerLabelOf(raw);
  return speakerLabel === undefined ? { speaker } : { speaker, speakerLabel };
}

/**
 * Seconds, unless the value only makes sense as milliseconds: with start and end known, the unit
 * whose value is closer to the measured span wins; without them a value is taken as seconds (spec).
 * @internal Exported for its tests only (test/webhook-normalize.test.ts).
 */
export function durationSeconds(
  duration: number | null | undefined,
  startMs: number,
  endMs: number | null,
): number | null {
  const spanSec = endMs !== null && endMs >= startMs ? (endMs - startMs) / 1000 : null;
  if (duration === null || duration === undefined) return spanSec === null ? null : Math.round(spanSec);
  if (spanSec !== null) {
    const asSeconds = Math.abs(duration - spanSec);
    const asMillis = Math.abs(duration / 1000 - spanSec);
    if (asMillis < asSeconds) return Math.round(duration / 1000);
  }
  return Math.round(duration);
}

type ChunkTime = { kind: 'absolute' | 'offset'; ms: number };

/** A chunk time: epoch ms / ISO (absolute) or a plain small number (offset from the call's start); other shapes unread. */
function readChunkTime(v: unknown, path: Path, unread: Unread): ChunkTime | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number' || (typeof v === 'string' && NUMERIC.test(v))) {
    const n = Number(v);
    // Epoch microseconds as the call's start reads them (instantMs); a chunk's offset is never that large.
    if (n >= EPOCH_US_MIN) return { kind: 'absolute', ms: n / 1000 };
    return n >= EPOCH_MS_MIN ? { kind: 'absolute', ms: n } : { kind: 'offset', ms: n };
  }
  if (typeof v === 'string') {
    const ms = parseUtc(v);
    if (!Number.isNaN(ms)) return { kind: 'absolute', ms };
    unread.add(path, 'expected epoch milliseconds, an offset or an ISO-8601 time, got text that is none of them');
    return null;
  }
  unread.add(path, `expected a time, got ${jsonType(v)}`);
  return null;
}

/**
 * How far a chunk time may lie before the call's start or after its end: one minute (the two
 * clocks, the rounding of the duration). A time beyond that cannot be in the call: it is read as
 * absent (README "Bad times").
 * @internal Exported for its tests only (test/webhook-shapes.test.ts).
 */
export const CHUNK_TIME_SLACK_MS = 60_000;

interface RawChunk {
  speaker: { speaker: Speaker; speakerLabel?: string };
  content: string | null;
  start: ChunkTime | null;
  end: ChunkTime | null;
  index: number;
}

function chunkOffsets(
  chunks: RawChunk[],
  startMs: number,
  durationSec: number | null,
  path: Path,
  unread: Unread,
): { start: number; end: number }[] {
  const lengthMs = durationSec === null ? Infinity : durationSec * 1000;
  const latest = lengthMs + CHUNK_TIME_SLACK_MS;
  // Relative times are milliseconds, unless every one of them fits within the call's length in
  // seconds (then the sender used seconds). Times that fit in neither unit are left out of that
  // decision (and read as absent below).
  const relative = chunks
    .flatMap((c) => [c.start, c.end])
    .filter((t): t is ChunkTime => t !== null && t.kind === 'offset' && t.ms <= latest);
  const maxRelative = relative.reduce((m, t) => Math.max(m, t.ms), 0);
  const relativeInSeconds =
    relative.length > 0 && durationSec !== null && durationSec >= 1 && maxRelative <= durationSec + 1;
  const toOffset = (t: ChunkTime | null, at: Path): number | null => {
    if (!t) return null;
    const offset = t.kind === 'absolute' ? t.ms - startMs : relativeInSeconds ? t.ms * 1000 : t.ms;
    if (!Number.isFinite(offset) || offset < -CHUNK_TIME_SLACK_MS || offset > latest) {
      unread.add(
        at,
        `a time outside the call (more than ${CHUNK_TIME_SLACK_MS / 1000} s before its start or after its end)`,
      );
      return null;
    }
    return Math.max(0, Math.round(offset));
  };
  let previous = 0;
  return chunks.map((c) => {
    const start = toOffset(c.start, [...path, c.index, 'startTime']) ?? previous;
    const end = toOffset(c.end, [...path, c.index, 'endTime']) ?? start;
    previous = end;
    return { start, end: Math.max(start, end) };
  });
}

/** `assist.transcription`: the spec's object `{content, chunks}`, or plain text (its content). */
function readTranscript(
  v: unknown,
  path: Path,
  unread: Unread,
  dir: Direction,
  startMs: number,
  durationSec: number | null,
): CanonicalCall['transcript'] {
  if (v === null || v === undefined) return null;
  if (typeof v === 'string' || typeof v === 'number') return { content: String(v), chunks: [] };
  if (!isObject(v)) {
    unread.add(path, `expected an object or text, got ${jsonType(v)}`);
    return null;
  }
  const chunksPath = [...path, 'chunks'];
  const raw: RawChunk[] = [];
  readList(v.chunks, chunksPath, unread).forEach((ch, i) => {
    const c = readObject(ch, [...chunksPath, i], unread);
    if (!c) return;
    raw.push({
      index: i,
      speaker: readSpeaker(c.speaker, [...chunksPath, i, 'speaker'], unread, dir),
      content: readText(c.content, [...chunksPath, i, 'content'], unread),
      start: readChunkTime(c.startTime, [...chunksPath, i, 'startTime'], unread),
      end: readChunkTime(c.endTime, [...chunksPath, i, 'endTime'], unread),
    });
  });
  const offsets = chunkOffsets(raw, startMs, durationSec, chunksPath, unread);
  const chunks: TranscriptChunk[] = raw.map((ch, i) => ({
    ...ch.speaker,
    startOffsetMs: offsets[i]!.start,
    endOffsetMs: offsets[i]!.end,
    content: ch.content ?? '',
  }));
  const content = readText(v.content, [...path, 'content'], unread) ?? chunks.map((ch) => ch.content).join('\n');
  return { content, chunks };
}

// ---- normalization --------------------------------------------------------------------------

export interface NormalizeContext {
  /** Agent id from the URL path (`/webhooks/ai-agent/:agentId`), which wins over the payload's. */
  agentId?: string | null;
  receivedAt: Date;
}

/** A webhook read: the canonical call, and the optional fields whose values could not be read. */
export interface ReadWebhook {
  call: CanonicalCall;
  unread: UnreadField[];
  /** `current` (spec v1/v2, the platform's AI-agent / CI webhook) or `legacy` (the AI Assistant Webhook). */
  dialect: 'current' | 'legacy';
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

/** The earliest start of a call: before it, a time is a unit or a clock gone wrong (12345 is 1970). */
const EARLIEST_START_MS = Date.UTC(2000, 0, 1);
/** How far after its arrival a call may start: a sender's clock a day off, not more. */
const START_AFTER_ARRIVAL_MS = 24 * 3600_000;

/** Why `startMs` cannot be the start of a call that arrived at `receivedAt`, or null when it can. */
function startProblem(startMs: number, receivedAt: Date): PayloadProblem | null {
  const at = new Date(startMs).toISOString();
  if (startMs < EARLIEST_START_MS)
    return { pointer: '/call/startTime', detail: `${at} is before 2000-01-01: not a call's start` };
  if (startMs > receivedAt.getTime() + START_AFTER_ARRIVAL_MS)
    return { pointer: '/call/startTime', detail: `${at} is more than a day after the call arrived: not its start` };
  return null;
}

const NO_END_TIME: PayloadProblem = {
  pointer: '/call/endTime',
  detail: 'required field is missing (and no duration to derive it from)',
};
const endTimeUnknown = (endTime: unknown, duration: unknown) =>
  (endTime === null || endTime === undefined) && (duration === null || duration === undefined);

/** Parses and normalizes a webhook body; throws InvalidPayloadError for what cannot be understood. */
export function normalizeWebhook(body: unknown, ctx: NormalizeContext): CanonicalCall {
  return readWebhook(body, ctx).call;
}

/**
 * The call's end is `endTime`, or `startTime` + `duration`: one of the two is needed, not both. When
 * one reads and the other does not (a negative or non-numeric duration, an endTime that is no time),
 * the other is read as absent and counted unread, instead of refusing the call for a field it does
 * not need. A shallow copy; `fields` itself is unchanged (the original is kept as sent).
 */
function unneededEndLeftOut(fields: Record<string, unknown>, unread: Unread): Record<string, unknown> {
  const call = fields.call;
  if (!isObject(call)) return fields;
  const end = optionalInstant(call.endTime);
  const duration = optionalDuration(call.duration);
  if (duration === false && typeof end === 'number') {
    unread.add(['call', 'duration'], "expected a non-negative number: the call's end is read from endTime");
    return { ...fields, call: { ...call, duration: undefined } };
  }
  if (end === false && typeof duration === 'number') {
    unread.add(['call', 'endTime'], "expected a time: the call's end is read from startTime and duration");
    return { ...fields, call: { ...call, endTime: undefined } };
  }
  return fields;
}

/** The call id a webhook body was sent with (current or legacy shape), trimmed, or null: what a refusal names. */
export function sentCallId(body: unknown): string | null {
  if (!isObject(body)) return null;
  let call: unknown;
  try {
    call = (isLegacyWebhook(body) ? legacyAsCurrent(body) : body).call;
  } catch {
    return null;
  }
  const id = isObject(call) ? call.id : undefined;
  if (typeof id === 'number' && Number.isFinite(id)) return String(id);
  return typeof id === 'string' && id.trim() !== '' ? id.trim().slice(0, 200) : null;
}

/**
 * Parses and normalizes a webhook body (the current payload, or the legacy one by its shape);
 * throws InvalidPayloadError when a required field cannot be understood, and reports the optional
 * fields it could not read.
 */
export function readWebhook(body: unknown, ctx: NormalizeContext): ReadWebhook {
  if (!isObject(body)) throw new InvalidPayloadError('', 'the body must be a JSON object');
  const legacy = isLegacyWebhook(body);
  const remap = legacy ? legacyPointer : (p: string) => p;
  const given = legacy ? legacyAsCurrent(body) : body;
  const unread = new Unread(remap);
  const fields = unneededEndLeftOut(given, unread);
  const refuse = (problems: PayloadProblem[]): never => {
    throw InvalidPayloadError.of(problems.map((p) => ({ ...p, pointer: remap(p.pointer) })));
  };

  // The common valid payload without zod; anything else (and every refusal) through it.
  const fast = requiredFieldsFast(fields);
  const parsed = fast ? { success: true as const, data: fast } : webhookPayloadSchema.safeParse(fields);
  if (!parsed.success) {
    // Every problem at once, not one per round trip.
    const problems: PayloadProblem[] = [];
    const seen = new Set<string>();
    for (const issue of parsed.error.issues) {
      const problem = {
        pointer: jsonPointer(issue.path),
        detail: valueAt(fields, issue.path) === undefined ? 'required field is missing' : issue.message,
      };
      const key = `${problem.pointer}\n${problem.detail}`;
      if (!seen.has(key)) problems.push(problem);
      seen.add(key);
    }
    const call = fields.call;
    if (isObject(call) && endTimeUnknown(call.endTime, call.duration)) problems.push(NO_END_TIME);
    return refuse(problems);
  }
  const p = parsed.data;
  const c = p.call;
  const rawCall = fields.call as Record<string, unknown>;
  const startMs = c.startTime;
  const badStart = startProblem(startMs, ctx.receivedAt);
  if (badStart) refuse([badStart]);
  let endMs = c.endTime ?? null;
  if (endTimeUnknown(endMs, c.duration)) refuse([NO_END_TIME]);
  // Bad times (README): a call cannot end before it starts. With a duration the end is known
  // without endTime, which is then read as absent; without one, nothing says when the call ended.
  if (endMs !== null && endMs < startMs) {
    if (c.duration === null || c.duration === undefined)
      refuse([
        { pointer: '/call/endTime', detail: 'the call ends before it starts (endTime is earlier than startTime)' },
      ]);
    unread.add(['call', 'endTime'], "earlier than startTime: the call's end is read from startTime and duration");
    endMs = null;
  }
  let durationSec = durationSeconds(c.duration, startMs, endMs);
  // Longer than from its start to its end, it cannot be the call's (a shorter one may be its talk
  // time): with both times known the duration is not needed, so it is read from them instead of
  // refusing the call — before, `1e300` went to the CRMs as the duration, and each refused the call.
  if (durationSec !== null && endMs !== null && durationSec * 1000 > endMs - startMs + CHUNK_TIME_SLACK_MS) {
    durationSec = Math.round((endMs - startMs) / 1000);
    unread.add(['call', 'duration'], 'longer than the call from its start to its end: read from those times');
  }
  const endedMs = endMs ?? (durationSec !== null ? startMs + durationSec * 1000 : null);
  if (endedMs !== null && Math.abs(endedMs) > MAX_DATE_MS)
    refuse([{ pointer: '/call/duration', detail: 'the call would end past the last representable time' }]);

  // The agent id that names the call: the URL path's, else the payload's first present one; only
  // that one is checked (one the path overrides identifies nothing).
  const agentPath: Path | null =
    ctx.agentId != null
      ? null
      : rawCall.agentId != null
        ? ['call', 'agentId']
        : fields.agentId != null
          ? ['agentId']
          : null;
  const agentValue = agentPath === null ? undefined : agentPath.length === 2 ? rawCall.agentId : fields.agentId;
  const agentProblem = agentPath === null ? null : agentIdProblem(agentValue, agentPath);
  if (agentProblem) refuse([agentProblem]);
  const agentId = ctx.agentId ?? textOrNull(agentValue);
  const callId = c.id.trim();
  const users = readUsers(rawCall.users, ['call', 'users'], unread);

  const assist = readObject(fields.assist, ['assist'], unread);
  const scenarios = assist ? readScenarios(assist.callScenarios, ['assist', 'callScenarios'], unread) : [];
  const transcript = assist
    ? readTranscript(assist.transcription, ['assist', 'transcription'], unread, c.direction, startMs, durationSec)
    : null;
  const summary = assist ? readSummary(assist.summary, ['assist', 'summary'], unread) : null;
  const title = (assist ? readHeadline(assist.callHeadline, ['assist', 'callHeadline'], unread) : null)?.trim() || null;
  const provider = assist ? readProvider(assist.provider, ['assist', 'provider'], unread) : null;

  // `channel` at the top or `call.channel` (the platform's current payload): the call's channel,
  // so routes `when: { channel: … }` match webhook calls too.
  const { channel, channelId } =
    fields.channel !== null && fields.channel !== undefined
      ? readChannel(fields.channel, ['channel'], unread)
      : readChannel(rawCall.channel, ['call', 'channel'], unread);

  const call: CanonicalCall = {
    key: callKey('ai-agent', agentId, callId),
    source: 'ai-agent',
    callId,
    agentId,
    channelId,
    eventId: null,
    direction: c.direction,
    from: toE164(c.from),
    to: toE164(c.to),
    fromRaw: c.from,
    toRaw: c.to,
    startedAt: new Date(startMs).toISOString(),
    endedAt: endedMs === null ? null : new Date(endedMs).toISOString(),
    durationSec,
    outcome: 'answered',
    users,
    owner: null,
    forwarding: null,
    channel,
    summary,
    scenarios,
    transcript,
    recordings: [],
    payloadVersion: legacy ? 'legacy' : p.version,
    receivedAt: ctx.receivedAt.toISOString(),
    raw: body,
    ...(title !== null ? { title } : {}),
    ...(provider !== null ? { provider } : {}),
  };
  if (transcript !== null) fromPayload.add(transcript);
  return { call, unread: unread.fields, dialect: legacy ? 'legacy' : 'current' };
}

/** Transcripts `readWebhook` read from a payload, untouched since (by identity). */
const fromPayload = new WeakSet<object>();

/**
 * True when `call.transcript` is the one `readWebhook` read from `call.raw`: `transcriptOfPayload`
 * gives it back from the payload and the call's fields, so the inbound log may store it once, in
 * the payload (src/model/call.ts, `encodeCall`).
 */
export function transcriptFromPayload(call: Pick<CanonicalCall, 'transcript'>): boolean {
  return call.transcript !== null && fromPayload.has(call.transcript);
}

/**
 * The transcript `readWebhook` read from `raw`, read again: the same function on the same payload
 * and the call fields it used (the dialect, the direction, the start and the duration).
 */
export function transcriptOfPayload(
  raw: unknown,
  call: Pick<CanonicalCall, 'payloadVersion' | 'direction' | 'startedAt' | 'durationSec'>,
): CanonicalCall['transcript'] {
  if (!isObject(raw)) return null;
  const fields = call.payloadVersion === 'legacy' ? legacyAsCurrent(raw) : raw;
  const unread = new Unread();
  const assist = readObject(fields.assist, ['assist'], unread);
  if (!assist) return null;
  const path = ['assist', 'transcription'];
  return readTranscript(
    assist.transcription,
    path,
    unread,
    call.direction,
    Date.parse(call.startedAt),
    call.durationSec,
  );
}
