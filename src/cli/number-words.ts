// Phone numbers typed on the command line in several words (the shell splits an unquoted
// `0151 12345678` or `+49 151 1234 5678`): `callsync opt-out`, `forget`, `call` and `calls --number`
// read them alike.
import type { CountryCode } from 'libphonenumber-js';
import { ForgetInputError, parseTarget, type ForgetTarget } from '../privacy/forget.js';
import { OptOutList } from '../sinks/notify/opt-out.js';
import { UsageError } from './io.js';

/** A word that may go on a number begun before it: digits and separators, no `+`. */
const CONTINUATION = /^[\d()./-]+$/;

/** The longest run of `words` from the first on that reads as one valid number, or null. */
function longestNumber(words: string[], region: CountryCode): { number: string; taken: number } | null {
  let found: { number: string; taken: number } | null = null;
  for (let n = 1; n <= words.length; n++) {
    const joined = words.slice(0, n).join(' ');
    if (joined.replace(/\D/g, '').length > 17) break;
    try {
      found = { number: OptOutList.normalize(joined, region), taken: n };
    } catch {
      // Not a number (yet): the next word may complete it.
    }
  }
  return found;
}

/**
 * The numbers of the command line, in E.164. A number may come as several words, as the shell
 * splits an unquoted `0151 12345678` or `+49 151 1234 5678`. A word with `+` or a leading 0 (a
 * trunk prefix) begins a new number — but for the area after a bare country code (`+39 06 …`);
 * other words of digits continue it. Of such a group the longest run of words that reads as one
 * valid number is taken, then the next (`212 555 1234 415 555 1234` in the US: two).
 */
export function numbersOfWords(words: string[], region: CountryCode): string[] {
  const groups: string[][] = [];
  for (const word of words) {
    const group = groups.at(-1);
    const afterCountryCode = group?.length === 1 && /^\+\d{1,3}$/.test(group[0]!);
    if (group && CONTINUATION.test(word) && (!word.startsWith('0') || afterCountryCode)) group.push(word);
    else groups.push([word]);
  }
  const numbers: string[] = [];
  for (const group of groups) {
    for (let i = 0; i < group.length;) {
      const found = longestNumber(group.slice(i), region);
      if (!found) {
        // No run of words from here is a number: the error names this word.
        try {
          OptOutList.normalize(group[i]!, region);
        } catch (err) {
          throw new UsageError((err as Error).message);
        }
        throw new UsageError(`not a valid phone number: "${group[i]}"`);
      }
      numbers.push(found.number);
      i += found.taken;
    }
  }
  return numbers;
}

/** A word of a number typed in several words: digits and separators, `+` first. */
const NUMBER_WORD = /^\+?[\d()./-]+$/;

/**
 * The one number or call id of the command line (`forget`, `call`): one word is a number or a call
 * id (parseTarget: a number starts with + or 00, or reads as a valid national number in `region`);
 * several words are one phone number, read as `opt-out` reads them (`+49 151 1234 5678` unquoted) —
 * never a call id, which is one word, and never two numbers at once.
 */
export function targetOfWords(words: string[], region: CountryCode, command: string): ForgetTarget {
  if (words.length === 1) {
    try {
      return parseTarget(words[0]!, region);
    } catch (err) {
      if (err instanceof ForgetInputError) throw new UsageError(err.message);
      throw err;
    }
  }
  const odd = words.find((w) => !NUMBER_WORD.test(w));
  if (odd !== undefined)
    throw new UsageError(
      `unexpected argument "${odd === words[0] ? words[1] : odd}": give one call id (one word) or one phone number (+49 151 1234 5678, in one word or several)`,
    );
  const numbers = numbersOfWords(words, region);
  if (numbers.length !== 1)
    throw new UsageError(
      `"${words.join(' ')}" reads as ${numbers.length} phone numbers: ${command} takes one (run it once per number)`,
    );
  return { kind: 'number', e164: numbers[0]! };
}

/** `calls --number`: one phone number in a format `call` reads (in one word), in E.164; else a usage error. */
export function numberOption(value: string, region: CountryCode): string {
  const bad = () =>
    new UsageError(
      `--number must be one phone number (+4930901820, 004930901820, or 030 901820 read in PHONE_DEFAULT_REGION, ${region}), got "${value}"`,
    );
  let target: ForgetTarget;
  try {
    target = targetOfWords(value.trim().split(/\s+/), region, 'calls --number');
  } catch (err) {
    if (err instanceof UsageError) throw bad();
    throw err;
  }
  if (target.kind !== 'number') throw bad();
  return target.e164;
}
