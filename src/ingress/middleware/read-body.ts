// Reads a request body into one buffer, with the fewest copies: over a real socket, straight from
// Node's request (a Content-Length body is copied chunk by chunk into a buffer of that length — not
// collected, concatenated and copied again into an ArrayBuffer as Hono's `arrayBuffer()` does);
// without one (tests calling `app.request`), from the web Request. A body beyond `maxBytes` is
// refused with 413 as soon as it passes it; a chunked body's bytes are taken from the body budget
// (./body-budget.ts) as they arrive, and refused with its 503 when they do not fit.
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { ApiError } from '../errors.js';

/** `Content-Encoding` values that leave the body as it is. */
const IDENTITY = /^\s*(identity\s*)?$/i;

/**
 * The body's bytes (a view of them: not a copy). A body in a content coding (gzip, br, …) is
 * refused with 415 before it is read (RFC 9110 §15.5.16): callsync reads bodies as they are sent,
 * and would otherwise take compressed bytes for text in the wrong charset.
 */
export async function readBody(c: Context, maxBytes: number, tooLargeDetail: string): Promise<Uint8Array> {
  const coding = c.req.header('content-encoding');
  if (coding !== undefined && !IDENTITY.test(coding))
    throw new ApiError(
      415,
      `content encoding ${JSON.stringify(coding.slice(0, 40))} is not supported: send the body uncompressed`,
      { pointer: 'content-encoding' },
    );
  const tooLarge = () => new ApiError(413, tooLargeDetail);
  const header = c.req.header('content-length');
  const declared = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
  if (declared !== undefined && declared > maxBytes) throw tooLarge();
  // A chunked body reserves its bytes as they arrive; a declared one was reserved up front.
  const take = declared === undefined ? c.get('bodyBudgetTake') : undefined;
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (incoming && typeof incoming.on === 'function' && !incoming.readableDidRead)
    return readIncoming(incoming, declared, maxBytes, tooLarge, take);
  if (declared !== undefined) {
    const whole = new Uint8Array(await c.req.arrayBuffer());
    // Hono's request caches the body it read: let go of it (read once, here).
    delete c.req.bodyCache.arrayBuffer;
    if (whole.byteLength > maxBytes) throw tooLarge();
    return whole;
  }
  const stream = c.req.raw.body;
  if (!stream) return new Uint8Array(0);
  const parts: Uint8Array[] = [];
  let size = 0;
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    try {
      if (size + value.byteLength > maxBytes) throw tooLarge();
      take?.(value.byteLength);
    } catch (err) {
      await reader.cancel().catch(() => undefined);
      throw err;
    }
    size += value.byteLength;
    parts.push(value);
  }
  return parts.length === 1 ? parts[0]! : Buffer.concat(parts, size);
}

function readIncoming(
  incoming: IncomingMessage,
  declared: number | undefined,
  maxBytes: number,
  tooLarge: () => ApiError,
  take: ((bytes: number) => void) | undefined,
): Promise<Uint8Array> {
  return new Promise<Uint8Array>((resolve, reject) => {
    // Node's parser holds a body to its Content-Length: the buffer is filled, never overrun.
    const whole = declared !== undefined ? Buffer.allocUnsafe(declared) : null;
    const parts: Buffer[] = [];
    let size = 0;
    const stop = () => {
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onError);
      incoming.off('close', onClose);
    };
    const onData = (chunk: Buffer) => {
      try {
        if (size + chunk.length > (whole?.length ?? maxBytes)) throw tooLarge();
        take?.(chunk.length);
      } catch (err) {
        // The rest is left unread: @hono/node-server drains it briefly after the answer, then closes.
        stop();
        incoming.pause();
        reject(err);
        return;
      }
      if (whole) chunk.copy(whole, size);
      else parts.push(chunk);
      size += chunk.length;
    };
    const onEnd = () => {
      stop();
      if (whole) resolve(size === whole.length ? whole : whole.subarray(0, size));
      else resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
    };
    const onError = (err: Error) => {
      stop();
      reject(err);
    };
    const onClose = () => {
      if (incoming.complete) return;
      stop();
      reject(new Error('the connection closed before the whole body arrived'));
    };
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onError);
    incoming.on('close', onClose);
  });
}
