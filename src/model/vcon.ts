// vCon (IETF draft-ietf-vcon-vcon-core: a JSON container of `parties`, `dialog`, `analysis` and
// `attachments`) in and out of the canonical call:
//  - `isVcon` / `normalizeVcon`: a vCon posted to the AI-agent route becomes the same canonical call
//    as the platform's call-data webhook (source `ai-agent`, the call id is the vCon's `uuid`);
//  - `renderVcon`: the vCon the archive writes beside each call (`<key>.vcon.json`): the two
//    parties, the transcript as one `text` dialog per utterance, summary, key points and topics as
//    `analysis`. Valid against the draft's JSON schema (vcon_json_schema.json of the working group's
//    repository; a copy is in test/fixtures/vcon).
//
// Mapping, both ways: parties[0] is the caller, parties[1] the callee (a `tel` in E.164 when the
// number is known); a text dialog's `originator` is its speaker (0 caller, 1 callee; a speaker
// callsync cannot place but the sender named is a further party by that name, read back as the
// chunk's `speakerLabel`); its `start` is the call's start plus the utterance's offset and `duration` its length in seconds. Analysis
// `summary` (text), `key_points` and `topics` (JSON arrays of strings; read in, plain text is one entry). The core vCon has no call
// direction: a vCon read in is an inbound call (what the AI agent answers), written out the
// caller is always party 0.
import { createHash } from 'node:crypto';
import { callKey, speakerLabelOf, type CanonicalCall, type Speaker, type TranscriptChunk } from './call.js';
import { toE164 } from './phone.js';
import { parseUtc } from './utc-time.js';
import {
  idProblem,
  InvalidPayloadError,
  jsonType,
  readStrings,
  readText,
  Unread,
  type Path,
  type UnreadField,
} from './webhook.js';

type Json = Record<string, unknown>;

/** Longest dialog accepted: a week, in seconds. */
const MAX_DURATION_S = 7 * 24 * 3600;

const isObject = (v: unknown): v is Json => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * A vCon rather than the platform's call-data payload: an object without `call` (the webhook's
 * payload always has one) that says it is a vCon (its `vcon` version) or has a vCon's `uuid` and
 * `parties` array. Whatever its `uuid` or `parties`, it is then read as a vCon: only a missing
 * `uuid` refuses it, with a pointer to `/uuid` rather than to the webhook's `/version` and `/call`.
 */
export function isVcon(body: unknown): boolean {
  if (!isObject(body) || 'call' in body) return false;
  return 'vcon' in body || ('uuid' in body && Array.isArray(body.parties));
}

export interface VconNormalizeOptions {
  agentId: string | null;
  receivedAt: Date;
}

function dateOf(value: unknown): number | null {
  if (typeof value !== 'string') return null;
  const ms = parseUtc(value);
  return Number.isNaN(ms) ? null : ms;
}

/**
 * A dialog's or analysis' inline body as text: a string (`base64url` decoded), a number's decimal
 * text, or the `text` of an object (a vendor's structured body, `{"text": "…"}`); absent -> null;
 * another shape is read as absent and counted (`/dialog/*\/body`, `/analysis/*\/body`).
 */
function bodyText(body: unknown, encoding: unknown, path: Path, unread: Unread): string | null {
  const at = [...path, 'body'];
  if (typeof body === 'string' && encoding === 'base64url') return Buffer.from(body, 'base64url').toString('utf8');
  if (isObject(body) && 'text' in body) return readText(body.text, [...at, 'text'], unread);
  return readText(body, at, unread);
}

/**
 * A `key_points` / `topics` body as a list of texts: a JSON array (inline, or as text with encoding
 * `json`), its elements read as the webhook's key points are; a body `bodyText` reads is one entry,
 * as sent (`"a; b"`: callsync does not guess where one point ends).
 */
function textList(entry: Json, path: Path, unread: Unread): string[] {
  let body = entry.body;
  if (typeof body === 'string' && entry.encoding === 'json') {
    try {
      body = JSON.parse(body);
    } catch {
      unread.add([...path, 'body'], 'encoding json, but the body is not JSON');
      return [];
    }
  }
  if (Array.isArray(body)) return readStrings(body, [...path, 'body'], unread);
  const text = bodyText(body, entry.encoding, path, unread);
  return text === null ? [] : [text];
}

/**
 * A text dialog's speaker: party 0 is the caller, 1 the callee; another originator is read as unknown
 * and counted, and the chunk keeps what names it (`speakerLabel`): that party's `name`, or the
 * originator itself when it is text.
 */
function speakerOf(
  originator: unknown,
  parties: unknown[],
  path: Path,
  unread: Unread,
): { speaker: Speaker; speakerLabel?: string } {
  if (originator === 0) return { speaker: 'caller' };
  if (originator === 1) return { speaker: 'callee' };
  if (originator === undefined || originator === null) return { speaker: 'unknown' };
  unread.add(path, 'expected 0 (the caller) or 1 (the callee)');
  const party = Number.isInteger(originator) ? parties[originator as number] : undefined;
  const name = isObject(party) ? party.name : originator;
  const speakerLabel = typeof name === 'string' ? speakerLabelOf(name) : undefined;
  return speakerLabel === undefined ? { speaker: 'unknown' } : { speaker: 'unknown', speakerLabel };
}

/**
 * The vCon as a canonical call. Only its `uuid` (the call id) refuses it (InvalidPayloadError, a
 * 400 at the ingress); any other value callsync cannot read — a date, a party, a dialog or its
 * start or duration, the analysis list — is read as absent, kept as sent in `raw` and reported in
 * `unread` (counted and logged once by the ingress, as for the platform's payload). A dialog without
 * a readable start is left out of the transcript; a call without dates starts when it came.
 */
export function normalizeVcon(
  body: unknown,
  options: VconNormalizeOptions,
): { call: CanonicalCall; unread: UnreadField[] } {
  if (!isObject(body)) throw new InvalidPayloadError('', 'a vCon is a JSON object');
  const uuid = body.uuid;
  if (uuid === undefined || uuid === null) throw new InvalidPayloadError('/uuid', 'required field is missing');
  if (typeof uuid !== 'string') throw new InvalidPayloadError('/uuid', `expected a string, got ${jsonType(uuid)}`);
  if (uuid.trim() === '') throw new InvalidPayloadError('/uuid', 'the uuid is empty');
  // Its call id: a lone surrogate hashes as U+FFFD, and two calls would share a key.
  const notAnId = idProblem(uuid);
  if (notAnId) throw new InvalidPayloadError('/uuid', notAnId);
  const unread = new Unread();
  const createdAt = dateOf(body.created_at);
  if (body.created_at !== undefined && createdAt === null) unread.add(['created_at'], 'not an RFC 3339 date-time');
  const parties = Array.isArray(body.parties) ? body.parties : [];
  if (!Array.isArray(body.parties) && body.parties !== undefined) unread.add(['parties'], 'must be an array');
  parties.forEach((p, i) => {
    if (!isObject(p)) unread.add(['parties', i], 'a party is an object');
  });
  let dialogs: unknown[] = [];
  if (Array.isArray(body.dialog)) dialogs = body.dialog;
  else if (body.dialog !== undefined) unread.add(['dialog'], 'must be an array');
  let analyses: unknown[] = [];
  if (Array.isArray(body.analysis)) analyses = body.analysis;
  else if (body.analysis !== undefined) unread.add(['analysis'], 'must be an array');
  analyses.forEach((a, i) => {
    if (!isObject(a)) unread.add(['analysis', i], 'an analysis is an object');
  });

  // The dialogs with a start, each with its start and end (ms); a duration that is not a number of
  // seconds from 0 to a week, or that ends beyond the dates JSON can carry, is read as absent.
  const dialogObjects: Json[] = [];
  const dialogIndexes: number[] = [];
  const starts: number[] = [];
  const ends: number[] = [];
  dialogs.forEach((d, i) => {
    if (!isObject(d)) return unread.add(['dialog', i], 'a dialog is an object');
    const start = dateOf(d.start);
    if (start === null) return unread.add(['dialog', i, 'start'], 'required RFC 3339 date-time missing');
    let end = start;
    if (d.duration !== undefined) {
      const ok = typeof d.duration === 'number' && d.duration >= 0 && d.duration <= MAX_DURATION_S;
      if (ok && !Number.isNaN(new Date(start + (d.duration as number) * 1000).getTime()))
        end = start + (d.duration as number) * 1000;
      else unread.add(['dialog', i, 'duration'], `must be a number of seconds from 0 to ${MAX_DURATION_S}`);
    }
    dialogObjects.push(d);
    dialogIndexes.push(i);
    starts.push(start);
    ends.push(end);
  });
  // Not Math.min(...starts): a vCon may hold more dialogs than a call's arguments can.
  const startMs =
    starts.length > 0 ? starts.reduce((a, b) => Math.min(a, b)) : (createdAt ?? options.receivedAt.getTime());
  const endMs = ends.length > 0 ? ends.reduce((a, b) => Math.max(a, b)) : null;

  const chunks: TranscriptChunk[] = [];
  dialogObjects.forEach((d, i) => {
    if (d.type !== 'text') return;
    const path = ['dialog', dialogIndexes[i]!];
    const content = bodyText(d.body, d.encoding, path, unread);
    if (content === null) return;
    const from = starts[i]! - startMs;
    const speaker = speakerOf(d.originator, parties, [...path, 'originator'], unread);
    chunks.push({ ...speaker, startOffsetMs: from, endOffsetMs: ends[i]! - startMs, content });
  });
  // The first analysis of a type, with its path (for what cannot be read in it).
  const byType = (type: string): { entry: Json; path: Path } | null => {
    const i = analyses.findIndex((a) => isObject(a) && a.type === type);
    return i < 0 ? null : { entry: analyses[i] as Json, path: ['analysis', i] };
  };
  const summaryEntry = byType('summary');
  const summaryText = summaryEntry
    ? bodyText(summaryEntry.entry.body, summaryEntry.entry.encoding, summaryEntry.path, unread)
    : null;
  const keyPoints = byType('key_points');
  const topics = byType('topics');
  const transcriptAnalysis = byType('transcript');
  const transcriptText =
    chunks.length > 0
      ? chunks.map((c) => c.content).join('\n')
      : transcriptAnalysis
        ? bodyText(transcriptAnalysis.entry.body, transcriptAnalysis.entry.encoding, transcriptAnalysis.path, unread)
        : null;

  // A party's number: its `tel` as text (a number as its decimal text, as in the webhook).
  const telOf = (i: number): string | null =>
    isObject(parties[i]) ? readText(parties[i].tel, ['parties', i, 'tel'], unread) : null;
  const fromRaw = telOf(0);
  const toRaw = telOf(1);
  const incomplete = dialogObjects.some((d) => d.type === 'incomplete');
  const callId = uuid.trim();
  const call: CanonicalCall = {
    key: callKey('ai-agent', options.agentId, callId),
    source: 'ai-agent',
    callId,
    agentId: options.agentId,
    channelId: null,
    eventId: null,
    direction: 'in',
    from: toE164(fromRaw),
    to: toE164(toRaw),
    fromRaw,
    toRaw,
    startedAt: new Date(startMs).toISOString(),
    endedAt: endMs === null ? null : new Date(endMs).toISOString(),
    durationSec: endMs === null ? null : Math.round((endMs - startMs) / 1000),
    outcome: incomplete ? 'missed' : 'answered',
    users: [],
    owner: null,
    forwarding: null,
    channel: null,
    summary:
      summaryText === null && !keyPoints && !topics
        ? null
        : {
            content: summaryText ?? '',
            keyPoints: keyPoints ? textList(keyPoints.entry, keyPoints.path, unread) : [],
            topics: topics ? textList(topics.entry, topics.path, unread) : [],
          },
    scenarios: [],
    transcript: transcriptText === null ? null : { content: transcriptText, chunks },
    recordings: [],
    payloadVersion: 'vcon',
    receivedAt: options.receivedAt.toISOString(),
    raw: body,
  };
  return { call, unread: unread.fields };
}

/**
 * The vCon's `uuid` of a call: its own when the call came as a vCon, else a version 8 UUID made
 * from the SHA-256 of the call key (the same call always gets the same one).
 * @internal Exported for its tests only (test/vcon.test.ts).
 */
export function vconUuid(call: Pick<CanonicalCall, 'key' | 'callId' | 'payloadVersion'>): string {
  if (
    call.payloadVersion === 'vcon' &&
    /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(call.callId)
  )
    return call.callId.toLowerCase();
  const h = createHash('sha256').update(call.key).digest();
  h[6] = (h[6]! & 0x0f) | 0x80; // version 8
  h[8] = (h[8]! & 0x3f) | 0x80; // RFC 4122 variant
  const hex = h.subarray(0, 16).toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

const VENDOR = 'callsync';

/** A time as RFC 3339, or `fallback` when it is beyond what a Date can hold (offsets sent out of range). */
function isoOr(ms: number, fallback: string): string {
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? fallback : d.toISOString();
}

function finiteOr(n: number, fallback: number): number {
  return Number.isFinite(n) ? n : fallback;
}

/** The call as a vCon (an object; the archive writes it as JSON). */
export function renderVcon(call: CanonicalCall): Json {
  // A party's `tel` only when the number is known in E.164 (an anonymous caller is a party without one).
  const partyOf = (e164: string | null, name: string | null): Json => ({
    ...(e164 ? { tel: e164 } : {}),
    ...(name ? { name } : {}),
  });
  const users = call.users
    .map((u) => u.fullName ?? ([u.firstName, u.lastName].filter(Boolean).join(' ') || null))
    .filter((n): n is string => n !== null);
  // The callee side of an inbound call is the company: its user (or the AI agent) names it.
  const calleeName = call.direction === 'in' ? (users[0] ?? (call.agentId ? `AI agent ${call.agentId}` : null)) : null;
  const callerName = call.direction === 'out' ? (users[0] ?? null) : null;
  const parties = [partyOf(call.from, callerName), partyOf(call.to, calleeName)];
  const start = Date.parse(call.startedAt);
  const dialog: Json[] = [];
  if (call.transcript && call.transcript.chunks.length > 0) {
    const labelParties = new Map<string, number>();
    for (const chunk of call.transcript.chunks) {
      const d: Json = {
        type: 'text',
        start: isoOr(start + chunk.startOffsetMs, call.startedAt),
        duration: finiteOr(Math.max(0, (chunk.endOffsetMs - chunk.startOffsetMs) / 1000), 0),
        parties: [0, 1],
        mediatype: 'text/plain',
        encoding: 'none',
        body: chunk.content,
      };
      if (chunk.speaker !== 'unknown') d.originator = chunk.speaker === 'caller' ? 0 : 1;
      else if (chunk.speakerLabel) {
        // A speaker callsync could not place, named by the sender: a party of its own, by that name.
        let party = labelParties.get(chunk.speakerLabel);
        if (party === undefined) {
          party = parties.push({ name: chunk.speakerLabel }) - 1;
          labelParties.set(chunk.speakerLabel, party);
        }
        d.originator = party;
        d.parties = [0, 1, party];
      }
      dialog.push(d);
    }
  } else if (call.transcript && call.transcript.content !== '') {
    dialog.push({
      type: 'text',
      start: call.startedAt,
      duration: call.durationSec ?? 0,
      parties: [0, 1],
      mediatype: 'text/plain',
      encoding: 'none',
      body: call.transcript.content,
    });
  } else if (
    call.outcome === 'missed' ||
    call.outcome === 'busy' ||
    call.outcome === 'rejected' ||
    call.outcome === 'failed'
  ) {
    const disposition = { missed: 'no-answer', busy: 'busy', rejected: 'congestion', failed: 'failed' }[call.outcome];
    dialog.push({ type: 'incomplete', start: call.startedAt, parties: [0, 1], disposition });
  }
  const allDialogs = dialog.map((_, i) => i);
  const analysis: Json[] = [];
  const about = allDialogs.length === 1 ? allDialogs[0]! : allDialogs;
  const analysisOf = (type: string, body: unknown, json: boolean): Json => ({
    type,
    ...(allDialogs.length > 0 ? { dialog: about } : {}),
    vendor: VENDOR,
    product: call.source,
    mediatype: json ? 'application/json' : 'text/plain',
    encoding: json ? 'json' : 'none',
    body,
  });
  if (call.summary) {
    if (call.summary.content !== '') analysis.push(analysisOf('summary', call.summary.content, false));
    if (call.summary.keyPoints.length > 0) analysis.push(analysisOf('key_points', call.summary.keyPoints, true));
    if (call.summary.topics.length > 0) analysis.push(analysisOf('topics', call.summary.topics, true));
  }
  return {
    uuid: vconUuid(call),
    created_at: call.receivedAt,
    subject: `Call ${call.callId}`,
    parties,
    dialog,
    analysis,
    attachments: [],
  };
}
