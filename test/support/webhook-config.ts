// The ingress' webhook settings for tests that build the app themselves (createIngressApp): any
// address, no credential, 1 MiB bodies, a minute's dedupe window.
import type { Config } from '../../src/config/index.js';

export const webhookConfig = (over: Partial<Config['webhook']> = {}): Config['webhook'] => ({
  allowedIps: '*',
  trustProxyHops: 0,
  authHeader: undefined,
  authTokens: [],
  bodyLimitBytes: 1024 * 1024,
  dedupeWindowMs: 60_000,
  enqueueTimeoutMs: 1500,
  ...over,
});
