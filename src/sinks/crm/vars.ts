// The CRM sinks' template variables: the one variable set (../template-vars.ts, documented in the
// README) with the CRM's parts filled in: numbers read in the sink's default region, the matched
// contact, and the link to the archived transcript.
import { hasTranscript, type CanonicalCall } from '../../model/call.js';
import { transcriptLink } from '../archive/keys.js';
import { escapeHtml, oneLine, renderTemplate, wholeGraphemes } from '../template.js';
import { templateVars, type TemplateVars } from '../template-vars.js';
import { displayNumber, type CountryCode } from './phone.js';

interface ArchiveLinkOptions {
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

export function callVars(call: CanonicalCall, opts: CallVarsOptions): TemplateVars {
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

  return templateVars(call, {
    displayNumber: (e164, raw) => displayNumber(e164, raw, opts.defaultRegion),
    contactName: opts.contactName,
    transcript: transcriptKey ? { key: transcriptKey, jsonKey: transcriptJsonKey, url: transcriptUrl } : null,
  });
}

/**
 * Renders an HTML body (HubSpot `hs_call_body`, Pipedrive `note`): values are HTML-escaped, the
 * template's own markup stays, line breaks become `<br>`, and runs of empty lines (from empty
 * values) collapse so an absent summary leaves no gap.
 */
export function renderHtmlBody(template: string, vars: Record<string, unknown>, max = BODY_MAX): string {
  const text = renderTemplate(template, vars, { escape: escapeHtml });
  return cutHtml(
    text
      .split('\n')
      .map((l) => l.trimEnd())
      .join('\n')
      .replace(/\n{3,}/g, '\n\n')
      .trim()
      .replace(/\n/g, '<br>\n'),
    max,
  );
}

/**
 * Longest body in UTF-16 units: HubSpot refuses a text property longer than 65,536 characters
 * (knowledge.hubspot.com, "Property field types in HubSpot", updated 2024-03-14), and a refused body
 * dead-lettered the call. Pipedrive names no limit for an activity's note; the same bound is kept.
 */
const BODY_MAX = 65_536;

/**
 * HTML cut to at most `max` UTF-16 units with an ellipsis: between graphemes (never half an emoji
 * or a letter without its accent), never inside an entity (`&amp;`) or a tag (`<br>`). Tags the
 * template opened stay open; the CRM closes them.
 */
function cutHtml(html: string, max: number): string {
  if (html.length <= max) return html;
  const head = wholeGraphemes(html, max - 1)
    .replace(/&[A-Za-z0-9#]{0,32}$/, '')
    .replace(/<[^<>]*$/, '');
  return `${head.trimEnd()}…`;
}

/** Renders a one-line title: values as text, on one line, cut to `max` characters (`oneLine`). */
export function renderTitle(template: string, vars: Record<string, unknown>, max = 250): string {
  return oneLine(renderTemplate(template, vars), max);
}

/** Default HubSpot / Pipedrive templates (the operator overrides them per sink in the config file). */
/** `{{title}}`: the call's headline when it has one, else `{{directionLabel}} call {{remote}} ({{outcome}})`. */
export const defaultTitleTemplate = '{{title}}';
export const defaultBodyTemplate = [
  '{{summary}}',
  '{{keyPointsSection}}',
  '{{topicsLine}}',
  '{{answersSection}}',
  '{{transcriptLine}}',
].join('\n\n');
