// Reads a JSON request body (./read-body.ts: Content-Length checked up front, chunked bodies
// counted as they stream, against the limit and the body budget) and a content-type check, decodes it in its declared charset
// (../charset.ts); the parsed body and its text are put on the context.
import type { Context, MiddlewareHandler } from 'hono';
import { decodeBody, encodingOf } from '../charset.js';
import { ApiError, WHOLE_REQUEST } from '../errors.js';
import { readBody } from './read-body.js';

export interface JsonBodyOptions {
  /** Largest accepted body in bytes. */
  maxBytes: number;
}

declare module 'hono' {
  interface ContextVariableMap {
    jsonBody: unknown;
    /** The body text `jsonBody` was parsed from: decoded from its charset, without a byte-order mark. */
    jsonText: string;
  }
}

/** `application/json`, `application/<x>+json`, and `text/json` (an old name some senders still use). */
const JSON_TYPE = /^(application\/([\w.+-]+\+)?json|text\/json)\s*(;|$)/i;

export function jsonBody(options: JsonBodyOptions): MiddlewareHandler {
  return async function jsonBodyMiddleware(c, next) {
    // Read in a function of its own: this frame, which waits for the rest of the request, holds no
    // chunk, text or parsed value (the handler lets go of them before it waits for Redis).
    await readJsonBody(c, options.maxBytes);
    await next();
  };
}

/** Reads, decodes and parses the body; puts the value and its text on the context. */
async function readJsonBody(c: Context, maxBytes: number): Promise<void> {
  const type = (c.req.header('content-type') ?? '').trim();
  // No content type is no reason to lose a call: the body is read as UTF-8 JSON, and refused only
  // if it is not. A declared other type (a form, text/plain) is a sender on the wrong route.
  if (type !== '' && !JSON_TYPE.test(type)) {
    throw new ApiError(415, `content type must be application/json, got "${type.slice(0, 100)}"`, {
      pointer: 'content-type',
    });
  }
  // An unsupported charset is refused before the body is read.
  const encoding = encodingOf(type);
  // The bytes are held by nothing once decoded (the text is what the record keeps).
  const text = decodeBody(await readBody(c, maxBytes, `request body is larger than ${maxBytes} bytes`), encoding);
  if (text.trim() === '') throw new ApiError(400, 'request body is empty', { pointer: WHOLE_REQUEST });
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new ApiError(400, `request body is not valid JSON: ${(err as Error).message}`, { pointer: WHOLE_REQUEST });
  }
  c.set('jsonBody', parsed);
  c.set('jsonText', text);
}
