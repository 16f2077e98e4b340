#!/usr/bin/env node
// Container HEALTHCHECK: GET /healthz on this process's HTTP port (the ingress PORT for the
// ingress and all roles, OPS_PORT - default 9464 - for worker and poller). Exit 0 when healthy.
/* global process, fetch, AbortSignal */
const role = process.env.CALLSYNC_ROLE || 'all';
const opsPort = (process.env.OPS_PORT || '').trim().toLowerCase();
const workerLike = role === 'worker' || role === 'poller';
let port;
if (opsPort === 'off' || opsPort === '0') port = workerLike ? null : process.env.PORT || '3000';
else if (opsPort) port = opsPort;
else port = workerLike ? '9464' : process.env.PORT || '3000';

if (port === null) process.exit(0); // no HTTP server to ask: the process being alive is all we know
try {
  const res = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(3000) });
  process.exit(res.ok ? 0 : 1);
} catch {
  process.exit(1);
}
