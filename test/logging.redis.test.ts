// Logs of a full run (webhooks with transcripts, a shared secret, the dashboard with its password,
// /metrics with its token, retries and a dead letter) are JSON with a request id on every request
// line and a job id on every job line, and contain no secret, no transcript or summary text and
// no unmasked phone number.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLogger, maskPhone } from '../src/log.js';
import { webhookPayload } from './support/calls.js';
import { memoryLog, postJson } from './support/callsync.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';
import { parseStrictJson } from './support/strict-json.js';

const HOOK_TOKEN = 'hook-token-5ecret-a1';
const ADMIN_PASSWORD = 'admin-pa55word-b2';
const ADMIN_TOKEN = 'admin-token-5ecret-c3';
const METRICS_TOKEN = 'metrics-token-5ecret-d4';
const S3_SECRET = 's3-5ecret-access-key-e5';

/** Text of the fixture's call that must never reach a log. */
const FORBIDDEN = [
  HOOK_TOKEN,
  ADMIN_PASSWORD,
  ADMIN_TOKEN,
  METRICS_TOKEN,
  S3_SECRET,
  Buffer.from(`admin:${ADMIN_PASSWORD}`).toString('base64'),
  'I need to move my appointment',
  'which day suits you',
  'Friday morning, please',
  'move her dentist appointment',
  '2116355340',
  '21155550100',
];

describe('logging of a full run', () => {
  let cs: OpsCallsync;
  let dir: string;
  const flaky = new FlakySink('crm');

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-logging-'));
    const file = join(dir, 'callsync.yaml');
    await writeFile(
      file,
      [
        'sinks:',
        '  archive:',
        '    type: archive',
        `    dir: ${join(dir, 'archive')}`,
        '  crm:',
        '    type: archive',
        '    bucket: never-used',
        '    accessKeyId: AKIAEXAMPLE',
        '    secretAccessKey: ${S3_SECRET}',
        'routes:',
        '  - to: [archive, crm]',
      ].join('\n'),
    );
    cs = await startOpsCallsync(
      {
        CALLSYNC_CONFIG: file,
        S3_SECRET,
        JOB_ATTEMPTS: '2',
        WEBHOOK_AUTH_HEADER: 'X-Callsync-Secret',
        WEBHOOK_AUTH_TOKENS: HOOK_TOKEN,
        ADMIN_PASSWORD,
        ADMIN_TOKEN,
        METRICS_TOKEN,
      },
      { sinks: new Map([['crm', flaky]]) },
      'trace',
    );
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('a run logs no secret, transcript or phone number, and tags request and job lines', async (t) => {
    const started = Date.now();
    const hook = `${cs.url}/webhooks/ai-agent/agent-1`;
    const auth = { 'x-callsync-secret': HOOK_TOKEN };
    for (const id of ['ok-log-1', 'flaky-log-1', 'perm-log-1', 'fail-log-1'])
      assert.equal((await postJson(hook, webhookPayload(id), auth)).status, 202);
    assert.equal((await postJson(hook, webhookPayload('ok-log-1'), auth)).status, 202, 'duplicate');
    assert.equal(
      (await postJson(hook, webhookPayload('bad-auth'), { 'x-callsync-secret': `${HOOK_TOKEN}-wrong` })).status,
      401,
    );
    assert.equal(
      (await postJson(hook, webhookPayload('bad-auth'), { authorization: `Bearer ${ADMIN_TOKEN}` })).status,
      401,
    );
    assert.equal(
      (await postJson(hook, '{"call": {"from": "+492116355340", "transcript": "I need to move my appointment"', auth))
        .status,
      400,
    );
    assert.equal(
      (
        await fetch(`${cs.url}/admin/queues`, {
          headers: { authorization: `Basic ${Buffer.from(`admin:${ADMIN_PASSWORD}`).toString('base64')}` },
        })
      ).status,
      200,
    );
    assert.equal(
      (await fetch(`${cs.url}/admin/queues/api/queues`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } }))
        .status,
      200,
    );
    assert.equal(
      (await fetch(`${cs.url}/metrics`, { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).status,
      200,
    );
    assert.equal((await fetch(`${cs.url}/admin/queues?token=${ADMIN_TOKEN}`)).status, 401);

    const crm = cs.operations.queues.find((q) => q.name === 'sink-crm')!;
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(
      async () => {
        const [c, a] = await Promise.all([crm.getJobCounts('completed', 'failed'), archive.getJobCounts('completed')]);
        return c.completed === 2 && c.failed === 2 && a.completed === 4;
      },
      { timeoutMs: 30_000, what: 'every job finished' },
    );
    t.diagnostic(`jobs done after ${Date.now() - started} ms`);
    await cs.stop();
    t.diagnostic(`stopped after ${Date.now() - started} ms`);

    const logs = cs.logs;
    assert.ok(logs.length > 20, `a run with trace logging writes lines (${logs.length})`);
    const text = logs.map((l) => JSON.stringify(l)).join('\n');
    for (const secret of FORBIDDEN) assert.ok(!text.includes(secret), `logs contain "${secret}"`);

    // Every request line carries its request id; every line about a job carries the job id.
    const requestLines = logs.filter((l) => l.msg === 'request');
    assert.ok(requestLines.length >= 12, `request lines: ${requestLines.length}`);
    for (const l of requestLines) assert.match(String(l.requestId), /^[0-9a-f-]{36}$/);
    const duplicate = logs.find((l) => l.msg === 'duplicate webhook acknowledged');
    assert.ok(duplicate?.requestId, 'lines logged inside a request carry its id');
    const jobLines = logs.filter(
      (l) => typeof l.msg === 'string' && /flaky sink|failure|dead-lettered|archived call/.test(l.msg),
    );
    assert.ok(jobLines.length >= 8, `job lines: ${jobLines.length}`);
    for (const l of jobLines) assert.ok(typeof l.jobId === 'string' && l.jobId.length > 0, `job id on "${l.msg}"`);
    assert.ok(
      logs.some((l) => l.msg === 'archived call' && l.level === 20),
      'sink debug lines are in the run',
    );
    for (const l of logs) assert.equal(typeof l.time, 'string');
    // Strict JSON: no key twice on a line (the sink's name was bound by the worker and again by the sink).
    assert.equal(cs.rawLogs.length, logs.length);
    for (const line of cs.rawLogs) assert.doesNotThrow(() => parseStrictJson(line), line);
  });
});

describe('log redaction and masking', () => {
  test('secrets, auth headers and transcript text are redacted wherever they sit', () => {
    const { lines, log } = memoryLog('info');
    log.info(
      {
        headers: { authorization: 'Bearer abc', cookie: 'sid=1', 'x-api-key': 'k-123' },
        config: { token: 't-1', password: 'p-1', apiKey: 'a-1', clientSecret: 'c-1' },
        call: { transcript: 'words', summary: { content: 'summary words' }, transcription: { content: 'more words' } },
        job: { data: { call: { transcript: 'deep words' } } },
      },
      'shapes',
    );
    const line = JSON.stringify(lines[0]);
    for (const value of ['Bearer abc', 'sid=1', 'k-123', 't-1', 'p-1', 'a-1', 'c-1', 'words'])
      assert.ok(!line.includes(value), `"${value}" in ${line}`);
  });

  test('a key bound twice (worker and sink both bind the sink; a line repeats a bound key) is written once, the innermost value', () => {
    const { raw, log } = memoryLog('info');
    const worker = log.child({ queue: 'sink-hubspot' }).child({ sink: 'hubspot', jobId: 'j-1' });
    const sink = worker.child({ sink: 'hubspot', callId: 'c-1' });
    sink.info('contact found');
    sink.info({ sink: 'hubspot', jobId: 'j-2', service: 'other' }, 'note created');
    log.child({ level2: 1 }).child({ level2: 2 }).warn('warned');
    assert.equal(raw.length, 3);
    const [first, second, third] = raw.map((l) => parseStrictJson(l) as Record<string, unknown>);
    assert.deepEqual(
      [first?.sink, first?.jobId, first?.callId, first?.queue, first?.msg],
      ['hubspot', 'j-1', 'c-1', 'sink-hubspot', 'contact found'],
    );
    assert.deepEqual([second?.jobId, second?.service, second?.msg], ['j-2', 'other', 'note created']);
    assert.equal(third?.level2, 2);
    assert.equal(third?.level, 40);
  });

  test('phone numbers are masked as +49211****400', () => {
    assert.equal(maskPhone('+492116355400'), '+49211****400');
    assert.equal(maskPhone('0211 6355 400'), '02116****400');
    assert.equal(maskPhone(null), null);
    assert.equal(maskPhone('123'), '****');
  });

  test('the logger writes JSON lines with an ISO time and the service name', () => {
    const chunks: string[] = [];
    const log = createLogger({
      level: 'info',
      destination: { write: (s: string) => (chunks.push(s), true) } as unknown as NodeJS.WritableStream,
    });
    log.info({ jobId: 'j-1' }, 'hello');
    const parsed = JSON.parse(chunks[0]!);
    assert.equal(parsed.service, 'callsync');
    assert.equal(parsed.jobId, 'j-1');
    assert.match(parsed.time, /^\d{4}-\d{2}-\d{2}T/);
  });
});
