// The canonical call record: every source (AI-agent webhook, channel events) is normalized into
// this one shape before it is queued, and every sink reads only this shape.
import { createHash, randomBytes } from 'node:crypto';

// The closed value sets of the record, each written once: config schemas (routes, CRM maps) and the
// normalizers take their `z.enum(...)` from these arrays, and the types are derived from them.

/**
 * `ai-agent`: the AI-agent webhook; `channel`: channel events read by the poller; `push`: the Push
 * API's call events (src/sources/push.ts); `history`: the call history read by `callsync backfill`.
 */
export const CALL_SOURCES = ['ai-agent', 'channel', 'push', 'history'] as const;
export type CallSource = (typeof CALL_SOURCES)[number];

export const DIRECTIONS = ['in', 'out'] as const;
export type Direction = (typeof DIRECTIONS)[number];

/** What became of the call. AI-agent calls are `answered` (the agent took them). */
export const OUTCOMES = ['answered', 'missed', 'rejected', 'busy', 'transferred', 'failed', 'unknown'] as const;
export type Outcome = (typeof OUTCOMES)[number];

/** `unknown` when the sender named a speaker callsync cannot place. */
export type Speaker = 'caller' | 'callee' | 'unknown';

/** Characters of an unplaced speaker's label kept on a chunk (the whole label stays in `raw`). */
const SPEAKER_LABEL_MAX = 100;

/**
 * A sent speaker label as a chunk keeps it: control characters and runs of white space as one space
 * (a label is shown on one line), trimmed, cut at `SPEAKER_LABEL_MAX` characters; undefined when empty.
 */
export function speakerLabelOf(label: string): string | undefined {
  const oneLine = label.replace(/[\p{Cc}\s]+/gu, ' ').trim();
  const cut = [...oneLine].slice(0, SPEAKER_LABEL_MAX).join('').trim();
  return cut === '' ? undefined : cut;
}

/** Recording types of channel events (spec 2.7). */
export const RECORDING_TYPES = ['voicemail', 'in_call_feature', 'call_recorder'] as const;
type RecordingType = (typeof RECORDING_TYPES)[number];

export interface CallUser {
  userId: string | null;
  accountId: string | null;
  fullUserId: string | null;
  firstName: string | null;
  lastName: string | null;
  fullName: string | null;
}

export interface CallSummary {
  content: string;
  keyPoints: string[];
  topics: string[];
}

interface SmartAnswerItem {
  question: string;
  answer: string;
  title: string | null;
}

export interface CallScenario {
  name: string;
  smartAnswers: { setName: string; setItems: SmartAnswerItem[] }[];
}

export interface TranscriptChunk {
  speaker: Speaker;
  /**
   * The label the sender gave a chunk whose speaker callsync cannot place (`Customer Service`, a vCon
   * party's name), trimmed and cut at `SPEAKER_LABEL_MAX` characters; absent otherwise. Sinks that
   * show a speaker show it instead of "unknown". Not part of the content hash (see `encodeCall`).
   */
  speakerLabel?: string;
  /** Milliseconds from the call's start. */
  startOffsetMs: number;
  endOffsetMs: number;
  content: string;
}

interface Transcript {
  content: string;
  chunks: TranscriptChunk[];
  /**
   * True in the job of a sink that does not read the transcript's text (its type's
   * `needsTranscript` is false): the call has a transcript, left out of that job (content and
   * chunks empty), so callsync stores it only where it is needed (docs/privacy.md).
   */
  omitted?: true;
}

/**
 * Parts of a call some sinks do not read: the users (their names), the summary (with key points and
 * topics), the smart answers, the headline, the forwarding (a number), the channel object as sent. A
 * sink type that says which it reads (`needsParts`, src/sinks/types.ts) gets the others left out of
 * its jobs, so they are not stored there (docs/privacy.md).
 */
export type CallPart = 'users' | 'summary' | 'scenarios' | 'title' | 'forwarding' | 'channel';

/** `call` with only the parts in `read`: the others empty (users and smart answers `[]`, summary, forwarding and channel null, no headline). */
export function withParts(call: CanonicalCall, read: ReadonlySet<CallPart>): CanonicalCall {
  const out = { ...call };
  if (!read.has('users')) out.users = [];
  if (!read.has('summary')) out.summary = null;
  if (!read.has('scenarios')) out.scenarios = [];
  if (!read.has('title')) delete out.title;
  if (!read.has('forwarding')) out.forwarding = null;
  if (!read.has('channel')) out.channel = null;
  return out;
}

export interface Recording {
  /** Relative to the telephony API's base URL, as the platform sends it. */
  downloadUrl: string;
  type: RecordingType;
}

export interface CanonicalCall {
  /** Stable identity of the call across redeliveries: `${source}:${scope}:${callId}`, built by `callKey`. */
  key: string;
  source: CallSource;
  callId: string;
  /** AI agent that handled the call (from the webhook path), when known. */
  agentId: string | null;
  /** Channel of a channel-based account, for channel events. */
  channelId: string | null;
  /** Platform event id (channel events), used for deduplication there. */
  eventId: string | null;
  direction: Direction;
  /** E.164 (`+4921112345`), or null when the party is anonymous or the number unusable. */
  from: string | null;
  to: string | null;
  /** The numbers exactly as the platform sent them. */
  fromRaw: string | null;
  toRaw: string | null;
  /** ISO-8601 UTC. */
  startedAt: string;
  endedAt: string | null;
  durationSec: number | null;
  outcome: Outcome;
  users: CallUser[];
  /** Channel user that initiated / accepted the call (channel events). */
  owner: string | null;
  forwarding: { target: string | null; type: string | null } | null;
  /** Extra channel object some webhook senders include (`call.channel`: `id`, `name`); kept as sent. */
  channel: unknown;
  /**
   * The call's headline (the AI-agent webhook's `assist.callHeadline`): CRM titles, the archive's
   * text. Absent when the sender gave none (so calls without it keep their content hash).
   */
  title?: string;
  /** Who produced the assist data (`assist.provider`), kept as sent; absent when not given. */
  provider?: string;
  summary: CallSummary | null;
  scenarios: CallScenario[];
  transcript: Transcript | null;
  recordings: Recording[];
  /** Webhook payload version (`v1`, `v2`) or null for channel events. */
  payloadVersion: string | null;
  /** ISO-8601 UTC time callsync accepted the event. */
  receivedAt: string;
  /** The original payload, verbatim (unknown fields included). */
  raw: unknown;
  /**
   * Which revision of the call this is. Set when the call is read from the inbound log (never by a
   * normalizer); not part of the call's content, and not written by any sink.
   */
  revision?: CallRevision;
}

/**
 * One accepted revision of a call. The platform may send a call again with more in it (a summary
 * finished later): the inbound log then holds a second entry for the same call key, an update.
 */
export interface CallRevision {
  /** Order of the revisions of one call: the inbound log entry id (`<ms>-<seq>`, assigned by Redis). */
  stamp: string;
  /** True when an earlier revision of the call was accepted within the dedupe window. */
  update: boolean;
  /** `contentHash` of this revision ('' for entries written before revisions existed). */
  content: string;
}

/**
 * The call key `<source>:<scope>:<id>` (`CanonicalCall.key`), written so that two distinct
 * identities never share one: the id comes last with `%` and `:` percent-encoded, so the key splits
 * at its first and last `:` whatever the scope holds (agent ids may contain `:`); a missing scope is
 * `-`, and a scope that is literally `-` or holds `%` is percent-encoded; lone surrogates are
 * `%uXXXX` in both. Ids and scopes without those characters give the same key as before that
 * encoding (docs/reliability.md, section 3).
 */
export function callKey(source: CallSource, scope: string | null, id: string): string {
  const s = scope === null ? '-' : scope === '-' ? '%2D' : unpaired(scope.replace(/%/g, '%25'));
  return `${source}:${s}:${unpaired(id.replace(/%/g, '%25').replace(/:/g, '%3A'))}`;
}

/** A lone surrogate (a surrogate pair is one code point under `u`, so only unpaired halves match). */
const LONE_SURROGATE = /\p{Cs}/gu;

/**
 * Lone surrogates written as `%uD800`: `callHash` reads the key as UTF-8, where each is U+FFFD, so
 * two ids differing only in one (an event id of the platform's API, `"e\ud800"` and `"e\udfff"`)
 * would share a key and one be taken for the other's duplicate. `%` is `%25` before, so no other id
 * spells the same; a key without them is unchanged.
 */
function unpaired(text: string): string {
  return text.replace(LONE_SURROGATE, (c) => `%u${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/**
 * Short, stable, queue-safe id derived from the call key: 128 bits of its SHA-256, so distinct keys
 * get distinct ids (a collision among even 10^12 calls has a chance of about 10^-15). Used for job
 * ids, the ingress dedupe key, the CRM record memory and external id, and notification markers.
 */
export function callHash(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 32);
}

/** Characters of the call id kept in a call's segment (the rest of a long id is in the hash only). */
const SEGMENT_READABLE_MAX = 100;
/** Hex digits of the call key's SHA-256 in a call's segment: 64 bits (why enough: docs/reliability.md). */
const SEGMENT_HASH_HEX = 16;

/**
 * One path segment naming a call in object keys and file names: `<readable>-<hash>`.
 *
 * `<readable>` is the call id with every character outside `[A-Za-z0-9._-]` as `_`, a leading dot as
 * `_`, cut at 100 characters: for people, not identity (`a/1`, `a_1` and `a 1` read alike, as do a
 * long id and its prefix, or one id posted for two agents). `<hash>` is the first 16 hex digits of
 * SHA-256 of the exact call key (the digits that begin `callHash`): it tells those calls apart.
 * The segment is ASCII, at most 117 characters, never starts with a dot, has no `/` or `\`, and its
 * hash is lower case, so ids that differ only by case still differ on case-insensitive file systems.
 */
export function callKeySegment(call: Pick<CanonicalCall, 'key' | 'callId'>): string {
  return `${callIdSegment(call.callId)}-${callHash(call.key).slice(0, SEGMENT_HASH_HEX)}`;
}

/**
 * The `<readable>` part of a call's segment (`callKeySegment`): what the archive's object names of
 * every call with this id start with (`forget --call` lists the records by it).
 */
export function callIdSegment(callId: string): string {
  return (
    callId
      .replace(/[^A-Za-z0-9._-]/g, '_')
      .replace(/^\./, '_')
      .slice(0, SEGMENT_READABLE_MAX) || '_'
  );
}

/**
 * Orders two revision stamps (`<ms>-<seq>`): negative when `a` is older. A missing stamp (a job
 * queued before revisions existed, or a call delivered outside the inbound log) is the oldest.
 */
export function compareStamps(a: string | undefined, b: string | undefined): number {
  if (a === b) return 0;
  if (a === undefined) return -1;
  if (b === undefined) return 1;
  const [am = 0, as = 0] = a.split('-').map(Number);
  const [bm = 0, bs = 0] = b.split('-').map(Number);
  return am !== bm ? am - bm : as - bs;
}

/** Keys of an object sorted, recursively: the same JSON text however the sender ordered them. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value === null || typeof value !== 'object') return value;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value).sort()) {
    const v = canonical((value as Record<string, unknown>)[k]);
    // A key named `__proto__` (JSON.parse makes it an own key) stays a key, never the prototype. Not
    // a prototype-less object for all: JSON.stringify of a call holding one used far more memory.
    if (k === '__proto__')
      Object.defineProperty(out, k, { value: v, enumerable: true, writable: true, configurable: true });
    else out[k] = v;
  }
  return out;
}

/**
 * What a stored record holds as its `transcript` when the transcript is stored once, in the record's
 * `raw` (see `encodeCall`); readers put back what the payload gives (queues/inbound.ts, `parseStoredCall`).
 */
const TRANSCRIPT_IN_RAW = '{"storedIn":"raw"}';

/** True for the value `TRANSCRIPT_IN_RAW` parses to. */
export function isTranscriptInRaw(value: unknown): boolean {
  return (
    value !== null &&
    typeof value === 'object' &&
    (value as { storedIn?: unknown }).storedIn === 'raw' &&
    Object.keys(value).length === 1
  );
}

/**
 * Stands for the transcript while the rest of the call is serialized: a text no payload can hold
 * (a NUL and 96 random bits drawn per process), found once in the JSON and replaced there.
 */
const PLACEHOLDER = `\u0000callsync-transcript-${randomBytes(12).toString('hex')}`;
const PLACEHOLDER_JSON = JSON.stringify(PLACEHOLDER);

/**
 * The call as stored in the inbound log, and the hash of its content.
 *
 * Content is everything callsync understood from the payload: the canonical record without
 * `receivedAt` (when callsync took it), `raw` (the payload verbatim) and `revision` — and, for a
 * vCon, without `startedAt` when that is `receivedAt` (a start the sender did not give). `raw` is left
 * out on purpose: a resend that differs only in fields callsync does not read (a sender's delivery
 * timestamp or attempt counter, an extra object) changes nothing any sink writes from the record,
 * so it stays a duplicate instead of sending every CRM and webhook receiver a no-op update. The
 * one object kept verbatim in the record (`channel`) is hashed with its keys sorted. A chunk's
 * `speakerLabel` (a label callsync could not place, kept as sent) is left out of the hash for the
 * same reason, so a call accepted before the record kept labels stays a duplicate when resent.
 *
 * `rawJson`, when given, is the request body `raw` was parsed from: stored as it is. With
 * `transcriptInRaw` (the transcript is the one the payload gives back: src/model/webhook.ts,
 * `transcriptFromPayload`), the record's `transcript` is `TRANSCRIPT_IN_RAW` — the transcript is
 * stored once, in `raw`, instead of twice (docs/reliability.md, section 3) — and the hash is the
 * same as with the transcript in place.
 */
export function encodeCall(
  call: CanonicalCall,
  rawJson?: string,
  transcriptInRaw = false,
): { json: string; contentHash: string } {
  const encoded = encodeRecord(call, rawJson, transcriptInRaw);
  // A start that is only the arrival (a vCon without any date starts when it came) says nothing of
  // the call: hashed, it would make every resend of the same vCon an update. Only a vCon's: the
  // platform's payload always brings its own start, even one that falls on the arrival.
  if (call.payloadVersion !== 'vcon' || call.startedAt !== call.receivedAt) return encoded;
  return { json: encoded.json, contentHash: encodeRecord({ ...call, startedAt: '' }).contentHash };
}

function encodeRecord(
  call: CanonicalCall,
  rawJson?: string,
  transcriptInRaw = false,
): { json: string; contentHash: string } {
  const { raw, receivedAt, revision: _revision, ...content } = call;
  if (content.channel !== null && typeof content.channel === 'object') content.channel = canonical(content.channel);
  const rawText = rawJson ?? JSON.stringify(raw);
  const tail = `"receivedAt":${JSON.stringify(receivedAt)}${rawText === undefined ? '' : `,"raw":${rawText}`}}`;
  const record = (body: string) => `${body.slice(0, -1)}${body.length > 2 ? ',' : ''}${tail}`;
  if (transcriptInRaw && rawJson !== undefined && content.transcript !== null) {
    const transcriptJson = JSON.stringify(withoutSpeakerLabels(content.transcript));
    content.transcript = PLACEHOLDER as unknown as CanonicalCall['transcript'];
    const body = JSON.stringify(content);
    const at = body.indexOf(PLACEHOLDER_JSON);
    if (at >= 0 && body.lastIndexOf(PLACEHOLDER_JSON) === at) {
      const before = body.slice(0, at);
      const after = body.slice(at + PLACEHOLDER_JSON.length);
      const contentHash = createHash('sha256').update(before).update(transcriptJson).update(after).digest('hex');
      return { json: record(`${before}${TRANSCRIPT_IN_RAW}${after}`), contentHash: contentHash.slice(0, 16) };
    }
    content.transcript = call.transcript;
  }
  const body = JSON.stringify(content);
  const hashed = withoutSpeakerLabels(content.transcript);
  // `transcript` keeps its place among the keys: the hash of a call without labels is its JSON's, as before.
  const hashedBody = hashed === content.transcript ? body : JSON.stringify({ ...content, transcript: hashed });
  const contentHash = createHash('sha256').update(hashedBody).digest('hex').slice(0, 16);
  return { json: record(body), contentHash };
}

/** The transcript without its chunks' `speakerLabel` (itself when no chunk has one): what the content hash reads. */
function withoutSpeakerLabels(transcript: CanonicalCall['transcript']): CanonicalCall['transcript'] {
  if (transcript === null || !Array.isArray(transcript.chunks)) return transcript;
  if (!transcript.chunks.some((c) => c?.speakerLabel !== undefined)) return transcript;
  return { ...transcript, chunks: transcript.chunks.map(({ speakerLabel: _label, ...chunk }) => chunk) };
}

/** `encodeCall`'s content hash alone. */
export function contentHash(call: CanonicalCall): string {
  return encodeCall(call, 'null').contentHash;
}

export function hasTranscript(call: CanonicalCall): boolean {
  return (
    call.transcript !== null &&
    (call.transcript.omitted === true || call.transcript.content.length > 0 || call.transcript.chunks.length > 0)
  );
}

export function hasSummary(call: CanonicalCall): boolean {
  return call.summary !== null;
}

/** `First Last` from whichever of the two parts are present; null when neither is. */
export function joinedName(firstName: string | null, lastName: string | null): string | null {
  return [firstName, lastName].filter(Boolean).join(' ') || null;
}

/**
 * The name a user is shown by: `fullName`, else first and last name, else the user id; '' when none is known.
 * @internal Exported for its tests only (test/display-name.test.ts).
 */
export function userDisplayName(user: Pick<CallUser, 'fullName' | 'firstName' | 'lastName' | 'userId'>): string {
  return user.fullName ?? joinedName(user.firstName, user.lastName) ?? user.userId ?? '';
}

/** The display names of the call's users, in order; users without any name or id are left out. */
export function userDisplayNames(call: Pick<CanonicalCall, 'users'>): string[] {
  return call.users.map(userDisplayName).filter((name) => name !== '');
}
