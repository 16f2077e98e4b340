// The routing configuration's fingerprint: a hash of what decides where a call goes — the sinks
// (name, type, options, endpoints) and the routes (conditions and targets) — normalized (keys
// sorted, route names left out) and without secrets, so processes on one QUEUE_PREFIX can tell
// whether they route the same calls the same way (src/state/config-fingerprint.ts).
import { createHash } from 'node:crypto';
import type { Config } from './index.js';
import { redactOptions } from './redact.js';

/** JSON with every object's keys sorted: equal configurations give equal text. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.keys(value)
        .sort()
        .filter((k) => (value as Record<string, unknown>)[k] !== undefined)
        .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/** What the fingerprint is made of (shown by nothing; hashed). */
function routingConfiguration(config: Pick<Config, 'sinks' | 'routes'>): unknown {
  const sinks = Object.values(config.sinks)
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((s) => ({ name: s.name, type: s.type, options: redactOptions(s.options), endpoints: s.endpoints ?? [] }));
  const routes = config.routes.map((r) => ({ when: r.when, to: r.to }));
  return canonical({ sinks, routes });
}

/** sha256 (hex) of the normalized sinks and routes, secrets left out. */
export function routingFingerprint(config: Pick<Config, 'sinks' | 'routes'>): string {
  return createHash('sha256')
    .update(JSON.stringify(routingConfiguration(config)))
    .digest('hex');
}
