// The text shaping of the two notification channels (SMS cut to length, HTML with escaped values).
// The variables their templates use are the one set of ../template-vars.ts.
import { escapeHtml, renderTemplate } from '../template.js';

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
export function renderText(template: string, fields: Record<string, unknown>): string {
  return renderTemplate(template, fields).replace(/\n{3,}/g, '\n\n').trim();
}

/** Renders the HTML part: from the HTML template (values escaped), or the escaped text in a pre-wrap block. */
export function renderHtml(htmlTemplate: string | undefined, text: string, fields: Record<string, unknown>): string {
  if (htmlTemplate !== undefined) return renderTemplate(htmlTemplate, fields, { escape: escapeHtmlMultiline });
  return `<!doctype html>\n<html><body><div style="font-family: sans-serif; white-space: pre-wrap">${escapeHtml(text)}</div></body></html>`;
}
