// Phone numbers typed on the command line in several words (the shell splits an unquoted
// `0151 12345678` or `+49 151 1234 5678`): `callsync opt-out` and `callsync forget` read them alike.
import type { CountryCode } from 'libphonenumber-js';
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
