// Pieces shared by the CRM sink types: option schemas and the per-call record memory.
import { z } from 'zod';
import { callHash } from '../../model/call.js';
import type { KeyValueStore } from '../../state/kv.js';
import { SinkError } from '../../errors.js';

export { regionSchema, resolveRegion } from '../region.js';

/** A `{{variable}}` template (the one variable set; a typo is a config error, not an empty note). */
export { templateSchema } from '../template-vars.js';

export const queueLimitSchema = z.strictObject({
  /** Jobs (calls) per window; each call makes a few requests (see docs/crm.md). */
  max: z.int().min(1),
  durationMs: z.int().min(1),
});

export const archiveLinkSchema = z.strictObject({
  enabled: z.boolean().default(true),
  /** The archive sink's key prefix; default ARCHIVE_S3_PREFIX. */
  prefix: z.string().optional(),
  /** Where the keys can be opened, e.g. an internal S3 console or CDN URL. Without it the key is shown. */
  baseUrl: z.url().optional(),
});

/**
 * Whether a CRM token can go into a header (or query) verbatim: printable ASCII only. Whitespace,
 * a line break or a non-ASCII character inside one is a copy-and-paste mistake, refused with the
 * configuration rather than answered 401 (or refused by the HTTP client) at every call.
 */
const isPlainToken = (token: string): boolean => /^[\x21-\x7e]+$/.test(token);

/**
 * The token a CRM sink uses — its own option, else the environment variable's — trimmed, or what is
 * wrong with it: none (`missing`), or one that is not a plain token (named by where it came from).
 * Checked with the configuration (`check`) and again by the sink.
 */
export function crmToken(
  own: string | undefined,
  fromEnv: string | undefined,
  names: { option: string; variable: string; what: string; missing: string },
): { token: string } | { problem: string } {
  const token = (own ?? fromEnv)?.trim();
  if (!token) return { problem: names.missing };
  if (!isPlainToken(token)) {
    const from = own !== undefined ? `the sink's ${names.option}` : names.variable;
    return {
      problem: `the ${names.what} (${from}) contains spaces, line breaks or non-ASCII characters; copy it again`,
    };
  }
  return { token };
}

export const timeoutSchema = z.int().min(100).max(120_000).default(15_000);

/** What a CRM sink remembers about one call: the CRM record it wrote, so a redelivery updates it. */
export interface CrmRecord {
  id: string;
  contactId?: string | null;
  /** Pipedrive: the activity behind the call log (the part that can be edited). */
  activityId?: string | null;
}

const PENDING_TTL_MS = 30 * 24 * 3600 * 1000;

/**
 * Per-call memory in the sink's KeyValueStore:
 *   `rec:<hash>`      the CRM record id (kept; a redelivery months later still updates)
 *   `pending:<hash>`  set just before a create request; when it is found on a later try without
 *                     `rec:`, an earlier try may have created the record and died before storing
 *                     its id, so the adapter looks the record up in the CRM before creating again.
 */
export class RecordMemory {
  constructor(private readonly kv: KeyValueStore) {}

  async get(callKey: string): Promise<CrmRecord | null> {
    const raw = await this.kv.get(`rec:${callHash(callKey)}`);
    if (raw === null) return null;
    try {
      const parsed = JSON.parse(raw) as CrmRecord;
      return typeof parsed.id === 'string' && parsed.id !== '' ? parsed : null;
    } catch {
      return null;
    }
  }

  async set(callKey: string, record: CrmRecord): Promise<void> {
    await this.kv.set(`rec:${callHash(callKey)}`, JSON.stringify(record));
  }

  async forget(callKey: string): Promise<void> {
    await this.kv.delete(`rec:${callHash(callKey)}`);
  }

  /** True when no earlier try started creating this call's record (the marker is now set). */
  async beginCreate(callKey: string, now: Date): Promise<boolean> {
    return this.kv.setIfAbsent(`pending:${callHash(callKey)}`, now.toISOString(), PENDING_TTL_MS);
  }

  /** When the first try that may have created this call's record began, or null without a marker. */
  async pendingSince(callKey: string): Promise<Date | null> {
    const raw = await this.kv.get(`pending:${callHash(callKey)}`);
    const t = raw === null ? NaN : Date.parse(raw);
    return Number.isNaN(t) ? null : new Date(t);
  }

  async endCreate(callKey: string): Promise<void> {
    await this.kv.delete(`pending:${callHash(callKey)}`);
  }

  /**
   * Runs a create request. When it fails with an answer that proves nothing was created (429,
   * 401/403, 4xx), the marker is dropped so the next try needs no lookup; after a network error
   * or a 5xx the outcome is unknown and the marker stays.
   */
  async creating<T>(callKey: string, create: () => Promise<T>): Promise<T> {
    try {
      return await create();
    } catch (err) {
      if (err instanceof SinkError && err.kind !== 'transient') await this.endCreate(callKey);
      throw err;
    }
  }
}

/** Milliseconds until the next UTC midnight (daily CRM budgets). */
export function untilUtcMidnight(now: Date): number {
  const next = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return Math.max(1000, next - now.getTime());
}

/** Offset of `timeZone` from UTC at `at` (ms; positive east of UTC), via Intl. */
function zoneOffsetMs(timeZone: string, at: number): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    second: 'numeric',
  }).formatToParts(new Date(at));
  const n = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  const wall = Date.UTC(n('year'), n('month') - 1, n('day'), n('hour'), n('minute'), n('second'));
  return wall - (at - (at % 1000));
}

/** Whether Intl knows this time zone name (IANA, e.g. `America/New_York`, or a link such as `US/Eastern`). */
export function isKnownTimeZone(timeZone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone });
    return true;
  } catch {
    return false;
  }
}

/**
 * Milliseconds until the next midnight in `timeZone` (a CRM's daily budget that resets on the
 * account's local day). Daylight-saving changes are taken into account: the offset is read at the
 * midnight itself.
 */
export function untilMidnightIn(timeZone: string, now: Date): number {
  const at = now.getTime();
  const local = new Date(at + zoneOffsetMs(timeZone, at));
  const nextLocalMidnight = Date.UTC(local.getUTCFullYear(), local.getUTCMonth(), local.getUTCDate() + 1);
  // The offset at midnight may differ from now's (a DST change today): read it there, twice to settle.
  let instant = nextLocalMidnight - zoneOffsetMs(timeZone, nextLocalMidnight - zoneOffsetMs(timeZone, at));
  instant = nextLocalMidnight - zoneOffsetMs(timeZone, instant);
  return Math.max(1000, instant - at);
}

/** `YYYY-MM-DD HH:MM:SS` in UTC (Pipedrive's call log times). */
export function utcDateTime(iso: string): string {
  return new Date(iso).toISOString().slice(0, 19).replace('T', ' ');
}
