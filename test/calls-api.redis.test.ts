// The calls' JSON API on the ops endpoints (src/ops/calls-api.ts): GET /api/calls?… lists calls of a
// range with each sink's state, GET /api/calls/:ref one call's timeline; behind the dashboard's
// credentials, bad parameters answered 400 in the spec's error body.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PermanentError } from '../src/errors.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

const TOKEN = 'calls-api-admin-token-7c2e';
const auth = { authorization: `Bearer ${TOKEN}` };

/** api-ok-* done; api-bad-* refused for good. */
class ApiSink implements Sink {
  readonly type = 'archive';
  readonly name = 'archive';
  async deliver(call: CanonicalCall): Promise<SinkResult> {
    if (call.callId.startsWith('api-bad-')) throw new PermanentError('remote refused the record', { status: 422 });
    return { status: 'done', refs: { objectKey: `calls/${call.callId}.json` } };
  }
}

describe('GET /api/calls', () => {
  let cs: OpsCallsync;
  let dir: string;
  const get = (path: string, headers: Record<string, string> = auth) => fetch(`${cs.url}${path}`, { headers });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'calls-api-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN },
      { sinks: new Map([['archive', new ApiSink()]]) },
    );
    for (const id of ['api-ok-1', 'api-bad-1']) {
      const r = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
      assert.equal(r.status, 202);
    }
    await waitFor(
      async () => {
        const res = await get('/api/calls?since=1h');
        if (res.status !== 200) return false;
        const body = (await res.json()) as { calls: { sinks: Record<string, string> }[] };
        return (
          body.calls.length === 2 && body.calls.every((c) => c.sinks.archive === 'done' || c.sinks.archive === 'failed')
        );
      },
      { timeoutMs: 20_000, what: 'both calls settled' },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('lists calls of a range, filtered by sink state; no credentials: 401', async () => {
    const failed = (await (await get('/api/calls?since=1h&status=failed&sink=archive')).json()) as {
      calls: { callId: string; sinks: Record<string, string>; reasons: Record<string, string> }[];
    };
    assert.deepEqual(
      failed.calls.map((c) => c.callId),
      ['api-bad-1'],
    );
    assert.match(failed.calls[0]!.reasons.archive!, /remote refused the record/);
    const done = (await (await get('/api/calls?since=1h&status=done')).json()) as {
      calls: { callId: string; from: string }[];
    };
    assert.deepEqual(
      done.calls.map((c) => c.callId),
      ['api-ok-1'],
    );
    assert.equal(done.calls[0]!.from, '+49211****340');
    const byNumber = (await (
      await get(`/api/calls?since=1h&number=${encodeURIComponent('+492116355340')}`)
    ).json()) as { calls: unknown[] };
    assert.equal(byNumber.calls.length, 2);

    const anonymous = await get('/api/calls?since=1h', {});
    assert.equal(anonymous.status, 401);
    assert.equal((await get('/api/calls/api-ok-1', { authorization: 'Bearer wrong' })).status, 401);
  });

  test('one call by call id or number: its timeline; unknown: 404; bad parameters: 400 with the error body', async () => {
    const res = await get('/api/calls/api-ok-1');
    assert.equal(res.status, 200);
    const body = (await res.json()) as {
      calls: { callId: string; entries: { event: string; refs?: Record<string, string> }[] }[];
    };
    assert.equal(body.calls.length, 1);
    assert.deepEqual(
      body.calls[0]!.entries.map((e) => e.event),
      ['received', 'fanned-out', 'attempt', 'done'],
    );
    assert.equal(body.calls[0]!.entries[3]!.refs?.objectKey, 'calls/api-ok-1.json');
    assert.ok(!JSON.stringify(body).includes('6355340'), 'no number in clear');
    const byNumber = (await (await get(`/api/calls/${encodeURIComponent('+492116355340')}`)).json()) as {
      calls: unknown[];
    };
    assert.equal(byNumber.calls.length, 2);
    // The request's access line (info) names its path: the number looked up is masked there, as in
    // every log line, its `+` written out or percent-encoded; a call id stays.
    assert.equal((await get('/api/calls/+492116355340')).status, 200);
    const access = cs.rawLogs.filter((l) => l.includes('"msg":"request"') && l.includes('/api/calls/'));
    assert.ok(access.length >= 3, access.join('\n'));
    for (const line of access) assert.ok(!line.includes('6355340'), `a number in the access line: ${line}`);
    assert.ok(access.some((l) => l.includes('"path":"/api/calls/api-ok-1"')));

    const missing = await get('/api/calls/no-such-call');
    assert.equal(missing.status, 404);
    assert.match(JSON.stringify(await missing.json()), /"status":404,.*no call found/);
    const bad = await get('/api/calls?since=soon');
    assert.equal(bad.status, 400);
    const problem = (await bad.json()) as { errors: { status: number; detail: string; source: { pointer: string } }[] };
    assert.equal(problem.errors[0]!.status, 400);
    assert.match(problem.errors[0]!.detail, /^since must be a duration/);
    assert.equal(problem.errors[0]!.source.pointer, '/query/since');
    assert.equal((await get('/api/calls')).status, 400, 'since is required');
  });

  test('a number that is no time or duration, or a range ending before it starts: 400 with the error body', async () => {
    // V8 reads `-1`, `0`, `12` as dates of 2000/2001: since=-1 listed every call of 25 years.
    for (const [query, pointer] of [
      ['since=-1', '/query/since'],
      ['since=0', '/query/since'],
      ['since=12', '/query/since'],
      ['since=1h&until=-1', '/query/until'],
      ['since=1h&until=2h', '/query/until'],
      ['since=2026-10-02T00:00:00Z&until=2026-10-01T00:00:00Z', '/query/until'],
      // A day the month does not have: not read as March 2 (Date.parse does), nor the 31st of April as May 1.
      ['since=2026-02-30', '/query/since'],
      ['since=2026-04-31T10:00:00Z', '/query/since'],
      ['since=2026-01-01&until=2026-02-29', '/query/until'],
    ] as const) {
      const res = await get(`/api/calls?${query}`);
      assert.equal(res.status, 400, query);
      const problem = (await res.json()) as { errors: { status: number; source: { pointer: string } }[] };
      assert.equal(problem.errors[0]!.status, 400, query);
      assert.equal(problem.errors[0]!.source.pointer, pointer, query);
    }
    // A day or a time with its zone still works, and so does a duration.
    for (const query of [
      'since=2026-01-01',
      'since=2026-01-01T00:00:00Z&until=1s',
      'since=2h&until=1h',
      'since=2024-02-29',
      // Longer ago than there is time: from 1970 (it was a time no Date can hold).
      'since=99999999999d',
    ])
      assert.equal((await get(`/api/calls?${query}`)).status, 200, query);
  });
});
