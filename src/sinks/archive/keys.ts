// The archive's layout: where a call's objects live (deterministic, date-partitioned, one name per
// call identity). Everything else that needs an archive key or link (the CRM's transcript links,
// `callsync send-sample`) asks this module and never builds keys itself.
import { callKeySegment, type CanonicalCall } from '../../model/call.js';

/** What the layout reads of a call. */
export type ArchivedCall = Pick<CanonicalCall, 'key' | 'callId' | 'startedAt'>;

/** The day a call's objects are filed under (`YYYY/MM/DD`, UTC, of its start; 1970/01/01 when unreadable). */
export function archiveDay(call: Pick<ArchivedCall, 'startedAt'>): string {
  return datePath(call.startedAt);
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

/** A short name part made of `[A-Za-z0-9_]` only (no `-` or `.`, so a recording's name splits unambiguously). */
function token(value: string, max: number, fallback: string): string {
  return value.replace(/[^A-Za-z0-9_]/g, '_').slice(0, max) || fallback;
}

/**
 * `<prefix>transcripts/YYYY/MM/DD/<readable>-<hash>.json`, `.txt` and `.vcon.json`, dated by the call's start
 * (UTC); `<readable>-<hash>` is the call's segment (`callKeySegment`: the call id made safe, and
 * 16 hex digits of SHA-256 of the exact call key), so distinct calls never share an object.
 */
export function archiveKeys(
  call: ArchivedCall,
  prefix: string | undefined,
): { json: string; text: string; vcon: string } {
  return archiveKeysOn(call, datePath(call.startedAt), prefix);
}

/** The keys `archiveKeys` gives the call when its start falls on `day` (`YYYY/MM/DD`). */
export function archiveKeysOn(
  call: Pick<ArchivedCall, 'key' | 'callId'>,
  day: string,
  prefix: string | undefined,
): { json: string; text: string; vcon: string } {
  const base = `${normalizePrefix(prefix)}transcripts/${day}/${callKeySegment(call)}`;
  return { json: `${base}.json`, text: `${base}.txt`, vcon: `${base}.vcon.json` };
}

/** What every recording key of the call starts with when its start falls on `day` (no other call's does). */
export function recordingKeysPrefixOn(
  call: Pick<ArchivedCall, 'key' | 'callId'>,
  day: string,
  prefix: string | undefined,
): string {
  return `${normalizePrefix(prefix)}recordings/${day}/${callKeySegment(call)}-`;
}

/** `<prefix>recordings/YYYY/MM/DD/<readable>-<hash>-<type>-<n>.<ext>`, beside the transcript's day. */
export function recordingKey(
  call: ArchivedCall,
  type: string,
  index: number,
  extension: string,
  prefix: string | undefined,
): string {
  const ext = token(extension.replace(/^\./, '').toLowerCase(), 8, 'bin');
  return `${recordingKeyStem(call, type, index, prefix)}.${ext}`;
}

/**
 * A recording's key up to the extension (which the download's content type decides): the object
 * is `<stem>.<ext>`. No other object's key starts with `<stem>.`.
 */
export function recordingKeyStem(call: ArchivedCall, type: string, index: number, prefix: string | undefined): string {
  return `${normalizePrefix(prefix)}recordings/${datePath(call.startedAt)}/${callKeySegment(call)}-${token(type, 32, 'recording')}-${index + 1}`;
}

/** An object key as a URL under `baseUrl` (each path segment percent-encoded). */
export function archiveUrl(baseUrl: string, key: string): string {
  return baseUrl.replace(/\/*$/, '/') + key.split('/').map(encodeURIComponent).join('/');
}

export interface TranscriptLink {
  /** Key of the readable transcript (`.txt`). */
  text: string;
  /** Key of the JSON record. */
  json: string;
  /** The transcript's URL under `baseUrl`, or null without one. */
  url: string | null;
}

/** The keys (and URL) of a call's archived transcript, for links from other systems (CRM notes). */
export function transcriptLink(call: ArchivedCall, options: { prefix?: string; baseUrl?: string }): TranscriptLink {
  const keys = archiveKeys(call, options.prefix);
  return { text: keys.text, json: keys.json, url: options.baseUrl ? archiveUrl(options.baseUrl, keys.text) : null };
}
