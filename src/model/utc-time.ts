// Times in the platform's payloads are ISO 8601 UTC (spec section 2). Date.parse reads a date-time
// without a zone in the server's local time zone (ECMA-262: a date alone is UTC, a date-time local),
// so the same payload gave one start on a server in Berlin and another in New York.

/** An ISO 8601 date-time without a zone designator (`2026-04-08T10:00:00`, `2026-04-08 10:00:00.5`). */
const WITHOUT_ZONE = /^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?$/;

/** Epoch ms of a time as Date.parse reads it, but a date-time without a zone is UTC; NaN for no time. */
export function parseUtc(text: string): number {
  const trimmed = text.trim();
  return Date.parse(WITHOUT_ZONE.test(trimmed) ? `${trimmed}Z` : text);
}
