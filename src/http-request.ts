// One HTTP request on node:http(s) with keep-alive agents: what the sinks' clients need of `fetch`
// for a JSON API, at a third of its CPU. Global `fetch` (undici) spent ~400 µs of CPU per small POST
// on loopback against ~130 µs here, and allocated most of the worker's "node internals" per call
// (docs/performance.md, round 14); the sinks make one or two such requests per call.
//
// What it does, as the callers used `fetch` before:
// - the answer's status, headers (`get`, case-insensitive) and whole body as UTF-8 text; a body
//   beyond `maxBodyBytes` is not read on (the request fails: a hostile or broken server cannot make
//   the worker hold gigabytes);
// - redirects are never followed: a 3xx is answered as it is, for the caller to report;
// - `signal` ends the request at any point, rejecting with the signal's reason (a `deadline()`'s
//   TimeoutError), as `fetch` does;
// - a network error rejects with Node's own error (`code` ECONNREFUSED, ECONNRESET, …; see
//   src/errors.ts `requestCertainlyNotSent`), not wrapped in a "fetch failed";
// - a body is a string (sent with its Content-Length) or an async iterable of bytes (streamed, with
//   the caller's Content-Length or chunked).
// No response is decompressed: no Accept-Encoding is sent. With tracing on, each request is a client
// span of the sink attempt (../telemetry.ts `traceHttp`); it imports nothing else of the project.
import {
  Agent as HttpAgent,
  request as httpRequestFn,
  type IncomingMessage,
  type OutgoingHttpHeaders,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequestFn } from 'node:https';
import { traceHttp } from './telemetry.js';

export interface HttpRequestInit {
  method: string;
  /** Header names in lower case. */
  headers?: Record<string, string>;
  body?: string | AsyncIterable<Uint8Array>;
  signal?: AbortSignal;
  /** Most bytes of the answer's body read; beyond, the request fails. Default 16 MiB. */
  maxBodyBytes?: number;
}

/** An answer's headers: `get` as on a web `Headers` (null when absent, repeated values joined by ", "). */
export interface AnswerHeaders {
  get(name: string): string | null;
}

export interface HttpAnswer {
  status: number;
  ok: boolean;
  headers: AnswerHeaders;
  /** The body as UTF-8 text ('' when empty). */
  text: string;
}

/** The status line and headers of an answer whose body could not be read whole. */
export interface AnswerHead {
  status: number;
  headers: AnswerHeaders;
}

/**
 * The answer's body was larger than `maxBodyBytes`. The telephony client does not retry it (the same
 * request gets it again); the poller asks for a smaller page (workers/poller.ts).
 */
export class AnswerTooLargeError extends Error {
  constructor(
    readonly maxBytes: number,
    readonly answer?: AnswerHead,
  ) {
    super(`the answer's body is larger than ${maxBytes} bytes`);
    this.name = 'AnswerTooLargeError';
  }
}

/**
 * The status and headers of an answer that came but whose body was too large or cut off (the
 * request's error), for a caller to whom the status alone says enough — an SMS send answered 2xx
 * was taken by the platform, whatever followed. Undefined for any other error.
 */
export function answerHeadOf(err: unknown): AnswerHead | undefined {
  return err instanceof Error ? (err as { answer?: AnswerHead }).answer : undefined;
}

const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;

/**
 * Idle connections are closed after 4 s (undici's default for `fetch`): shorter than most servers'
 * keep-alive (Node's 5 s, nginx 75 s), so a request rarely goes out on a socket the server is closing.
 * A server's shorter `Keep-Alive: timeout=` hint is honoured by Node's agent.
 */
const IDLE_SOCKET_MS = 4000;
const agents = {
  'http:': new HttpAgent({ keepAlive: true, timeout: IDLE_SOCKET_MS }),
  'https:': new HttpsAgent({ keepAlive: true, timeout: IDLE_SOCKET_MS }),
};

/** Where a redirect points, for a message: origin and path, never a query string or credentials. */
export function redirectTarget(location: string | null, from: URL | string): string {
  if (location === null || location.trim() === '') return 'nowhere (no Location header)';
  try {
    const to = new URL(location, from);
    return `${to.origin}${to.pathname}`;
  } catch {
    return 'an unreadable Location';
  }
}

class Headerish implements AnswerHeaders {
  constructor(private readonly raw: IncomingMessage['headers']) {}
  get(name: string): string | null {
    const v = this.raw[name.toLowerCase()];
    if (v === undefined) return null;
    return Array.isArray(v) ? v.join(', ') : v;
  }
}

export function httpRequest(url: URL, init: HttpRequestInit): Promise<HttpAnswer> {
  return traceHttp(init.method, url, () => send(url, init));
}

function send(url: URL, init: HttpRequestInit): Promise<HttpAnswer> {
  return new Promise<HttpAnswer>((resolve, reject) => {
    const { signal } = init;
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const secure = url.protocol === 'https:';
    if (!secure && url.protocol !== 'http:') {
      reject(Object.assign(new TypeError(`unsupported protocol ${url.protocol}`), { code: 'ERR_INVALID_URL' }));
      return;
    }
    const headers: OutgoingHttpHeaders = { ...init.headers };
    const body = init.body;
    if (typeof body === 'string') headers['content-length'] = Buffer.byteLength(body);
    const maxBytes = init.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    let settled = false;
    const fail = (err: unknown) => {
      if (settled) return;
      settled = true;
      signal?.removeEventListener('abort', onAbort);
      req.destroy();
      reject(err);
    };
    const onAbort = () => fail(signal!.reason);
    const req = (secure ? httpsRequestFn : httpRequestFn)(
      {
        protocol: url.protocol,
        hostname: url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname,
        port: url.port,
        path: `${url.pathname}${url.search}`,
        method: init.method,
        headers,
        agent: agents[secure ? 'https:' : 'http:'],
      },
      (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        const head = (): AnswerHead => ({ status: res.statusCode ?? 0, headers: new Headerish(res.headers) });
        res.on('data', (chunk: Buffer) => {
          size += chunk.length;
          if (size > maxBytes) {
            fail(new AnswerTooLargeError(maxBytes, head()));
            return;
          }
          chunks.push(chunk);
        });
        res.on('end', () => {
          if (settled) return;
          settled = true;
          signal?.removeEventListener('abort', onAbort);
          const status = res.statusCode ?? 0;
          resolve({
            status,
            ok: status >= 200 && status < 300,
            headers: new Headerish(res.headers),
            text: chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8'),
          });
        });
        // An error after the status line came (the body cut off): the status and headers go with it.
        res.on('error', (err) => fail(Object.assign(err, { answer: head() })));
        res.on('close', () => {
          if (!res.complete)
            fail(Object.assign(new Error('the answer was cut off'), { code: 'ECONNRESET', answer: head() }));
        });
      },
    );
    // Whether the request's bytes could have reached the server: not before a new connection is up
    // (TCP, and for https the TLS handshake — a certificate refused, a port without TLS). An error
    // before that is marked `notSent` (src/errors.ts requestCertainlyNotSent): even a POST may be resent.
    let connected = false;
    req.on('socket', (socket) => {
      if (!socket.connecting) connected = true;
      else socket.once(secure ? 'secureConnect' : 'connect', () => (connected = true));
    });
    req.on('error', (err) => fail(connected ? err : Object.assign(err, { notSent: true })));
    signal?.addEventListener('abort', onAbort, { once: true });
    if (body === undefined) req.end();
    else if (typeof body === 'string') req.end(body);
    else void stream(req, body).catch(fail);
  });
}

/** Writes `body` to `req` as the socket takes it, then ends it. */
async function stream(req: ReturnType<typeof httpRequestFn>, body: AsyncIterable<Uint8Array>): Promise<void> {
  for await (const chunk of body) {
    if (req.destroyed) return;
    if (!req.write(chunk))
      await new Promise<void>((resolve, reject) => {
        const done = () => {
          req.off('drain', done);
          req.off('close', done);
          req.off('error', reject);
          resolve();
        };
        req.on('drain', done);
        req.on('close', done);
        req.once('error', reject);
      });
  }
  if (!req.destroyed) req.end();
}
