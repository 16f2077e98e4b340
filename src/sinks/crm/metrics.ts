// Prometheus counters of the CRM sinks, on prom-client's default registry (served by the lead's
// /metrics endpoint). Registered once per process, however often the module is loaded.
import client from 'prom-client';

function counter<L extends string>(name: string, help: string, labelNames: readonly L[]): client.Counter<L> {
  const existing = client.register.getSingleMetric(name);
  if (existing) return existing as client.Counter<L>;
  return new client.Counter<L>({ name, help, labelNames });
}

/** Every CRM HTTP answer, by sink and status (`network` when there was none). */
export const crmRequests = counter(
  'callsync_crm_requests_total',
  'HTTP requests made by the CRM sinks, by answer status',
  ['sink', 'crm', 'status'] as const,
);

/** A CRM rejected the credentials (401/403): the sink's queue is being paused. */
export const crmAuthFailures = counter(
  'callsync_crm_auth_failures_total',
  'Credentials rejected by a CRM (401/403); the sink queue is paused until an operator resumes it',
  ['sink', 'crm', 'status'] as const,
);

/** A CRM asked us to slow down (429, or its rate-limit headers said the window is used up). */
export const crmRateLimited = counter(
  'callsync_crm_rate_limited_total',
  'Times a CRM sink paused its queue for a CRM rate limit',
  ['sink', 'crm', 'reason'] as const,
);
