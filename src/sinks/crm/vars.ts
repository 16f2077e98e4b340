// The variables CRM title/body templates can use (`{{summary}}`, `{{keyPointsList}}`, ...), built
// from the canonical call only. Listed in docs/crm.md; keep the two in step.
import { hasTranscript, type CanonicalCall } from '../../model/call.js';
import { transcriptLink } from '../archive/keys.js';
import { escapeHtml, renderTemplate } from '../template.js';
import { displayNumber, type CountryCode } from './phone.js';

export interface ArchiveLinkOptions {
  /** Whether the body mentions the archived transcript (the archive sink's object key). */
  enabled: boolean;
  /** The archive sink's key prefix (same as its `prefix`). */
  prefix?: string;
  /** Public or internal URL the keys live under, e.g. `https://s3.eu-central-1.amazonaws.com/bucket/`. */
  baseUrl?: string;
}

export interface CallVarsOptions {
  defaultRegion: CountryCode;
  archive: ArchiveLinkOptions;
  /** Name of the CRM contact the call was matched to, when known. */
  contactName?: string | null;
}

function durationText(sec: number | null): string {
  if (sec === null) return '';
  const s = Math.max(0, Math.round(sec));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  if (h > 0) return `${h}h ${m}m ${r}s`;
  if (m > 0) return `${m}m ${r}s`;
  return `${r}s`;
}

const bullet = (items: string[]) => items.map((i) => `• ${i}`).join('\n');

export function callVars(call: CanonicalCall, opts: CallVarsOptions): Record<string, unknown> {
  const from = displayNumber(call.from, call.fromRaw, opts.defaultRegion);
  const to = displayNumber(call.to, call.toRaw, opts.defaultRegion);
  const keyPoints = call.summary?.keyPoints ?? [];
  const topics = call.summary?.topics ?? [];
  const answers = call.scenarios.flatMap((s) =>
    s.smartAnswers.flatMap((set) =>
      set.setItems.map((item) => ({ scenario: s.name, set: set.setName, question: item.question, answer: item.answer, title: item.title ?? '' })),
    ),
  );
  const counterpart = call.direction === 'in' ? from : to;

  let transcriptKey = '';
  let transcriptJsonKey = '';
  let transcriptUrl = '';
  if (opts.archive.enabled && hasTranscript(call)) {
    // The archive owns its layout: keys and URL come from it (src/sinks/archive/keys.ts).
    const link = transcriptLink(call, opts.archive);
    transcriptKey = link.text;
    transcriptJsonKey = link.json;
    transcriptUrl = link.url ?? '';
  }
  const transcriptRef = transcriptUrl || transcriptKey;

  return {
    callId: call.callId,
    key: call.key,
    source: call.source,
    agentId: call.agentId ?? '',
    channelId: call.channelId ?? '',
    direction: call.direction,
    directionLabel: call.direction === 'in' ? 'Inbound' : 'Outbound',
    outcome: call.outcome,
    from: from ?? 'anonymous',
    to: to ?? 'anonymous',
    counterpart: counterpart ?? 'anonymous',
    fromRaw: call.fromRaw ?? '',
    toRaw: call.toRaw ?? '',
    startedAt: call.startedAt,
    endedAt: call.endedAt ?? '',
    durationSec: call.durationSec ?? '',
    durationText: durationText(call.durationSec),
    owner: call.owner ?? '',
    users: call.users.map((u) => u.fullName ?? ([u.firstName, u.lastName].filter(Boolean).join(' ') || u.userId || '')).filter((n) => n !== ''),
    contactName: opts.contactName ?? '',
    summary: call.summary?.content ?? '',
    keyPoints,
    keyPointsList: bullet(keyPoints),
    topics,
    answers,
    answersList: answers.map((a) => `${a.question}: ${a.answer}`).join('\n'),
    /** Ready-made blocks that are '' when empty, so a default body has no dangling headings. */
    keyPointsSection: keyPoints.length > 0 ? `Key points:\n${bullet(keyPoints)}` : '',
    topicsLine: topics.length > 0 ? `Topics: ${topics.join(', ')}` : '',
    answersSection: answers.length > 0 ? `Answers:\n${answers.map((a) => `${a.question}: ${a.answer}`).join('\n')}` : '',
    recordingCount: call.recordings.length,
    hasTranscript: hasTranscript(call),
    transcriptKey,
    transcriptJsonKey,
    transcriptUrl,
    /** `Transcript: <url or key>` when there is an archived transcript, else ''. */
    transcriptLine: transcriptRef ? `Transcript: ${transcriptRef}` : '',
  };
}

/**
 * Renders an HTML body (HubSpot `hs_call_body`, Pipedrive `note`): values are HTML-escaped, the
 * template's own markup stays, line breaks become `<br>`, and runs of empty lines (from empty
 * values) collapse so an absent summary leaves no gap.
 */
export function renderHtmlBody(template: string, vars: Record<string, unknown>): string {
  const text = renderTemplate(template, vars, { escape: escapeHtml });
  return text
    .split('\n')
    .map((l) => l.trimEnd())
    .join('\n')
    .replace(/\n{3,}/g, '\n\n')
    .trim()
    .replace(/\n/g, '<br>\n');
}

/** Renders a one-line title: values as text, whitespace folded, cut to `max` characters. */
export function renderTitle(template: string, vars: Record<string, unknown>, max = 250): string {
  const text = renderTemplate(template, vars).replace(/\s+/g, ' ').trim();
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

/** Default HubSpot / Pipedrive templates (the operator overrides them per sink in the config file). */
export const defaultTitleTemplate = '{{directionLabel}} call {{counterpart}} ({{outcome}})';
export const defaultBodyTemplate = ['{{summary}}', '{{keyPointsSection}}', '{{topicsLine}}', '{{answersSection}}', '{{transcriptLine}}'].join(
  '\n\n',
);

/** Every variable `callVars` provides (config validation rejects other names). */
export const templateVarNames: readonly string[] = [
  'callId', 'key', 'source', 'agentId', 'channelId', 'direction', 'directionLabel', 'outcome',
  'from', 'to', 'counterpart', 'fromRaw', 'toRaw', 'startedAt', 'endedAt', 'durationSec', 'durationText',
  'owner', 'users', 'contactName', 'summary', 'keyPoints', 'keyPointsList', 'topics', 'answers', 'answersList',
  'keyPointsSection', 'topicsLine', 'answersSection', 'recordingCount', 'hasTranscript',
  'transcriptKey', 'transcriptJsonKey', 'transcriptUrl', 'transcriptLine',
];
