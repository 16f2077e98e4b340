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

/** Spec 2.7 records, as returned by the API (validated by the client). */
export interface ChannelCall {
  callSid: string;
  channelId?: string | null;
  direction: 'INCOMING' | 'OUTGOING' | string;
  establishedAt?: string | null;
  forwarding?: { target?: string | null; type?: string | null } | null;
  from?: string | null;
  owner?: string | null;
  startedAt?: string | null;
  state?: string | null;
  terminatedAt?: string | null;
  terminatedReason?: string | null;
  to?: string | null;
  [extra: string]: unknown;
}

export interface ChannelEvent {
  eventId: string;
  type: string;
  createdAt?: string | null;
  call?: ChannelCall | null;
  recordings?: { downloadUrl: string; type: string }[] | null;
  [extra: string]: unknown;
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
  readChannelEvents(channelId: string, position: string | undefined, limit: number, signal?: AbortSignal): Promise<ChannelInbox>;
  /** Streams a file from a relative URL (e.g. a recording's `downloadUrl`) with the API's auth. */
  download(relativeUrl: string, signal?: AbortSignal): Promise<Download>;
  /** Sends an SMS (spec 2.4). Not idempotent: the caller owns the "never twice" policy. */
  sendSms(request: SendWebSmsRequest, signal?: AbortSignal): Promise<void>;
}

/**
 * Spec 2.8 HistoryEntryResponse (type CALL), as returned by `GET /history`; the call fields
 * `callId`, `duration` and `recordings` as in the platform's own library (sipgateio-node,
 * lib/history/history.types.ts, CallHistoryEntry). Validated by the client only as far as
 * callsync reads it; unknown fields are kept.
 */
export interface HistoryEntry {
  id: string;
  type?: string | null;
  source?: string | null;
  target?: string | null;
  sourceAlias?: string | null;
  targetAlias?: string | null;
  /** INCOMING, OUTGOING, MISSED_INCOMING, MISSED_OUTGOING. */
  direction?: string | null;
  /** NOPICKUP, BUSY, PICKUP, FORWARD. */
  status?: string | null;
  created?: string | null;
  lastModified?: string | null;
  /** Seconds. */
  duration?: number | null;
  callId?: string | null;
  recordings?: { url?: string | null; downloadUrl?: string | null; [extra: string]: unknown }[] | null;
  [extra: string]: unknown;
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
