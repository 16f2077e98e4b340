// The AI-agent call-data webhook (spec 6.1), parsed liberally with zod and normalized into the
// canonical call record. Senders in production deviate from the spec (numbers without `+`, ISO
// strings for epoch ms, durations in ms, upper-case enums, offsets for chunk times, nulls for
// absent parts, extra objects); all of that is normalized. Only what cannot be understood is rejected.
import { z } from 'zod';
import { callKey, joinedName, type CallScenario, type CallUser, type CanonicalCall, type Direction, type Speaker, type TranscriptChunk } from './call.js';
import { toE164 } from './phone.js';

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

// ---- liberal scalars -------------------------------------------------------------------------

/** A string; numbers are taken as their decimal text. */
const text = z.union([z.string(), z.number().transform(String)], { error: 'expected a string' });

// The many optional text fields are only *checked* by zod (string, number, null or absent) and
// converted by the normalizer below: a zod transform per field allocates its own result and
// context objects, which made zod ~5x slower and the payload's parse allocate ~27 KB
// (docs/performance.md).
type TextLike = string | number | null | undefined;
const optionalText = z
  .custom<TextLike>((v) => v === null || v === undefined || typeof v === 'string' || typeof v === 'number', { error: 'expected a string' })
  .optional();
/** An optional text field's value: numbers as their decimal text, absent as null. */
const textOf = (v: TextLike): string | null => (v === null || v === undefined ? null : typeof v === 'number' ? String(v) : v);

/** A value quoted for an error detail: at most 60 characters of it (a detail never echoes a whole transcript). */
const quoted = (v: string): string => `"${v.length > 60 ? `${v.slice(0, 60)}…` : v}"`;

/** A lone surrogate (a surrogate pair is one code point under `u`, so only unpaired halves match). */
const LONE_SURROGATE = /\p{Cs}/u;
const UNSAFE_NUMBER_ID = 'a numeric id must be a whole number of at most 2^53-1 (a larger one has lost digits in JSON); send it as a string';
const LONE_SURROGATE_ID = 'the id is not valid Unicode text (it holds a lone surrogate, e.g. "\\ud800")';

/**
 * An identifier that becomes part of the call key (call id, agent id): a string, or a whole number
 * its decimal text spells exactly. Refused: numbers beyond 2^53 (12345678901234567890 arrives as
 * 12345678901234567000, so two calls would share a key and one be answered as the other's duplicate)
 * and lone surrogates (they hash as U+FFFD in UTF-8, with the same effect).
 */
function idProblem(v: unknown): string | null {
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

const optionalIdText = z
  .custom<TextLike>((v) => (v === null || v === undefined || typeof v === 'string' || typeof v === 'number') && idProblem(v) === null, {
    error: (issue) => idProblem(issue.input) ?? 'expected a string',
  })
  .optional();

const EPOCH_MS_MIN = 1e11; // below this a number is taken as epoch seconds (1973 in ms)
const MAX_DATE_MS = 8.64e15;

/** Epoch milliseconds, epoch seconds, a numeric string or an ISO-8601 string -> epoch ms. */
const instant = z.union([z.number(), z.string()], { error: 'expected epoch milliseconds or an ISO-8601 time' }).transform((v, ctx) => {
  let ms: number;
  if (typeof v === 'number' || /^\s*-?\d+(\.\d+)?\s*$/.test(v)) {
    const n = Number(v);
    ms = Math.abs(n) < EPOCH_MS_MIN ? n * 1000 : n;
  } else {
    ms = Date.parse(v);
  }
  // A JavaScript Date spans +-8.64e15 ms; beyond that no time can be written down (and toISOString throws).
  if (!Number.isFinite(ms) || Math.abs(ms) > MAX_DATE_MS) {
    ctx.addIssue({ code: 'custom', message: `${quoted(String(v))} is not a time (expected epoch milliseconds or ISO-8601)` });
    return z.NEVER;
  }
  return Math.round(ms);
});

const NUMERIC = /^\s*-?\d+(\.\d+)?\s*$/;

type ChunkTime = { kind: 'absolute' | 'offset'; ms: number };
/** A chunk time: epoch ms / ISO (absolute) or a plain small number (offset from the call's start). */
function chunkTimeOf(v: string | number | null | undefined): ChunkTime | null {
  if (v === null || v === undefined) return null;
  if (typeof v === 'number' || NUMERIC.test(v)) {
    const n = Number(v);
    return n >= EPOCH_MS_MIN ? { kind: 'absolute', ms: n } : { kind: 'offset', ms: n };
  }
  return { kind: 'absolute', ms: Date.parse(v) };
}
// Checked here, converted by chunkTimeOf (no zod transform: see optionalText).
const chunkTime = z
  .custom<string | number | null | undefined>(
    (v) =>
      v === null ||
      v === undefined ||
      (typeof v === 'number' && Number.isFinite(v)) ||
      (typeof v === 'string' && (NUMERIC.test(v) ? Number.isFinite(Number(v)) : !Number.isNaN(Date.parse(v)))),
    { error: (issue) => (typeof issue.input === 'string' ? `${quoted(issue.input)} is not a time` : 'expected a time') },
  )
  .optional();

const number = z.union([z.number(), z.string().regex(/^\s*\d+(\.\d+)?\s*$/).transform(Number).pipe(z.number())], {
  error: 'expected a number',
});

const direction = text.transform((v, ctx): Direction => {
  const s = v.trim().toLowerCase();
  if (['in', 'inbound', 'incoming', 'missed_incoming'].includes(s)) return 'in';
  if (['out', 'outbound', 'outgoing', 'missed_outgoing'].includes(s)) return 'out';
  ctx.addIssue({ code: 'custom', message: `${quoted(v)} is not a direction (expected in or out)` });
  return z.NEVER;
});

const version = text.transform((v, ctx) => {
  const s = v.trim().toLowerCase();
  if (s === '') {
    ctx.addIssue({ code: 'custom', message: 'version is empty (expected v1 or v2)' });
    return z.NEVER;
  }
  return /^\d+$/.test(s) ? `v${s}` : s;
});

const stringList = z.array(z.unknown()).nullish();
/** A list of strings: nulls dropped, other values as their JSON. */
const stringsOf = (v: unknown[] | null | undefined): string[] =>
  (v ?? []).filter((x) => x !== null && x !== undefined).map((x) => (typeof x === 'string' ? x : JSON.stringify(x)));

// ---- structure ------------------------------------------------------------------------------

const USER_FIELDS = ['userId', 'accountId', 'fullUserId', 'firstName', 'lastName', 'fullName'] as const;
const isTextLike = (v: unknown): v is TextLike => v === null || v === undefined || typeof v === 'string' || typeof v === 'number';

/** The readable users of the list: objects whose name and id fields are text (or absent); others are dropped. */
function usersOf(list: unknown[] | null | undefined): CallUser[] {
  const users: CallUser[] = [];
  for (const u of list ?? []) {
    if (u === null || typeof u !== 'object' || Array.isArray(u)) continue;
    const r = u as Record<string, unknown>;
    if (!USER_FIELDS.every((f) => isTextLike(r[f]))) continue;
    const firstName = textOf(r.firstName as TextLike);
    const lastName = textOf(r.lastName as TextLike);
    users.push({
      userId: textOf(r.userId as TextLike),
      accountId: textOf(r.accountId as TextLike),
      fullUserId: textOf(r.fullUserId as TextLike),
      firstName,
      lastName,
      fullName: textOf(r.fullName as TextLike) ?? joinedName(firstName, lastName),
    });
  }
  return users;
}

const summary = z.looseObject({
  content: optionalText,
  keyPoints: stringList,
  topics: stringList,
});

const smartAnswerItem = z.looseObject({
  question: optionalText,
  answer: optionalText,
  title: optionalText,
});

const scenario = z.looseObject({
  name: optionalText,
  smartAnswers: z
    .array(
      z.looseObject({
        setName: optionalText,
        setItems: z.array(smartAnswerItem).nullish(),
      }),
    )
    .nullish(),
});

const chunk = z.looseObject({
  speaker: optionalText,
  startTime: chunkTime,
  endTime: chunkTime,
  content: optionalText,
});

const transcription = z.looseObject({
  content: optionalText,
  chunks: z.array(chunk).nullish(),
});

const objectOrNull = <T extends z.ZodType>(schema: T) => schema.nullish();

export const webhookPayloadSchema = z.looseObject({
  version,
  call: z.looseObject(
    {
      id: idText.refine((v) => v.trim() !== '', 'call id is empty'),
      from: text,
      to: text,
      startTime: instant,
      endTime: instant.nullish(),
      duration: number.nullish(),
      direction,
      // Entries that are not readable users are dropped, not rejected (usersOf).
      users: z.array(z.unknown()).nullish(),
      agentId: optionalIdText,
    },
    { error: (issue) => (issue.input === undefined ? 'required' : 'expected an object') },
  ),
  agentId: optionalIdText,
  assist: objectOrNull(
    z.looseObject({
      summary: objectOrNull(summary),
      callScenarios: z.array(scenario).nullish(),
      transcription: objectOrNull(transcription),
      callHeadline: optionalText,
      provider: optionalText,
    }),
  ),
  channel: z.unknown().optional(),
});

export type WebhookPayload = z.infer<typeof webhookPayloadSchema>;

// ---- normalization --------------------------------------------------------------------------

function speakerOf(raw: string | null, dir: Direction): Speaker {
  const s = (raw ?? '').trim().toLowerCase();
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
 * Seconds, unless the value only makes sense as milliseconds: with start and end known, the unit
 * whose value is closer to the measured span wins; without them a value is taken as seconds (spec).
 */
export function durationSeconds(duration: number | null | undefined, startMs: number, endMs: number | null): number | null {
  const spanSec = endMs !== null && endMs >= startMs ? (endMs - startMs) / 1000 : null;
  if (duration === null || duration === undefined) return spanSec === null ? null : Math.round(spanSec);
  if (spanSec !== null) {
    const asSeconds = Math.abs(duration - spanSec);
    const asMillis = Math.abs(duration / 1000 - spanSec);
    if (asMillis < asSeconds) return Math.round(duration / 1000);
  }
  return Math.round(duration);
}

function chunkOffsets(
  chunks: z.infer<typeof chunk>[],
  startMs: number,
  durationSec: number | null,
): { start: number; end: number }[] {
  // Relative times are milliseconds, unless every one of them fits within the call's length in
  // seconds (then the sender used seconds).
  const times = chunks.map((c) => [chunkTimeOf(c.startTime), chunkTimeOf(c.endTime)] as const);
  const relative = times.flat().filter((t): t is ChunkTime => t !== null && t.kind === 'offset');
  const maxRelative = relative.reduce((m, t) => Math.max(m, t.ms), 0);
  const relativeInSeconds = relative.length > 0 && durationSec !== null && durationSec >= 1 && maxRelative <= durationSec + 1;
  const toOffset = (t: ChunkTime | null): number | null => {
    if (!t) return null;
    if (t.kind === 'absolute') return Math.max(0, Math.round(t.ms - startMs));
    return Math.max(0, Math.round(relativeInSeconds ? t.ms * 1000 : t.ms));
  };
  let previous = 0;
  return times.map(([startTime, endTime]) => {
    const start = toOffset(startTime) ?? previous;
    const end = toOffset(endTime) ?? start;
    previous = end;
    return { start, end: Math.max(start, end) };
  });
}

export interface NormalizeContext {
  /** Agent id from the URL path (`/webhooks/ai-agent/:agentId`), which wins over the payload's. */
  agentId?: string | null;
  receivedAt: Date;
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v: unknown = root;
  for (const key of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[key];
  }
  return v;
}

const NO_END_TIME: PayloadProblem = { pointer: '/call/endTime', detail: 'required field is missing (and no duration to derive it from)' };
const endTimeUnknown = (endTime: unknown, duration: unknown) => (endTime === null || endTime === undefined) && (duration === null || duration === undefined);

/** Parses and normalizes a webhook body; throws InvalidPayloadError for what cannot be understood. */
export function normalizeWebhook(body: unknown, ctx: NormalizeContext): CanonicalCall {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new InvalidPayloadError('', 'the body must be a JSON object');
  }
  const parsed = webhookPayloadSchema.safeParse(body);
  if (!parsed.success) {
    // Every problem at once, not one per round trip.
    const problems: PayloadProblem[] = [];
    const seen = new Set<string>();
    for (const issue of parsed.error.issues) {
      const problem = { pointer: jsonPointer(issue.path), detail: valueAt(body, issue.path) === undefined ? 'required field is missing' : issue.message };
      const key = `${problem.pointer}\n${problem.detail}`;
      if (!seen.has(key)) problems.push(problem);
      seen.add(key);
    }
    const call = valueAt(body, ['call']);
    if (call !== null && typeof call === 'object' && !Array.isArray(call) && endTimeUnknown(valueAt(call, ['endTime']), valueAt(call, ['duration']))) {
      problems.push(NO_END_TIME);
    }
    throw InvalidPayloadError.of(problems);
  }
  const p = parsed.data;
  const c = p.call;
  const startMs = c.startTime;
  const endMs = c.endTime ?? null;
  if (endTimeUnknown(endMs, c.duration)) throw InvalidPayloadError.of([NO_END_TIME]);
  const durationSec = durationSeconds(c.duration, startMs, endMs);
  const endedMs = endMs ?? (durationSec !== null ? startMs + durationSec * 1000 : null);
  if (endedMs !== null && Math.abs(endedMs) > MAX_DATE_MS) throw new InvalidPayloadError('/call/duration', 'the call would end past the last representable time');

  const agentId = ctx.agentId ?? textOf(c.agentId) ?? textOf(p.agentId);
  const callId = c.id.trim();
  const users = usersOf(c.users);

  const assist = p.assist;
  const scenarios: CallScenario[] = (assist?.callScenarios ?? []).map((s) => ({
    name: textOf(s.name) ?? '',
    smartAnswers: (s.smartAnswers ?? []).map((set) => ({
      setName: textOf(set.setName) ?? '',
      setItems: (set.setItems ?? []).map((i) => ({ question: textOf(i.question) ?? '', answer: textOf(i.answer) ?? '', title: textOf(i.title) })),
    })),
  }));

  let transcript: CanonicalCall['transcript'] = null;
  if (assist?.transcription) {
    const t = assist.transcription;
    const rawChunks = t.chunks ?? [];
    const offsets = chunkOffsets(rawChunks, startMs, durationSec);
    const chunks: TranscriptChunk[] = rawChunks.map((ch, i) => ({
      speaker: speakerOf(textOf(ch.speaker), c.direction),
      startOffsetMs: offsets[i]!.start,
      endOffsetMs: offsets[i]!.end,
      content: textOf(ch.content) ?? '',
    }));
    const content = textOf(t.content) ?? chunks.map((ch) => ch.content).join('\n');
    transcript = { content, chunks };
  }

  const channel = (p.channel ?? (c as Record<string, unknown>).channel ?? null) as unknown;
  // `call.channel.id` is the call's channel: routes `when: { channel: … }` match webhook calls too.
  const channelIdRaw = channel !== null && typeof channel === 'object' ? (channel as Record<string, unknown>).id : undefined;
  const channelId = typeof channelIdRaw === 'string' && channelIdRaw.trim() !== '' ? channelIdRaw.trim() : typeof channelIdRaw === 'number' && Number.isFinite(channelIdRaw) ? String(channelIdRaw) : null;
  const title = textOf(assist?.callHeadline)?.trim() || null;
  const provider = textOf(assist?.provider) ?? null;

  return {
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
    summary: assist?.summary
      ? { content: textOf(assist.summary.content) ?? '', keyPoints: stringsOf(assist.summary.keyPoints), topics: stringsOf(assist.summary.topics) }
      : null,
    scenarios,
    transcript,
    recordings: [],
    payloadVersion: p.version,
    receivedAt: ctx.receivedAt.toISOString(),
    raw: body,
    ...(title !== null ? { title } : {}),
    ...(provider !== null ? { provider } : {}),
  };
}
