// Secrets out of what is shown or compared: a sink's options as check-config prints them, and as
// the routing fingerprint hashes them (src/config/fingerprint.ts).

const SECRET_KEY = /secret|token|password|passphrase|api[-_]?key|authorization|credential|signing|cookie/i;
/** Options whose values are all sent as credentials (e.g. the signed webhook's custom headers): names kept, values hidden. */
const SECRET_MAPS = new Set(['headers']);
/** Values that are secrets whatever their key: signing secrets, tokens with a known prefix, `Bearer …`. */
const SECRET_VALUE = /^(whsec_|pat-|sk_|xox[abp]-|ghp_|glpat-)|^bearer\s/i;

/** A URL with user info (`https://user:pass@…`) or a query (`?code=…`, `?api_token=…`): either may hold a credential. */
const URL_WITH_CREDENTIALS = /^[a-z][a-z0-9+.-]*:\/\/(?:[^/?#\s]*@|[^?#\s]*\?)/i;

/** A sink's options with anything secret-looking replaced: secret keys, header values, secret values, URL credentials. */
export function redactOptions(value: unknown, key = ''): unknown {
  if (key && SECRET_KEY.test(key)) return '[redacted]';
  if (typeof value === 'string') {
    if (SECRET_VALUE.test(value.trim())) return '[redacted]';
    return URL_WITH_CREDENTIALS.test(value) ? redactUrl(value) : value;
  }
  if (Array.isArray(value)) return value.map((v) => redactOptions(v));
  if (value !== null && typeof value === 'object') {
    if (SECRET_MAPS.has(key)) return Object.fromEntries(Object.keys(value).map((k) => [k, '[redacted]']));
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactOptions(v, k)]));
  }
  return value;
}

/**
 * `redis://user:secret@host` -> `redis://user:***@host`; `https://host/fn?code=key&x=1` ->
 * `https://host/fn?code=***&x=***` (a query value may be the credential: an Azure Function's
 * `code`, Pipedrive's `api_token`; the names stay).
 */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    // A credential without a user name (`https://token@host`) is the user part.
    else if (u.username) u.username = '***';
    if (u.search) u.search = u.search.replace(/([?&][^=&]*=)[^&]*/g, '$1***');
    return u.toString();
  } catch {
    return url;
  }
}

/**
 * The secret values of a configuration: environment variables and sink options named as credentials
 * (`HUBSPOT_ACCESS_TOKEN`, `accessToken`, `headers` values…), values shaped as one (`whsec_…`), the
 * passwords (or user parts) of URLs (`REDIS_URL`, `SMTP_URL`). What rememberSecrets (src/redact.ts)
 * keeps out of every remote's text.
 */
export function secretValues(env: NodeJS.ProcessEnv, sinkOptions: unknown[]): string[] {
  const out: string[] = [];
  const fromUrl = (value: string) => {
    if (!URL_WITH_CREDENTIALS.test(value)) return;
    try {
      const u = new URL(value);
      const secret = decodeURIComponent(u.password || u.username);
      if (secret) out.push(secret);
    } catch {
      // not a URL after all
    }
  };
  const walk = (value: unknown, key: string, secret: boolean) => {
    if (typeof value === 'string') {
      if (secret || SECRET_VALUE.test(value.trim())) out.push(value);
      else fromUrl(value);
    } else if (Array.isArray(value)) for (const v of value) walk(v, key, secret);
    else if (value !== null && typeof value === 'object')
      for (const [k, v] of Object.entries(value)) walk(v, k, secret || SECRET_MAPS.has(k) || SECRET_KEY.test(k));
  };
  for (const [name, value] of Object.entries(env)) if (value !== undefined) walk(value, name, SECRET_KEY.test(name));
  for (const options of sinkOptions) walk(options, '', false);
  return out;
}
