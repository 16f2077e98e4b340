// `callsync opt-out add|remove|list`: numbers that never get an SMS (the notification sinks' list).
import type { RedisClient } from '../../queues/connection.js';
import { redisKeys } from '../../queues/keys.js';
import type { Config } from '../config/index.js';
import { maskPhone } from '../log.js';
import { OptOutList } from '../sinks/notify/opt-out.js';
import { UsageError, type CliIo } from './io.js';
import type { CountryCode } from 'libphonenumber-js';

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
function numbersOfWords(words: string[], region: CountryCode): string[] {
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

export async function optOut(
  config: Config,
  redis: RedisClient,
  action: string,
  numbers: string[],
  io: CliIo,
): Promise<number> {
  const list = new OptOutList(redis, redisKeys(config.redis).area('optout'));
  if (action === 'list') {
    const all = await list.list();
    if (all.length === 0) io.out('the opt-out list is empty');
    for (const n of all) io.out(n);
    return 0;
  }
  if (numbers.length === 0)
    throw new UsageError(`opt-out ${action} needs at least one NUMBER (E.164, e.g. +4915112345678)`);
  // National numbers (0151 …) are read in PHONE_DEFAULT_REGION (default DE), like the CRM sinks read them.
  const region = config.privacy.defaultRegion;
  const normalized = numbersOfWords(numbers, region);
  if (action === 'add') {
    const added = await list.add(...normalized);
    io.out(
      `added ${added} number(s)${added < normalized.length ? ` (${normalized.length - added} already on the list)` : ''}: ${normalized.map((n) => maskPhone(n)).join(', ')}`,
    );
    return 0;
  }
  const removed = await list.remove(...normalized);
  io.out(
    `removed ${removed} number(s)${removed < normalized.length ? ` (${normalized.length - removed} were not on the list)` : ''}`,
  );
  return 0;
}
