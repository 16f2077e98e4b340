// An update (second revision) of a call dead-lettered at a sink while the first revision's job
// still retries there; the first revision then succeeds. The sink's state is the update's — failed,
// with its reason —, `calls --status failed` lists the call, and the Calls page retries the update's
// dead letter. Before, the first revision's later "done" stood for the sink: no reason, no listing,
// and Retry answered 409 "not failed" while the call's newest content sat in the dead letters.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { apiCallOf, startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { testRedis, uniquePrefix, waitFor } from './support/redis.js';
import { cli } from './support/cli.js';
import { PermanentError, TransientError } from '../src/errors.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';

const TOKEN = 'update-dead-letter-token-4b1d';
const auth = { authorization: `Bearer ${TOKEN}` };

/** The first revision fails (503) while `down`; the corrected revision is refused for good (400). */
class RevisionSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  down = true;
  async deliver(call: Omit<CanonicalCall, 'revision'>): Promise<SinkResult> {
    if (call.summary?.content.includes('corrected'))
      throw new PermanentError('remote rejected the record: field "summary" too long', { status: 400 });
    if (this.down) throw new TransientError('remote down', { status: 503 });
    return { status: 'done', refs: { id: call.callId } };
  }
}

type ApiCall = {
  id: string;
  sinks: Record<string, string>;
  reasons: Record<string, string>;
  entries: { event: string; sink?: string; jobId?: string; attempt?: number; reason?: string }[];
};

let cs: OpsCallsync;
let dir: string;
const sink = new RevisionSink();
const prefix = uniquePrefix('update-dl');

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'update-dl-'));
  cs = await startOpsCallsync(
    { QUEUE_PREFIX: prefix, ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, JOB_ATTEMPTS: '200' },
    { sinks: new Map([['archive', sink]]) },
  );
});
after(async () => {
  await cs?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** `callsync <argv>` against this test's prefix. */
const run = async (argv: string[]) =>
  cli(argv, { ...(await testRedis()).env(), QUEUE_PREFIX: prefix, ARCHIVE_DIR: dir });

test("an update's dead letter stays visible when the first revision's retry succeeds after it", async () => {
  const id = 'update-dl-1';
  const api = () => apiCallOf<ApiCall>(cs.url, id, auth);
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
  await waitFor(async () => (await api())?.sinks.archive === 'retrying', { what: 'the first revision retrying' });
  // The platform sends a corrected call: an update, its own job; the sink refuses it for good.
  const corrected = webhookPayload(id, (p) => (p.assist.summary.content = 'A corrected summary.'));
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, corrected)).status, 202);
  await waitFor(async () => (await api())?.entries.some((e) => e.event === 'dead-lettered'), {
    what: "the update's dead letter",
    timeoutMs: 20_000,
  });
  // The remote is back: the first revision's next retry goes through.
  sink.down = false;
  await waitFor(async () => (await api())?.entries.some((e) => e.event === 'done'), {
    what: "the first revision's done",
    timeoutMs: 20_000,
  });
  const call = (await api())!;
  assert.equal(
    call.sinks.archive,
    'failed',
    "the update (the call's newest content) was dead-lettered, never delivered",
  );
  assert.match(call.reasons.archive ?? '', /field "summary" too long/);
  const failed = JSON.parse((await run(['calls', '--since', '1h', '--status', 'failed', '--json'])).out) as {
    calls: { callId: string }[];
  };
  assert.deepEqual(
    failed.calls.map((c) => c.callId),
    [id],
    'calls --status failed lists it',
  );
  const retry = await fetch(`${cs.url}/admin/queues/calls/${call.id}/retry`, {
    method: 'POST',
    headers: { ...auth, 'content-type': 'application/json' },
    body: JSON.stringify({ sink: 'archive' }),
  });
  assert.ok(retry.ok, `the Calls page retries the update's dead letter: ${retry.status} ${await retry.text()}`);
});
