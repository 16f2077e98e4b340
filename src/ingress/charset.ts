// The body's text from its bytes: the `charset` of its Content-Type honoured (UTF-8 when absent), a
// byte-order mark taken off, bytes that are not text in that charset refused. The text it returns
// is what the inbound log stores verbatim, so an archive shows "Müller" whatever the charset was.
import { declaredEncoding, SUPPORTED_NAMES, textIn } from '../charset.js';
import { ApiError, WHOLE_REQUEST } from './errors.js';

/** The encoding the body's charset names, if it is one callsync decodes; else a 415 naming it. */
export function encodingOf(contentType: string): string {
  const declared = declaredEncoding(contentType);
  if ('encoding' in declared) return declared.encoding;
  throw new ApiError(
    415,
    `charset ${JSON.stringify(declared.unsupported.slice(0, 40))} is not supported; send ${SUPPORTED_NAMES}`,
    { pointer: 'content-type' },
  );
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
  const text = textIn(bytes, used);
  if (text === null) {
    const where = used === 'utf-8' ? ` (at byte ${firstInvalidUtf8(bytes)})` : '';
    const hint =
      encoding === 'utf-8' && !bom
        ? '; declare the charset if it is not UTF-8 (e.g. application/json; charset=iso-8859-1)'
        : '';
    throw new ApiError(400, `request body is not valid ${used.toUpperCase()} text${where}${hint}`, {
      pointer: WHOLE_REQUEST,
    });
  }
  return text;
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
