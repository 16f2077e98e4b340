// The AI-agent call-data webhook (spec 6.1), parsed liberally with zod and normalized into the
// canonical call record. Senders in production deviate from the spec (numbers without `+`, ISO
// strings for epoch ms, durations in ms, upper-case enums, offsets for chunk times, nulls for
// absent parts, extra objects); all of that is normalized. Only what cannot be understood is rejected.
import { z } from 'zod';
import type { CallScenario, CallUser, CanonicalCall, Direction, Speaker, TranscriptChunk } from './call.js';
import { toE164 } from './phone.js';

/** A field that cannot be understood: becomes a 400 with a JSON pointer to it. */
export class InvalidPayloadError extends Error {
  constructor(
    readonly pointer: string,
    readonly detail: string,
  ) {
    super(`${pointer || '/'}: ${detail}`);
    this.name = 'InvalidPayloadError';
  }
}

/** `['call', 'users', 0]` -> `/call/users/0` (RFC 6901). */
export function jsonPointer(path: readonly PropertyKey[]): string {
  return path.map((p) => `/${String(p).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

// ---- liberal scalars -------------------------------------------------------------------------

/** A string; numbers are taken as their decimal text. */
const text = z.union([z.string(), z.number().transform(String)], { error: 'expected a string' });
const optionalText = text.nullish().transform((v) => v ?? null);

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
    ctx.addIssue({ code: 'custom', message: `"${String(v)}" is not a time (expected epoch milliseconds or ISO-8601)` });
    return z.NEVER;
  }
  return Math.round(ms);
});

/** A chunk time: epoch ms / ISO (absolute) or a plain small number (offset from the call's start). */
const chunkTime = z.union([z.number(), z.string()], { error: 'expected a time' }).transform((v, ctx) => {
  if (typeof v === 'number' || /^\s*-?\d+(\.\d+)?\s*$/.test(v)) {
    const n = Number(v);
    return n >= EPOCH_MS_MIN ? { kind: 'absolute' as const, ms: n } : { kind: 'offset' as const, ms: n };
  }
  const ms = Date.parse(v);
  if (Number.isNaN(ms)) {
    ctx.addIssue({ code: 'custom', message: `"${v}" is not a time` });
    return z.NEVER;
  }
  return { kind: 'absolute' as const, ms };
});

const number = z.union([z.number(), z.string().regex(/^\s*\d+(\.\d+)?\s*$/).transform(Number)], {
  error: 'expected a number',
});

const direction = text.transform((v, ctx): Direction => {
  const s = v.trim().toLowerCase();
  if (['in', 'inbound', 'incoming', 'missed_incoming'].includes(s)) return 'in';
  if (['out', 'outbound', 'outgoing', 'missed_outgoing'].includes(s)) return 'out';
  ctx.addIssue({ code: 'custom', message: `"${v}" is not a direction (expected in or out)` });
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

const stringList = z
  .array(z.unknown())
  .nullish()
  .transform((v) => (v ?? []).filter((x) => x !== null && x !== undefined).map((x) => (typeof x === 'string' ? x : JSON.stringify(x))));

// ---- structure ------------------------------------------------------------------------------

const user = z.looseObject({
  userId: optionalText,
  accountId: optionalText,
  fullUserId: optionalText,
  firstName: optionalText,
  lastName: optionalText,
  fullName: optionalText,
});

const summary = z.looseObject({
  content: optionalText.transform((v) => v ?? ''),
  keyPoints: stringList,
  topics: stringList,
});

const smartAnswerItem = z.looseObject({
  question: optionalText.transform((v) => v ?? ''),
  answer: optionalText.transform((v) => v ?? ''),
  title: optionalText,
});

const scenario = z.looseObject({
  name: optionalText.transform((v) => v ?? ''),
  smartAnswers: z
    .array(
      z.looseObject({
        setName: optionalText.transform((v) => v ?? ''),
        setItems: z.array(smartAnswerItem).nullish().transform((v) => v ?? []),
      }),
    )
    .nullish()
    .transform((v) => v ?? []),
});

const chunk = z.looseObject({
  speaker: optionalText,
  startTime: chunkTime.nullish(),
  endTime: chunkTime.nullish(),
  content: optionalText.transform((v) => v ?? ''),
});

const transcription = z.looseObject({
  content: optionalText,
  chunks: z.array(chunk).nullish().transform((v) => v ?? []),
});

const objectOrNull = <T extends z.ZodType>(schema: T) => schema.nullish().transform((v) => v ?? null);

export const webhookPayloadSchema = z.looseObject({
  version,
  call: z.looseObject(
    {
      id: text.refine((v) => v.trim() !== '', 'call id is empty'),
      from: text,
      to: text,
      startTime: instant,
      endTime: instant.nullish(),
      duration: number.nullish(),
      direction,
      users: z
        .array(z.union([user, z.unknown().transform(() => null)]))
        .nullish()
        .transform((v) => (v ?? []).filter((u): u is z.infer<typeof user> => u !== null)),
      agentId: optionalText.optional(),
    },
    { error: (issue) => (issue.input === undefined ? 'required' : 'expected an object') },
  ),
  agentId: optionalText.optional(),
  assist: objectOrNull(
    z.looseObject({
      summary: objectOrNull(summary),
      callScenarios: z.array(scenario).nullish().transform((v) => v ?? []),
      transcription: objectOrNull(transcription),
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
  const relative = chunks.flatMap((c) => [c.startTime, c.endTime]).filter((t) => !!t && t.kind === 'offset');
  const maxRelative = relative.reduce((m, t) => Math.max(m, t!.ms), 0);
  const relativeInSeconds = relative.length > 0 && durationSec !== null && durationSec >= 1 && maxRelative <= durationSec + 1;
  const toOffset = (t: z.infer<typeof chunkTime> | null | undefined): number | null => {
    if (!t) return null;
    if (t.kind === 'absolute') return Math.max(0, Math.round(t.ms - startMs));
    return Math.max(0, Math.round(relativeInSeconds ? t.ms * 1000 : t.ms));
  };
  let previous = 0;
  return chunks.map((c) => {
    const start = toOffset(c.startTime) ?? previous;
    const end = toOffset(c.endTime) ?? start;
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

/** Parses and normalizes a webhook body; throws InvalidPayloadError for what cannot be understood. */
export function normalizeWebhook(body: unknown, ctx: NormalizeContext): CanonicalCall {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new InvalidPayloadError('', 'the body must be a JSON object');
  }
  const parsed = webhookPayloadSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const missing = valueAt(body, issue.path) === undefined;
    throw new InvalidPayloadError(jsonPointer(issue.path), missing ? 'required field is missing' : issue.message);
  }
  const p = parsed.data;
  const c = p.call;
  const startMs = c.startTime;
  const endMs = c.endTime ?? null;
  if (endMs === null && (c.duration === null || c.duration === undefined)) {
    throw new InvalidPayloadError('/call/endTime', 'required field is missing (and no duration to derive it from)');
  }
  const durationSec = durationSeconds(c.duration, startMs, endMs);
  const endedMs = endMs ?? (durationSec !== null ? startMs + durationSec * 1000 : null);
  if (endedMs !== null && Math.abs(endedMs) > MAX_DATE_MS) throw new InvalidPayloadError('/call/duration', 'the call would end past the last representable time');

  const agentId = ctx.agentId ?? c.agentId ?? p.agentId ?? null;
  const callId = c.id.trim();
  const users: CallUser[] = c.users.map((u) => ({
    userId: u.userId,
    accountId: u.accountId,
    fullUserId: u.fullUserId,
    firstName: u.firstName,
    lastName: u.lastName,
    fullName: u.fullName ?? ([u.firstName, u.lastName].filter(Boolean).join(' ') || null),
  }));

  const assist = p.assist;
  const scenarios: CallScenario[] = (assist?.callScenarios ?? []).map((s) => ({
    name: s.name,
    smartAnswers: s.smartAnswers.map((set) => ({
      setName: set.setName,
      setItems: set.setItems.map((i) => ({ question: i.question, answer: i.answer, title: i.title })),
    })),
  }));

  let transcript: CanonicalCall['transcript'] = null;
  if (assist?.transcription) {
    const t = assist.transcription;
    const offsets = chunkOffsets(t.chunks, startMs, durationSec);
    const chunks: TranscriptChunk[] = t.chunks.map((ch, i) => ({
      speaker: speakerOf(ch.speaker, c.direction),
      startOffsetMs: offsets[i]!.start,
      endOffsetMs: offsets[i]!.end,
      content: ch.content,
    }));
    const content = t.content ?? chunks.map((ch) => ch.content).join('\n');
    transcript = { content, chunks };
  }

  const channel = (p.channel ?? (c as Record<string, unknown>).channel ?? null) as unknown;

  return {
    key: `ai-agent:${agentId ?? '-'}:${callId}`,
    source: 'ai-agent',
    callId,
    agentId,
    channelId: null,
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
      ? { content: assist.summary.content, keyPoints: assist.summary.keyPoints, topics: assist.summary.topics }
      : null,
    scenarios,
    transcript,
    recordings: [],
    payloadVersion: p.version,
    receivedAt: ctx.receivedAt.toISOString(),
    raw: body,
  };
}
