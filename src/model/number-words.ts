// Phone numbers as an operator types them — E.164, with 00, national (read in PHONE_DEFAULT_REGION),
// in one word or in several (the shell splits an unquoted `0151 12345678` or `+49 151 1234 5678`) —
// read alike by every door: the command line (`opt-out`, `forget`, `call`, `calls --number`), the
// calls' JSON API (`?number=`, `/api/calls/:ref`) and the dashboard's Calls page.
import type { CountryCode } from 'libphonenumber-js';
import { asciiDigits } from '../redact.js';
import { phoneLibMax } from './libphonenumber.js';

/** Text that is not what was asked for (a number, a number or a call id); the message says why. */
export class NumberWordsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'NumberWordsError';
  }
}

/** A phone number (E.164) or a call id, as `forget` and `call` take one. */
export type NumberOrCallId = { kind: 'number'; e164: string } | { kind: 'call'; callId: string };

function validE164(text: string): string | undefined {
  const parsed = phoneLibMax().parsePhoneNumberFromString(text);
  return parsed?.isValid() ? parsed.number : undefined;
}

/**
 * E.164 form of a number: international (`+4915112345678`), or national (`0151 12345678`) read in
 * `region` when given (PHONE_DEFAULT_REGION). Throws NumberWordsError on anything that is not a
 * valid number.
 */
export function readNumber(number: string, region?: CountryCode): string {
  const trimmed = number.trim();
  let e164: string | undefined;
  if (trimmed.startsWith('+')) e164 = validE164(trimmed);
  else if (region !== undefined) {
    const parsed = phoneLibMax().parsePhoneNumberFromString(trimmed, region);
    e164 = parsed?.isValid() ? parsed.number : undefined;
  }
  if (e164 === undefined)
    throw new NumberWordsError(
      `not a valid phone number: "${number}" (expected E.164 such as +4915112345678${region ? `, or a national number in ${region}` : ''})`,
    );
  return e164;
}

/**
 * One word as a number or a call id: a number when it starts with `+` or `00` (E.164, any spacing; an
 * invalid one throws) or, made of digits and separators only, reads as a valid national number in
 * `region` (PHONE_DEFAULT_REGION) or as an international one without `+`/`00`; a `tel:` URI is its
 * number; anything else is a call id.
 * @internal Exported for its tests (test/privacy-forget-gaps.redis.test.ts …); callers take targetOfWords.
 */
export function parseTarget(input: string, region: CountryCode): NumberOrCallId {
  const given = input.trim();
  // Digits of any script are digits (`٠١٧٠ ١٢٣٤٥٦٧` as a request may spell the number); a call id stays as given.
  const ascii = asciiDigits(given);
  // A `tel:` URI (RFC 3966), as payloads and CRMs spell a number, is that number.
  const text = /^tel:\s*[+\d(]/i.test(ascii) ? ascii.slice(4).trim() : ascii;
  if (text === '') throw new NumberWordsError('expected a phone number (+4915112345678) or a call id');
  const lib = phoneLibMax();
  if (text.startsWith('+') || text.startsWith('00')) {
    const parsed = lib.parsePhoneNumberFromString(text.startsWith('00') ? `+${text.slice(2)}` : text);
    if (!parsed?.isValid())
      throw new NumberWordsError(`not a valid phone number: expected E.164 such as +4915112345678`);
    return { kind: 'number', e164: parsed.number };
  }
  if (/^[\d\s()./-]+$/.test(text)) {
    const national = lib.parsePhoneNumberFromString(text, region);
    if (national?.isValid()) return { kind: 'number', e164: national.number };
    const international = lib.parsePhoneNumberFromString(`+${text.replace(/\D/g, '')}`);
    if (international?.isValid()) return { kind: 'number', e164: international.number };
  }
  return { kind: 'call', callId: given };
}

/** A word that may go on a number begun before it: digits and separators, no `+`. */
const CONTINUATION = /^[\d()./-]+$/;

/** The longest run of `words` from the first on that reads as one valid number, or null. */
function longestNumber(words: string[], region: CountryCode): { number: string; taken: number } | null {
  let found: { number: string; taken: number } | null = null;
  for (let n = 1; n <= words.length; n++) {
    const joined = words.slice(0, n).join(' ');
    if (joined.replace(/\D/g, '').length > 17) break;
    try {
      found = { number: readNumber(joined, region), taken: n };
    } catch {
      // Not a number (yet): the next word may complete it.
    }
  }
  return found;
}

/**
 * The numbers of a list of words, in E.164. A number may come as several words, as the shell
 * splits an unquoted `0151 12345678` or `+49 151 1234 5678`. A word with `+` or a leading 0 (a
 * trunk prefix) begins a new number — but for the area after a bare country code (`+39 06 …`);
 * other words of digits continue it. Of such a group the longest run of words that reads as one
 * valid number is taken, then the next (`212 555 1234 415 555 1234` in the US: two).
 */
export function numbersOfWords(words: string[], region: CountryCode): string[] {
  const groups: string[][] = [];
  for (const word of words.map(asciiDigits)) {
    const group = groups.at(-1);
    const afterCountryCode = group?.length === 1 && /^\+\d{1,3}$/.test(group[0]!);
    if (group && CONTINUATION.test(word) && (!word.startsWith('0') || afterCountryCode)) group.push(word);
    else groups.push([word]);
  }
  const numbers: string[] = [];
  for (const group of groups) {
    for (let i = 0; i < group.length;) {
      const found = longestNumber(group.slice(i), region);
      // No run of words from here is a number: the error names this word.
      if (!found) throw readNumberError(group[i]!, region);
      numbers.push(found.number);
      i += found.taken;
    }
  }
  return numbers;
}

function readNumberError(word: string, region: CountryCode): NumberWordsError {
  try {
    readNumber(word, region);
  } catch (err) {
    if (err instanceof NumberWordsError) return err;
    throw err;
  }
  return new NumberWordsError(`not a valid phone number: "${word}"`);
}

/** A word of a number typed in several words: digits and separators, `+` first. */
const NUMBER_WORD = /^\+?[\d()./-]+$/;

/**
 * The one number or call id of a list of words (`forget`, `call`): one word is a number or a call id
 * (parseTarget); several words are one phone number, read as `opt-out` reads them (`+49 151 1234
 * 5678` unquoted) — never a call id, which is one word, and never two numbers at once. `command`
 * names what takes one, in the error.
 */
export function targetOfWords(words: string[], region: CountryCode, command: string): NumberOrCallId {
  if (words.length === 1) return parseTarget(words[0]!, region);
  const odd = words.find((w) => !NUMBER_WORD.test(asciiDigits(w)));
  if (odd !== undefined)
    throw new NumberWordsError(
      `unexpected argument "${odd === words[0] ? words[1] : odd}": give one call id (one word) or one phone number (+49 151 1234 5678, in one word or several)`,
    );
  const numbers = numbersOfWords(words, region);
  if (numbers.length !== 1)
    throw new NumberWordsError(
      `"${words.join(' ')}" reads as ${numbers.length} phone numbers: ${command} takes one (run it once per number)`,
    );
  return { kind: 'number', e164: numbers[0]! };
}

/**
 * A filter's number (`calls --number`, `/api/calls?number=`, the Calls page's search): one phone
 * number in a form `call` reads (+4930901820, 004930901820, 030 901820 read in `region`, spaced or
 * not), in E.164; null when it is anything else (a call id, two numbers, no number).
 */
export function oneNumber(value: string, region: CountryCode): string | null {
  try {
    const target = targetOfWords(value.trim().split(/\s+/), region, 'a number filter');
    return target.kind === 'number' ? target.e164 : null;
  } catch (err) {
    if (err instanceof NumberWordsError) return null;
    throw err;
  }
}
