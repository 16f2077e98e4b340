// Phone matching for the CRM sinks: every number, ours and the CRM's, is brought to E.164 with
// libphonenumber (national numbers read in the configured default region) before comparing, so a
// contact stored as `0211 6355340` or `+49 211 6355340` matches a call from `+492116355340`.
import type { CountryCode } from 'libphonenumber-js';
import { phoneLib } from '../../model/libphonenumber.js';
import type { CanonicalCall } from '../../model/call.js';
import { isAnonymous } from '../../model/phone.js';

export type { CountryCode };

/** E.164 of any written form of a number, or null when it is anonymous or not a phone number. */
function normalizePhone(raw: string | null | undefined, defaultRegion: CountryCode): string | null {
  if (raw === null || raw === undefined || isAnonymous(raw)) return null;
  const trimmed = raw.trim().replace(/^tel:/i, '');
  // `0049 ...` is the international prefix of most of Europe; libphonenumber only knows it per region.
  const value = trimmed.startsWith('00') ? `+${trimmed.slice(2)}` : trimmed;
  try {
    const parsed = phoneLib().parsePhoneNumberFromString(value, defaultRegion);
    if (!parsed || !parsed.isPossible()) return null;
    return parsed.number;
  } catch {
    return null;
  }
}

/** Whether two written numbers are the same line. Anonymous or unreadable numbers never match. */
export function samePhone(
  a: string | null | undefined,
  b: string | null | undefined,
  defaultRegion: CountryCode,
): boolean {
  const x = normalizePhone(a, defaultRegion);
  return x !== null && x === normalizePhone(b, defaultRegion);
}

/** The ways a CRM may have stored a number, used as search terms (then verified by `samePhone`). */
export interface PhoneForms {
  e164: string;
  /** National significant number, digits only (`2116355340`). */
  nationalNumber: string;
  /** `0211 6355340` */
  national: string;
  /** `+49 211 6355340` */
  international: string;
}

export function phoneForms(e164: string): PhoneForms | null {
  const parsed = phoneLib().parsePhoneNumberFromString(e164);
  if (!parsed) return null;
  return {
    e164: parsed.number,
    nationalNumber: parsed.nationalNumber,
    national: parsed.formatNational(),
    international: parsed.formatInternational(),
  };
}

/**
 * The other party of the call, whose contact the call belongs to: the caller of an inbound call,
 * the callee of an outbound one. Null when that party is anonymous or the number is unreadable.
 */
export function counterpartNumber(call: CanonicalCall, defaultRegion: CountryCode): string | null {
  const [e164, raw] = call.direction === 'in' ? [call.from, call.fromRaw] : [call.to, call.toRaw];
  if (e164 !== null) return normalizePhone(e164, defaultRegion);
  return normalizePhone(raw, defaultRegion);
}

/** A number for a CRM field: E.164 when readable, else the raw value, else null (anonymous). */
export function displayNumber(e164: string | null, raw: string | null, defaultRegion: CountryCode): string | null {
  if (e164 !== null) return e164;
  if (raw === null || isAnonymous(raw)) return null;
  return normalizePhone(raw, defaultRegion) ?? raw.trim();
}
