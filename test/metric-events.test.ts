import assert from 'node:assert/strict';
import { test } from 'node:test';
import { metrics } from '../src/metrics.js';
import { ingressMetrics } from '../workers/metric-events.js';

async function rejectedCount(labels: { status: string; reason: string }): Promise<number> {
  const { values } = await metrics.webhooksRejected.get();
  return values.find((v) => v.labels.status === labels.status && v.labels.reason === labels.reason)?.value ?? 0;
}

test('callsync_webhooks_rejected_total names every status the ingress answers with, a late Push event too', async () => {
  const events = ingressMetrics();
  const cases: [number, string][] = [
    [400, 'invalid-payload'],
    [401, 'unauthorized'],
    [403, 'forbidden'],
    [405, 'method-not-allowed'],
    [409, 'late-event'],
    [413, 'too-large'],
    [415, 'unsupported-media-type'],
    [500, 'internal'],
  ];
  for (const [status, reason] of cases) {
    const before = await rejectedCount({ status: String(status), reason });
    // The ingress passes the status as the reason for a typed HTTP error (src/ingress/app.ts).
    events.rejected!(status, String(status));
    assert.equal(await rejectedCount({ status: String(status), reason }), before + 1, `${status} ${reason}`);
  }
  // A reason the ingress names itself is kept as it is.
  const before = await rejectedCount({ status: '503', reason: 'body-budget' });
  events.rejected!(503, 'body-budget');
  assert.equal(await rejectedCount({ status: '503', reason: 'body-budget' }), before + 1);
});
