// The one set of `{{variables}}` every template in the config file can use: CRM titles and notes
// (hubspot, pipedrive) and notification texts (sms, email). Built from the canonical call only,
// validated against one list, documented once (README.md, "Template variables"; keep the two in
// step). Names from before the two vocabularies were merged stay accepted as aliases.
import { z } from 'zod';
import { hasTranscript, userDisplayNames, type CallPart, type CanonicalCall } from '../model/call.js';
import { isAnonymous } from '../model/phone.js';
import { localDateTime } from './notify/time.js';
import { templateFields } from './template.js';

/**
 * Every variable a template may use, in the order of the README table.
 * @internal Exported for its tests only (test/template-vars.test.ts).
 */
export const TEMPLATE_VARS = [
  'callId',
  'key',
  'source',
  'agentId',
  'channelId',
  'title',
  'provider',
  'direction',
  'directionLabel',
  'outcome',
  'caller',
  'callee',
  'remote',
  'fromRaw',
  'toRaw',
  'startedAt',
  'endedAt',
  'date',
  'time',
  'dateTime',
  'timeZone',
  'duration',
  'durationSec',
  'owner',
  'users',
  'contactName',
  'summary',
  'keyPoints',
  'keyPointsList',
  'topics',
  'answers',
  'answersList',
  'summarySection',
  'keyPointsSection',
  'topicsLine',
  'answersSection',
  'agentLine',
  'recordingCount',
  'hasTranscript',
  'transcriptKey',
  'transcriptJsonKey',
  'transcriptUrl',
  'transcriptLine',
] as const;
/** @internal Part of a signature only tests use (exported with it). */
export type TemplateVar = (typeof TEMPLATE_VARS)[number];

/**
 * Older names -> the variable they now stand for. The CRM templates said `from`, `to`,
 * `counterpart`, `durationText`; the notification templates `agent`, `channel`. Config files
 * written with them keep working.
 * @internal Exported for its tests only (test/template-vars.test.ts).
 */
export const TEMPLATE_ALIASES = {
  from: 'caller',
  to: 'callee',
  counterpart: 'remote',
  durationText: 'duration',
  agent: 'agentId',
  channel: 'channelId',
} as const satisfies Record<string, TemplateVar>;
type TemplateAlias = keyof typeof TEMPLATE_ALIASES;

export type TemplateVars = Record<TemplateVar | TemplateAlias, unknown>;

/** The part of the call each variable reads beyond its identity, numbers, times and outcome (`templateVars`). */
const PART_OF: Partial<Record<TemplateVar, CallPart>> = {
  users: 'users',
  summary: 'summary',
  keyPoints: 'summary',
  keyPointsList: 'summary',
  topics: 'summary',
  summarySection: 'summary',
  keyPointsSection: 'summary',
  topicsLine: 'summary',
  answers: 'scenarios',
  answersList: 'scenarios',
  answersSection: 'scenarios',
  title: 'title',
};

/** The parts of a call (`CallPart`) these templates read; undefined ones are skipped. */
export function partsReadBy(templates: readonly (string | undefined)[]): Set<CallPart> {
  const parts = new Set<CallPart>();
  for (const template of templates) {
    if (template === undefined) continue;
    for (const field of templateFields(template)) {
      const head = field.split('.')[0] as string;
      const name = Object.hasOwn(TEMPLATE_ALIASES, head) ? TEMPLATE_ALIASES[head as TemplateAlias] : head;
      const part = Object.hasOwn(PART_OF, name) ? PART_OF[name as TemplateVar] : undefined;
      if (part) parts.add(part);
    }
  }
  return parts;
}

const KNOWN = new Set<string>([...TEMPLATE_VARS, ...Object.keys(TEMPLATE_ALIASES)]);

/** Names a template uses that are neither variables nor aliases (empty when it is fine). Dots reach into a variable (`answers.0.answer`). */
function unknownTemplateFields(template: string): string[] {
  return templateFields(template).filter((f) => !KNOWN.has(f.split('.')[0] as string));
}

/** A `{{variable}}` template of the config file: a misspelt name is a config error listing the known ones. */
export const templateSchema = z
  .string()
  .min(1)
  .superRefine((template, ctx) => {
    const unknown = unknownTemplateFields(template);
    if (unknown.length > 0) {
      ctx.addIssue({
        code: 'custom',
        message: `unknown field(s) ${unknown.map((f) => `{{${f}}}`).join(', ')}; known: ${TEMPLATE_VARS.join(', ')}`,
      });
    }
  });

/**
 * The one duration format of templates: `1 h 5 min`, `2 min 5 s`, `2 min`, `45 s`; '' when unknown.
 * @internal Exported for its tests only (test/template-vars.test.ts).
 */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds) || seconds < 0) return '';
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  if (h > 0) return `${h} h ${m} min`;
  if (m > 0) return rest > 0 ? `${m} min ${rest} s` : `${m} min`;
  return `${rest} s`;
}

/** E.164 when the record has it, else the raw value; null when the party is anonymous. */
function plainNumber(e164: string | null, raw: string | null): string | null {
  if (e164 !== null) return e164;
  return isAnonymous(raw) ? null : (raw as string).trim();
}

export interface TemplateVarsOptions {
  /** Time zone of `date`, `time` and `dateTime`. Default UTC. */
  timeZone?: string;
  /**
   * How a number is shown (null: anonymous, shown as `anonymous`). Default: E.164, else the raw
   * value. The CRM sinks pass one that also reads national numbers in their default region.
   */
  displayNumber?: (e164: string | null, raw: string | null) => string | null;
  /** Name of the CRM contact the call was matched to (CRM sinks). */
  contactName?: string | null;
  /** The call's archived transcript (CRM sinks with the archive link on), when there is one. */
  transcript?: { key: string; jsonKey: string; url: string } | null;
}

const bullet = (items: string[]) => items.map((i) => `• ${i}`).join('\n');

/** The values of every template variable (and alias) for one call. */
export function templateVars(call: CanonicalCall, opts: TemplateVarsOptions = {}): TemplateVars {
  const timeZone = opts.timeZone ?? 'UTC';
  const shown = opts.displayNumber ?? plainNumber;
  const caller = shown(call.from, call.fromRaw) ?? 'anonymous';
  const callee = shown(call.to, call.toRaw) ?? 'anonymous';
  const started = new Date(call.startedAt);
  const local = Number.isNaN(started.getTime())
    ? { date: '', time: '', dateTime: '' }
    : localDateTime(started, timeZone);
  const keyPoints = call.summary?.keyPoints ?? [];
  const topics = call.summary?.topics ?? [];
  const answers = call.scenarios.flatMap((s) =>
    s.smartAnswers.flatMap((set) =>
      set.setItems.map((item) => ({
        scenario: s.name,
        set: set.setName,
        question: item.question,
        answer: item.answer,
        title: item.title ?? '',
      })),
    ),
  );
  const summary = call.summary?.content.trim() ?? '';
  const answersList = answers.map((a) => `${a.question}: ${a.answer}`).join('\n');
  const transcriptRef = opts.transcript ? opts.transcript.url || opts.transcript.key : '';

  const vars: Record<TemplateVar, unknown> = {
    callId: call.callId,
    key: call.key,
    source: call.source,
    agentId: call.agentId ?? '',
    channelId: call.channelId ?? '',
    // The call's headline, else the title callsync has always made of it.
    title:
      call.title ??
      `${call.direction === 'in' ? 'Inbound' : 'Outbound'} call ${call.direction === 'in' ? caller : callee} (${call.outcome})`,
    provider: call.provider ?? '',
    direction: call.direction === 'in' ? 'incoming' : 'outgoing',
    directionLabel: call.direction === 'in' ? 'Inbound' : 'Outbound',
    outcome: call.outcome,
    caller,
    callee,
    remote: call.direction === 'in' ? caller : callee,
    fromRaw: call.fromRaw ?? '',
    toRaw: call.toRaw ?? '',
    startedAt: call.startedAt,
    endedAt: call.endedAt ?? '',
    date: local.date,
    time: local.time,
    dateTime: local.dateTime,
    timeZone,
    duration: formatDuration(call.durationSec),
    durationSec: call.durationSec ?? '',
    owner: call.owner ?? '',
    users: userDisplayNames(call),
    contactName: opts.contactName ?? '',
    summary,
    keyPoints: keyPoints.map((p) => `- ${p.trim()}`).join('\n'),
    keyPointsList: bullet(keyPoints),
    topics,
    answers,
    answersList,
    // Ready-made blocks that are '' when empty, so a default body has no dangling headings.
    summarySection: summary !== '' ? `Summary:\n${summary}` : '',
    keyPointsSection: keyPoints.length > 0 ? `Key points:\n${bullet(keyPoints)}` : '',
    topicsLine: topics.length > 0 ? `Topics: ${topics.join(', ')}` : '',
    answersSection: answers.length > 0 ? `Answers:\n${answersList}` : '',
    recordingCount: call.recordings.length,
    hasTranscript: hasTranscript(call),
    transcriptKey: opts.transcript?.key ?? '',
    transcriptJsonKey: opts.transcript?.jsonKey ?? '',
    transcriptUrl: opts.transcript?.url ?? '',
    transcriptLine: transcriptRef ? `Transcript: ${transcriptRef}` : '',
    agentLine: call.agentId ? `Agent: ${call.agentId}` : '',
  };
  const aliases = Object.fromEntries(
    Object.entries(TEMPLATE_ALIASES).map(([old, name]) => [old, vars[name]]),
  ) as Record<TemplateAlias, unknown>;
  return { ...vars, ...aliases };
}
