// Many calls during an outage (a signed webhook endpoint answering 503 to all of them, each retrying),
// most received within the same seconds: `callsync calls`, GET /api/calls and the Calls page list them
// a page at a time, newest first, and the way each says to go on (the `--until` it prints, `next`,
// the link to the older ones) reaches every call — none passed over, none twice. Before, the CLI said "an earlier --until"
// and showed times to the second: taking the last row's time skipped the calls of that second not
// listed yet (84 of 300 in a probe).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';

const TOKEN = 'calls-paging-token-3f9c';
const auth = { authorization: `Bearer ${TOKEN}` };
const TOTAL = 150;
const PAGE = 40;
const ids = Array.from({ length: TOTAL }, (_, i) => `page-${i}`);

let cs: OpsCallsync;
let dir: string;
let env: Record<string, string>;
const secret = `whsec_${randomBytes(32).toString('base64')}`;
const receiver = new FakeWebhookReceiver(secret);

type Listed = { callId: string; receivedAt: number; sinks: Record<string, string> };

before(async () => {
  await receiver.start();
  receiver.answer = () => ({ status: 503, body: { message: 'backend down' } });
  dir = await mkdtemp(join(tmpdir(), 'calls-paging-'));
  env = { ARCHIVE_DIR: dir, ADMIN_TOKEN: TOKEN, CRM_WEBHOOK_URL: receiver.url, CRM_WEBHOOK_SECRET: secret };
  cs = await startOpsCallsync(env);
  for (let i = 0; i < TOTAL; i += 25)
    await Promise.all(
      ids.slice(i, i + 25).map(async (id) => {
        assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
      }),
    );
  // Every call retrying at the endpoint.
  await waitFor(
    async () => {
      const res = await fetch(`${cs.url}/api/calls?since=1h&status=retrying&limit=1000`, { headers: auth });
      return ((await res.json()) as { calls: Listed[] }).calls.length === TOTAL ? true : null;
    },
    { timeoutMs: 60_000, what: 'every call retrying' },
  );
});
after(async () => {
  await cs?.stop();
  await receiver.stop();
  await rm(dir, { recursive: true, force: true });
});

/** Pages until `next` says there are none, at most 20; each page's call ids in order. */
async function pages(next: (page: number, from: string) => Promise<{ ids: string[]; until?: string }>) {
  const seen: string[][] = [];
  let until: string | undefined;
  for (let n = 0; n < 20; n++) {
    const page = await next(n, until ?? '');
    seen.push(page.ids);
    if (page.until === undefined) break;
    until = page.until;
  }
  return seen;
}

function assertAllReached(seen: string[][], where: string) {
  const reached = new Set(seen.flat());
  const missed = ids.filter((id) => !reached.has(id));
  assert.deepEqual(missed, [], `${where}: calls passed over between pages (${seen.map((p) => p.length).join(', ')})`);
  for (const page of seen) assert.ok(page.length <= PAGE);
  // Each page goes on where the last one stopped: none listed twice.
  assert.equal(seen.flat().length, reached.size, `${where}: a call listed on two pages`);
}

test('`callsync calls`: the --until it prints for the rest reaches every call', async () => {
  const seen = await pages(async (_n, until) => {
    const out: string[] = [];
    const code = await runCli(
      ['calls', '--since', '1h', '--status', 'retrying', '--limit', String(PAGE), ...(until ? ['--until', until] : [])],
      {
        env: { REDIS_URL, ...(await testRedis()).env(), QUEUE_PREFIX: cs.prefix, ...env },
        out: (l) => out.push(l),
        err: (l) => out.push(l),
      },
    );
    assert.equal(code, 0, out.join('\n'));
    const rows = out.filter((l) => /^\S+Z +page-\d+ /.test(l));
    const times = rows.map((l) => l.split(/ +/)[0]!);
    assert.deepEqual(times, [...times].sort().reverse(), 'newest first');
    const more = out.find((l) => l.startsWith('(stopped at --limit'));
    const go = more === undefined ? undefined : / --until (\S+) for the rest/.exec(more)?.[1];
    if (more !== undefined) assert.ok(go, `the line says which --until goes on: ${more}`);
    return { ids: rows.map((l) => l.split(/ +/)[1]!), ...(go ? { until: go } : {}) };
  });
  assertAllReached(seen, 'callsync calls');
});

test("GET /api/calls: next reaches every call; the Calls page's link to the older ones too", async () => {
  const api = await pages(async (_n, until) => {
    const query = new URLSearchParams({
      since: '1h',
      status: 'retrying',
      limit: String(PAGE),
      ...(until ? { until } : {}),
    });
    const res = await fetch(`${cs.url}/api/calls?${query.toString()}`, { headers: auth });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { calls: Listed[]; more: boolean; next?: string };
    assert.equal(body.next !== undefined, body.more);
    return { ids: body.calls.map((c) => c.callId), ...(body.next === undefined ? {} : { until: body.next }) };
  });
  assertAllReached(api, 'GET /api/calls');

  let href = `/admin/queues/calls?since=1h&status=retrying&limit=${PAGE}`;
  const page = await pages(async () => {
    const html = await (await fetch(`${cs.url}${href}`, { headers: auth })).text();
    const listed = [...html.matchAll(/<a href="\/admin\/queues\/calls\/[0-9a-f]{32}">(page-\d+)<\/a>/g)].map(
      (m) => m[1]!,
    );
    const older = /<a\s+class="older"\s+href="([^"]+)"/.exec(html)?.[1];
    if (older) href = older.replaceAll('&amp;', '&');
    return { ids: listed, ...(older ? { until: href } : {}) };
  });
  assertAllReached(page, 'the Calls page');
});
