// The contract corpus (test/fixtures/platform/: the platform's documented example payloads and the
// spec's shapes) through the real ingress over a real port, as `callsync start` runs it: every
// payload gets a 202, its original is stored byte for byte in the inbound log and archived
// unchanged (JSON-identical: the archive writes the original re-indented inside its document), and
// its canonical fields are what the payload says —
// posted with a Content-Length and, as the platform's documentation says it sends them, with
// `Transfer-Encoding: chunked`. Also: an optional field of a shape callsync cannot read is
// accepted, archived, counted and logged once.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createIngressApp } from '../src/ingress/app.js';
import { createLogger } from '../src/log.js';
import { callKey, type CanonicalCall } from '../src/model/call.js';
import { archiveKeys } from '../src/sinks/archive/keys.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { webhookPayload } from './support/calls.js';
import { webhookConfig } from './support/webhook-config.js';

const CORPUS = new URL('./fixtures/platform/', import.meta.url);
const files = readdirSync(CORPUS)
  .filter((f) => f.endsWith('.json'))
  .sort();

type Expected = Partial<
  Pick<
    CanonicalCall,
    | 'callId'
    | 'title'
    | 'provider'
    | 'channelId'
    | 'direction'
    | 'from'
    | 'to'
    | 'startedAt'
    | 'endedAt'
    | 'durationSec'
    | 'payloadVersion'
  >
> & {
  summary: string | null;
  channel?: unknown;
  chunks?: [speaker: string, startMs: number, endMs: number][];
};

/** What each corpus file must become (the canonical fields a sink writes from). */
const EXPECTED: Record<string, Expected> = {
  'ci-webhook-current.json': {
    callId: 'pbx-a1b2c3d4-e5f6-7890-abcd-ef1234567890',
    title: 'Invoice inquiry and plan change',
    provider: 'AZURE',
    channelId: 'f47ac10b-58cc-4372-a567-0e02b2c3d479',
    channel: { id: 'f47ac10b-58cc-4372-a567-0e02b2c3d479', name: 'Support Channel' },
    summary: null,
    direction: 'in',
    from: '+4921163553400',
    to: '+4921163553401',
    startedAt: '2026-04-08T09:22:41.663Z',
    endedAt: '2026-04-08T09:24:04.329Z',
    // 82666 is milliseconds (the span is 82.666 s).
    durationSec: 83,
    payloadVersion: 'v1',
    chunks: [
      ['caller', 3200, 12400],
      ['callee', 13100, 18900],
      ['caller', 19500, 26300],
      ['callee', 27000, 40100],
    ],
  },
  'ai-assistant-webhook-legacy.json': {
    callId: 'call_12345',
    title: 'Customer asked about product availability and pricing',
    provider: undefined,
    channelId: 'channel_98765',
    channel: { id: 'channel_98765', name: 'Sales' },
    summary: 'The customer asked whether the product is in stock and what it costs.',
    direction: 'in',
    from: '+491751234567',
    to: '+498912345678',
    startedAt: '2024-06-12T14:20:00.000Z',
    endedAt: '2024-06-12T14:25:00.000Z',
    durationSec: 300,
    payloadVersion: 'legacy',
  },
  'spec-v2.json': {
    callId: 'c-2026-04-08-0001',
    title: undefined,
    provider: undefined,
    channelId: null,
    summary: 'The caller asked to move her dentist appointment to Friday morning.',
    direction: 'in',
    from: '+492116355340',
    to: '+4921155550100',
    durationSec: 135,
    payloadVersion: 'v2',
    chunks: [
      ['caller', 3000, 6000],
      ['callee', 7000, 9500],
      ['caller', 70000, 72000],
    ],
  },
  'spec-v1-required.json': {
    callId: 'spec-v1-0001',
    title: undefined,
    provider: undefined,
    channelId: null,
    summary: null,
    direction: 'out',
    from: '+492116355340',
    to: '+4921155550100',
    durationSec: 60,
    payloadVersion: 'v1',
    chunks: undefined,
  },
};

/** POSTs `body` over a socket with `Transfer-Encoding: chunked`, in `parts` chunks written one by one. */
function postChunked(url: string, body: string, parts: number): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', 'transfer-encoding': 'chunked' } },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
      },
    );
    req.on('error', reject);
    const bytes = Buffer.from(body, 'utf8');
    const size = Math.ceil(bytes.length / parts);
    let at = 0;
    const next = () => {
      if (at >= bytes.length) {
        req.end();
        return;
      }
      // A multi-byte character may be cut between chunks: the ingress joins the bytes before decoding.
      req.write(bytes.subarray(at, at + size));
      at += size;
      setTimeout(next, 5);
    };
    next();
  });
}

async function postText(url: string, body: string): Promise<{ status: number; body: string }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return { status: res.status, body: await res.text() };
}

describe('the platform corpus: the original is stored byte for byte', () => {
  // The inbound log keeps the body's text as received (the archive later writes the same JSON
  // value re-indented inside its document: checked JSON-identical below).
  const prefix = uniquePrefix('corpus');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const inbound = new InboundLog(redis, prefix);
  const webhook = webhookConfig();
  const app = createIngressApp({
    webhook,
    acceptor: new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1500 }),
    ready: async () => true,
    log: createLogger({ level: 'silent' }),
  });

  before(() => waitFor(() => redis.status === 'ready', { what: 'Redis connection' }));
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  for (const file of files) {
    test(`${file}: stored as sent`, async () => {
      const text = readFileSync(new URL(file, CORPUS), 'utf8');
      const res = await app.request('/webhooks/ai-agent/bytes', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: text,
      });
      assert.equal(res.status, 202, await res.clone().text());
      const entry = await inbound.find(((await res.json()) as { id: string }).id);
      assert.ok(entry?.text.endsWith(`"raw":${text}}`), 'the stored original is the body, byte for byte');
    });
  }
});

describe('the platform corpus through the real ingress', () => {
  let cs: OpsCallsync;
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-corpus-'));
    // Every call archived (the default route skips calls without content, like spec-v1-required).
    const config = join(dir, 'callsync.yaml');
    await writeFile(
      config,
      `sinks:\n  archive:\n    type: archive\n    dir: ${dir}\nroutes:\n  - name: everything\n    to: [archive]\n`,
    );
    // A small body limit, so a chunked body beyond it is tried too (the corpus is < 4 KiB a file).
    cs = await startOpsCallsync({ CALLSYNC_CONFIG: config, WEBHOOK_BODY_LIMIT: '16384' });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** The archived document of a call, once the archive sink wrote it. */
  async function archived(
    agentId: string,
    callId: string,
    startedAt: string,
  ): Promise<{ call: CanonicalCall; original: unknown }> {
    const path = join(
      dir,
      archiveKeys({ key: callKey('ai-agent', agentId, callId), callId, startedAt }, undefined).json,
    );
    const text = await waitFor(() => readFile(path, 'utf8').catch(() => null), {
      what: `archived ${callId}`,
      timeoutMs: 20_000,
    });
    return JSON.parse(text) as { call: CanonicalCall; original: unknown };
  }

  function checkCanonical(file: string, call: CanonicalCall) {
    const want = EXPECTED[file];
    assert.ok(want, `${file} has its expected fields in this test`);
    const { summary, chunks, ...fields } = want;
    for (const [name, value] of Object.entries(fields))
      assert.deepEqual(call[name as keyof CanonicalCall], value, `${file}: ${name}`);
    assert.equal(call.summary?.content ?? null, summary, `${file}: summary`);
    if (chunks)
      assert.deepEqual(
        call.transcript?.chunks.map((c) => [c.speaker, c.startOffsetMs, c.endOffsetMs]),
        chunks,
        `${file}: chunks`,
      );
    for (const n of [call.from, call.to]) assert.match(n ?? '', /^\+[1-9]\d{6,14}$/, `${file}: numbers in E.164`);
  }

  test('every corpus file is a known payload', () => {
    assert.deepEqual(files, Object.keys(EXPECTED).sort());
  });

  for (const file of files) {
    const text = readFileSync(new URL(file, CORPUS), 'utf8');
    const sent = JSON.parse(text) as Record<string, any>;
    const startedAt = EXPECTED[file]?.startedAt;

    test(`${file}: 202, archived unchanged, canonical fields`, async () => {
      const res = await postText(`${cs.url}/webhooks/ai-agent/corpus`, text);
      assert.equal(res.status, 202, res.body);
      assert.equal((JSON.parse(res.body) as { duplicate: boolean }).duplicate, false);
      const callId = String(sent.call.id);
      const doc = await archived('corpus', callId, startedAt ?? new Date(sent.call.startTime as number).toISOString());
      assert.deepEqual(doc.original, sent, 'the archived original is the payload as sent');
      checkCanonical(file, doc.call);
    });

    test(`${file}: the same bytes with Transfer-Encoding: chunked`, async () => {
      const res = await postChunked(`${cs.url}/webhooks/ai-agent/corpus-chunked`, text, 7);
      assert.equal(res.status, 202, res.body);
      const callId = String(sent.call.id);
      const doc = await archived(
        'corpus-chunked',
        callId,
        startedAt ?? new Date(sent.call.startTime as number).toISOString(),
      );
      assert.deepEqual(doc.original, sent);
      checkCanonical(file, doc.call);
    });
  }

  test('a chunked body beyond WEBHOOK_BODY_LIMIT is a 413 without a Content-Length', async () => {
    const big = JSON.stringify(webhookPayload('corpus-too-big', (p) => (p.padding = 'x'.repeat(20_000))));
    const res = await postChunked(`${cs.url}/webhooks/ai-agent/corpus`, big, 10);
    assert.equal(res.status, 413);
    assert.equal(
      (JSON.parse(res.body) as { errors: { source: { pointer: string } }[] }).errors[0]?.source.pointer,
      '/',
    );
  });

  // The property test (test/webhook-shapes.test.ts) tries every JSON type in every optional field of
  // the parser; here, through the ingress, one webhook per type with that type in every optional leaf.
  const LEAVES: (string | number)[][] = [
    ['call', 'users', 0, 'firstName'],
    ['call', 'channel'],
    ['assist', 'summary', 'content'],
    ['assist', 'summary', 'keyPoints'],
    ['assist', 'callScenarios', 0, 'name'],
    ['assist', 'callScenarios', 0, 'smartAnswers', 0, 'setItems'],
    ['assist', 'transcription', 'content'],
    ['assist', 'transcription', 'chunks', 0, 'speaker'],
    ['assist', 'transcription', 'chunks', 0, 'startTime'],
    ['assist', 'transcription', 'chunks', 1, 'endTime'],
    ['assist', 'transcription', 'chunks', 2, 'content'],
    ['assist', 'callHeadline'],
    ['assist', 'provider'],
  ];
  const VALUES: Record<string, unknown> = {
    string: 'text',
    number: 1e300,
    boolean: true,
    null: null,
    object: { any: ['thing'] },
    array: [1, 'two', null],
  };
  for (const [type, value] of Object.entries(VALUES)) {
    test(`every optional field as ${type}: 202 and archived as sent`, async () => {
      const id = `corpus-type-${type}`;
      const body = webhookPayload(id, (p) => {
        for (const path of LEAVES) {
          let at: any = p;
          for (const key of path.slice(0, -1)) at = at[key];
          at[path.at(-1)!] = structuredClone(value);
        }
      });
      const res = await postText(`${cs.url}/webhooks/ai-agent/corpus`, JSON.stringify(body));
      assert.equal(res.status, 202, res.body);
      const doc = await archived('corpus', id, '2026-04-08T10:00:00.000Z');
      assert.deepEqual(doc.original, body);
      assert.equal(doc.call.callId, id);
    });
  }

  test('an optional field callsync cannot read: 202, archived as sent, counted per field, logged once without its value', async () => {
    const secret = 'do-not-log-this-text';
    const post = async (id: string) => {
      const body = webhookPayload(id, (p) => {
        p.assist.callHeadline = [secret];
        p.assist.transcription.chunks[0].content = { text: secret };
        p.assist.transcription.chunks[1].content = { text: secret };
      });
      const res = await postText(`${cs.url}/webhooks/ai-agent/corpus`, JSON.stringify(body));
      assert.equal(res.status, 202, res.body);
      const doc = await archived('corpus', id, '2026-04-08T10:00:00.000Z');
      assert.deepEqual(doc.original, body, 'the unread values are kept in the original');
      assert.equal(doc.call.title, undefined);
      assert.equal(doc.call.transcript?.chunks[0]?.content, '');
      assert.equal(doc.call.transcript?.chunks[2]?.content, 'Friday morning, please.');
    };
    const count = async (field: string) => {
      const text = await (await fetch(`${cs.url}/metrics`)).text();
      const line = text
        .split('\n')
        .find((l) => l.startsWith(`callsync_webhook_fields_unread_total{field="${field}"} `));
      return Number(line?.split(' ')[1] ?? 0);
    };
    const fields = ['/assist/callHeadline', '/assist/transcription/chunks/*/content'];
    const before = await Promise.all(fields.map(count));
    await post('corpus-unread-1');
    await post('corpus-unread-2');
    // One per webhook and field, however many chunks had it.
    assert.deepEqual(
      await Promise.all(fields.map(count)),
      before.map((n) => n + 2),
    );

    // Logged once per field and process, whichever webhook of this process had it first.
    for (const field of fields) {
      const lines = cs.logs.filter((l) => l.field === field && String(l.msg).startsWith('webhook field not read'));
      assert.equal(lines.length, 1, field);
      assert.match(String(lines[0]!.detail), /^expected text/);
      assert.match(String(lines[0]!.pointer), /^\/assist\/(callHeadline|transcription\/chunks\/\d+\/content)$/);
    }
    assert.ok(!JSON.stringify(cs.logs).includes(secret), 'no value reaches the log');
  });
});
