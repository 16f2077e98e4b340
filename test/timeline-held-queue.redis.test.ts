// A queue held back by a remote's "retry later" for the whole queue (a signed webhook endpoint
// answering `429 Retry-After: 3600`, queues/hold.ts): every other call waiting in that queue — one
// not attempted yet, one retrying after a 503 whose next attempt was due long before the hold ends —
// shows, through `callsync call`, GET /api/calls and the Calls page, why it waits and when it can run
// next (the hold's end), not "pending" with no reason or a next attempt that has passed while nothing ran.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { apiCallOf, startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, testRedis, waitFor } from './support/redis.js';
import { runCli } from '../src/cli/index.js';

const TOKEN = 'timeline-held-token-5d1e';
const auth = { authorization: `Bearer ${TOKEN}` };
const SINK = 'hook.e1';

type ApiCall = {
  id: string;
  sinks: Record<string, string>;
  reasons: Record<string, string>;
  nextAt?: Record<string, number>;
  entries: { event: string; sink?: string; endpoint?: string; nextAt?: number }[];
};

let cs: OpsCallsync;
let dir: string;
let env: Record<string, string>;
const secret = `whsec_${randomBytes(32).toString('base64')}`;
const receiver = new FakeWebhookReceiver(secret);

before(async () => {
  await receiver.start();
  receiver.answer = (callId) => {
    if (callId === 'held-429')
      return { status: 429, headers: { 'retry-after': '3600' }, body: { message: 'quota used up' } };
    if (callId === 'held-503') return { status: 503, body: { message: 'backend down' } };
    return undefined;
  };
  dir = await mkdtemp(join(tmpdir(), 'timeline-held-'));
  const file = join(dir, 'callsync.yaml');
  await writeFile(
    file,
    [
      'sinks:',
      '  hook:',
      '    type: webhook',
      '    endpoints:',
      `      - { name: e1, url: "${receiver.url}" }`,
      '    retry: { schedule: [20s], attempts: 3 }',
      'routes:',
      '  - to: [hook]',
    ].join('\n'),
  );
  env = { ADMIN_TOKEN: TOKEN, CALLSYNC_CONFIG: file, CRM_WEBHOOK_SECRET: secret };
  cs = await startOpsCallsync(env);
});
after(async () => {
  await cs?.stop();
  await receiver.stop();
  await rm(dir, { recursive: true, force: true });
});

const api = async (ref: string): Promise<ApiCall> => {
  const call = await apiCallOf<ApiCall>(cs.url, ref, auth);
  assert.ok(call, ref);
  return call;
};
const lastOf = (call: ApiCall) => call.entries.filter((e) => e.sink === 'hook').at(-1);
const post = async (id: string) =>
  assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);

test('calls waiting in a queue held back for an hour say so, with the time the hold ends', async () => {
  // A 503 first: its next attempt is due in about 20 s.
  await post('held-503');
  const failed = await waitFor(async () => {
    const c = await api('held-503');
    return lastOf(c)?.event === 'retry' ? c : null;
  });
  const dueAt = lastOf(failed)!.nextAt!;
  // Then a 429 for an hour: the endpoint's queue is held back that long, for every job in it.
  await post('held-429');
  const limited = await waitFor(async () => {
    const c = await api('held-429');
    return lastOf(c)?.event === 'retry' ? c : null;
  });
  const holdEnd = lastOf(limited)!.nextAt!;
  assert.ok(holdEnd - dueAt > 3_000_000, 'the hold ends long after the 503 retry was due');
  // A call received during the hold: its job waits in the held queue.
  await post('held-later');
  await waitFor(async () => ((await api('held-later')).entries.some((e) => e.event === 'fanned-out') ? true : null));

  const holdIso = new Date(holdEnd).toISOString().slice(0, 16); // to the minute
  for (const [id, state] of [
    ['held-later', 'pending'],
    ['held-503', 'retrying'],
  ] as const) {
    const call = await api(id);
    assert.equal(call.sinks[SINK], state, id);
    assert.match(call.reasons[SINK] ?? '', /held back until/, `${id}: why it waits: ${call.reasons[SINK]}`);
    assert.ok(call.reasons[SINK]!.includes(holdIso), `${id}: until when: ${call.reasons[SINK]}`);
    const next = call.nextAt?.[SINK];
    assert.ok(next !== undefined && Math.abs(next - holdEnd) < 5000, `${id}: its next run is the hold's end: ${next}`);
    // The list says it too.
    const listed = await (await fetch(`${cs.url}/api/calls?since=1h`, { headers: auth })).json();
    const row = (listed as { calls: ApiCall[] }).calls.find((c) => c.id === call.id)!;
    assert.match(row.reasons[SINK] ?? '', /held back until/);
    // (Read again: the hold's end is now + its PTTL, which may round a millisecond apart.)
    assert.ok(Math.abs(row.nextAt![SINK]! - next) < 1000, `${id}: the list's next run: ${row.nextAt?.[SINK]}`);
    // `callsync call` prints it as a note; the Calls page in the sink's chip.
    const out: string[] = [];
    const code = await runCli(['call', id], {
      env: { REDIS_URL, ...(await testRedis()).env(), QUEUE_PREFIX: cs.prefix, ...env },
      out: (l) => out.push(l),
      err: (l) => out.push(l),
    });
    assert.equal(code, 0);
    assert.match(
      out.join('\n'),
      new RegExp(`^note: ${SINK.replace('.', '\\.')}: its queue sink-hook\\.e1 is held back until ${holdIso}`, 'm'),
    );
    const page = await (await fetch(`${cs.url}/admin/queues/calls/${call.id}`, { headers: auth })).text();
    assert.match(page, /data-sink="hook\.e1" title="its queue sink-hook\.e1 is held back until/);
  }
  // The call that asked for the wait: retrying, next at the hold's end (as its own entry says).
  const own = await api('held-429');
  assert.equal(own.sinks[SINK], 'retrying');
  assert.equal(own.nextAt?.[SINK], holdEnd);
  // How long, readable: an hour in ms has 7 digits, which the timeline masks as a phone number may be.
  assert.match(own.reasons[SINK] ?? '', /sink queue pauses for 3600 s\b/, own.reasons[SINK]);
});
