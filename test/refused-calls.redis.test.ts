// "The platform says it sent call X; callsync has no call X": a webhook refused (4xx) with its call
// id readable is kept under that id, and `callsync call X`, GET /api/calls/X and the Calls page say
// why — when, the status, the field and the reason, the request id. The log line names the call id.
// Kept bounded (MAX_REFUSALS in all, CALL_TIMELINE_TTL_DAYS long), erased by `callsync forget`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config/index.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline, MAX_REFUSALS, refusedCallsKey, type Refusal } from '../queues/timeline.js';
import { webhookPayload } from './support/calls.js';
import { hangup, newCall } from './support/fake-push.js';
import { postJson, testEnv } from './support/callsync.js';
import { cli } from './support/cli.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';

const TOKEN = 'refused-admin-token-9a4f';

describe('a refused call is kept under its call id', () => {
  let cs: OpsCallsync;
  let dir: string;
  let env: Record<string, string>;
  const api = (path: string) => fetch(`${cs.url}${path}`, { headers: { authorization: `Bearer ${TOKEN}` } });

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-refused-'));
    env = { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, PUSH_API_VERIFY: 'false' };
    cs = await startOpsCallsync(env);
    env.QUEUE_PREFIX = cs.prefix;
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('callsync call, the JSON API and the Calls page say why; accepted later, the call shows its refusals', async () => {
    // The platform's documented example, its start time unreadable: the call cannot be placed in time.
    const bad = await postJson(
      `${cs.url}/webhooks/ai-agent/agent-1`,
      webhookPayload('ref-1', (p) => (p.call.startTime = 'soon')),
    );
    assert.equal(bad.status, 400);
    const requestId = bad.headers.get('x-request-id');
    assert.ok(requestId);

    const shown = await waitFor(
      async () => {
        const r = await cli(['call', 'ref-1'], env);
        return /was refused/.test(r.out) ? r : null;
      },
      { what: 'the refusal kept' },
    );
    assert.equal(shown.code, 1);
    const lines = shown.out.split('\n');
    assert.equal(lines[0], 'call "ref-1" was refused, never stored (1 refusal(s), newest first):');
    assert.match(lines[1]!, /^time\s+source\s+status\s+pointer\s+detail\s+request$/);
    assert.match(lines[2]!, new RegExp(`^\\S+Z\\s+ai-agent\\s+400\\s+/call/startTime\\s+.+\\s+${requestId}$`));

    const json = await cli(['call', 'ref-1', '--json'], env);
    const body = JSON.parse(json.out) as { calls: unknown[]; refused: Refusal[] };
    assert.deepEqual(body.calls, []);
    assert.equal(body.refused.length, 1);
    assert.deepEqual(
      { ...body.refused[0], at: 0, detail: '' },
      { at: 0, callId: 'ref-1', source: 'ai-agent', status: 400, pointer: '/call/startTime', detail: '', requestId },
    );

    // The log line of the refusal names the call id.
    const logged = cs.logs.find((l) => l.msg === 'webhook refused' && l.callId === 'ref-1');
    assert.ok(logged, JSON.stringify(cs.logs.filter((l) => l.msg === 'webhook refused')));

    const notFound = await api('/api/calls/ref-1');
    assert.equal(notFound.status, 404);
    const error = (await notFound.json()) as { errors: { detail: string }[] };
    assert.match(
      error.errors[0]!.detail,
      /^no call stored for "ref-1": refused 1 time\(s\), the last at \S+ \(400 \/call\/startTime: /,
    );
    const page = await (await api('/admin/queues/calls?q=ref-1')).text();
    assert.match(page, /<table id="refused">/);
    assert.match(page, /<code>\/call\/startTime<\/code>/);

    // Sent again, readable: accepted; its refusal still shows beside it.
    const good = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('ref-1'));
    assert.equal(good.status, 202);
    const later = await waitFor(
      async () => {
        const r = await cli(['call', 'ref-1'], env);
        return r.code === 0 ? r : null;
      },
      { what: 'the call stored' },
    );
    assert.match(later.out, /^refused before \(1, newest first\):$/m);
    const found = (await (await api('/api/calls/ref-1')).json()) as { calls: unknown[]; refused: Refusal[] };
    assert.equal(found.calls.length, 1);
    assert.equal(found.refused.length, 1);
  });

  test('a Push API event refused with its call id readable is kept too; a body without a call id is kept without one', async () => {
    const push = await fetch(`${cs.url}/webhooks/push`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'callId=push-ref-1&direction=in',
    });
    assert.equal(push.status, 400);
    const shown = await waitFor(
      async () => {
        const r = await cli(['call', 'push-ref-1', '--json'], env);
        return r.out.includes('"refused"') ? (JSON.parse(r.out) as { refused: Refusal[] }) : null;
      },
      { what: 'the push refusal kept' },
    );
    assert.equal(shown.refused[0]?.source, 'push');
    assert.equal(shown.refused[0]?.pointer, '/event');

    const members = async () =>
      cs.callsync.redis.producer.zcard(refusedCallsKey(redisKeys(loadConfig(testEnv(cs.prefix)).redis)));
    const before = await members();
    const noId = await postJson(
      `${cs.url}/webhooks/ai-agent/agent-1`,
      webhookPayload('x', (p) => delete p.call.id),
    );
    assert.equal(noId.status, 400);
    await waitFor(async () => (await members()) === before + 1, { what: 'the refusal without a call id kept' });
    // Under no call id: no lookup finds it (an empty id included).
    assert.equal((await cli(['call', 'x', '--json'], env)).out.includes('"refused"'), false);
  });

  test('callsync refused lists the refusals of a time range, newest first', async () => {
    const listed = await cli(['refused', '--since', '1h'], env);
    assert.equal(listed.code, 0, listed.err);
    const lines = listed.out.split('\n');
    assert.match(lines[0]!, /^time\s+call\s+source\s+status\s+pointer\s+detail\s+request$/);
    assert.match(lines[1]!, /^\S+Z\s+-\s+ai-agent\s+400\s+\/call\/id\s/);
    assert.match(lines[2]!, /^\S+Z\s+push-ref-1\s+push\s+400\s+\/event\s/);
    assert.match(lines[3]!, /^\S+Z\s+ref-1\s+ai-agent\s+400\s+\/call\/startTime\s/);
    assert.equal(lines.length, 4);
    const json = JSON.parse((await cli(['refused', '--since', '1h', '--limit', '2', '--json'], env)).out) as {
      refused: Refusal[];
      total: number;
    };
    assert.deepEqual(
      json.refused.map((r) => r.callId),
      [null, 'push-ref-1'],
    );
    assert.equal(json.total, 3);
    // Cut at --limit, the text says so (before, it listed two and said nothing of the third).
    const cut = (await cli(['refused', '--since', '1h', '--limit', '2'], env)).out.split('\n');
    assert.equal(cut.length, 4);
    assert.equal(
      cut[3],
      'the newest 2 of 3 in that range: a larger --limit (up to 1000) or an earlier --until for the rest',
    );
    const none = await cli(['refused', '--since', '2h', '--until', '1h'], env);
    assert.equal(none.out, 'no refusals kept in that range');
    const bad = await cli(['refused'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--since is required/);

    // The same as JSON for other tools, behind the dashboard's credentials.
    const viaApi = (await (await api('/api/refusals?since=1h')).json()) as { refused: Refusal[]; total: number };
    assert.equal(viaApi.total, 3);
    assert.deepEqual(
      viaApi.refused.map((r) => r.callId),
      [null, 'push-ref-1', 'ref-1'],
    );
    assert.equal((await fetch(`${cs.url}/api/refusals?since=1h`)).status, 401);
    const noSince = await api('/api/refusals');
    assert.equal(noSince.status, 400);
    assert.equal(
      ((await noSince.json()) as { errors: { source: { pointer: string } }[] }).errors[0]!.source.pointer,
      '/query/since',
    );
    const unknown = await api('/api/refusals?since=1h&sink=x');
    assert.equal(unknown.status, 400);

    // The Calls page's range lists them too, each call id a link to its search; not for a query by
    // sink or by a state a refusal is not, nor for a range without them.
    const page = await (await api('/admin/queues/calls?since=1h')).text();
    const table = /<table id="refused">[\s\S]*?<\/table>/.exec(page)?.[0] ?? '';
    assert.deepEqual(
      [...table.matchAll(/<a href="\/admin\/queues\/calls\?q=([^"]+)">/g)].map((m) => m[1]),
      ['push-ref-1', 'ref-1'],
    );
    assert.match(page, /Webhooks of this range answered with an error/);
    assert.match(table, /<span title="its call id could not be read">-<\/span>/);
    assert.match(table, /<code>\/call\/startTime<\/code>/);
    for (const query of ['since=1h&status=done', 'since=1h&sink=archive', 'since=2h&until=1h'])
      assert.doesNotMatch(await (await api(`/admin/queues/calls?${query}`)).text(), /id="refused"/, query);
    assert.match(await (await api('/admin/queues/calls?since=1h&status=failed')).text(), /id="refused"/);
    const first = await (await api('/admin/queues/calls?since=1h&limit=1')).text();
    // A second call stored: with a limit of 1 the list of calls says it stopped there.
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('ref-2'))).status, 202);
    const cutCalls = await waitFor(
      async () => {
        const text = await (await api('/admin/queues/calls?since=1h&limit=1')).text();
        return /class="more"/.test(text) ? text : null;
      },
      { what: 'the Calls page to say its list stopped at the limit' },
    );
    assert.match(cutCalls, /The newest 1 that match; older calls of the range were not looked at/);
    assert.doesNotMatch(await (await api('/admin/queues/calls?since=1h')).text(), /class="more"/);
    assert.match(
      first,
      /newest\s+first, the newest 1 of\s+3 \(<a\s+href="\/admin\/queues\/calls\?since=1h&amp;limit=1000"\s*>up to 1000<\/a\s*>\):/,
    );

    // A call id is the sender's text: shown escaped, never as markup on the operator's page.
    const hostile = '<img src=x onerror=alert(1)>"&';
    const sent = await postJson(
      `${cs.url}/webhooks/ai-agent/agent-1`,
      webhookPayload(hostile, (p) => (p.call.startTime = 'soon')),
    );
    assert.equal(sent.status, 400);
    const escaped = await waitFor(
      async () => {
        const text = await (await api('/admin/queues/calls?since=1h')).text();
        return text.includes('&lt;img') ? text : null;
      },
      { what: 'the hostile call id listed' },
    );
    assert.doesNotMatch(escaped, /<img/);
    assert.ok(
      escaped.includes(`?q=${encodeURIComponent(hostile).replace(/&/g, '&amp;')}"`),
      'the link carries the id encoded',
    );
    await cli(['forget', hostile], env);
  });

  // "The platform says call X is going on; callsync has no call X": a Push API call is stored at its
  // hangup. Before, `callsync call X` said "no call found" while its events were being assembled.
  test('a Push API call in progress is named so, with its events and when it will be stored; at its hangup it is a call', async () => {
    const push = (body: string) =>
      fetch(`${cs.url}/webhooks/push`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body,
      });
    assert.equal((await push(newCall('open-1'))).status, 200);
    const shown = await cli(['call', 'open-1'], env);
    assert.equal(shown.code, 0, shown.err);
    assert.match(
      shown.out,
      /^call "open-1" is in progress \(Push API: newCall at \S+Z\): it is stored at its hangup, or with outcome unknown at \S+Z \(PUSH_CALL_TIMEOUT_SECONDS\) — until then it has no timeline$/,
    );
    const json = JSON.parse((await cli(['call', 'open-1', '--json'], env)).out) as {
      calls: unknown[];
      inProgress: { events: { event: string }[]; closesAt: number };
    };
    assert.deepEqual(json.calls, []);
    assert.deepEqual(
      json.inProgress.events.map((e) => e.event),
      ['newCall'],
    );
    assert.ok(json.inProgress.closesAt > Date.now());
    const viaApi = await api('/api/calls/open-1');
    assert.equal(viaApi.status, 404);
    const body = (await viaApi.json()) as { errors: { detail: string }[]; inProgress: unknown };
    assert.match(body.errors[0]!.detail, /^call "open-1" is in progress/);
    assert.ok(body.inProgress);
    assert.match(
      await (await api('/admin/queues/calls?q=open-1')).text(),
      /class="in-progress">call &quot;open-1&quot; is in progress/,
    );

    assert.equal((await push(hangup('open-1'))).status, 200);
    const stored = await waitFor(
      async () => {
        const r = await cli(['call', 'open-1'], env);
        return /^call open-1 \(push, /m.test(r.out) ? r : null;
      },
      { what: 'the call stored at its hangup' },
    );
    assert.doesNotMatch(stored.out, /in progress/);
    // An unknown id is still none.
    assert.equal((await cli(['call', 'never-seen-1'], env)).code, 1);
  });

  test('callsync forget <callId> erases its refusals', async () => {
    const forgot = await cli(['forget', 'ref-1'], env);
    assert.equal(forgot.code, 0, forgot.err);
    const after = await cli(['call', 'ref-1', '--json'], env);
    assert.doesNotMatch(after.out, /"refused"/);
    assert.match((await cli(['call', 'push-ref-1', '--json'], env)).out, /"refused"/, 'other calls keep theirs');
  });
});

describe('refusals are bounded', () => {
  const prefix = uniquePrefix('refused-bound');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test(`a flood of refused call ids keeps the newest ${MAX_REFUSALS}; those older than the TTL go`, async () => {
    const config = loadConfig(testEnv(prefix));
    let now = Date.now();
    const timeline = new CallTimeline(redis, redisKeys(config.redis), { ...config.timeline, now: () => now });
    const key = refusedCallsKey(redisKeys(config.redis));
    const refusal = (i: number): Refusal => ({
      at: now,
      callId: `flood-${i}`,
      source: 'ai-agent',
      status: 400,
      pointer: '/call/startTime',
      detail: 'Expected number, received string',
    });
    const total = MAX_REFUSALS + 500;
    for (let i = 0; i < total; i++) {
      timeline.refused(refusal(i));
      if (i % 1000 === 999) await redis.ping();
    }
    await waitFor(async () => (await redis.zscore(key, JSON.stringify(refusal(total - 1)))) !== null, {
      what: 'the last refusal written',
    });
    assert.equal(await redis.zcard(key), MAX_REFUSALS);
    assert.deepEqual(await timeline.refusals('flood-0'), [], 'the oldest went');
    assert.equal((await timeline.refusals(`flood-${total - 1}`)).length, 1);
    const ttl = await redis.pttl(key);
    assert.ok(ttl > 0 && ttl <= timeline.ttlMs, String(ttl));

    // A call id with a pattern's characters is looked up as written, not as a pattern.
    for (const callId of ['glob*[1]', 'glob-x[1]', 'glob*[1]x']) timeline.refused({ ...refusal(0), callId });
    await waitFor(async () => (await timeline.refusals('glob*[1]x')).length === 1 || null, {
      what: 'the glob refusals written',
    });
    assert.deepEqual(
      (await timeline.refusals('glob*[1]')).map((r) => r.callId),
      ['glob*[1]'],
    );

    // A TTL later, one more refusal: the rest are older than the TTL and go.
    now += timeline.ttlMs + 1000;
    timeline.refused(refusal(total));
    await waitFor(async () => (await redis.zcard(key)) === 1, { what: 'the old refusals trimmed' });
  });
});
