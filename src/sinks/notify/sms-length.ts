// What an SMS costs: its encoding and segments, and a cut that keeps it within a number of segments.
// A text of GSM 03.38 characters only (3GPP TS 23.038 §6.2.1: the default alphabet, and its extension
// table whose characters take an escape septet each, so count twice) goes as GSM-7: 160 septets in
// one segment, 153 per segment once concatenated (7 septets carry the concatenation header). Any
// other character makes the whole text UCS-2: 70 UTF-16 code units in one segment, 67 per segment
// concatenated; a character outside the BMP is a surrogate pair, 2 units. A segment boundary never
// splits an escape and its character, nor a surrogate pair: such a character starts the next segment.

/** The GSM 03.38 default alphabet, without the escape (0x1B). */
const GSM7_BASIC = new Set(
  '@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !"#¤%&\'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿abcdefghijklmnopqrstuvwxyzäöñüà',
);
/** The extension table: escape + character, two septets each. */
const GSM7_EXTENSION = new Set('\f^{}\\[~]|€');

type SmsEncoding = 'gsm7' | 'ucs2';

export interface SmsLength {
  encoding: SmsEncoding;
  /** Septets (GSM-7) or UTF-16 code units (UCS-2). */
  units: number;
  segments: number;
}

/**
 * True when every character of the text is in the GSM 03.38 alphabet (with its extension table).
 * @internal Exported for its tests only (test/notify-text.test.ts).
 */
export function isGsm7(text: string): boolean {
  for (const ch of text) if (!GSM7_BASIC.has(ch) && !GSM7_EXTENSION.has(ch)) return false;
  return true;
}

/** Segments of `sizes` packed `perSegment` at a time, none split across two; one when all fit in `single`. */
function pack(sizes: Iterable<number>, single: number, perSegment: number): { units: number; segments: number } {
  let units = 0;
  let segments = 1;
  let used = 0;
  for (const size of sizes) {
    units += size;
    if (used + size > perSegment) {
      segments++;
      used = 0;
    }
    used += size;
  }
  return { units, segments: units <= single ? 1 : segments };
}

/** The encoding, size and segment count of an SMS text (an empty text is one segment). */
export function smsLength(text: string): SmsLength {
  if (isGsm7(text)) {
    const { units, segments } = pack(
      Array.from(text, (ch) => (GSM7_EXTENSION.has(ch) ? 2 : 1)),
      160,
      153,
    );
    return { encoding: 'gsm7', units, segments };
  }
  const { units, segments } = pack(
    Array.from(text, (ch) => ch.length),
    70,
    67,
  );
  return { encoding: 'ucs2', units, segments };
}

const segmenter = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/** Printable ASCII, tab and line feed: one grapheme per code unit (only CR LF would join two). */
const ONE_UNIT_GRAPHEMES = /^[\x20-\x7e\t\n]*$/;

/**
 * Length in user-perceived characters (an emoji or an accented letter counts once).
 * @internal Exported for its tests only (test/notify-text.test.ts).
 */
export function textLength(text: string): number {
  if (ONE_UNIT_GRAPHEMES.test(text)) return text.length;
  let n = 0;
  for (const _ of segmenter.segment(text)) n++;
  return n;
}

export interface SmsLimits {
  /** At most this many segments. */
  maxSegments: number;
  /** At most this many characters (graphemes), when set. */
  maxLength?: number;
}

/**
 * Cuts a text to fit the limits: at the last word boundary when there is one in the last third,
 * never inside a character (grapheme), trailing punctuation dropped, and an ellipsis appended in
 * the text's own encoding — `...` for a GSM-7 text (`…` is not in the GSM alphabet and would make
 * it UCS-2, at more than twice the segments), `…` for a UCS-2 one. A text that fits is only trimmed.
 */
export function truncateSms(text: string, limits: SmsLimits): string {
  const trimmed = text.trim();
  const fits = (t: string) =>
    smsLength(t).segments <= limits.maxSegments &&
    (limits.maxLength === undefined || textLength(t) <= limits.maxLength);
  // No text of more code units than this fits the segments (GSM-7: 160 septets in one segment, 153
  // each in more, a character at least one; UCS-2: fewer): only the head of a longer text is looked
  // at. Segmenting a whole long text into graphemes is quadratic on Node 20 (100,000 characters took
  // 3 s, a 3 MB summary hours, the worker's event loop blocked all the while).
  const bound = Math.max(160, 153 * limits.maxSegments);
  if (trimmed.length <= bound && fits(trimmed)) return trimmed;
  // One unit more than can fit: its last grapheme, perhaps cut in two, is never part of the answer.
  const head = trimmed.length > bound ? trimmed.slice(0, bound + 1) : trimmed;
  const graphemes = Array.from(segmenter.segment(head), (s) => s.segment);
  const ellipsis = (t: string) => (isGsm7(t) ? '...' : '…');
  const finish = (count: number) => {
    let cut = graphemes.slice(0, count).join('');
    const lastSpace = cut.search(/\s\S*$/);
    if (lastSpace >= Math.floor(cut.length * 0.66)) cut = cut.slice(0, lastSpace);
    cut = cut.replace(/[\s,;:.\-–—]+$/u, '');
    return cut + ellipsis(cut);
  };
  // The longest prefix that fits with its ellipsis (a longer prefix never takes fewer segments) ...
  let lo = 0;
  let hi = graphemes.length - 1;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    const prefix = graphemes.slice(0, mid).join('');
    if (fits(prefix + ellipsis(prefix))) lo = mid;
    else hi = mid - 1;
  }
  // ... then cut at a word and checked again: shorter still where the cut changed the encoding.
  for (let count = lo; count > 0; count--) {
    const candidate = finish(count);
    if (fits(candidate)) return candidate;
  }
  return fits('...') ? '...' : '';
}
