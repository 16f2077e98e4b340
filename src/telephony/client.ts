// The typed client of the platform REST API (`{base_url}/v2`): channel inboxes, recording
// downloads and SMS. Reads are retried (network errors, 5xx, 429 after Retry-After); the SMS send
// is not, because it is not idempotent.
import { Readable, Transform, pipeline } from 'node:stream';
import type { ReadableStream as WebReadableStream } from 'node:stream/web';
import pRetry from 'p-retry';
import { z } from 'zod';
import { deadline } from '../deadline.js';
import { AnswerTooLargeError, answerHeadOf, httpRequest, redirectTarget, type HttpAnswer } from '../http-request.js';
import type { Logger } from '../log.js';
import { envEnum, envOptionalInt, envString, envUrl, type EnvOf, type EnvShape } from '../env-values.js';
import { networkReason, requestCertainlyNotSent } from '../errors.js';
import {
  createAuthProvider,
  type AuthProvider,
  type IssuedTokens,
  type RefreshTokenStore,
  type TelephonyAuth,
} from './auth.js';
import {
  OutcomeUnknownError,
  ResponseValidationError,
  TelephonyApiError,
  telephonyErrorFromResponse,
  telephonyNetworkError,
} from './errors.js';
import type { ChannelInbox, Download, HistoryPage, HistoryQuery, SendWebSmsRequest, TelephonyClient } from './types.js';

const DEFAULT_CHANNEL_EVENTS_PATH = '/channels/{channelId}/events';
const DEFAULT_SMS_PATH = '/sessions/sms';
const HISTORY_PATH = '/history';

export interface TelephonyClientOptions {
  /** API root including the version path, e.g. `https://api.example.com/v2` (TELEPHONY_API_URL). */
  baseUrl: string;
  auth: TelephonyAuth;
  /** Time limit of one request (headers and JSON body). Default 10 000 ms. */
  timeoutMs?: number;
  /** A download fails when no byte arrived for this long. Default 30 000 ms. */
  downloadIdleTimeoutMs?: number;
  /** Retries of an idempotent read after network errors and 5xx. Default 4. */
  retries?: number;
  /** First retry delay; doubles each retry, with jitter. Default 500 ms. */
  retryMinDelayMs?: number;
  /** Upper bound of one retry delay. Default 10 000 ms. */
  retryMaxDelayMs?: number;
  /**
   * A 429/503 asking to wait at most this long is waited out inside the read (up to 3 times);
   * a longer wait is thrown as RetryLaterError for the caller to schedule. Default 60 000 ms.
   */
  maxRetryAfterMs?: number;
  /** Path of a channel's inbox; `{channelId}` is replaced. Default `/channels/{channelId}/events`. */
  channelEventsPath?: string;
  /** Path the SendWebSmsRequest is POSTed to. Default `/sessions/sms`. */
  smsPath?: string;
  userAgent?: string;
  log?: Logger;
  now?: () => number;
  /** Called after an OAuth refresh (e.g. to persist a rotated refresh token). */
  onTokens?: (tokens: IssuedTokens) => void;
  /** OAuth: keeps the rotated refresh token across restarts (src/state/refresh-token.ts). */
  refreshTokenStore?: RefreshTokenStore;
}

const inboxSchema = z.looseObject({
  events: z.array(z.unknown()),
  // Only an echo of the limit asked for: read when it is a whole number above 0, else that limit. A
  // value of another shape (`"100"`, `1.5`) refused the page, which the poller then read again forever.
  limit: z.unknown().optional(),
  position: z.union([z.string(), z.number()]).transform(String),
});

const historySchema = z.looseObject({
  items: z.array(z.unknown()),
  totalCount: z.number().int().nonnegative(),
});

const MAX_ERROR_BODY = 16 * 1024;
const MAX_RATE_LIMIT_WAITS = 3;

/** Names the fields a zod failure is about: `ChannelInbox: position: expected string, received undefined`. */
function describeZodError(record: string, error: z.ZodError): string {
  const parts = error.issues
    .slice(0, 5)
    .map((i) => `${i.path.length > 0 ? i.path.join('.') : '(record)'}: ${i.message}`);
  return `${record}: ${parts.join('; ')}`;
}

export class TelephonyApiClient implements TelephonyClient {
  readonly baseUrl: string;
  private readonly auth: AuthProvider;
  private readonly timeoutMs: number;
  private readonly downloadIdleTimeoutMs: number;
  private readonly retries: number;
  private readonly retryMinDelayMs: number;
  private readonly retryMaxDelayMs: number;
  private readonly maxRetryAfterMs: number;
  private readonly channelEventsPath: string;
  private readonly smsPath: string;
  private readonly userAgent: string;
  private readonly log: Logger | undefined;

  constructor(options: TelephonyClientOptions) {
    const url = new URL(options.baseUrl);
    this.baseUrl = url.toString().replace(/\/+$/, '');
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.downloadIdleTimeoutMs = options.downloadIdleTimeoutMs ?? 30_000;
    this.retries = options.retries ?? 4;
    this.retryMinDelayMs = options.retryMinDelayMs ?? 500;
    this.retryMaxDelayMs = options.retryMaxDelayMs ?? 10_000;
    this.maxRetryAfterMs = options.maxRetryAfterMs ?? 60_000;
    this.channelEventsPath = options.channelEventsPath ?? DEFAULT_CHANNEL_EVENTS_PATH;
    this.smsPath = options.smsPath ?? DEFAULT_SMS_PATH;
    this.userAgent = options.userAgent ?? 'callsync';
    this.log = options.log;
    this.auth = createAuthProvider(options.auth, {
      timeoutMs: this.timeoutMs,
      now: options.now ?? Date.now,
      onTokens: options.onTokens,
      tokenStore: options.refreshTokenStore,
      log: options.log,
    });
  }

  async readChannelEvents(
    channelId: string,
    position: string | undefined,
    limit: number,
    signal?: AbortSignal,
  ): Promise<ChannelInbox> {
    const path = this.channelEventsPath.replace('{channelId}', encodeURIComponent(channelId));
    const url = new URL(this.apiUrl(path));
    url.searchParams.set('limit', String(limit));
    if (position !== undefined && position !== '') url.searchParams.set('position', position);
    const operation = `GET ${this.channelEventsPath}`;
    const json = await this.readJson(operation, url.toString(), signal);
    const parsed = inboxSchema.safeParse(json);
    if (!parsed.success)
      throw new ResponseValidationError(
        operation,
        describeZodError(`ChannelInbox of channel ${channelId}`, parsed.error),
      );
    const echoed = parsed.data.limit;
    return {
      events: parsed.data.events,
      limit: Number.isSafeInteger(echoed) && (echoed as number) > 0 ? (echoed as number) : limit,
      position: parsed.data.position,
    };
  }

  /**
   * One page of the call history (spec 2.8, `GET /history`): the query parameters as the
   * platform's library sends them (sipgateio-node lib/history/history.ts: `types`, `from`, `to`,
   * `offset`, `limit`). A read: retried like the other reads.
   */
  async readHistory(query: HistoryQuery, signal?: AbortSignal): Promise<HistoryPage> {
    const url = new URL(this.apiUrl(HISTORY_PATH));
    for (const type of query.types) url.searchParams.append('types', type);
    url.searchParams.set('from', query.from);
    url.searchParams.set('to', query.to);
    url.searchParams.set('offset', String(query.offset));
    url.searchParams.set('limit', String(query.limit));
    const operation = `GET ${HISTORY_PATH}`;
    const json = await this.readJson(operation, url.toString(), signal);
    const parsed = historySchema.safeParse(json);
    if (!parsed.success)
      throw new ResponseValidationError(operation, describeZodError('HistoryResponse', parsed.error));
    return { items: parsed.data.items, totalCount: parsed.data.totalCount };
  }

  async download(relativeUrl: string, signal?: AbortSignal): Promise<Download> {
    const url = this.resolveDownloadUrl(relativeUrl);
    const operation = 'GET recording';
    const res = await this.withRetries(operation, signal, async () => {
      // Not AbortSignal.timeout: that would also cut a long body off. The header phase has its own
      // timer; the body has an idle timer below.
      const controller = new AbortController();
      const timer = setTimeout(() => controller.abort(new DOMException('timed out', 'TimeoutError')), this.timeoutMs);
      const onAbort = () => controller.abort(signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        const response = await this.fetchDownload(operation, url, controller.signal);
        if (!response.ok) throw await this.failure(operation, response);
        if (response.body === null)
          throw new TelephonyApiError(
            'transient',
            `Telephony API ${operation} answered ${response.status} without a body`,
            {
              operation,
              status: response.status,
            },
          );
        return { response, controller };
      } catch (err) {
        controller.abort();
        throw err;
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
    });
    const { response, controller } = res;
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    const source = Readable.fromWeb(response.body as unknown as WebReadableStream<Uint8Array>);
    const body = idleGuard(this.downloadIdleTimeoutMs, () => {
      controller.abort();
      return new TelephonyApiError(
        'transient',
        `Telephony API ${operation}: no data for ${this.downloadIdleTimeoutMs} ms`,
        {
          operation,
        },
      );
    });
    pipeline(source, body, (err) => {
      signal?.removeEventListener('abort', onAbort);
      if (err) body.destroy(err instanceof TelephonyApiError ? err : telephonyNetworkError(operation, err));
    });
    const length = response.headers.get('content-length');
    return {
      body,
      contentType: response.headers.get('content-type') ?? 'application/octet-stream',
      contentLength: length !== null && /^\d+$/.test(length) ? Number(length) : null,
    };
  }

  async sendSms(request: SendWebSmsRequest, signal?: AbortSignal): Promise<void> {
    validateSms(request);
    const operation = `POST ${this.smsPath}`;
    // Cleared once the answer is read (AbortSignal.timeout would keep the request alive for the whole limit).
    const limit = deadline(this.timeoutMs, signal);
    try {
      await this.sendSmsWithin(operation, request, limit.signal);
    } finally {
      limit.clear();
    }
  }

  private async sendSmsWithin(operation: string, request: SendWebSmsRequest, signal: AbortSignal): Promise<void> {
    let res: HttpAnswer;
    try {
      res = await this.sendApi(operation, this.apiUrl(this.smsPath), { method: 'POST', json: request }, signal);
    } catch (err) {
      // Typed errors come from the OAuth refresh, before anything was sent: safe to retry as they say.
      if (err instanceof TelephonyApiError) throw err;
      // Answered, but the body was too large or cut off: the status alone says what the platform did
      // with the SMS (the body of a 2xx is not read; an error's text is then unknown).
      const head = answerHeadOf(err);
      if (head) res = { ...head, ok: head.status >= 200 && head.status < 300, text: '' };
      else throw this.sendFailure(operation, err);
    }
    if (res.ok) return;
    // A gateway that gave up waiting (502/504) cannot say whether the platform sent the SMS.
    if (res.status === 502 || res.status === 504)
      throw new OutcomeUnknownError(operation, `answered ${res.status}`, { status: res.status });
    throw this.answerFailure(operation, res);
  }

  /** An SMS send that failed without an answer: not sent (retry as the error says), or perhaps sent. */
  private sendFailure(operation: string, err: unknown): Error {
    if (requestCertainlyNotSent(err)) return telephonyNetworkError(operation, err);
    const reason =
      err instanceof Error && err.name === 'TimeoutError'
        ? `no answer within ${this.timeoutMs} ms`
        : err instanceof Error
          ? networkReason(err)
          : String(err);
    return new OutcomeUnknownError(operation, reason, { cause: err });
  }

  /** A relative URL (`/recordings/1`, `recordings/1`, `/v2/recordings/1`) resolved against the API root. */
  resolveDownloadUrl(relativeUrl: string): string {
    const base = new URL(`${this.baseUrl}/`);
    if (/^[a-z][a-z0-9+.-]*:/i.test(relativeUrl) || relativeUrl.startsWith('//')) {
      const absolute = new URL(relativeUrl, base);
      // Never send the API's credentials to another host.
      if (absolute.origin !== base.origin)
        throw new TelephonyApiError(
          'permanent',
          `refusing to download from ${absolute.origin}: not the telephony API's origin`,
          { operation: 'GET recording' },
        );
      return absolute.toString();
    }
    const basePath = base.pathname.replace(/\/+$/, '');
    if (basePath !== '' && (relativeUrl === basePath || relativeUrl.startsWith(`${basePath}/`)))
      return new URL(relativeUrl, base.origin).toString();
    return `${this.baseUrl}/${relativeUrl.replace(/^\/+/, '')}`;
  }

  private apiUrl(path: string): string {
    return `${this.baseUrl}/${path.replace(/^\/+/, '')}`;
  }

  /**
   * Sends a request with the current credentials; after a 401 with OAuth, refreshes the token and
   * sends once more (`discard` first lets go of the rejected answer).
   */
  private async authorized<T extends { status: number }>(
    operation: string,
    signal: AbortSignal,
    send: (authorization: string) => Promise<T>,
    discard?: (rejected: T) => Promise<unknown>,
  ): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const authorization = await this.auth.header(signal);
      const res = await send(authorization);
      if (res.status === 401 && attempt === 1 && this.auth.rejected(authorization)) {
        await discard?.(res);
        this.log?.info({ operation }, 'telephony API rejected the access token; refreshing it once');
        continue;
      }
      return res;
    }
  }

  /**
   * An API request (JSON in and out) on node:http (src/http-request.ts). Never redirected: a 3xx is
   * answered as it is, and reported as a permanent failure naming where it points (`answerFailure`).
   */
  private sendApi(
    operation: string,
    url: string,
    init: { method: string; json?: unknown },
    signal: AbortSignal,
  ): Promise<HttpAnswer> {
    const body = init.json === undefined ? undefined : JSON.stringify(init.json);
    return this.authorized(operation, signal, (authorization) => {
      const headers: Record<string, string> = {
        authorization,
        accept: 'application/json',
        'user-agent': this.userAgent,
      };
      if (body !== undefined) headers['content-type'] = 'application/json';
      return httpRequest(new URL(url), { method: init.method, headers, body, signal });
    });
  }

  /**
   * A download (`fetch`): it may be redirected (e.g. to a signed storage URL), and fetch drops the
   * Authorization header when a redirect leaves the API's origin.
   */
  private fetchDownload(operation: string, url: string, signal: AbortSignal): Promise<Response> {
    return this.authorized(
      operation,
      signal,
      (authorization) =>
        fetch(url, {
          method: 'GET',
          headers: { authorization, accept: '*/*', 'user-agent': this.userAgent },
          signal,
          redirect: 'follow',
        }),
      (rejected) => rejected.arrayBuffer().catch(() => undefined),
    );
  }

  /** An API answer that is not 2xx, as a typed error (a redirect names where it points, never followed). */
  private answerFailure(operation: string, res: HttpAnswer): Error {
    if (res.status >= 300 && res.status < 400)
      return new TelephonyApiError(
        'permanent',
        `Telephony API ${operation} answered ${res.status} redirect to ${redirectTarget(res.headers.get('location'), this.baseUrl)} (redirects are not followed: check TELEPHONY_API_URL)`,
        { operation, status: res.status },
      );
    return telephonyErrorFromResponse({
      status: res.status,
      operation,
      body: res.text.slice(0, MAX_ERROR_BODY),
      retryAfter: res.headers.get('retry-after'),
    });
  }

  /** A download answer that is not 2xx, as a typed error (its body read up to MAX_ERROR_BODY). */
  private async failure(operation: string, res: Response): Promise<Error> {
    const body = await readLimited(res, MAX_ERROR_BODY).catch(() => '');
    return telephonyErrorFromResponse({
      status: res.status,
      operation,
      body,
      retryAfter: res.headers.get('retry-after'),
    });
  }

  private async readJson(operation: string, url: string, signal?: AbortSignal): Promise<unknown> {
    return this.withRetries(operation, signal, async () => {
      const limit = deadline(this.timeoutMs, signal);
      let res: HttpAnswer;
      try {
        res = await this.sendApi(operation, url, { method: 'GET' }, limit.signal);
      } finally {
        limit.clear();
      }
      if (!res.ok) throw this.answerFailure(operation, res);
      try {
        // A byte-order mark before the JSON is not part of it (as the ingress reads a webhook):
        // JSON.parse refused it, at every poll of the page.
        return JSON.parse(res.text.startsWith('\ufeff') ? res.text.slice(1) : res.text) as unknown;
      } catch {
        throw new ResponseValidationError(operation, `answered ${res.status} with a body that is not JSON`);
      }
    });
  }

  /**
   * Runs an idempotent request: network errors, timeouts and 5xx are retried with exponential
   * backoff and jitter; 429/503 with a short Retry-After are waited out exactly (not counted as a
   * retry); everything else is thrown at once.
   */
  private async withRetries<T>(
    operation: string,
    signal: AbortSignal | undefined,
    attempt: () => Promise<T>,
  ): Promise<T> {
    let rateLimitWaits = 0;
    const once = async (): Promise<T> => {
      for (;;) {
        try {
          return await attempt();
        } catch (err) {
          if (signal?.aborted) throw signal.reason ?? err;
          if (err instanceof TelephonyApiError && err.kind === 'retry-later') {
            if (err.retryAfterMs <= this.maxRetryAfterMs && rateLimitWaits < MAX_RATE_LIMIT_WAITS) {
              rateLimitWaits++;
              // At least the first retry delay: a Retry-After of 0 or in the past must not resend at once.
              const waitMs = Math.max(err.retryAfterMs, this.retryMinDelayMs);
              this.log?.warn(
                { operation, status: err.status, retryAfterMs: err.retryAfterMs, waitMs },
                'telephony API asked to wait; waiting',
              );
              await sleep(waitMs, signal);
              continue;
            }
            throw err;
          }
          if (err instanceof TelephonyApiError) throw err;
          throw telephonyNetworkError(operation, err);
        }
      }
    };
    return pRetry(once, {
      retries: this.retries,
      minTimeout: this.retryMinDelayMs,
      maxTimeout: this.retryMaxDelayMs,
      randomize: true,
      signal,
      shouldRetry: ({ error }) => retriable(error),
      onFailedAttempt: ({ error, attemptNumber, retriesLeft }) => {
        if (retriable(error) && retriesLeft > 0) {
          this.log?.warn(
            { operation, attempt: attemptNumber, retriesLeft, err: error.message },
            'telephony API read failed; retrying',
          );
        }
      },
    });
  }
}

/** A read that failed transiently (network, timeout, 5xx), not one whose answer did not match the spec. */
function retriable(error: unknown): boolean {
  return (
    error instanceof TelephonyApiError &&
    error.kind === 'transient' &&
    !(error instanceof ResponseValidationError) &&
    // The same request gets the same answer, as large: its caller asks for less (workers/poller.ts).
    !(error.cause instanceof AnswerTooLargeError)
  );
}

export function createTelephonyClient(options: TelephonyClientOptions): TelephonyApiClient {
  return new TelephonyApiClient(options);
}

/** Checks a SendWebSmsRequest against spec 2.4 before it is sent: a bad one can never succeed. */
function validateSms(request: SendWebSmsRequest): void {
  const problems: string[] = [];
  if (typeof request.smsId !== 'string' || request.smsId.trim() === '') problems.push('smsId is required');
  if (typeof request.recipient !== 'string' || request.recipient.trim() === '') problems.push('recipient is required');
  if (typeof request.message !== 'string' || request.message === '') problems.push('message is required');
  if (request.sendAt !== undefined) {
    const nowS = Math.floor(Date.now() / 1000);
    if (!Number.isInteger(request.sendAt)) problems.push('sendAt must be whole Unix seconds');
    else if (request.sendAt < nowS - 60) problems.push('sendAt is in the past');
    else if (request.sendAt > nowS + 30 * 24 * 3600) problems.push('sendAt is more than 30 days ahead');
  }
  if (problems.length > 0)
    throw new TelephonyApiError('permanent', `SendWebSmsRequest invalid: ${problems.join('; ')}`, {
      operation: 'POST SMS',
    });
}

async function readLimited(res: Response, max: number): Promise<string> {
  if (res.body === null) return '';
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < max) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value);
      size += value.byteLength;
    }
  } finally {
    await reader.cancel().catch(() => undefined);
  }
  return Buffer.concat(chunks).subarray(0, max).toString('utf8');
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A pass-through that fails when no chunk passed for `idleMs` (the consumer's back-pressure included). */
function idleGuard(idleMs: number, onIdle: () => Error): Transform {
  let timer: NodeJS.Timeout | undefined;
  const arm = (stream: Transform) => {
    clearTimeout(timer);
    timer = setTimeout(() => stream.destroy(onIdle()), idleMs);
    timer.unref();
  };
  const guard = new Transform({
    transform(chunk: Buffer, _enc, callback) {
      arm(this);
      callback(null, chunk);
    },
    flush(callback) {
      clearTimeout(timer);
      callback();
    },
  });
  arm(guard);
  guard.on('close', () => clearTimeout(timer));
  return guard;
}

/** A bad TELEPHONY_* setting; `problems` lists every one. */
export class TelephonyConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid telephony API configuration:\n${problems.map((p) => `  - ${p}`).join('\n')}`);
    this.name = 'TelephonyConfigError';
  }
}

const envPath = (placeholder?: string) =>
  envString.refine((v) => v === undefined || (v.startsWith('/') && (!placeholder || v.includes(placeholder))), {
    message: `expected a path starting with /${placeholder ? ` containing ${placeholder}` : ''}`,
  });

/**
 * The environment variables of the platform API client. Field by field they are checked here (part
 * of the one environment schema, src/config/env.ts); how they combine by telephonyOptions.
 */
export const telephonyEnv = {
  /** API root including the version, e.g. `https://api.example.com/v2`. Unset: no API client. */
  TELEPHONY_API_URL: envUrl,
  TELEPHONY_TOKEN_ID: envString,
  TELEPHONY_TOKEN: envString,
  TELEPHONY_ACCESS_TOKEN: envString,
  TELEPHONY_OAUTH_TOKEN_URL: envUrl,
  TELEPHONY_OAUTH_CLIENT_ID: envString,
  TELEPHONY_OAUTH_CLIENT_SECRET: envString,
  TELEPHONY_OAUTH_REFRESH_TOKEN: envString,
  TELEPHONY_OAUTH_CLIENT_AUTH: envEnum(['basic', 'post'], 'basic'),
  TELEPHONY_TIMEOUT_MS: envOptionalInt(1),
  TELEPHONY_DOWNLOAD_IDLE_TIMEOUT_MS: envOptionalInt(1),
  TELEPHONY_RETRIES: envOptionalInt(0),
  TELEPHONY_MAX_RETRY_AFTER_MS: envOptionalInt(0),
  TELEPHONY_CHANNEL_EVENTS_PATH: envPath('{channelId}'),
  TELEPHONY_SMS_PATH: envPath(),
} satisfies EnvShape;

export type TelephonyEnv = EnvOf<typeof telephonyEnv>;

/**
 * Client options from the parsed TELEPHONY_* variables; null when TELEPHONY_API_URL is unset.
 * Credentials, in this order: OAuth refresh (TELEPHONY_OAUTH_TOKEN_URL + _CLIENT_ID + _CLIENT_SECRET
 * + _REFRESH_TOKEN, optionally a first TELEPHONY_ACCESS_TOKEN), a fixed bearer token
 * (TELEPHONY_ACCESS_TOKEN), or a personal access token as HTTP Basic (TELEPHONY_TOKEN_ID +
 * TELEPHONY_TOKEN). Throws TelephonyConfigError listing every problem of how they combine.
 */
export function telephonyOptions(env: TelephonyEnv): TelephonyClientOptions | null {
  const baseUrl = env.TELEPHONY_API_URL;
  if (baseUrl === undefined) return null;
  const problems: string[] = [];
  const oauth = {
    TELEPHONY_OAUTH_TOKEN_URL: env.TELEPHONY_OAUTH_TOKEN_URL,
    TELEPHONY_OAUTH_CLIENT_ID: env.TELEPHONY_OAUTH_CLIENT_ID,
    TELEPHONY_OAUTH_CLIENT_SECRET: env.TELEPHONY_OAUTH_CLIENT_SECRET,
    TELEPHONY_OAUTH_REFRESH_TOKEN: env.TELEPHONY_OAUTH_REFRESH_TOKEN,
  };
  const oauthSet = Object.keys(oauth).filter((n) => oauth[n as keyof typeof oauth] !== undefined);
  const { TELEPHONY_ACCESS_TOKEN: accessToken, TELEPHONY_TOKEN_ID: tokenId, TELEPHONY_TOKEN: token } = env;
  let auth: TelephonyAuth | undefined;
  if (oauthSet.length > 0) {
    const missing = Object.keys(oauth).filter((n) => oauth[n as keyof typeof oauth] === undefined);
    if (missing.length > 0)
      problems.push(`OAuth refresh needs ${missing.join(', ')} as well (or unset ${oauthSet.join(', ')})`);
    auth = {
      kind: 'oauth',
      tokenUrl: oauth.TELEPHONY_OAUTH_TOKEN_URL ?? '',
      clientId: oauth.TELEPHONY_OAUTH_CLIENT_ID ?? '',
      clientSecret: oauth.TELEPHONY_OAUTH_CLIENT_SECRET ?? '',
      refreshToken: oauth.TELEPHONY_OAUTH_REFRESH_TOKEN ?? '',
      accessToken,
      clientAuth: env.TELEPHONY_OAUTH_CLIENT_AUTH ?? 'basic',
    };
  } else if (accessToken !== undefined) {
    auth = { kind: 'bearer', accessToken };
  }
  if (tokenId !== undefined || token !== undefined) {
    if (auth !== undefined)
      problems.push(
        'set either TELEPHONY_TOKEN_ID/TELEPHONY_TOKEN (personal access token) or OAuth settings, not both',
      );
    else if (tokenId === undefined || token === undefined)
      problems.push('a personal access token needs both TELEPHONY_TOKEN_ID and TELEPHONY_TOKEN');
    else auth = { kind: 'basic', tokenId, token };
  }
  if (auth === undefined && problems.length === 0) {
    problems.push(
      'TELEPHONY_API_URL is set but no credentials: set TELEPHONY_TOKEN_ID + TELEPHONY_TOKEN, or TELEPHONY_ACCESS_TOKEN, or the TELEPHONY_OAUTH_* settings',
    );
  }

  const options: TelephonyClientOptions = {
    baseUrl,
    auth: auth ?? { kind: 'bearer', accessToken: '' },
    timeoutMs: env.TELEPHONY_TIMEOUT_MS,
    downloadIdleTimeoutMs: env.TELEPHONY_DOWNLOAD_IDLE_TIMEOUT_MS,
    retries: env.TELEPHONY_RETRIES,
    maxRetryAfterMs: env.TELEPHONY_MAX_RETRY_AFTER_MS,
    channelEventsPath: env.TELEPHONY_CHANNEL_EVENTS_PATH,
    smsPath: env.TELEPHONY_SMS_PATH,
  };
  if (problems.length > 0) throw new TelephonyConfigError(problems);
  return options;
}
