// Reads a JSON request body with a size limit (Content-Length checked up front, chunked bodies
// counted as they stream) and a content-type check, decodes it in its declared charset
// (../charset.ts); the parsed body and its text are put on the context.
import type { Context, MiddlewareHandler } from 'hono';
import { decodeBody, encodingOf } from '../charset.js';
import { ApiError, WHOLE_REQUEST } from '../errors.js';

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

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

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
  const tooLarge = () => new ApiError(413, `request body is larger than ${maxBytes} bytes`);
  const type = c.req.header('content-type') ?? '';
  if (!JSON_TYPE.test(type)) {
    throw new ApiError(
      415,
      `content type must be application/json, got ${type === '' ? 'none' : `"${type.slice(0, 100)}"`}`,
      {
        pointer: 'content-type',
      },
    );
  }
  // An unsupported charset is refused before the body is read.
  const encoding = encodingOf(type);
  const declared = c.req.header('content-length');
  if (declared !== undefined && Number(declared) > maxBytes) throw tooLarge();

  const parts: Uint8Array[] = [];
  let size = 0;
  // With a Content-Length within the limit (Node's parser holds the body to it), read the body
  // whole: @hono/node-server then skips building a web Request and stream (a third of the
  // ingress' CPU, docs/performance.md). Chunked bodies are counted as they stream.
  const stream = declared !== undefined && /^\d+$/.test(declared) ? null : c.req.raw.body;
  if (!stream && declared !== undefined) {
    const whole = new Uint8Array(await c.req.arrayBuffer());
    // Hono's request caches the body it read: let go of it (read once, here).
    delete c.req.bodyCache.arrayBuffer;
    if (whole.byteLength > maxBytes) throw tooLarge();
    parts.push(whole);
    size = whole.byteLength;
  }
  if (stream) {
    const reader = stream.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > maxBytes) {
        await reader.cancel().catch(() => undefined);
        throw tooLarge();
      }
      parts.push(value);
    }
  }
  const text = decodeBody(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size), encoding);
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
