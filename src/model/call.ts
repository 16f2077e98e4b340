// The canonical call record: every source (AI-agent webhook, channel events) is normalized into
// this one shape before it is queued, and every sink reads only this shape.
import { createHash } from 'node:crypto';

export type CallSource = 'ai-agent' | 'channel';
export type Direction = 'in' | 'out';
/** What became of the call. AI-agent calls are `answered` (the agent took them). */
export type Outcome = 'answered' | 'missed' | 'rejected' | 'busy' | 'transferred' | 'failed' | 'unknown';
/** `unknown` when the sender named a speaker callsync cannot place. */
export type Speaker = 'caller' | 'callee' | 'unknown';
export type RecordingType = 'voicemail' | 'in_call_feature' | 'call_recorder';

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

export interface SmartAnswerItem {
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
  /** Milliseconds from the call's start. */
  startOffsetMs: number;
  endOffsetMs: number;
  content: string;
}

export interface Transcript {
  content: string;
  chunks: TranscriptChunk[];
}

export interface Recording {
  /** Relative to the telephony API's base URL, as the platform sends it. */
  downloadUrl: string;
  type: RecordingType;
}

export interface CanonicalCall {
  /** Stable identity of the call across redeliveries: `${source}:${scope}:${callId}`. */
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
  /** Extra channel object some webhook senders include; kept as sent. */
  channel: unknown;
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
}

/** Short, stable, queue-safe id derived from the call key (used for job ids and object keys). */
export function callHash(key: string): string {
  return createHash('sha256').update(key).digest('hex').slice(0, 32);
}

export function hasTranscript(call: CanonicalCall): boolean {
  return call.transcript !== null && (call.transcript.content.length > 0 || call.transcript.chunks.length > 0);
}

export function hasSummary(call: CanonicalCall): boolean {
  return call.summary !== null;
}
