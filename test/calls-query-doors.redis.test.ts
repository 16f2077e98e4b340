// The calls' JSON API (/api/calls) and the dashboard's Calls page read a number and a sink as the
// command line does (`callsync call`, `calls --number`, `calls --sink`): a national number
// (PHONE_DEFAULT_REGION), 00, spaced forms find the caller's calls; an unreadable number or a sink
// nobody knows is a 400 with the spec's error body (the page: its error shown), not "no calls match".
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

const TOKEN = 'calls-doors-admin-token-4b1d';
const auth = { authorization: `Bearer ${TOKEN}` };
/** The sample payload's caller, +492116355340, as an operator in Germany types it. */
const SPELLINGS = ['+492116355340', '+49 211 6355340', '00492116355340', '0211 6355340', '02116355340', '0211-6355340'];

type Problem = { errors: { status: number; detail: string; source: { pointer: string } }[] };

describe('the calls API and the Calls page read numbers and sinks as the CLI does', () => {
  let cs: OpsCallsync;
  let dir: string;
  const get = (path: string) => fetch(`${cs.url}${path}`, { headers: auth });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'calls-doors-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, PHONE_DEFAULT_REGION: 'DE' });
    for (const id of ['doors-1', 'doors-2'])
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await waitFor(
      async () => {
        const body = (await (await get('/api/calls?since=1h&status=done')).json()) as { calls?: unknown[] };
        return body.calls?.length === 2;
      },
      { timeoutMs: 20_000, what: 'both calls done' },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('?number= in every form the CLI reads finds the calls; an unreadable one: 400 at /query/number', async () => {
    for (const number of SPELLINGS) {
      const res = await get(`/api/calls?since=1h&number=${encodeURIComponent(number)}`);
      assert.equal(res.status, 200, number);
      const body = (await res.json()) as { calls: { callId: string }[] };
      assert.deepEqual(body.calls.map((c) => c.callId).sort(), ['doors-1', 'doors-2'], number);
    }
    for (const number of ['nonsense', '0211', '+4912', '0211 6355340 0211 6355341']) {
      const res = await get(`/api/calls?since=1h&number=${encodeURIComponent(number)}`);
      assert.equal(res.status, 400, number);
      const problem = (await res.json()) as Problem;
      assert.equal(problem.errors[0]!.status, 400, number);
      assert.equal(problem.errors[0]!.source.pointer, '/query/number', number);
      assert.match(problem.errors[0]!.detail, /^number must be one phone number .*PHONE_DEFAULT_REGION, DE/, number);
    }
  });

  test('/api/calls/:ref reads a national number as `callsync call` does', async () => {
    for (const ref of SPELLINGS) {
      const res = await get(`/api/calls/${encodeURIComponent(ref)}`);
      assert.equal(res.status, 200, ref);
      const body = (await res.json()) as { calls: { callId: string }[] };
      assert.deepEqual(body.calls.map((c) => c.callId).sort(), ['doors-1', 'doors-2'], ref);
    }
    assert.equal((await get('/api/calls/doors-1')).status, 200);
    assert.equal((await get('/api/calls/no-such-call')).status, 404);
  });

  test('?sink= of a sink nobody knows: 400 at /query/sink naming the known ones', async () => {
    const res = await get('/api/calls?since=1h&sink=nowhere');
    assert.equal(res.status, 400);
    const problem = (await res.json()) as Problem;
    assert.equal(problem.errors[0]!.source.pointer, '/query/sink');
    assert.equal(problem.errors[0]!.detail, 'sink "nowhere" is unknown (known: archive)');
    assert.equal((await get('/api/calls?since=1h&sink=archive')).status, 200);
  });

  test('the Calls page: a national number finds the calls; a bad number or an unknown sink shows its error, 400', async () => {
    for (const q of SPELLINGS) {
      const res = await get(`/admin/queues/calls?q=${encodeURIComponent(q)}`);
      assert.equal(res.status, 200, q);
      const text = await res.text();
      assert.match(text, />doors-1</, q);
      assert.match(text, />doors-2</, q);
    }
    const sink = await get('/admin/queues/calls?sink=nowhere');
    assert.equal(sink.status, 400);
    assert.match(
      await sink.text(),
      /<p class="err" role="alert">sink &quot;nowhere&quot; is unknown \(known: archive\)<\/p>/,
    );
    const number = await get(`/admin/queues/calls?q=${encodeURIComponent('+4912')}`);
    assert.equal(number.status, 400);
    assert.match(await number.text(), /<p class="err" role="alert">number must be one phone number/);
  });
});
