// What an operator reads of a call through `callsync call`/`calls`, GET /api/calls and the Calls
// page, on a running callsync: the caller the platform sent (an internal extension, a number
// callsync cannot read) rather than "anonymous"; a retried dead letter said to be retried rather
// than kept with its old reason; a call whose sink retried for days (thousands of entries, the
// timeline trimmed) still named, with its latest outcome.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postJson } from './support/callsync.js';
import { FlakySink } from './support/flaky-sink.js';
import { apiCallOf, startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline } from '../queues/timeline.js';
import { sampleCall, webhookPayload } from './support/calls.js';

const TOKEN = 'timeline-operator-views-token-5b1e';
const auth = { authorization: `Bearer ${TOKEN}` };

type ApiCall = {
  id: string;
  callId: string;
  from: string | null;
  to: string | null;
  sinks: Record<string, string>;
  reasons: Record<string, string>;
};

describe("the operator's views of a call", () => {
  let cs: OpsCallsync;
  let dir: string;
  const sink = new FlakySink();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'timeline-operator-views-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, JOB_ATTEMPTS: '2' },
      { sinks: new Map([['archive', sink]]) },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const api = (ref: string) => apiCallOf<ApiCall>(cs.url, ref, auth);
  const page = async (path: string) => (await fetch(`${cs.url}/admin/queues/calls${path}`, { headers: auth })).text();
  async function cli(argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runCli(argv, {
      env: { REDIS_URL, ...(await testRedis()).env(), QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir },
      out: (l) => out.push(l),
      err: (l) => err.push(l),
    });
    return { code, out: out.join('\n'), err: err.join('\n') };
  }
  const settled = (ref: string, state: string) =>
    waitFor(async () => (await api(ref))?.sinks.archive === state, { timeoutMs: 20_000, what: `${ref}: ${state}` });

  test('a caller callsync cannot read as E.164 is shown as sent (masked), never as "anonymous"', async () => {
    const cases: [string, string | null, string][] = [
      // call id, call.from as sent, what the doors show
      ['ok-extension-1', '23', '23'],
      ['ok-foreign-1', '0049 30 9018 2012 345 99', '00493****599'],
      ['ok-words-1', 'reception', 'unreadable'],
      ['ok-unknown-1', '<unknown>', 'anonymous'],
    ];
    for (const [id, from] of cases) {
      const payload = webhookPayload(id, (p) => (p.call.from = from));
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202, id);
    }
    for (const [id, , shown] of cases) {
      await settled(id, 'done');
      const call = (await api(id))!;
      assert.equal(call.from ?? 'anonymous', shown, `the API: ${id}`);
      const one = await cli(['call', id]);
      assert.ok(one.out.startsWith(`call ${id} (ai-agent, in, ${shown} → `), `callsync call ${id}: ${one.out}`);
      const detail = await page(`/${call.id}`);
      assert.ok(detail.includes(`, ${shown} → `), `the Calls page of ${id}: ${shown}`);
      const found = await page(`?q=${id}`);
      assert.ok(found.includes(`<td>${shown} → `), `the Calls page's list: ${id}`);
    }
    const list = await cli(['calls', '--since', '1h']);
    assert.match(list.out, /ok-extension-1 .* 23 → /);
    assert.doesNotMatch(list.out, /ok-extension-1 .* anonymous → /);
  });

  test("a retried dead letter: its sink says when it was retried and by whom, not the dead letter's reason", async () => {
    const id = 'gate-retried-1';
    sink.failing = true;
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await settled(id, 'failed');
    assert.match((await api(id))!.reasons.archive!, /field "subject" too long/);
    // The queue held, so that the new round has no outcome yet when the doors are read.
    const queue = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await queue.pause();
    try {
      const call = (await api(id))!;
      const res = await fetch(`${cs.url}/admin/queues/calls/${call.id}/retry`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ sink: 'archive' }),
      });
      assert.equal(res.status, 200, await res.text());
      const after = (await api(id))!;
      assert.notEqual(after.sinks.archive, 'failed');
      assert.doesNotMatch(after.reasons.archive ?? '', /too long/, "not the dead letter's reason");
      assert.match(after.reasons.archive ?? '', /dead letter retried \d{4}-\d\d-\d\dT[\d:.]+Z by the Calls page/);
      const shown = await cli(['call', id]);
      assert.match(shown.out, /retried +archive .*dead letter retried by the Calls page/);
      assert.doesNotMatch(shown.out, /^note: archive: .*too long/m);
    } finally {
      sink.failing = false;
      await queue.resume();
    }
    await settled(id, 'done');
    assert.equal((await api(id))!.reasons.archive, undefined, 'done: no reason left of the retry');
  });

  test('a timeline trimmed after thousands of entries still says which call it is, and its latest outcome', async () => {
    const id = 'ok-flood-1';
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await settled(id, 'done');
    const hash = (await api(id))!.id;
    // A sink retrying for days with a short backoff: 3000 failed attempts, then done — written as
    // the workers write them (CallTimeline.sinkEvents, the running callsync's cap).
    const timeline = new CallTimeline(cs.callsync.redis.worker, redisKeys(cs.callsync.config.redis), {
      ttlDays: 1,
    });
    const call = sampleCall(id);
    for (let from = 1; from <= 3000; from += 500)
      await timeline.sinkEvents(
        call,
        Array.from({ length: 500 }, (_, i) => ({
          event: 'retry' as const,
          sink: 'archive',
          jobId: `${hash}-flood`,
          attempt: from + i,
          kind: 'transient',
          reason: 'remote answered 503',
        })),
        hash,
      );
    await timeline.sinkEvents(call, [{ event: 'done', sink: 'archive', jobId: `${hash}-flood`, attempt: 3001 }], hash);
    assert.ok((await cs.callsync.redis.worker.llen(timeline.key(hash))) <= timeline.maxEntries, 'bounded');

    const shown = (await api(id))!;
    assert.equal(shown.callId, id, 'the API names the call');
    assert.equal(shown.from, '+49211****340');
    assert.equal(shown.sinks.archive, 'done');
    const one = await cli(['call', id]);
    assert.ok(one.out.startsWith(`call ${id} (ai-agent, in, +49211****340 → `), one.out.slice(0, 200));
    assert.match(one.out, /^sinks: archive:done$/m);
    const list = await cli(['calls', '--since', '1h', '--json']);
    const listed = (JSON.parse(list.out) as { calls: ApiCall[] }).calls.find((c) => c.id === hash);
    assert.equal(listed?.callId, id, 'callsync calls names it');
    assert.ok((await page(`/${hash}`)).includes(`<h1>Call ${id}</h1>`), 'the Calls page names it');
  });

  test('hostile call ids and a remote echoing them: one short line per call, nothing raw on the terminal or the page', async () => {
    const long = `ok-long-${'A'.repeat(10_000)}`;
    const longFailed = `perm-long-${'B'.repeat(10_000)}`;
    // perm-*: the remote refuses it with an error text that quotes the call id (FlakySink).
    const evil = 'perm-\u001b[2J\u001b]0;owned\u0007<script>alert(1)</script>\r\nsecond line';
    for (const id of [long, evil, longFailed]) {
      const payload = webhookPayload(id);
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202, id.slice(0, 20));
    }
    await settled(long, 'done');
    await settled(evil, 'failed');
    await settled(longFailed, 'failed');

    const list = await cli(['calls', '--since', '1h']);
    for (const line of list.out.split('\n')) assert.ok(line.length < 400, `a line of ${line.length} characters`);
    const dead = await cli(['dlq', 'list']);
    assert.match(dead.out, /perm-long-B{40,}…/);
    for (const line of dead.out.split('\n'))
      assert.ok(line.length < 800, `dlq list: a line of ${line.length} characters`);
    assert.match(list.out, /ok-long-A{40,}…/);
    const listPage = await page('?since=1h');
    assert.ok(!listPage.includes('A'.repeat(100)), 'the Calls page lists the long id cut short');
    assert.ok(!listPage.includes('<script>alert'));

    const one = await cli(['call', evil]);
    assert.equal(one.code, 0);
    const raw = [...(one.out + one.err)].filter((ch) => (ch < ' ' && ch !== '\n') || ch === '\u007f');
    assert.deepEqual(raw, [], 'no control character written raw');
    assert.match(one.out, /perm-\\x1b\[2J/);
    const hash = (await api(evil))!.id;
    const detail = await page(`/${hash}`);
    assert.ok(!detail.includes('<script>alert'), 'escaped on the page');
    assert.ok(detail.includes('&lt;script&gt;alert(1)&lt;/script&gt;'));
  });

  test("GET /api/calls and /api/refusals: hostile limits and ranges are 400s with the spec's body, the echo bounded", async () => {
    const huge = '9'.repeat(5000);
    const bad: [string, string][] = [
      ['since=2h&limit=-1', 'limit'],
      ['since=2h&limit=abc', 'limit'],
      ['since=2h&limit=1e3', 'limit'],
      [`since=2h&limit=${huge}`, 'limit'],
      ['since=2h&limit=0', 'limit'],
      [`since=${huge}x`, 'since'],
      [`since=2h&until=${huge}d`, 'until'],
      [`since=2h&status=${'x'.repeat(5000)}`, 'status'],
    ];
    for (const path of ['/api/calls', '/api/refusals'])
      for (const [query, param] of bad) {
        const res = await fetch(`${cs.url}${path}?${query}`, { headers: auth });
        const label = `${path}?${query.slice(0, 40)}`;
        if (path === '/api/refusals' && param === 'status') {
          assert.equal(res.status, 400, label);
          continue;
        }
        assert.equal(res.status, 400, label);
        const body = (await res.json()) as {
          errors: { status: number; detail: string; source: { pointer: string } }[];
        };
        assert.equal(body.errors[0]!.status, 400);
        assert.equal(body.errors[0]!.source.pointer, `/query/${param}`, label);
        assert.ok(
          body.errors[0]!.detail.length < 400,
          `${label}: a detail of ${body.errors[0]!.detail.length} characters`,
        );
      }
    // A range back to the year 1 is bounded work (the newest calls of it), not an error.
    const far = await fetch(`${cs.url}/api/calls?since=0001-01-01&limit=1000`, { headers: auth });
    assert.equal(far.status, 200);
    assert.equal(((await far.json()) as { truncated: boolean }).truncated, false);
  });
});
