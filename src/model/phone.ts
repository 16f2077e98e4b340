// Liberal phone number normalization for incoming data: E.164 when the number can be read as one.
import { asciiDigits } from '../redact.js';
import { phoneLib } from './libphonenumber.js';

/** A number that starts with its area code in brackets (`(201) 555-0123`): written nationally. */
const NATIONAL_AREA_CODE = /^\s*\(\s*\d/;
const ANONYMOUS = /^(<?unknown>?|anonymous|anonym|private|restricted|withheld|unavailable|null)$/i;

/**
 * `+49 211 6355340`, `0049 2116355340`, `492116355340` -> `+492116355340`; the digits of any script
 * read as digits (`+٤٩ ٢١١…` from an Arabic phone, full-width `＋４９…`).
 * Anonymous markers, internal extensions and national numbers without a country code -> null
 * (the raw value is kept beside it in the canonical record): a leading trunk `0` (`030 1234567`),
 * or an area code in brackets first (`(201) 555-0123`, `(030) 1234567`) — written nationally, so its
 * digits are no country code (read as E.164, `(201) 555-0123` was `+2015550123`, a number in Egypt;
 * the CRM sinks read it in their region, and `forget` finds it by its national form).
 */
export function toE164(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null;
  const trimmed = raw.trim();
  if (trimmed === '' || ANONYMOUS.test(trimmed)) return null;
  const ascii = asciiDigits(trimmed).replace(/^tel:/i, '');
  if (NATIONAL_AREA_CODE.test(ascii)) return null;
  let s = ascii.replace(/[\s\-()./]/g, '');
  if (s.startsWith('00')) s = `+${s.slice(2)}`;
  if (/^\+[1-9]\d{6,14}$/.test(s)) return s;
  if (/^[1-9]\d{7,14}$/.test(s)) return `+${s}`;
  return null;
}

export function isAnonymous(raw: string | null | undefined): boolean {
  return raw === null || raw === undefined || raw.trim() === '' || ANONYMOUS.test(raw.trim());
}

const SPELLINGS_CACHED = 1000;
const spellingsCache = new Map<string, string[]>();

/**
 * The spellings to look for a number in text (with numberPattern, src/redact.ts): E.164
 * (`+4917612349876`, also found as `004917…` and `4917…`), with the trunk `0` after the country
 * code (`+49 (0) 176…`), national (`0176 12349876`) and, where that has a trunk prefix, without it
 * (`176 12349876`). A number toE164 cannot read (an extension,
 * a national number without a country code): itself.
 */
export function numberSpellings(raw: string): string[] {
  const e164 = toE164(raw);
  if (e164 === null) return raw.trim() === '' ? [] : [raw.trim()];
  let spellings = spellingsCache.get(e164);
  if (spellings) return spellings;
  const parsed = phoneLib().parsePhoneNumberFromString(e164);
  spellings = [e164];
  if (parsed) {
    const national = parsed.formatNational().replace(/\D/g, '');
    spellings.push(national);
    if (national !== parsed.nationalNumber) {
      spellings.push(`+${parsed.countryCallingCode}${national}`);
      // Without the trunk 0 nor a country code (`176 1234 9876`), as a caller may say it; from 7
      // digits on only, as numberPattern looks for shorter ones exactly.
      if (parsed.nationalNumber.length >= 7) spellings.push(parsed.nationalNumber);
    }
  }
  if (spellingsCache.size >= SPELLINGS_CACHED) spellingsCache.clear();
  spellingsCache.set(e164, spellings);
  return spellings;
}
