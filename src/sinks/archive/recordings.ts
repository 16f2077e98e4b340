// Recordings of channel calls (spec 2.7 Recording: relative downloadUrl, type voicemail /
// in_call_feature / call_recorder), downloaded with the telephony API's auth and streamed into the
// archive beside the call's transcript. Nothing is held whole in memory: the download is piped
// into the object store (multipart upload on S3, a temp file + rename on disk).
import type { Logger } from 'pino';
import type { CanonicalCall } from '../../model/call.js';
import type { Readable } from 'node:stream';
import { deadline } from '../../deadline.js';
import { PermanentError, TransientError } from '../../errors.js';
import { sinkErrorOf } from '../telephony-errors.js';
import type { TelephonyClient } from '../../telephony/types.js';
import { recordingKey } from './keys.js';
import type { ObjectStore } from './store.js';

const EXTENSIONS: Record<string, string> = {
  'audio/wav': 'wav',
  'audio/wave': 'wav',
  'audio/x-wav': 'wav',
  'audio/vnd.wave': 'wav',
  'audio/mpeg': 'mp3',
  'audio/mp3': 'mp3',
  'audio/ogg': 'ogg',
  'audio/opus': 'opus',
  'audio/webm': 'webm',
  'audio/mp4': 'm4a',
  'audio/aac': 'aac',
  'audio/flac': 'flac',
  'audio/x-flac': 'flac',
  'audio/basic': 'au',
};

/** File extension from the content type, else from the URL's last path segment, else `bin`. */
export function recordingExtension(contentType: string, downloadUrl: string): string {
  const mime = contentType.split(';')[0]?.trim().toLowerCase() ?? '';
  const known = EXTENSIONS[mime];
  if (known) return known;
  const path = downloadUrl.split(/[?#]/)[0] ?? '';
  const m = /\.([A-Za-z0-9]{1,5})$/.exec(path.slice(path.lastIndexOf('/') + 1));
  return m ? m[1]!.toLowerCase() : 'bin';
}

export interface ArchiveRecordingsDeps {
  store: ObjectStore;
  telephony: TelephonyClient | null;
  /** The archive's key prefix. */
  prefix: string | undefined;
  log: Logger;
  signal?: AbortSignal;
  /**
   * Time limit of one recording, download and upload together (default RECORDING_TIMEOUT_MS). The
   * download's idle limit does not end a body that trickles in forever, nor one far too slow.
   */
  timeoutMs?: number;
}

/** Default time limit of one recording (download and upload): 30 minutes. */
const RECORDING_TIMEOUT_MS = 30 * 60_000;

/**
 * Streams every recording of the call into the store. Returns refs `recording<n>` -> object key.
 * Keys are deterministic (`recordings/YYYY/MM/DD/<readable>-<hash>-<type>-<n>.<ext>`, see keys.ts), so a retry overwrites.
 */
export async function archiveRecordings(
  call: CanonicalCall,
  deps: ArchiveRecordingsDeps,
): Promise<Record<string, string>> {
  const refs: Record<string, string> = {};
  if (call.recordings.length === 0) return refs;
  if (deps.telephony === null) {
    throw new PermanentError(
      `call ${call.callId} has ${call.recordings.length} recording(s) but no telephony API is configured (TELEPHONY_API_URL) to download them`,
    );
  }
  const timeoutMs = deps.timeoutMs ?? RECORDING_TIMEOUT_MS;
  const count = call.recordings.length;
  for (const [index, recording] of call.recordings.entries()) {
    const limit = deadline(timeoutMs, deps.signal);
    // The limit ran out (not the worker's shutdown): said as such, whatever the stream's error was.
    const timedOut = () =>
      limit.signal.aborted && !deps.signal?.aborted
        ? new TransientError(
            `recording ${index + 1} of ${count} (${recording.type}): download and upload did not finish within ${timeoutMs} ms`,
          )
        : null;
    let key: string;
    let body: Readable | undefined;
    let stored: { bytes: number | null; contentType: string };
    try {
      const download = await deps.telephony.download(recording.downloadUrl, limit.signal).catch((err: unknown) => {
        throw timedOut() ?? sinkErrorOf(err);
      });
      body = download.body;
      stored = { bytes: download.contentLength, contentType: download.contentType };
      key = recordingKey(
        call,
        recording.type,
        index,
        recordingExtension(download.contentType, recording.downloadUrl),
        deps.prefix,
      );
      // The limit ends the body, and with it the upload (the store's temp file or multipart upload is dropped).
      const onLimit = () => download.body.destroy(timedOut() ?? undefined);
      limit.signal.addEventListener('abort', onLimit, { once: true });
      try {
        await deps.store.putStream(key, download.body, {
          contentType: download.contentType,
          contentLength: download.contentLength,
        });
      } finally {
        limit.signal.removeEventListener('abort', onLimit);
      }
    } catch (err) {
      // Free the HTTP connection of an unfinished download.
      body?.destroy();
      // The download may have failed under way (a stalled body): the telephony client's error.
      throw timedOut() ?? sinkErrorOf(err);
    } finally {
      limit.clear();
    }
    refs[`recording${index + 1}`] = key;
    deps.log.debug(
      { key, type: recording.type, bytes: stored.bytes, contentType: stored.contentType },
      'archived recording',
    );
  }
  return refs;
}
