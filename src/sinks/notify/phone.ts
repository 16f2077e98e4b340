// Which numbers may get an SMS: valid E.164 mobile numbers only. Everything else is a deliberate
// skip with a reason (anonymous caller, unusable number, landline), never a failure.
import { phoneLibMax } from '../../model/libphonenumber.js';
import { isAnonymous } from '../../model/phone.js';

/**
 * Number types that can receive an SMS. FIXED_LINE_OR_MOBILE is how the metadata classifies
 * numbers of plans that do not tell the two apart (US, Canada); they are accepted.
 */
const TEXTABLE = new Set(['MOBILE', 'FIXED_LINE_OR_MOBILE']);

export type RecipientCheck = { ok: true; number: string } | { ok: false; reason: string };

/** Parses an E.164 number (`+` and country code required); undefined when it is not a valid number. */
export function parseE164(value: string): string | undefined {
  const trimmed = value.trim();
  if (!trimmed.startsWith('+')) return undefined;
  const parsed = phoneLibMax().parsePhoneNumberFromString(trimmed);
  return parsed?.isValid() ? parsed.number : undefined;
}

/**
 * Checks a number for an SMS. `raw` is the number as the platform sent it (to tell an anonymous
 * caller from an unusable number in the reason).
 */
export function checkSmsRecipient(number: string | null, raw: string | null = null): RecipientCheck {
  if (number === null || number.trim() === '') {
    return { ok: false, reason: isAnonymous(raw) ? 'anonymous caller' : 'caller number unusable' };
  }
  const parsed = number.trim().startsWith('+') ? phoneLibMax().parsePhoneNumberFromString(number.trim()) : undefined;
  if (!parsed?.isValid()) return { ok: false, reason: 'not a valid E.164 number' };
  const type = parsed.getType();
  if (type === undefined || !TEXTABLE.has(type)) {
    return {
      ok: false,
      reason:
        type === 'FIXED_LINE' ? 'landline (not a mobile number)' : `not a mobile number (${type ?? 'unknown type'})`,
    };
  }
  return { ok: true, number: parsed.number };
}
