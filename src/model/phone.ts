// Liberal phone number normalization for incoming data: E.164 when the number can be read as one.

const ANONYMOUS = /^(<?unknown>?|anonymous|anonym|private|restricted|withheld|unavailable|null)$/i;

/**
 * `+49 211 6355340`, `0049 2116355340`, `492116355340` -> `+492116355340`.
 * Anonymous markers, internal extensions and national numbers without a country code -> null
 * (the raw value is kept beside it in the canonical record).
 */
export function toE164(raw: string | null | undefined): string | null {
  if (raw === null || raw === undefined) return null;
  const trimmed = raw.trim();
  if (trimmed === '' || ANONYMOUS.test(trimmed)) return null;
  let s = trimmed.replace(/^tel:/i, '').replace(/[\s\-()./]/g, '');
  if (s.startsWith('00')) s = `+${s.slice(2)}`;
  if (/^\+[1-9]\d{6,14}$/.test(s)) return s;
  if (/^[1-9]\d{7,14}$/.test(s)) return `+${s}`;
  return null;
}

export function isAnonymous(raw: string | null | undefined): boolean {
  return raw === null || raw === undefined || raw.trim() === '' || ANONYMOUS.test(raw.trim());
}
