// One small HTTP client shared by the CRM adapters: node:http (../../http-request.ts) with a timeout, every answer sorted
// into the sink error kinds, and the CRM's rate limit honoured for the whole sink queue:
//   429                      -> RetryLaterError(scope 'queue') for Retry-After (or the CRM's window);
//                               a request may answer 'job' instead (a search limit of its own)
//   rate-limit headers at 0  -> the next request of this sink waits the window out the same way
//   401 / 403                -> AuthError (the runner pauses the queue) + metric
//   400 / 422 / other 4xx    -> PermanentError with the CRM's own message (redacted: redactRemoteText)
//   3xx                      -> PermanentError naming where it points (redirects are not followed)
//   5xx / network / timeout  -> TransientError
// Nothing here logs request bodies, URLs with query strings or credentials.
import {
  AuthError,
  errorFromHttp,
  errorFromNetwork,
  parseRetryAfter,
  remoteWaitMs,
  PermanentError,
  RetryLaterError,
  TransientError,
  waitText,
} from '../../errors.js';
import { deadline } from '../../deadline.js';
import { answerHeadOf, httpRequest, redirectTarget, type AnswerHeaders, type HttpAnswer } from '../../http-request.js';
import { redactRemoteText } from '../../redact.js';
import { crmAuthFailures, crmRateLimited, crmRequests } from './metrics.js';

export interface CrmAnswer {
  status: number;
  headers: AnswerHeaders;
  /** Parsed JSON, or undefined when the body was empty or not JSON. */
  body: unknown;
}

export interface CrmHttpConfig {
  /** `HubSpot`, `Pipedrive`, `Webhook`: used in messages and metrics. */
  crm: string;
  /** Sink name (config), for metrics and messages. */
  sink: string;
  baseUrl: string;
  /** Headers sent with every request (authorization, user agent). */
  headers: Record<string, string>;
  /** Query parameters added to every request (e.g. Pipedrive's `api_token`); never shown in messages. */
  query?: Record<string, string>;
  timeoutMs: number;
  now: () => Date;
  /** What to tell the operator on 401/403 (which setting to check). */
  authHint: string;
  /** The CRM's error text from an error answer. */
  errorDetail(body: unknown, text: string): string | undefined;
  /** Wait after a 429 without Retry-After, from the CRM's headers or body. */
  rateLimitDelayMs(answer: CrmAnswer): number;
  /** When an answer's rate-limit headers say the window is used up: how long until it resets. */
  windowExhaustedMs?(headers: AnswerHeaders): number | undefined;
}

export interface CrmRequest {
  method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  path: string;
  query?: Record<string, string>;
  body?: unknown;
  /** A body already serialized as JSON, sent byte for byte (signed payloads). */
  rawBody?: string;
  /** A streamed body of its own content type (a multipart file upload); never resent by the client. */
  stream?: { body: AsyncIterable<Uint8Array>; contentType: string; contentLength?: number };
  /** Time limit of this request (a large upload), instead of the sink's `timeoutMs`. */
  timeoutMs?: number;
  /** Headers of this request only. */
  headers?: Record<string, string>;
  /** Statuses returned to the caller instead of thrown (e.g. 404 to notice a deleted record). */
  accept?: number[];
  /**
   * Who waits after a 429: the whole sink queue (default; the rest of this sink's requests wait
   * too) or only this job (an endpoint with a limit of its own, e.g. HubSpot's search).
   */
  rateLimitScope?: 'queue' | 'job' | ((answer: CrmAnswer) => 'queue' | 'job');
  /**
   * The status alone answers this request (a signed webhook's receiver took the message with its
   * 2xx): an answer whose body is too large or cut off after the status line is returned with no
   * body, instead of failing the request (its retry would send the message again).
   */
  statusOnly?: boolean;
  signal?: AbortSignal;
}

export class CrmHttp {
  private blockedUntil = 0;

  constructor(readonly config: CrmHttpConfig) {}

  /** Milliseconds until this sink may call the CRM again (0 when it may now). */
  pausedForMs(): number {
    return Math.max(0, this.blockedUntil - this.config.now().getTime());
  }

  private block(ms: number): void {
    this.blockedUntil = Math.max(this.blockedUntil, this.config.now().getTime() + ms);
  }

  async request(req: CrmRequest): Promise<CrmAnswer> {
    const { crm, sink } = this.config;
    const url = new URL(req.path === '' ? this.config.baseUrl : this.config.baseUrl.replace(/\/+$/, '') + req.path);
    // Messages name the path (or the host), never the query string: it may carry a token.
    const what = `${crm} ${req.method} ${req.path === '' ? `${url.host}${url.pathname}` : req.path}`;
    const waitMs = this.pausedForMs();
    if (waitMs > 0) {
      // The last answer said the window is used up: pause the queue instead of earning a 429.
      throw new RetryLaterError(`${crm} rate limit window used up; sink queue pauses for ${waitText(waitMs)}`, waitMs, {
        scope: 'queue',
      });
    }

    for (const [k, v] of Object.entries({ ...req.query, ...this.config.query })) url.searchParams.set(k, v);
    // A user agent of our own unless the sink names one (fetch sent `node`; node:http sends none).
    const headers: Record<string, string> = {
      accept: 'application/json',
      'user-agent': 'callsync',
      ...this.config.headers,
      ...req.headers,
    };
    let payload: string | AsyncIterable<Uint8Array> | undefined;
    if (req.stream !== undefined) {
      payload = req.stream.body;
      headers['content-type'] = req.stream.contentType;
      if (req.stream.contentLength !== undefined) headers['content-length'] = String(req.stream.contentLength);
    } else if (req.rawBody !== undefined) payload = req.rawBody;
    else if (req.body !== undefined) payload = JSON.stringify(req.body);
    if (typeof payload === 'string') headers['content-type'] = 'application/json';
    // Cleared once the answer is read (AbortSignal.timeout would keep the request alive for the whole limit).
    const limit = deadline(req.timeoutMs ?? this.config.timeoutMs, req.signal);
    const signal = limit.signal;

    let res: HttpAnswer;
    try {
      // A redirect is answered as it is (reported below), never followed: it would resend the body elsewhere.
      res = await httpRequest(url, { method: req.method, headers, body: payload, signal });
    } catch (err) {
      const head = req.statusOnly ? answerHeadOf(err) : undefined;
      if (head === undefined) {
        crmRequests.inc({ sink, crm, status: 'network' });
        if (req.signal?.aborted) throw new TransientError(`${what} abandoned: worker shutting down`, { cause: err });
        throw errorFromNetwork(what, err);
      }
      res = { status: head.status, ok: head.status >= 200 && head.status < 300, headers: head.headers, text: '' };
    } finally {
      limit.clear();
    }
    const text = res.text;
    crmRequests.inc({ sink, crm, status: String(res.status) });

    let body: unknown;
    if (text.length > 0) {
      try {
        body = JSON.parse(text);
      } catch {
        body = undefined;
      }
    }
    const answer: CrmAnswer = { status: res.status, headers: res.headers, body };

    const exhausted = this.config.windowExhaustedMs?.(res.headers);
    if (exhausted !== undefined && exhausted > 0) {
      this.block(exhausted);
      crmRateLimited.inc({ sink, crm, reason: 'headers' });
    }

    if ((res.status >= 200 && res.status < 300) || req.accept?.includes(res.status)) return answer;

    if (res.status >= 300 && res.status < 400) {
      throw new PermanentError(
        `${what} answered ${res.status} redirect to ${redirectTarget(res.headers.get('location'), url)} (redirects are not followed)`,
        { status: res.status },
      );
    }
    const detail = this.detail(body, text);
    if (res.status === 429) {
      // A window the headers said is used up for longer (a daily budget) outlasts a short Retry-After.
      const delay = remoteWaitMs(
        Math.max(
          parseRetryAfter(res.headers.get('retry-after'), this.config.now().getTime()) ??
            this.config.rateLimitDelayMs(answer),
          this.pausedForMs(),
        ),
      );
      const scope =
        typeof req.rateLimitScope === 'function' ? req.rateLimitScope(answer) : (req.rateLimitScope ?? 'queue');
      if (scope === 'queue') this.block(delay);
      crmRateLimited.inc({ sink, crm, reason: '429' });
      const who = scope === 'queue' ? 'sink queue pauses' : 'this job waits';
      throw new RetryLaterError(
        `${what} answered 429${detail ? `: ${detail}` : ''}; ${who} for ${waitText(delay)}`,
        delay,
        {
          status: 429,
          scope,
        },
      );
    }
    if (res.status === 401 || res.status === 403) {
      crmAuthFailures.inc({ sink, crm, status: String(res.status) });
      throw new AuthError(
        `${crm} rejected the credentials of sink "${sink}" (${what} answered ${res.status}${detail ? `: ${detail}` : ''}). ` +
          `${this.config.authHint} The sink queue stays paused until an operator resumes it.`,
        { status: res.status },
      );
    }
    throw errorFromHttp({
      status: res.status,
      what,
      detail,
      retryAfter: res.headers.get('retry-after'),
      rateLimitScope: 'queue',
    });
  }

  /** The CRM's error text, redacted (numbers and e-mail addresses masked, cut short): it often echoes what we sent. */
  private detail(body: unknown, text: string): string | undefined {
    const d = this.config.errorDetail(body, text);
    if (d !== undefined && d.trim() !== '') return redactRemoteText(d);
    // Non-JSON error pages: a short excerpt is still better than nothing.
    // A tag is at most 2,000 characters here: an unbounded `<[^>]*>` scans to the end from every `<`
    // that is never closed (quadratic on a large answer full of them).
    const plain = redactRemoteText(text.replace(/<[^<>]{0,2000}>/g, ' '));
    return plain === '' ? undefined : plain;
  }
}

/** A header's value as a number, or undefined. */
export function numberHeader(headers: AnswerHeaders, name: string): number | undefined {
  const v = headers.get(name);
  if (v === null || v.trim() === '') return undefined;
  const n = Number(v);
  return Number.isFinite(n) ? n : undefined;
}

/** Value at `obj.key` when `obj` is an object. */
export function field(obj: unknown, key: string): unknown {
  return obj !== null && typeof obj === 'object' && Object.hasOwn(obj, key)
    ? (obj as Record<string, unknown>)[key]
    : undefined;
}

export function stringField(obj: unknown, key: string): string | undefined {
  const v = field(obj, key);
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return String(v);
  return undefined;
}
