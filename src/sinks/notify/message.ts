// The fields a notification template may use, taken from the canonical call, and the text
// shaping of the two channels (SMS cut to length, HTML with escaped values).
import { userDisplayNames, type CanonicalCall } from '../../model/call.js';
import { escapeHtml, renderTemplate, templateFields } from '../template.js';
import { formatDuration, localDateTime } from './time.js';

/** Every `{{field}}` a notification template may use (checked when the config is loaded). */
export const MESSAGE_FIELDS = [
  'callId',
  'source',
  'direction',
  'outcome',
  'caller',
  'callee',
  'remote',
  'agent',
  'users',
  'channel',
  'summary',
  'keyPoints',
  'topics',
  'duration',
  'durationSec',
  'date',
  'time',
  'dateTime',
  'timeZone',
  'startedAt',
] as const;

export type MessageField = (typeof MESSAGE_FIELDS)[number];

/** Names in the template that are not message fields (empty when the template is fine). */
export function unknownFields(template: string): string[] {
  const known = new Set<string>(MESSAGE_FIELDS);
  return templateFields(template).filter((f) => !known.has(f));
}

function party(e164: string | null, raw: string | null): string {
  return e164 ?? (raw && raw.trim() !== '' ? raw.trim() : 'anonymous');
}

/** The values of the message fields for one call; times are shown in `timeZone`. */
export function messageFields(call: CanonicalCall, timeZone: string): Record<MessageField, string> {
  const started = new Date(call.startedAt);
  const local = Number.isNaN(started.getTime()) ? { date: '', time: '', dateTime: '' } : localDateTime(started, timeZone);
  const caller = party(call.from, call.fromRaw);
  const callee = party(call.to, call.toRaw);
  return {
    callId: call.callId,
    source: call.source,
    direction: call.direction === 'in' ? 'incoming' : 'outgoing',
    outcome: call.outcome,
    caller,
    callee,
    remote: call.direction === 'in' ? caller : callee,
    agent: call.agentId ?? '',
    users: userDisplayNames(call).join(', '),
    channel: call.channelId ?? '',
    summary: call.summary?.content.trim() ?? '',
    keyPoints: (call.summary?.keyPoints ?? []).map((p) => `- ${p.trim()}`).join('\n'),
    topics: (call.summary?.topics ?? []).join(', '),
    duration: formatDuration(call.durationSec),
    durationSec: call.durationSec === null ? '' : String(call.durationSec),
    date: local.date,
    time: local.time,
    dateTime: local.dateTime,
    timeZone,
    startedAt: call.startedAt,
  };
}

const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** Printable ASCII, tab and line feed: one grapheme per code unit (only CR LF would join two). */
const ONE_UNIT_GRAPHEMES = /^[\x20-\x7e\t\n]*$/;

/** Length in user-perceived characters (an emoji or an accented letter counts once). */
export function textLength(text: string): number {
  if (ONE_UNIT_GRAPHEMES.test(text)) return text.length;
  let n = 0;
  for (const _ of segmenter.segment(text)) n++;
  return n;
}

/**
 * Cuts a text to at most `max` characters: at the last word boundary when there is one in the
 * last third, never inside a character, trailing punctuation dropped, `…` appended.
 */
export function truncateText(text: string, max: number): string {
  const trimmed = text.trim();
  if (textLength(trimmed) <= max) return trimmed;
  const graphemes = Array.from(segmenter.segment(trimmed), (s) => s.segment);
  let cut = graphemes.slice(0, Math.max(0, max - 1)).join('');
  const lastSpace = cut.search(/\s\S*$/);
  if (lastSpace >= Math.floor(cut.length * 0.66)) cut = cut.slice(0, lastSpace);
  return `${cut.replace(/[\s,;:.\-–—]+$/u, '')}…`;
}

/** HTML escaping for multi-line values: newlines become line breaks. */
export function escapeHtmlMultiline(value: string): string {
  return escapeHtml(value).replace(/\r?\n/g, '<br>\n');
}

/** Renders a template for a plain-text part or an SMS. */
export function renderText(template: string, fields: Record<string, string>): string {
  return renderTemplate(template, fields).replace(/\n{3,}/g, '\n\n').trim();
}

/** Renders the HTML part: from the HTML template (values escaped), or the escaped text in a pre-wrap block. */
export function renderHtml(htmlTemplate: string | undefined, text: string, fields: Record<string, string>): string {
  if (htmlTemplate !== undefined) return renderTemplate(htmlTemplate, fields, { escape: escapeHtmlMultiline });
  return `<!doctype html>\n<html><body><div style="font-family: sans-serif; white-space: pre-wrap">${escapeHtml(text)}</div></body></html>`;
}
