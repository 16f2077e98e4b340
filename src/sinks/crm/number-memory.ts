// How a CRM sink names a phone number in its state (HubSpot's `contact:<…>`, Pipedrive's
// `newperson:<…>` and `newperson-lock:<…>`): by its keyed hash (docs/privacy.md, "The keyed hash"),
// as the notification ledger and the timeline's number index do. A plain SHA-256 of a number is the
// number to anyone who reads Redis: a country's numbers are few enough to hash them all.
import type { HmacKeySource } from '../../../queues/privacy-key.js';
import { callHash } from '../../model/call.js';
import { recipientHash } from '../notify/ledger.js';

/**
 * The names of `e164` in a CRM sink's state: `current` to write and read (the keyed hash; the plain
 * hash only without a privacy key: tools and tests without Redis), then `earlier`, the plain hash
 * an earlier version wrote (read until it expires, a day at most).
 */
export async function numberMemoryNames(
  privacyKey: HmacKeySource | undefined,
  e164: string,
): Promise<{ current: string; earlier: string | null }> {
  const plain = callHash(e164);
  if (privacyKey === undefined) return { current: plain, earlier: null };
  return { current: recipientHash(await privacyKey.get(), e164), earlier: plain };
}
