// The seam every source of calls goes through: how one HTTP request becomes canonical calls (and
// what the sender is answered). The ingress app mounts each source's paths behind the allow list,
// accepts the calls it returns through the normal acceptor and sends its reply; adding a source
// touches its file, one line in src/sources/index.ts, its tests and its docs.
import type { CanonicalCall } from '../model/call.js';

/** A request as a source sees it. */
export interface SourceRequest {
  /** Path parameters of the matched route (`:agentId`). */
  params: Record<string, string>;
  headers: Headers;
  /** Absolute URL of the request as received. */
  url: string;
  receivedAt: Date;
  /** Parsed JSON body and its text (sources with `body: 'json'`: the app's JSON guards ran). */
  json?: { value: unknown; text: string };
  /** The body's bytes as received (sources with `body: 'raw'`, at most `maxBodyBytes`). */
  raw?: Buffer;
}

/** One call to accept; `rawJson` is the body text `call.raw` was parsed from, stored verbatim. */
interface SourceCall {
  call: CanonicalCall;
  rawJson?: string;
}

/** What the acceptor said about one call. */
export interface SourceAccepted {
  id: string;
  duplicate: boolean;
  update?: true;
  spooled?: boolean;
}

export interface SourceReply {
  status: 200 | 202;
  contentType: 'application/json' | 'application/xml';
  body: string;
}

interface SourceResult {
  calls: SourceCall[];
  /**
   * Optional fields whose values the source could not read (read as absent, kept in the original):
   * the ingress counts them (`callsync_webhook_fields_unread_total{field}`) and logs each field
   * once per process. `field` is a closed set of pointers (array indexes as `*`).
   */
  unread?: { field: string; pointer: string; detail: string }[];
  /** The answer to the sender, once the calls are accepted (in order). */
  reply(accepted: SourceAccepted[]): SourceReply;
}

export interface Source {
  /** Also the `CanonicalCall.source` of what it yields, where it yields calls itself. */
  name: string;
  /** POST paths (Hono patterns). Other methods get 405. */
  paths: string[];
  /**
   * `json`: the ingress' JSON guards run first (shared secret, charset, size, shape limits);
   * `raw`: the source reads the bytes itself (e.g. to check a signature over them).
   */
  body: 'json' | 'raw';
  /** Largest body of a `raw` source. */
  maxBodyBytes?: number;
  receive(request: SourceRequest): Promise<SourceResult>;
}

/** Input a source will never accept: answered with this status and the spec's error body. */
export class SourceRefusal extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 409 | 413 | 415,
    readonly detail: string,
    readonly pointer = '/',
    readonly problems?: { detail: string; pointer: string }[],
  ) {
    super(detail);
    this.name = 'SourceRefusal';
  }
}

/** A store the source needs did not answer: nothing was acknowledged, the sender should retry (503). */
export class SourceUnavailable extends Error {
  constructor(cause: unknown) {
    super(`source state unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'SourceUnavailable';
  }
}
