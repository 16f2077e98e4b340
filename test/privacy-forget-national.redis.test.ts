// `callsync forget <number>` a day later for a call whose payload gave the caller's number in its
// national form (`0170 1234567`, `٠١٧٠ ١٢٣٤٥٦٧`: no country code, so the record's `from` is null and
// the number is kept as sent in `fromRaw`). Its jobs are swept after a day and no archive holds it,
// but its timeline (call id, the number masked, every sink's outcome) stays CALL_TIMELINE_TTL_DAYS:
// forget finds it by the timeline's number index, in the national form it looks up, as it finds
// calls that gave the number in E.164 (privacy-forget-timeline) or with a trunk 0 (privacy-forget-gaps);
// and the lookups by number (`callsync call +49…`, `calls --number`, /api/calls) list them before.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { CallTimeline, findCalls } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { startWebhookCallsync, stopWebhookCallsync, type WebhookCallsync } from './support/webhook-callsync.js';

const A = '+491701234567';
const DAY_MS = 24 * 3600_000;

describe('forget <number> a day later, for calls that gave the number in its national form', () => {
  let setup: WebhookCallsync | undefined;
  before(async () => {
    setup = await startWebhookCallsync('forgetnational');
  });
  after(() => stopWebhookCallsync(setup));

  test("the calls' timelines and lookups go", async () => {
    const { target, conn, cs, env, prefix } = setup!;
    const spellings = [
      '0170 1234567',
      '(0170) 123-4567',
      '\u0660\u0661\u0667\u0660 \u0661\u0662\u0663\u0664\u0665\u0666\u0667',
    ];
    const ids = spellings.map((_, i) => `national-${i}`);
    for (const [i, from] of spellings.entries())
      assert.equal(
        (
          await postJson(
            `${cs.url}/webhooks/ai-agent/agent-1`,
            webhookPayload(ids[i], (p) => (p.call.from = from)),
          )
        ).status,
        202,
      );
    // Another caller's national number stays.
    assert.equal(
      (
        await postJson(
          `${cs.url}/webhooks/ai-agent/agent-1`,
          webhookPayload('other', (p) => (p.call.from = '0176 1234599')),
        )
      ).status,
      202,
    );
    const hashes = ids.map((id) => callHash(callKey('ai-agent', 'agent-1', id)));
    const other = callHash(callKey('ai-agent', 'agent-1', 'other'));
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const config = loadConfig(env);
    const log = pino({ level: 'silent' });
    const timeline = new CallTimeline(conn, target.keys(prefix), config.timeline);
    try {
      await waitFor(async () => (await queue.getJobCounts('completed')).completed === 4 || null, {
        what: 'the calls delivered',
        timeoutMs: 30_000,
      });
      const job = await queue.getJob(hashes[0]!);
      assert.equal((job?.data as { call: { from: string | null } }).call.from, null, 'no country code: no E.164');
      // Two days later the delivered jobs are swept; the timelines stay 30 days.
      assert.equal((await sweepRetention(config, conn, log, Date.now() + 2 * DAY_MS)).removed.completed_jobs, 4);
      for (const hash of [...hashes, other])
        assert.notDeepEqual(await timeline.read(hash), [], 'the timeline is there');
      // What `callsync call +49…`, `calls --number` and /api/calls list for the number (Art. 15): these calls too.
      assert.deepEqual((await timeline.byNumber(A)).sort(), [...hashes].sort());
      assert.deepEqual(await timeline.resolve('+49 170 1234567'), await timeline.byNumber(A));
      const listed = await findCalls(timeline, { since: 0, number: A, limit: 50 });
      assert.deepEqual(listed.calls.map((c) => c.id).sort(), [...hashes].sort(), '`calls --number` lists them');

      const receipt = await forget(config, conn, log, { target: parseTarget(A, 'DE'), dryRun: false, crm: false });
      assert.equal(receipt.calls, 3, JSON.stringify(receipt));
      for (const [i, hash] of hashes.entries()) {
        assert.deepEqual(await timeline.read(hash), [], `no timeline of the call from "${spellings[i]}"`);
        assert.deepEqual(await timeline.byCallId(ids[i]!), [], 'no lookup by its call id');
      }
      assert.notDeepEqual(await timeline.read(other), [], "the other caller's timeline stays");
      assert.deepEqual(await timeline.byCallId('other'), [other]);
    } finally {
      await queue.close();
    }
  });
});
