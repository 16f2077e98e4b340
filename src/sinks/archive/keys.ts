// Where a call's archive objects live: deterministic, date-partitioned, containing the call id.
import type { CanonicalCall } from '../../model/call.js';

/** Keeps ids safe as one path segment in S3 and on disk. */
export function safeSegment(value: string): string {
  const cleaned = value.replace(/[^A-Za-z0-9._=-]/g, '_').replace(/^\.+/, '_');
  return cleaned.slice(0, 200) || '_';
}

function datePath(iso: string): string {
  const d = new Date(iso);
  const valid = !Number.isNaN(d.getTime());
  const t = valid ? d : new Date(0);
  const mm = String(t.getUTCMonth() + 1).padStart(2, '0');
  const dd = String(t.getUTCDate()).padStart(2, '0');
  return `${t.getUTCFullYear()}/${mm}/${dd}`;
}

/** Normalizes a prefix to `''` or `something/`. */
export function normalizePrefix(prefix: string | undefined): string {
  const p = (prefix ?? '').replace(/^\/+/, '');
  return p === '' || p.endsWith('/') ? p : `${p}/`;
}

/** `<prefix>transcripts/YYYY/MM/DD/<callId>.json` and `.txt`, dated by the call's start (UTC). */
export function archiveKeys(call: CanonicalCall, prefix: string | undefined): { json: string; text: string } {
  const base = `${normalizePrefix(prefix)}transcripts/${datePath(call.startedAt)}/${safeSegment(call.callId)}`;
  return { json: `${base}.json`, text: `${base}.txt` };
}

/** `<prefix>recordings/YYYY/MM/DD/<callId>-<type>-<n>.<ext>`, beside the transcript's day. */
export function recordingKey(call: CanonicalCall, type: string, index: number, extension: string, prefix: string | undefined): string {
  const ext = extension.replace(/^\./, '') || 'bin';
  return `${normalizePrefix(prefix)}recordings/${datePath(call.startedAt)}/${safeSegment(call.callId)}-${safeSegment(type)}-${index + 1}.${safeSegment(ext)}`;
}
