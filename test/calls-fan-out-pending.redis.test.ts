// A call accepted (202) but not fanned out yet (no worker running, or a backlog) waits for its
// sinks: `callsync call` says so (`fan-out:pending` and a note where the backlog shows), and
// `callsync calls --status pending` lists it (before, it showed `sinks: -` and no filter found it).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { testRedis, uniquePrefix, waitFor } from './support/redis.js';
import { cli } from './support/cli.js';

let cs: OpsCallsync;
let dir: string;
const prefix = uniquePrefix('fanout-pending');

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'fanout-pending-'));
  // The ingress only: calls are accepted into the inbound log; the worker (fan-out) is not running.
  cs = await startOpsCallsync({ QUEUE_PREFIX: prefix, CALLSYNC_ROLE: 'ingress', ARCHIVE_DIR: dir });
});
after(async () => {
  await cs?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** `callsync <argv>` against this test's prefix. */
const run = async (argv: string[]) =>
  cli(argv, { ...(await testRedis()).env(), QUEUE_PREFIX: prefix, ARCHIVE_DIR: dir });

test('a call accepted but not fanned out yet is listed by calls --status pending', async () => {
  const id = 'waiting-for-fan-out-1';
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
  // It has a timeline (received), so `callsync call` finds it.
  await waitFor(async () => (await run(['call', id])).code === 0, { what: 'its timeline' });
  const shown = await run(['call', id]);
  assert.match(shown.out, /^sinks: fan-out:pending$/m);
  assert.match(shown.out, /^note: not fanned out yet .*callsync_inbound_log_entries/m);
  const all = JSON.parse((await run(['calls', '--since', '1h', '--json'])).out) as {
    calls: { callId: string; sinks: object }[];
  };
  assert.deepEqual(
    all.calls.map((c) => c.callId),
    [id],
    'listed without a filter',
  );
  const pending = JSON.parse((await run(['calls', '--since', '1h', '--status', 'pending', '--json'])).out) as {
    calls: { callId: string }[];
  };
  assert.deepEqual(
    pending.calls.map((c) => c.callId),
    [id],
    'calls --status pending: the call waits for its fan-out and sinks',
  );
  for (const status of ['failed', 'done', 'skipped'])
    assert.deepEqual(
      (JSON.parse((await run(['calls', '--since', '1h', '--status', status, '--json'])).out) as { calls: unknown[] })
        .calls,
      [],
      `--status ${status}`,
    );
  // With a sink asked for, it is not listed: no sink has a job yet.
  const archive = JSON.parse(
    (await run(['calls', '--since', '1h', '--status', 'pending', '--sink', 'archive', '--json'])).out,
  ) as {
    calls: unknown[];
  };
  assert.deepEqual(archive.calls, []);
});
