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
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

/** `source.pointer` of a problem with the whole body or the request as a whole. */
export const WHOLE_REQUEST = '/';

/** A typed HTTP failure; `app.onError` turns it into the spec's error body. */
export class ApiError extends HTTPException {
  readonly pointer: string;
  readonly headers: Record<string, string>;
  constructor(status: ContentfulStatusCode, detail: string, options: { pointer?: string; headers?: Record<string, string>; cause?: unknown } = {}) {
    super(status, { message: detail, cause: options.cause });
    this.pointer = options.pointer || WHOLE_REQUEST;
    this.headers = options.headers ?? {};
  }
}

export function errorBody(status: number, detail: string, pointer = WHOLE_REQUEST): { errors: DetailedError[] } {
  return { errors: [{ status, title: titles[status] ?? 'Error', detail, source: { pointer: pointer || WHOLE_REQUEST } }] };
}
