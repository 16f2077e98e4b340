// HTTP errors in the platform's shape (spec 7): `{ "errors": [ { status, title, detail, source: { pointer } } ] }`.
// `source.pointer` locates the error: a JSON pointer to the field (`/call/startTime`); `/` when the
// whole body or the request as a whole is refused (not JSON, too large, address not allowed, Redis
// away, shutting down); the header's name when a header is (`content-type`, the credential header).
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';

export interface DetailedError {
  status: number;
  title: string;
  detail: string;
  source: { pointer: string };
}

const titles: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  403: 'Forbidden',
  404: 'Not Found',
  405: 'Method Not Allowed',
  408: 'Request Timeout',
  409: 'Conflict',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  429: 'Too Many Requests',
  431: 'Request Header Fields Too Large',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** `source.pointer` of a problem with the whole body or the request as a whole. */
export const WHOLE_REQUEST = '/';

/** One thing wrong with a request: what, and where (a JSON pointer into the body; `/` for the whole request). */
export interface Problem {
  detail: string;
  pointer: string;
}

export interface ApiErrorOptions {
  pointer?: string;
  headers?: Record<string, string>;
  /** Every problem found, one error entry each; default the one of `detail` and `pointer`. */
  problems?: Problem[];
  /** Facts for the refusal's log line (never sent to the client). */
  logFields?: Record<string, unknown>;
  /** The refusal's `reason` in callsync_webhooks_rejected_total; default: named by the status. */
  reason?: string;
  cause?: unknown;
  /**
   * A refusal of a source's webhook, kept (IngressDeps.refusals) under the call id when it could be
   * read, else without one; set for every 4xx of a source's route but those of `gate`.
   */
  refusedCall?: RefusedCall;
  /**
   * Refused before the sender was known (the allow list, the credentials, the body budget): not kept
   * as a refusal — anyone could send those, and push a known sender's refusals out of the bounded store.
   */
  gate?: true;
}

/** What a kept refusal names: the call id as sent (null when it could not be read) and the source. */
export interface RefusedCall {
  callId: string | null;
  source: string;
}

/** A typed HTTP failure; `app.onError` turns it into the spec's error body. */
export class ApiError extends HTTPException {
  readonly pointer: string;
  readonly headers: Record<string, string>;
  readonly problems: Problem[];
  readonly logFields: Record<string, unknown>;
  readonly reason: string | undefined;
  /** Set by the ingress for a source's refusal (see ApiErrorOptions.refusedCall). */
  refusedCall: RefusedCall | undefined;
  gate: boolean;
  constructor(status: ContentfulStatusCode, detail: string, options: ApiErrorOptions = {}) {
    super(status, { message: detail, cause: options.cause });
    this.pointer = options.pointer || WHOLE_REQUEST;
    this.headers = options.headers ?? {};
    this.problems = options.problems?.length ? options.problems : [{ detail, pointer: this.pointer }];
    this.logFields = options.logFields ?? {};
    this.reason = options.reason;
    this.refusedCall = options.refusedCall;
    this.gate = options.gate === true;
  }
}

export function errorBody(status: number, detail: string, pointer = WHOLE_REQUEST): { errors: DetailedError[] } {
  return problemsBody(status, [{ detail, pointer }]);
}

/** The error body as JSON text, for the answers the HTTP server writes itself (src/listen.ts). */
export const errorBodyText = (status: number, detail: string): string => JSON.stringify(errorBody(status, detail));

/** The error body with one entry per problem; an empty pointer names the whole request (`/`). */
export function problemsBody(status: number, problems: Problem[]): { errors: DetailedError[] } {
  const title = titles[status] ?? 'Error';
  return {
    errors: problems.map((p) => ({ status, title, detail: p.detail, source: { pointer: p.pointer || WHOLE_REQUEST } })),
  };
}
