// The shutdown gate in process: once shutdown begins, a request already inside finishes with 202,
// new requests get 503 with Retry-After in the spec's error shape, liveness and metrics still
// answer, and shutdown resolves with exit code 0.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CallAcceptor } from '../src/ingress/accept.js';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

describe('shutdown gate', () => {
  let cs: OpsCallsync;
  let dir: string;
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  let inside = 0;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-gate-'));
    // Calls named `hold-*` wait inside the acceptor until the test releases them.
    const wrapAcceptor = (inner: CallAcceptor): CallAcceptor => ({
      async accept(call) {
        if (call.callId.startsWith('hold-')) {
          inside++;
          await held;
        }
        return inner.accept(call);
      },
    });
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir }, { wrapAcceptor });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('in-flight requests finish, new ones get 503, and shutdown exits 0', async () => {
    const app = cs.callsync.app!;
    const inFlight = postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload('hold-1'));
    await waitFor(() => inside === 1, { what: 'the request inside the acceptor' });
    assert.equal(cs.operations.gate.inFlight, 1);

    const stopping = cs.shutdown('test');
    await waitFor(() => cs.operations.gate.closed, { what: 'the gate to close' });

    // New requests (through the app, as a request on a kept-alive connection would arrive).
    const refused = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(webhookPayload('late-1')),
    });
    assert.equal(refused.status, 503);
    assert.equal(refused.headers.get('retry-after'), '5');
    assert.equal(refused.headers.get('connection'), 'close');
    const body = await refused.json();
    assert.deepEqual(body, {
      errors: [
        {
          status: 503,
          title: 'Service Unavailable',
          detail: 'callsync is shutting down; retry later',
          source: { pointer: '/' },
        },
      ],
    });
    assert.equal((await app.request('/readyz')).status, 503);
    assert.equal((await app.request('/healthz')).status, 200);
    const metrics = await (await app.request('/metrics')).text();
    assert.match(metrics, /callsync_webhooks_rejected_total\{status="503",reason="shutting-down"\} 1/);

    release();
    const res = await inFlight;
    assert.equal(res.status, 202, 'the request already inside was acknowledged');
    assert.equal(await stopping, 0);
    assert.ok(cs.logs.some((l) => l.msg === 'stopped'));
  });
});
