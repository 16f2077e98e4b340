#!/usr/bin/env node
// Container HEALTHCHECK: GET /healthz on this process's HTTP port (the ingress PORT for the
// ingress and all roles, OPS_PORT - default 9464 - for worker and poller) at the address it listens
// on (HOST; OPS_HOST for the ops server). Exit 0 when healthy.
/* global process, fetch, AbortSignal */
const role = process.env.CALLSYNC_ROLE || 'all';
const opsPort = (process.env.OPS_PORT || '').trim().toLowerCase();
const workerLike = role === 'worker' || role === 'poller';
let port;
let ops = false;
if (opsPort === 'off' || opsPort === '0') port = workerLike ? null : process.env.PORT || '3000';
else if (opsPort) [port, ops] = [opsPort, true];
else [port, ops] = workerLike ? ['9464', true] : [process.env.PORT || '3000', false];

// Where that server listens: the ops server on OPS_HOST, else HOST; the ingress on HOST. Every
// interface (0.0.0.0, ::, unset) is asked on loopback; one address only there (before, always
// 127.0.0.1: a HOST of the container's own address made a healthy container unhealthy).
const listen = ((ops && process.env.OPS_HOST) || process.env.HOST || '').trim();
const host = ['', '0.0.0.0', '::', '[::]'].includes(listen)
  ? '127.0.0.1'
  : listen.includes(':') && !listen.startsWith('[')
    ? `[${listen}]`
    : listen;

if (port === null) process.exit(0); // no HTTP server to ask: the process being alive is all we know
try {
  const res = await fetch(`http://${host}:${port}/healthz`, { signal: AbortSignal.timeout(3000) });
  process.exit(res.ok ? 0 : 1);
} catch {
  process.exit(1);
}
