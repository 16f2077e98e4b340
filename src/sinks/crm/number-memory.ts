// How a CRM sink names a phone number in its state (HubSpot's `contact:<…>`, Pipedrive's
// `newperson:<…>` and `newperson-lock:<…>`): by its keyed hash (docs/privacy.md, "The keyed hash"),
// as the notification ledger and the timeline's number index do. A plain SHA-256 of a number is the
// number to anyone who reads Redis: a country's numbers are few enough to hash them all.
import type { HmacKeySource } from '../../../queues/privacy-key.js';
import { callHash } from '../../model/call.js';
import { recipientHash } from '../notify/ledger.js';

/**
 * How long after its start a process still reads the plain-hash names an earlier version wrote:
 * they were written with a TTL of a day, so a day (and an hour for a rolling upgrade, old and new
 * processes side by side) after the first new process started none is left. A process started
 * later reads them needlessly for its first day: one GET on a miss, nothing wrong.
 * @internal Exported for its test only (test/crm-number-memory.test.ts).
 */
export const EARLIER_NAMES_FOR_MS = 25 * 3600_000;
const startedAt = Date.now();

/**
 * The names of `e164` in a CRM sink's state: `current` to write and read (the keyed hash; the plain
 * hash only without a privacy key: tools and tests without Redis), then `earlier`, the plain hash
 * an earlier version wrote — during the process' first EARLIER_NAMES_FOR_MS only (`now`: for tests).
 */
export async function numberMemoryNames(
  privacyKey: HmacKeySource | undefined,
  e164: string,
  now: number = Date.now(),
): Promise<{ current: string; earlier: string | null }> {
  const plain = callHash(e164);
  if (privacyKey === undefined) return { current: plain, earlier: null };
  const current = recipientHash(await privacyKey.get(), e164);
  return { current, earlier: now - startedAt < EARLIER_NAMES_FOR_MS ? plain : null };
}
