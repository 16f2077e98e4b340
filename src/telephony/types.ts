// The platform REST API (`{base_url}/v2`) as callsync uses it. The poller, the archive sink
// (recordings) and the SMS channel all go through this one interface.
import type { Readable } from 'node:stream';

/** Spec 2.4 SendWebSmsRequest. */
export interface SendWebSmsRequest {
  smsId: string;
  recipient: string;
  message: string;
  /** Unix time in seconds; at most 30 days ahead, never in the past. */
  sendAt?: number;
}

export interface ChannelInbox {
  /** Raw event objects: parsed one by one so a malformed event cannot block the page. */
  events: unknown[];
  limit: number;
  position: string;
}

export interface Download {
  body: Readable;
  contentType: string;
  contentLength: number | null;
}

export interface TelephonyClient {
  /** Reads a page of a channel's events starting at `position` (undefined: from the beginning). */
  readChannelEvents(
    channelId: string,
    position: string | undefined,
    limit: number,
    signal?: AbortSignal,
  ): Promise<ChannelInbox>;
  /** Streams a file from a relative URL (e.g. a recording's `downloadUrl`) with the API's auth. */
  download(relativeUrl: string, signal?: AbortSignal): Promise<Download>;
  /** Sends an SMS (spec 2.4). Not idempotent: the caller owns the "never twice" policy. */
  sendSms(request: SendWebSmsRequest, signal?: AbortSignal): Promise<void>;
}

/** Spec 2.8 HistoryResponse: one page of `GET /history`. */
export interface HistoryPage {
  /** Raw entries: normalized one by one so a malformed entry cannot block the page. */
  items: unknown[];
  totalCount: number;
}

/** The query of `GET /history` (sipgateio-node lib/history/history.ts: `types`, `from`, `to`, `offset`, `limit`). */
export interface HistoryQuery {
  types: string[];
  /** ISO-8601, inclusive. */
  from: string;
  /** ISO-8601, exclusive. */
  to: string;
  offset: number;
  limit: number;
}
