// The body's text from its bytes: the `charset` of its Content-Type honoured (UTF-8 when absent), a
// byte-order mark taken off, bytes that are not text in that charset refused. The text it returns
// is what the inbound log stores verbatim, so an archive shows "Müller" whatever the charset was.
import { TextDecoder } from 'node:util';
import { ApiError, WHOLE_REQUEST } from './errors.js';

/**
 * The encodings a webhook body may be in, by their WHATWG names (what `TextDecoder` resolves a
 * label to). WHATWG decodes latin1, iso-8859-1 and us-ascii as windows-1252 (they differ only in
 * bytes 0x80–0x9F, C1 controls in ISO-8859-1, €‚ƒ„… in windows-1252), as browsers do: a sender
 * that says latin1 nearly always means windows-1252, and C1 controls carry nothing in call data.
 */
const SUPPORTED = new Set(['utf-8', 'windows-1252', 'utf-16le', 'utf-16be']);
const SUPPORTED_NAMES = 'utf-8, iso-8859-1 (latin1), windows-1252, us-ascii, utf-16le, utf-16be';

/** One fatal decoder per encoding: a byte sequence that is not text in it throws. */
const decoders = new Map<string, TextDecoder>();
/** Label (lower case) -> encoding, for labels seen; bounded by WHATWG's finite list of labels. */
const encodingOfLabel = new Map<string, string>();

function decoder(encoding: string): TextDecoder {
  let d = decoders.get(encoding);
  if (!d) decoders.set(encoding, (d = new TextDecoder(encoding, { fatal: true })));
  return d;
}

/**
 * Bytes 0x80–0x9F in windows-1252 (WHATWG's index; the five it leaves undefined map to the C1
 * control of the same number). Decoded here rather than by TextDecoder: Node 20.20's TextDecoder
 * decodes "windows-1252" as ISO-8859-1 (byte 0x80 becomes U+0080, not €), and which Node versions
 * get it right varies.
 */
const WINDOWS_1252_HIGH = '€\x81‚ƒ„…†‡ˆ‰Š‹Œ\x8DŽ\x8F\x90‘’“”•–—˜™š›œ\x9DžŸ';
const HAS_C1 = /[\x80-\x9f]/;
const C1 = /[\x80-\x9f]/g;

function decodeWindows1252(bytes: Uint8Array): string {
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('latin1');
  return HAS_C1.test(text) ? text.replace(C1, (ch) => WINDOWS_1252_HIGH[ch.charCodeAt(0) - 0x80]!) : text;
}

// Global, not sticky: a parameter that does not parse is skipped, and a quoted value is consumed
// whole (a `;charset=` inside another parameter's quotes is not one).
const PARAM = /;\s*([^\s;=]+)\s*(?:=\s*(?:"((?:[^"\\]|\\.)*)"|([^;]*)))?/g;

/**
 * The `charset` parameter of a media type (`application/json; charset="UTF-8"` -> `UTF-8`), or null
 * when there is none. Names are case-insensitive; the value may be quoted (RFC 9110 5.6.6).
 * @internal Exported for its tests only (test/ingress-edge.redis.test.ts).
 */
export function charsetParameter(contentType: string): string | null {
  if (!contentType.includes(';')) return null;
  // A real media type is short; the cut keeps a header of many unclosed quotes from costing n².
  for (const m of contentType.slice(0, 512).matchAll(PARAM)) {
    if (m[1]!.toLowerCase() !== 'charset') continue;
    if (m[2] !== undefined) return m[2].replace(/\\(.)/g, '$1');
    return (m[3] ?? '').trim();
  }
  return null;
}

/** The encoding a charset label names, if it is one callsync decodes; else a 415 naming it. */
export function encodingOf(contentType: string): string {
  const label = charsetParameter(contentType);
  if (label === null) return 'utf-8';
  // WHATWG's label matching: ASCII whitespace around it ignored, case-insensitive. Keys are then
  // labels TextDecoder knows (a finite list), so the cache stays small whatever senders write.
  const key = label.replace(/^[\t\n\f\r ]+|[\t\n\f\r ]+$/g, '').toLowerCase();
  let encoding = encodingOfLabel.get(key);
  if (encoding === undefined) {
    try {
      encoding = new TextDecoder(key).encoding;
    } catch {
      encoding = '';
    }
    if (encoding !== '') encodingOfLabel.set(key, encoding);
  }
  if (!SUPPORTED.has(encoding)) {
    throw new ApiError(415, `charset ${JSON.stringify(label.slice(0, 40))} is not supported; send ${SUPPORTED_NAMES}`, {
      pointer: 'content-type',
    });
  }
  return encoding;
}

/** The encoding a byte-order mark at the start announces, or null. */
function byteOrderMark(bytes: Uint8Array): string | null {
  const [a, b, c] = bytes;
  if (a === 0xef && b === 0xbb && c === 0xbf) return 'utf-8';
  if (a === 0xfe && b === 0xff) return 'utf-16be';
  if (a === 0xff && b === 0xfe) return 'utf-16le';
  return null;
}

/**
 * The body as text. A byte-order mark wins over the declared charset, as in WHATWG's `decode`:
 * a body starting with one is never valid JSON in any other charset (ï»¿, þÿ and ÿþ are not JSON
 * whitespace), so this only turns refusals into acceptances. Bytes that are not text in the
 * encoding are a 400: decoding them into U+FFFD would archive garbage without anyone noticing,
 * while a 400 shows in the sender's webhook log.
 */
export function decodeBody(bytes: Uint8Array, encoding: string): string {
  const bom = byteOrderMark(bytes);
  const used = bom ?? encoding;
  // TextDecoder removes its own encoding's mark (ignoreBOM is false); one of another is no mark.
  if (used === 'windows-1252') return decodeWindows1252(bytes); // every byte is a character: never refused
  try {
    return decoder(used).decode(bytes);
  } catch {
    const where = used === 'utf-8' ? ` (at byte ${firstInvalidUtf8(bytes)})` : '';
    const hint =
      encoding === 'utf-8' && !bom
        ? '; declare the charset if it is not UTF-8 (e.g. application/json; charset=iso-8859-1)'
        : '';
    throw new ApiError(400, `request body is not valid ${used.toUpperCase()} text${where}${hint}`, {
      pointer: WHOLE_REQUEST,
    });
  }
}

/**
 * Offset of the first byte that does not belong to a well-formed UTF-8 sequence (RFC 3629), or -1.
 * @internal Exported for its tests only (test/ingress-edge.redis.test.ts).
 */
export function firstInvalidUtf8(bytes: Uint8Array): number {
  let i = bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  while (i < bytes.length) {
    const b = bytes[i]!;
    if (b < 0x80) {
      i++;
      continue;
    }
    let need: number;
    let min = 0x80;
    let max = 0xbf;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) {
      need = 2;
      if (b === 0xe0) min = 0xa0; // overlong
      if (b === 0xed) max = 0x9f; // surrogates
    } else if (b >= 0xf0 && b <= 0xf4) {
      need = 3;
      if (b === 0xf0) min = 0x90; // overlong
      if (b === 0xf4) max = 0x8f; // beyond U+10FFFF
    } else return i;
    for (let k = 1; k <= need; k++) {
      const next = bytes[i + k];
      if (next === undefined || next < (k === 1 ? min : 0x80) || next > (k === 1 ? max : 0xbf)) return i;
    }
    i += need + 1;
  }
  return -1;
}
