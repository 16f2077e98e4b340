// Phone numbers typed on the command line in several words (the shell splits an unquoted
// `0151 12345678` or `+49 151 1234 5678`): `callsync opt-out`, `forget` and `call` read them alike,
// as the calls' API and the Calls page do (src/model/number-words.ts); a bad one is a usage error.
import type { CountryCode } from 'libphonenumber-js';
import * as words from '../model/number-words.js';
import { UsageError } from './io.js';

function usage<T>(read: () => T): T {
  try {
    return read();
  } catch (err) {
    if (err instanceof words.NumberWordsError) throw new UsageError(err.message);
    throw err;
  }
}

/** The numbers of the command line, in E.164 (numbersOfWords); a word that is none: a usage error. */
export function numbersOfWords(list: string[], region: CountryCode): string[] {
  return usage(() => words.numbersOfWords(list, region));
}

/** The one number or call id of the command line (targetOfWords); else a usage error. */
export function targetOfWords(list: string[], region: CountryCode, command: string): words.NumberOrCallId {
  return usage(() => words.targetOfWords(list, region, command));
}
