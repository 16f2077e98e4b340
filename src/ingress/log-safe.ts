// A refusal's detail and pointer made fit for the logs and for the refusals kept under a call id
// (queues/timeline.ts, Refusal): no payload text, no phone number. Used by the ingress for a webhook
// it refuses and by the poller for a channel event it dead-letters.
import { maskDigitRuns } from '../redact.js';

/**
 * A refusal's detail fit for the logs: quoted text (values from the payload, JSON.parse's snippet
 * of the body) becomes "…", so no payload text or phone number reaches a log line.
 */
export function logSafeDetail(detail: string): string {
  return detail
    .replace(/"[^]*"/g, '"…"')
    .replace(/'[^']*'/g, "'…'")
    .slice(0, 300);
}

/** Characters of a JSON pointer written to a log line. */
const MAX_LOGGED_POINTER = 200;

/**
 * A pointer fit for the logs: it is made of the sender's keys, which may be phone numbers or
 * sentences. Each segment's digit runs are masked (maskDigitRuns), a segment with whitespace
 * becomes `…`, and the pointer is cut to 200 characters. The answer to the sender keeps it whole.
 */
export function logSafePointer(pointer: string | undefined): string | undefined {
  if (pointer === undefined) return undefined;
  const safe = pointer
    .split('/')
    .map((segment) => {
      const key = segment.replace(/~1/g, '/').replace(/~0/g, '~');
      return /\s/.test(key) ? '…' : maskDigitRuns(key).replace(/~/g, '~0').replace(/\//g, '~1');
    })
    .join('/');
  return safe.length <= MAX_LOGGED_POINTER ? safe : `${safe.slice(0, MAX_LOGGED_POINTER - 1)}…`;
}

/** A kept refusal's detail: as logged, and no digit run a number could hide in (a detail may quote the sender's values). */
export function refusalDetail(detail: string): string {
  return maskDigitRuns(logSafeDetail(detail));
}
