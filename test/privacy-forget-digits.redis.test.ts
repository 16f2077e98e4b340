// `callsync forget <number>` and numbers written in digits that are not ASCII: Arabic-Indic
// (`٠١٧٠…`, as Arabic keyboards and phones send them), Extended Arabic-Indic (Persian/Urdu, `۰۱۷۰…`)
// and Devanagari (`०१७०…`). A call that carries the number so — as the caller of a webhook, the callee
// of an outbound one, the caller of a polled channel event, or in the transcript's text — is the
// number's call: forget erases it whole (its jobs, dead letters, archived objects), and a scan of
// every key under the prefix and every archived file, with every Unicode digit read as its value and
// the bidi marks right-to-left text puts between digits skipped, finds the number nowhere; another
// caller's calls stay. And the call is read: a caller's number in those digits (bidi marks around
// it too) is the E.164 number, listed under it in the timeline's number index.
// A link in a field kept verbatim that holds the number percent-escaped mentions it too.
// (Full-width digits in a transcript: privacy-forget-gaps.)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import type { RedisClient } from '../queues/connection.js';
import { CallTimeline } from '../queues/timeline.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { numbersOfWords, oneNumber, parseTarget, targetOfWords } from '../src/model/number-words.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { channelEvent, FakeTelephony } from './support/fake-telephony.js';
import { testRedis, waitFor, type TestRedis, valuesUnder } from './support/redis.js';

const A = '+491701234567';
const B = '+491761234599';
/** `s` with its ASCII digits written in the script whose zero is `zero`. */
const script = (zero: number) => (s: string) => s.replace(/\d/g, (d) => String.fromCodePoint(zero + Number(d)));
const arabic = script(0x660);
const persian = script(0x6f0);
const devanagari = script(0x966);

/** Every Unicode decimal digit as its ASCII digit (they come in aligned runs of ten, 0 to 9). */
function asAscii(text: string): string {
  return text.replace(/\p{Nd}/gu, (c) => {
    const cp = c.codePointAt(0)!;
    let zero = cp;
    while (/\p{Nd}/u.test(String.fromCodePoint(zero - 1))) zero--;
    return String((cp - zero) % 10);
  });
}
/** Whether `text` holds A's digits (`1701234567`, its national number) in any script, with separators between them. */
const holdsA = (text: string) => /1701234567/.test(asAscii(text).replace(/(\d)[^\p{L}\p{N}"\\]{1,5}(?=\d)/gu, '$1'));
const holdsB = (text: string) => /1761234599/.test(asAscii(text));

test('the number given to forget in those digits is the number, not a call id', () => {
  // As the data subject wrote it in the request, pasted (quoted: one word) or typed (several words).
  assert.deepEqual(parseTarget(arabic('0170 1234567'), 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(parseTarget(persian('00491701234567'), 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(parseTarget(`\u200f${devanagari('0170-1234567')}\u200f`, 'DE'), { kind: 'number', e164: A });
  assert.deepEqual(targetOfWords(arabic('0170 123 45 67').split(' '), 'DE', 'forget'), { kind: 'number', e164: A });
  assert.deepEqual(numbersOfWords([arabic('+49'), arabic('170'), arabic('1234567')], 'DE'), [A]);
  assert.equal(oneNumber(persian('0170 1234567'), 'DE'), A, '`calls --number`, the Calls page');
  // A call id stays as given.
  assert.deepEqual(parseTarget('c-٤٢', 'DE'), { kind: 'call', callId: 'c-٤٢' });
});

describe('forget <number> and numbers in Arabic-Indic, Persian and Devanagari digits', () => {
  let target: TestRedis;
  let conn: RedisClient;
  let cs: TestCallsync;
  let api: FakeTelephony;
  let receiver: FakeWebhookReceiver;
  let dir: string;
  let env: Record<string, string>;
  let prefix: string;

  before(async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    target = await testRedis();
    conn = target.connect();
    [api, receiver] = await Promise.all([FakeTelephony.start(), new FakeWebhookReceiver(secret).start()]);
    api.addEvents('ch-1', [
      channelEvent({ eventId: 'ev-1', channelId: 'ch-1', call: { from: arabic(A) } }),
      channelEvent({ eventId: 'ev-2', channelId: 'ch-1', call: { from: devanagari('0170 1234567') } }),
      channelEvent({ eventId: 'ev-3', channelId: 'ch-1', call: { from: B } }),
    ]);
    dir = await mkdtemp(join(tmpdir(), 'forget-digits-'));
    await writeFile(
      join(dir, 'callsync.yaml'),
      `sinks:\n  local:\n    type: archive\n    dir: ${join(dir, 'archive')}\n  hooks:\n    type: webhook\n    endpoints: [{ name: r, url: "${receiver.url}" }]\nroutes:\n  - to: [local, hooks]\n`,
    );
    prefix = await target.prefix('forgetdigits');
    env = testEnv(prefix, {
      ...target.env(),
      CALLSYNC_CONFIG: join(dir, 'callsync.yaml'),
      CRM_WEBHOOK_SECRET: secret,
      SPOOL_ENABLED: 'false',
      PHONE_DEFAULT_REGION: 'DE',
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      POLL_CHANNEL_IDS: 'ch-1',
      POLL_INTERVAL_MS: '200',
    });
    cs = await startTestCallsync(env);
  });
  after(async () => {
    await cs?.stop();
    await Promise.all([api?.close(), receiver?.stop()]);
    if (target && prefix) await target.cleanup(prefix);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Every value under the prefix (by type) and every archived file, as text. */
  async function everything(): Promise<{ where: string; text: string }[]> {
    const out: { where: string; text: string }[] = [];
    out.push(...(await valuesUnder(conn, prefix)));
    const files = await readdir(join(dir, 'archive'), { recursive: true, withFileTypes: true }).catch(() => []);
    for (const f of files)
      if (f.isFile()) out.push({ where: f.name, text: await readFile(join(f.parentPath, f.name), 'utf8') });
    return out;
  }

  test('every call that carries the number in those digits goes whole; the other caller’s stay', async () => {
    const calls: [string, (p: Record<string, any>) => void][] = [
      ['d-from', (p) => (p.call.from = arabic(A))],
      ['d-to', (p) => Object.assign(p.call, { from: B, direction: 'out', to: persian('0170 1234567') })],
      [
        'd-text',
        (p) => {
          p.call.from = B;
          p.assist.transcription.content = `Caller: my number is ${devanagari('0170 1234567')}.`;
          p.assist.transcription.chunks[0].content = `my number is ${devanagari('0170 1234567')}.`;
        },
      ],
      ['d-other', (p) => (p.call.from = arabic(B))],
      // As right-to-left text copies a number: wrapped in, and split by, invisible bidi marks.
      ['d-bidi', (p) => (p.call.from = `\u200e+${arabic('49')}\u200e${arabic('170 1234567')}\u200e`)],
      [
        'd-bidi-text',
        (p) => {
          p.call.from = B;
          p.assist.transcription.content = `Caller: رقمي \u200f${arabic('0170')}\u200f${arabic('1234567')}\u200f`;
        },
      ],
      // A field callsync keeps verbatim, with the number percent-escaped in a link.
      [
        'd-link',
        (p) => Object.assign(p.call, { from: B, links: { crm: 'https://crm.example/search?q=%2B49%20170%201234567' } }),
      ],
    ];
    for (const [id, patch] of calls)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id, patch))).status, 202);
    const keys = [
      ...calls.map(([id]) => callKey('ai-agent', 'agent-1', id)),
      ...['ev-1', 'ev-2', 'ev-3'].map((ev) => `channel:ch-1:${ev}`),
    ];
    const name = sinkQueueName('hooks', 'r');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    try {
      await waitFor(
        async () =>
          (await Promise.all(keys.map(async (k) => (await queue.getJob(callHash(k)))?.isCompleted()))).every(Boolean) ||
          null,
        { what: 'the calls delivered', timeoutMs: 30_000 },
      );
      assert.ok(
        (await everything()).some((v) => holdsA(v.text)),
        'the scan sees the number before forget',
      );
      // The calls are read: the caller in Arabic-Indic digits is A, found by A's number (`callsync call`),
      // as are those that gave A's national number (no country code) in Persian or Devanagari digits.
      const job = await queue.getJob(callHash(keys[0]!));
      assert.equal((job?.data as { call: { from: string | null } }).call.from, A);
      const timeline = new CallTimeline(conn, target.keys(prefix), loadConfig(env).timeline);
      const indexed = await waitFor(
        async () => ((await timeline.byNumber(A)).length >= 5 ? timeline.byNumber(A) : null),
        {
          what: "A's calls in the number index",
          timeoutMs: 10_000,
        },
      );
      assert.deepEqual(
        indexed.sort(),
        [
          ...['d-from', 'd-bidi', 'd-to'].map((id) => callKey('ai-agent', 'agent-1', id)),
          'channel:ch-1:ev-1',
          'channel:ch-1:ev-2',
        ]
          .map((k) => callHash(k))
          .sort(),
        'the calls whose caller or callee is A',
      );

      const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: false,
      });

      const left = (await everything()).filter((v) => holdsA(v.text)).map((v) => v.where);
      assert.deepEqual(left, [], `nothing of the number is left (receipt ${JSON.stringify(receipt)})`);
      assert.equal(await queue.getJob(callHash(callKey('ai-agent', 'agent-1', 'd-link'))), undefined, 'the link');
      for (const key of keys.filter((k) => k.endsWith('d-other') || k.endsWith('ev-3')))
        assert.ok(await queue.getJob(callHash(key)), `the other caller's call ${key} stays`);
      const all = await everything();
      assert.ok(
        all.some((v) => v.where.startsWith('d-other-') && holdsB(v.text)),
        "the other caller's archive stays",
      );
    } finally {
      await queue.close();
    }
  });
});
