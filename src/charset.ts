// Text from bytes in the charsets callsync decodes (the webhook's JSON body, the Push API's form):
// which charset label names which encoding, and decoding that says when bytes are not text in it.
// What becomes of such bytes is the caller's: src/ingress/charset.ts refuses the body, the Push API
// reads the field as windows-1252 (src/sources/push.ts).
import { TextDecoder } from 'node:util';

/**
 * The encodings a webhook body may be in, by their WHATWG names (what `TextDecoder` resolves a
 * label to). WHATWG decodes latin1, iso-8859-1 and us-ascii as windows-1252 (they differ only in
 * bytes 0x80–0x9F, C1 controls in ISO-8859-1, €‚ƒ„… in windows-1252), as browsers do: a sender
 * that says latin1 nearly always means windows-1252, and C1 controls carry nothing in call data.
 */
const SUPPORTED = new Set(['utf-8', 'windows-1252', 'utf-16le', 'utf-16be']);
export const SUPPORTED_NAMES = 'utf-8, iso-8859-1 (latin1), windows-1252, us-ascii, utf-16le, utf-16be';

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

/**
 * The encoding the `charset` of a media type names (UTF-8 when there is none) if it is one callsync
 * decodes, else `unsupported` with the label as sent.
 */
export function declaredEncoding(contentType: string): { encoding: string } | { unsupported: string } {
  const label = charsetParameter(contentType);
  if (label === null) return { encoding: 'utf-8' };
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
  return SUPPORTED.has(encoding) ? { encoding } : { unsupported: label };
}

/**
 * The bytes as text in `encoding` (one `SUPPORTED`), or null when they are not text in it; windows-1252
 * reads every byte. TextDecoder removes its own encoding's byte-order mark (ignoreBOM is false); one
 * of another is no mark.
 */
export function textIn(bytes: Uint8Array, encoding: string): string | null {
  if (encoding === 'windows-1252') return decodeWindows1252(bytes);
  try {
    return decoder(encoding).decode(bytes);
  } catch {
    return null;
  }
}
