// Credentials of the telephony REST API: a personal access token (HTTP Basic), a fixed OAuth 2.0
// bearer token, or an OAuth 2.0 refresh-token grant that keeps a short-lived access token fresh.
// The spec (section 5) does not show the scheme; docs/polling.md records the decision.
import { z } from 'zod';
import { networkReason } from '../errors.js';
import { TelephonyApiError } from './errors.js';
import { redactRemoteText } from '../redact.js';
import type { Logger } from '../log.js';

export type TelephonyAuth =
  | { kind: 'basic'; tokenId: string; token: string }
  | { kind: 'bearer'; accessToken: string }
  | {
      kind: 'oauth';
      /** Token endpoint (RFC 6749 section 6 refresh grant is POSTed here). */
      tokenUrl: string;
      clientId: string;
      clientSecret: string;
      refreshToken: string;
      /** A current access token to start with; without one the first request refreshes. */
      accessToken?: string;
      /** Epoch ms when `accessToken` expires, when known. */
      accessTokenExpiresAt?: number;
      /** How the client authenticates at the token endpoint. Default `basic` (RFC 6749 2.3.1). */
      clientAuth?: 'basic' | 'post';
    };

export interface AuthProvider {
  /** The Authorization header value for the next request. */
  header(signal?: AbortSignal): Promise<string>;
  /**
   * The API answered 401 to a request sent with `usedHeader`: drop that token so the next
   * `header()` refreshes it. Returns false when refreshing cannot help (static credentials).
   */
  rejected(usedHeader: string): boolean;
}

/** New tokens from a refresh; `refreshToken` is set when the server rotated it. */
export interface IssuedTokens {
  accessToken: string;
  expiresAt: number | null;
  refreshToken: string | null;
}

/**
 * Where the newest refresh token outlives the process (src/state/refresh-token.ts keeps it in
 * Redis), so a restart does not start again from the environment's token, which the identity
 * server may have rotated away since.
 */
export interface RefreshTokenStore {
  /** The refresh token saved last for these credentials; null when none (or the environment's token changed since). */
  load(): Promise<string | null>;
  save(refreshToken: string): Promise<void>;
}

export interface AuthProviderOptions {
  timeoutMs: number;
  now: () => number;
  /** Called after every successful refresh (e.g. to persist a rotated refresh token). */
  onTokens?: (tokens: IssuedTokens) => void;
  /** Keeps a rotated refresh token across restarts and shares it between processes. */
  tokenStore?: RefreshTokenStore;
  /** For the store's failures (never a token). */
  log?: Logger;
}

export function createAuthProvider(auth: TelephonyAuth, options: AuthProviderOptions): AuthProvider {
  switch (auth.kind) {
    case 'basic': {
      const value = `Basic ${Buffer.from(`${auth.tokenId}:${auth.token}`).toString('base64')}`;
      return { header: async () => value, rejected: () => false };
    }
    case 'bearer': {
      const value = `Bearer ${auth.accessToken}`;
      return { header: async () => value, rejected: () => false };
    }
    case 'oauth':
      return new OAuthRefresher(auth, options);
  }
}

const tokenResponseSchema = z.looseObject({
  access_token: z.string().min(1),
  token_type: z.string().nullish(),
  expires_in: z.union([z.number(), z.string().regex(/^\d+$/)]).nullish(),
  refresh_token: z.string().min(1).nullish(),
});

/** How long a refresh waits for the token store (Redis away: it goes on with the token in memory). */
const STORE_WAIT_MS = 2000;

function bounded<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

const tokenErrorSchema = z.looseObject({ error: z.string(), error_description: z.string().nullish() });

/**
 * Keeps one access token, refreshed shortly before it expires (tokens may live only minutes) and
 * whenever the API rejects it. Concurrent callers share one refresh.
 */
class OAuthRefresher implements AuthProvider {
  private accessToken: string | null;
  private expiresAt: number | null;
  private refreshToken: string;
  private inflight: Promise<string> | null = null;

  constructor(
    private readonly auth: Extract<TelephonyAuth, { kind: 'oauth' }>,
    private readonly options: AuthProviderOptions,
  ) {
    this.accessToken = auth.accessToken ?? null;
    this.expiresAt = auth.accessTokenExpiresAt ?? null;
    this.refreshToken = auth.refreshToken;
  }

  async header(signal?: AbortSignal): Promise<string> {
    if (this.accessToken !== null && !this.expiringSoon()) return `Bearer ${this.accessToken}`;
    return `Bearer ${await this.refresh(signal)}`;
  }

  rejected(usedHeader: string): boolean {
    if (this.accessToken !== null && usedHeader === `Bearer ${this.accessToken}`) this.accessToken = null;
    return true;
  }

  private expiringSoon(): boolean {
    if (this.expiresAt === null) return false;
    // Refresh a fifth of the lifetime early, at most a minute: a 5-minute token is renewed after 4.
    const remaining = this.expiresAt - this.options.now();
    return remaining <= this.margin;
  }

  private margin = 60_000;

  private refresh(signal?: AbortSignal): Promise<string> {
    this.inflight ??= this.doRefresh(signal).finally(() => {
      this.inflight = null;
    });
    return this.inflight;
  }

  /** The stored refresh token; null without a store or when it cannot be read (logged). */
  private async storedToken(): Promise<string | null> {
    if (!this.options.tokenStore) return null;
    try {
      return await bounded(this.options.tokenStore.load(), STORE_WAIT_MS);
    } catch (err) {
      this.options.log?.warn(
        { err: { message: (err as Error).message } },
        'stored OAuth refresh token could not be read: using the one in memory',
      );
      return null;
    }
  }

  /**
   * Refreshes with the newest refresh token known: the stored one (another process, or this one
   * before a restart, rotated it) before the one in memory (the environment's at start). When the
   * server rejects one as invalid (400: rotated away, revoked), the other is tried, and the store
   * read once more (another process may have rotated it meanwhile) before the rejection is final.
   */
  private async doRefresh(signal?: AbortSignal): Promise<string> {
    const tried = new Set<string>();
    let rejection: unknown = null;
    for (let round = 0; round < 2; round++) {
      const stored = await this.storedToken();
      for (const token of [stored, this.refreshToken]) {
        if (token === null || token === '' || tried.has(token)) continue;
        tried.add(token);
        try {
          return await this.exchange(token, signal);
        } catch (err) {
          if (!(err instanceof TelephonyApiError) || err.kind !== 'auth' || err.status !== 400) throw err;
          rejection = err;
        }
      }
      if (!this.options.tokenStore) break;
    }
    throw rejection ?? refreshError('auth', 'OAuth token refresh: no refresh token');
  }

  private async exchange(refreshToken: string, signal?: AbortSignal): Promise<string> {
    const form = new URLSearchParams({ grant_type: 'refresh_token', refresh_token: refreshToken });
    const headers: Record<string, string> = {
      'content-type': 'application/x-www-form-urlencoded',
      accept: 'application/json',
    };
    if ((this.auth.clientAuth ?? 'basic') === 'basic') {
      const id = encodeURIComponent(this.auth.clientId);
      const secret = encodeURIComponent(this.auth.clientSecret);
      headers.authorization = `Basic ${Buffer.from(`${id}:${secret}`).toString('base64')}`;
    } else {
      form.set('client_id', this.auth.clientId);
      form.set('client_secret', this.auth.clientSecret);
    }
    const timeout = AbortSignal.timeout(this.options.timeoutMs);
    let res: Response;
    try {
      res = await fetch(this.auth.tokenUrl, {
        method: 'POST',
        headers,
        body: form.toString(),
        signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
      });
    } catch (err) {
      const reason =
        err instanceof Error ? (err.name === 'TimeoutError' ? 'timed out' : networkReason(err)) : String(err);
      throw refreshError('transient', `OAuth token refresh failed: ${reason}`, { cause: err });
    }
    const text = await res.text();
    if (!res.ok) {
      let detail = '';
      try {
        const e = tokenErrorSchema.safeParse(JSON.parse(text));
        // A token server may quote what it was sent (Spring's "Invalid refresh token: <token>"): the
        // secrets of this exchange go before the remote's text is read, whatever their shape.
        const secrets = [refreshToken, this.auth.clientSecret];
        const said = (remote: string) => redactRemoteText(withoutSecrets(remote, secrets));
        if (e.success)
          detail = `: ${said(e.data.error)}${e.data.error_description ? ` (${said(e.data.error_description)})` : ''}`;
      } catch {
        // not JSON: the status says enough
      }
      const message = `OAuth token refresh answered ${res.status}${detail}`;
      // 400 invalid_grant / 401 invalid_client: the refresh token or client is no longer valid.
      if (res.status >= 400 && res.status < 500 && res.status !== 408 && res.status !== 429) {
        throw refreshError('auth', message, { status: res.status });
      }
      throw refreshError('transient', message, { status: res.status });
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw refreshError('transient', 'OAuth token refresh answered a body that is not JSON');
    }
    const parsed = tokenResponseSchema.safeParse(json);
    if (!parsed.success) {
      const fields = parsed.error.issues.map((i) => i.path.join('.') || '(body)').join(', ');
      throw refreshError('auth', `OAuth token response is missing or has invalid fields: ${fields}`);
    }
    const now = this.options.now();
    const expiresIn =
      parsed.data.expires_in === undefined || parsed.data.expires_in === null ? null : Number(parsed.data.expires_in);
    this.accessToken = parsed.data.access_token;
    this.expiresAt = expiresIn === null ? null : now + expiresIn * 1000;
    this.margin = expiresIn === null ? 60_000 : Math.min(60_000, (expiresIn * 1000) / 5);
    const rotated = parsed.data.refresh_token ?? null;
    this.refreshToken = rotated ?? refreshToken;
    if (rotated !== null && this.options.tokenStore) {
      try {
        await bounded(this.options.tokenStore.save(rotated), STORE_WAIT_MS);
      } catch (err) {
        this.options.log?.warn(
          { err: { message: (err as Error).message } },
          "rotated OAuth refresh token could not be stored: this process keeps it in memory; a restart before the next refresh starts from the environment's token",
        );
      }
    }
    this.options.onTokens?.({
      accessToken: this.accessToken,
      expiresAt: this.expiresAt,
      refreshToken: parsed.data.refresh_token ?? null,
    });
    return this.accessToken;
  }
}

/** A failed OAuth token refresh: `auth` when the token or client was refused, else `transient`. */
function refreshError(
  kind: 'auth' | 'transient',
  message: string,
  options: { status?: number; cause?: unknown } = {},
): TelephonyApiError {
  return new TelephonyApiError(kind, message, { operation: 'OAuth token refresh', ...options });
}

/** `text` with every occurrence of each secret (also percent-encoded, as a form sends it) as `[redacted]`. */
function withoutSecrets(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) {
    if (secret.length < 4) continue;
    for (const form of new Set([secret, encodeURIComponent(secret)])) out = out.split(form).join('[redacted]');
  }
  return out;
}
