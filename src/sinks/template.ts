// `{{field}}` templates the operator writes in the config file (notification texts, CRM notes).
// Deliberately tiny: no logic, no partials, nothing evaluated; only values are substituted, and
// only values pass through `escape`, so the template's own markup stays as written.

const PLACEHOLDER = /\{\{\s*([A-Za-z_][A-Za-z0-9_.]*)\s*\}\}/g;

export interface RenderOptions {
  /** Applied to every substituted value (e.g. escapeHtml for an HTML body). Default: none. */
  escape?: (value: string) => string;
}

/** The text of one value: null/undefined -> '', arrays joined with ', ', objects -> ''. */
function toText(value: unknown): string {
  if (value === null || value === undefined) return '';
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (Array.isArray(value))
    return value
      .map(toText)
      .filter((s) => s !== '')
      .join(', ');
  return '';
}

function lookup(vars: Record<string, unknown>, path: string): unknown {
  let current: unknown = vars;
  for (const part of path.split('.')) {
    if (current === null || typeof current !== 'object' || !Object.hasOwn(current, part)) return undefined;
    current = (current as Record<string, unknown>)[part];
  }
  return current;
}

/** Replaces each `{{ name }}` (dots reach into objects) by its value; unknown names become ''. */
export function renderTemplate(template: string, vars: Record<string, unknown>, opts: RenderOptions = {}): string {
  const escape = opts.escape ?? ((s: string) => s);
  return template.replace(PLACEHOLDER, (_match, name: string) => escape(toText(lookup(vars, name))));
}

/** The field names a template uses, in order of first appearance (for config validation). */
export function templateFields(template: string): string[] {
  const names = new Set<string>();
  for (const m of template.matchAll(PLACEHOLDER)) names.add(m[1] as string);
  return [...names];
}

/** C0 and C1 control characters (NUL, ESC, DEL, NEL …) besides the whitespace `\s` already matches. */
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const CONTROLS = /[\u0000-\u0008\u000e-\u001f\u007f-\u009f]/g;
/**
 * Bidi embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069): one left open in a value
 * reverses the rest of the line, e.g. the numbers after a caller's name ("Trojan Source" spoofing).
 */
const BIDI_CONTROLS = /[\u202a-\u202e\u2066-\u2069]/g;
const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/**
 * Text as one line of at most `max` UTF-16 units (a CRM title, an e-mail subject): line breaks,
 * other whitespace and control characters fold into single spaces, bidi controls are dropped (each
 * script keeps its own direction); a longer text is cut with an ellipsis between graphemes (half a
 * surrogate pair is invalid UTF-16, half an emoji sequence or a letter without its accent shows wrong).
 */
export function oneLine(text: string, max: number): string {
  const line = text.replace(BIDI_CONTROLS, '').replace(CONTROLS, ' ').replace(/\s+/g, ' ').trim();
  if (line.length <= max) return line;
  return `${wholeGraphemes(line, max - 1).trimEnd()}…`;
}

/** The longest start of `text` of at most `max` UTF-16 units that ends between graphemes. */
export function wholeGraphemes(text: string, max: number): string {
  // Only the head and one unit more are segmented (a long text is slow to): a grapheme that goes
  // on past `max` shows as a segment too long to fit, so boundaries are those of the whole text.
  let cut = '';
  for (const { segment } of graphemes.segment(text.slice(0, max + 1))) {
    if (cut.length + segment.length > max) break;
    cut += segment;
  }
  return cut;
}

const HTML_ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Escapes text for HTML element content and attribute values. */
export function escapeHtml(value: string): string {
  return value.replace(/[&<>"']/g, (c) => HTML_ESCAPES[c] as string);
}
