// Hostile shapes of data at every entrance of a running callsync — the AI-agent webhook, the Push
// API, the channel events the poller reads — and what became of each call, as `callsync call <id>`
// shows it: accepted means delivered to every routed sink (or dead-lettered with a reason), never
// stuck, and never a process or a channel brought down by one call. The parts without servers:
// test/hostile-shapes.test.ts.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { redisKeys } from '../queues/keys.js';
import { runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { CallTimeline, callsNamed } from '../queues/timeline.js';
import { TOO_DEEP_MARKER } from '../src/model/json-depth.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { hangup, newCall } from './support/fake-push.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';
import { waitFor } from './support/redis.js';

const CHANNEL = 'ch-hostile';
/** What a terminal acts on instead of showing: control characters (a line break aside), bidi overrides. */
// eslint-disable-next-line no-control-regex -- control characters are what must not be printed
const UNPRINTABLE_BUT_NEWLINE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e]/;

describe('hostile shapes through a running callsync', () => {
  let cs: TestCallsync;
  let receiver: FakeWebhookReceiver;
  let api: FakeTelephony;
  let dir: string;
  let timeline: CallTimeline;
  /** The environment `callsync` commands read (the test instance's Redis and prefix). */
  let cliEnv: Record<string, string>;

  before(async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    [receiver, api] = await Promise.all([new FakeWebhookReceiver(secret).start(), FakeTelephony.start()]);
    dir = await mkdtemp(join(tmpdir(), 'hostile-'));
    await writeFile(
      join(dir, 'callsync.yaml'),
      [
        'sinks:',
        '  archive:',
        '    type: archive',
        `    dir: ${join(dir, 'archive')}`,
        '  hooks:',
        '    type: webhook',
        `    endpoints: [{ name: r, url: "${receiver.url}" }]`,
        'routes:',
        '  - to: [archive, hooks]',
        '',
      ].join('\n'),
    );
    const env: Record<string, string> = {
      CALLSYNC_CONFIG: join(dir, 'callsync.yaml'),
      CRM_WEBHOOK_SECRET: secret,
      SPOOL_ENABLED: 'false',
      PUSH_API_VERIFY: 'false',
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      POLL_CHANNEL_IDS: CHANNEL,
      POLL_INTERVAL_MS: '200',
      POLL_MAX_BACKOFF_MS: '1000',
      JOB_ATTEMPTS: '2',
    };
    cs = await startTestCallsync(env);
    timeline = new CallTimeline(cs.redis.producer, redisKeys(cs.config.redis), cs.config.timeline);
    cliEnv = testEnv(cs.prefix, env);
  });

  after(async () => {
    await cs?.stop();
    await Promise.all([receiver?.stop(), api?.close()]);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Each routed sink's final state in the call's timeline (`callsync call <ref>`), once none is pending. */
  async function sinksOf(ref: string): Promise<{ sinks: Record<string, string>; reasons: Record<string, string> }> {
    return waitFor(
      async () => {
        const [call] = await callsNamed(timeline, ref);
        const states = Object.values(call?.sinks ?? {});
        return states.length > 0 && states.every((s) => ['done', 'skipped', 'failed'].includes(s))
          ? { sinks: call!.sinks, reasons: call!.reasons }
          : null;
      },
      { timeoutMs: 20_000, what: `the sinks of ${ref} done, skipped or failed` },
    );
  }

  const DELIVERED = { sinks: { archive: 'done', 'hooks.r': 'done' }, reasons: {} };

  const push = (body: string) =>
    fetch(`${cs.url}/webhooks/push`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body,
    });

  test('webhook: a caller "number" of 20,000 digits is delivered to every sink, not dead-lettered', async () => {
    // Before: each attempt's timeline entry (and each error) was scrubbed with a pattern made of the
    // call's numbers, one piece per digit; V8 could not compile it, so every sink failed every attempt.
    const payload = webhookPayload('hostile-digits', (p) => (p.call.from = '7'.repeat(20_000)));
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload);
    assert.equal(res.status, 202);
    assert.deepEqual(await sinksOf('hostile-digits'), DELIVERED);
    assert.equal(receiver.byCall.get('hostile-digits')?.size, 1);
  });

  test('a call id with terminal escapes is shown escaped by `callsync call`, `calls` and `dlq list`, never run', async () => {
    // ESC ] 52 writes the operator's clipboard in many terminals; ESC [ 2 J clears the screen; CR and
    // a cursor move overwrite what was printed; U+202E reverses what follows.
    const callId = 'esc-1\u001b]52;c;cHduZWQ=\u0007\u001b[2J\u001b[1A\r\u202einnocent';
    receiver.poison.add(callId);
    try {
      const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(callId));
      assert.equal(res.status, 202);
      assert.equal((await sinksOf(callId)).sinks['hooks.r'], 'failed');
      const shown = 'esc-1\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\x1b[1A\\x0d\\u202einnocent';
      for (const argv of [
        ['call', callId],
        ['calls', '--since', '1h'],
        ['dlq', 'list'],
      ]) {
        const out: string[] = [];
        const io: CliIo = { env: cliEnv, out: (l) => out.push(l), err: (l) => out.push(l) };
        assert.equal(await runCli(argv, io), 0, argv[0]);
        const text = out.join('\n');
        assert.doesNotMatch(text, UNPRINTABLE_BUT_NEWLINE, `${argv[0]}: ${JSON.stringify(text)}`);
        assert.ok(text.includes(shown), `${argv[0]} names the call: ${JSON.stringify(text)}`);
      }
      // As JSON the id is the id (escaped by JSON itself).
      const json: string[] = [];
      await runCli(['call', callId, '--json'], { env: cliEnv, out: (l) => json.push(l), err: (l) => json.push(l) });
      assert.equal((JSON.parse(json.join('')) as { calls: { callId: string }[] }).calls[0]!.callId, callId);
    } finally {
      receiver.poison.delete(callId);
    }
  });

  test('Push API: fields named __proto__[], constructor[], toString[] are kept; the call is delivered', async () => {
    // Before: `toString[]=x` threw a TypeError in the form parser, answered 400 "the body is not UTF-8".
    const extra = { '__proto__[]': 'a', 'constructor[]': 'b', 'toString[]': 'c', valueOf: 'd' };
    const form = (body: string) => `${body}&${new URLSearchParams(extra).toString()}`;
    for (const body of [newCall('push-proto'), hangup('push-proto')]) {
      const res = await push(form(body));
      assert.equal(res.status, 200, await res.text());
    }
    assert.deepEqual(await sinksOf('push-proto'), DELIVERED);
    const { newCall: kept } = await archivedOriginal('push-proto');
    for (const [name, value] of Object.entries({
      valueOf: 'd',
      '__proto__[]': ['a'],
      'constructor[]': ['b'],
      'toString[]': ['c'],
    }))
      assert.deepEqual(kept[name], value, `${name} in the archived original`);
  });

  test('Push API: a call named "open" is a call like any other, and the calls after it are taken', async () => {
    // Before: its events were written into the set of open calls (`…:push:open`): 503 for that call
    // for good, and when no call was open it turned the set into a hash: every Push call after it 503.
    for (const body of [newCall('open'), newCall('after-open'), hangup('after-open'), hangup('open')]) {
      const res = await push(body);
      assert.equal(res.status, 200, `${body}: ${await res.text()}`);
    }
    assert.deepEqual(await sinksOf('open'), DELIVERED);
    assert.deepEqual(await sinksOf('after-open'), DELIVERED);
    const res = await push('event=newCall&callId=p-twice&callId=p-other');
    assert.equal(res.status, 400);
    assert.deepEqual(((await res.json()) as { errors: { source: { pointer: string } }[] }).errors[0]!.source, {
      pointer: '/callId',
    });
  });

  test('poller: an event nested 100,000 levels deep in a field callsync does not read is delivered, and the events after it too', async () => {
    // Before: storing it overflowed JSON.stringify's stack; the page failed on every read, and the
    // channel never got past it.
    const event = JSON.stringify(channelEvent({ eventId: 'deep-1', channelId: CHANNEL }));
    const deep = `${event.slice(0, -1)},"x-trace":${'['.repeat(100_000)}${']'.repeat(100_000)}}`;
    const next = JSON.stringify(channelEvent({ eventId: 'after-deep-2', channelId: CHANNEL }));
    const position = Buffer.from('idx:0').toString('base64url');
    api.inject({
      on: 'events',
      channelId: CHANNEL,
      status: 200,
      body: `{"events":[${deep},${next}],"position":"${position}"}`,
      times: 1000,
    });
    try {
      assert.deepEqual(await sinksOf('call-deep-1'), DELIVERED);
      assert.deepEqual(await sinksOf('call-after-deep-2'), DELIVERED);
    } finally {
      api.clearFaults();
    }
    const original = await archivedOriginal('call-deep-1');
    let inner: unknown = original['x-trace'];
    while (Array.isArray(inner)) inner = inner[0];
    assert.equal(inner, TOO_DEEP_MARKER, 'the field kept to 64 levels, the rest a marker');
    assert.equal(original.eventId, 'deep-1');
    assert.ok(
      cs.logs.some((l) => Array.isArray(l.fields) && (l.fields as string[]).some((f) => f.startsWith('x-trace:'))),
      'logged as a field not read',
    );
  });

  test('poller: a page larger than an answer may be (16 MiB) is read again in smaller pages, not retried forever', async () => {
    // Before: the client refused the answer at 16 MiB, the poll failed, and the next poll asked for
    // the same page: the channel stopped at it for good.
    const pad = 'p'.repeat(1024 * 1024);
    const ids = Array.from({ length: 30 }, (_, i) => `big-${i}`);
    api.addEvents(
      CHANNEL,
      ids.map((eventId) => channelEvent({ eventId, channelId: CHANNEL, 'x-pad': pad })),
    );
    for (const id of [ids[0]!, ids[29]!]) assert.deepEqual(await sinksOf(`call-${id}`), DELIVERED);
    const limits = api.inboxRequests(CHANNEL).map((r) => Number(r.query.limit));
    assert.ok(limits.includes(100) && limits.some((l) => l < 16), `page sizes asked: ${limits.join(' ')}`);
  });

  /** The original a call's archived record keeps (`original`), found by its id in the archive folder. */
  async function archivedOriginal(callId: string): Promise<Record<string, any>> {
    const root = join(dir, 'archive');
    for (const entry of await readdir(root, { recursive: true })) {
      if (!entry.endsWith('.json') || entry.endsWith('.vcon.json')) continue;
      const record = JSON.parse(await readFile(join(root, entry), 'utf8')) as {
        call?: { callId?: string };
        original: Record<string, any>;
      };
      if (record.call?.callId === callId) return record.original;
    }
    throw new Error(`no archived record of ${callId}`);
  }
});
