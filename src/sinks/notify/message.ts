// The text shaping of the two notification channels (plain text, HTML with escaped values; an
// SMS is cut to its segments by ./sms-length.ts). The variables their templates use are the one
// set of ../template-vars.ts.
import { escapeHtml, renderTemplate } from '../template.js';

/** HTML escaping for multi-line values: newlines become line breaks. */
function escapeHtmlMultiline(value: string): string {
  return escapeHtml(value).replace(/\r?\n/g, '<br>\n');
}

/** Renders a template for a plain-text part or an SMS. */
export function renderText(template: string, fields: Record<string, unknown>): string {
  return renderTemplate(template, fields)
    .replace(/\n{3,}/g, '\n\n')
    .trim();
}

/** Renders the HTML part: from the HTML template (values escaped), or the escaped text in a pre-wrap block. */
export function renderHtml(htmlTemplate: string | undefined, text: string, fields: Record<string, unknown>): string {
  if (htmlTemplate !== undefined) return renderTemplate(htmlTemplate, fields, { escape: escapeHtmlMultiline });
  return `<!doctype html>\n<html><body><div style="font-family: sans-serif; white-space: pre-wrap">${escapeHtml(text)}</div></body></html>`;
}
