// HTTP errors in the platform's shape (spec 7): `{ "errors": [ { status, title, detail, source: { pointer } } ] }`.
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

/** A typed HTTP failure; `app.onError` turns it into the spec's error body. */
export class ApiError extends HTTPException {
  readonly pointer: string;
  readonly headers: Record<string, string>;
  constructor(status: ContentfulStatusCode, detail: string, options: { pointer?: string; headers?: Record<string, string>; cause?: unknown } = {}) {
    super(status, { message: detail, cause: options.cause });
    this.pointer = options.pointer ?? '';
    this.headers = options.headers ?? {};
  }
}

export function errorBody(status: number, detail: string, pointer = ''): { errors: DetailedError[] } {
  return { errors: [{ status, title: titles[status] ?? 'Error', detail, source: { pointer } }] };
}
