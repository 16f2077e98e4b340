// `callsync backfill` and `callsync replay` end to end: a fake call history with paging (the
// platform's GET /history), callsync running against real Redis, an S3 archive (s3rver) and a
// signed-webhook receiver; an interrupted backfill resumes; a second backfill or replay adds nothing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { DeleteObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { inboundStreamKey } from '../queues/inbound.js';
import { sinkQueueName } from '../queues/registry.js';
import { backfill, BACKFILL_CURSOR_TTL_S, backfillCursorKey } from '../src/cli/backfill.js';
import { runCli } from '../src/cli/index.js';
import { replay } from '../src/cli/replay.js';
import { createObjectStore, type ArchiveOptions } from '../src/sinks/archive/index.js';
import type { CliIo } from '../src/cli/io.js';
import { loadConfig } from '../src/config/index.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { REDIS_URL, waitFor } from './support/redis.js';
import { startS3, type TestS3, S3_ARCHIVE_SINK_YAML } from './support/s3.js';

const run = promisify(execFile);
const DIRECTIONS = ['INCOMING', 'OUTGOING', 'MISSED_INCOMING', 'MISSED_OUTGOING'];
const STATUSES = ['PICKUP', 'NOPICKUP', 'BUSY', 'FORWARD'];

/** `n` CALL entries created on `day` (one minute apart), as the platform lists them. */
function historyEntries(tag: string, day: string, n: number): Record<string, unknown>[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `${tag}-${i}`,
    type: 'CALL',
    source: '+4921155550100',
    target: `+49151000${String(i).padStart(4, '0')}`,
    direction: DIRECTIONS[i % 4],
    status: STATUSES[i % 4],
    created: new Date(Date.parse(`${day}T08:00:00Z`) + i * 60_000).toISOString(),
    lastModified: new Date(Date.parse(`${day}T09:00:00Z`)).toISOString(),
    duration: i % 4 === 0 ? 30 + i : 0,
    callId: `call-${tag}-${i}`,
    recordings: [],
    archived: false,
    read: false,
    starred: false,
    labels: [],
    endpoints: [],
    connectionIds: [],
  }));
}

describe('backfill and replay', () => {
  let api: FakeTelephony;
  let s3: TestS3;
  let hook: FakeWebhookReceiver;
  let late: FakeWebhookReceiver;
  let cs: TestCallsync;
  let dir: string;
  let env: Record<string, string>;
  let redis: Redis;

  async function cli(argv: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const io: CliIo = { env, out: (l) => out.push(l), err: (l) => err.push(l) };
    const code = await runCli(argv, io);
    return { code, out: out.join('\n'), err: err.join('\n') };
  }

  before(async () => {
    [api, s3] = await Promise.all([FakeTelephony.start({ maxPageSize: 10 }), startS3()]);
    hook = await new FakeWebhookReceiver(`whsec_${randomBytes(32).toString('base64')}`).start();
    late = await new FakeWebhookReceiver(`whsec_${randomBytes(32).toString('base64')}`).start();
    api.addHistory(historyEntries('oct5', '2026-10-05', 25));
    api.addHistory(historyEntries('oct6', '2026-10-06', 23));
    api.addHistory(historyEntries('oct9', '2026-10-09', 7));
    // Outside every range asked for, and not calls: never accepted.
    api.addHistory(historyEntries('sep', '2026-09-01', 3));
    api.addHistory([
      {
        id: 'sms-1',
        type: 'SMS',
        source: '+4921155550100',
        target: '+4915100000001',
        direction: 'OUTGOING',
        status: 'PICKUP',
        created: '2026-10-05T10:00:00Z',
      },
    ]);
    dir = await mkdtemp(join(tmpdir(), 'backfill-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
${S3_ARCHIVE_SINK_YAML}  hook:
    type: webhook
    urls: [${hook.url}]
    secrets: [${hook.secret}]
  late:
    type: webhook
    urls: [${late.url}]
    secrets: [${late.secret}]
    rateLimit: { max: 10, durationMs: 1000 }
routes:
  - to: [archive, hook]
`,
    );
    cs = await startTestCallsync({
      ...s3.env,
      CALLSYNC_CONFIG: configPath,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
    });
    env = testEnv(cs.prefix, {
      ...s3.env,
      CALLSYNC_CONFIG: configPath,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
    });
    redis = new Redis(REDIS_URL);
  });

  after(async () => {
    redis?.disconnect();
    await cs?.stop();
    await Promise.all([s3?.destroy(), api?.close(), hook?.stop(), late?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  test('--dry-run reads every page and counts, and writes nothing', async () => {
    const before = api.requests.length;
    const r = await cli(['backfill', '--from', '2026-10-05', '--to', '2026-10-06', '--dry-run', '--page-size', '10']);
    assert.equal(r.code, 0, r.err);
    assert.match(
      r.out,
      /dry run: 25 calls in 2026-10-05T00:00:00.000Z \.\. 2026-10-06T00:00:00.000Z would be accepted; nothing written/,
    );
    const pages = api.requests.slice(before).filter((q) => q.path === '/v2/history');
    assert.deepEqual(
      pages.map((q) => q.query.offset),
      ['0', '10', '20'],
    );
    assert.deepEqual(
      pages.map((q) => q.query.types),
      ['CALL', 'CALL', 'CALL'],
    );
    assert.equal(await redis.xlen(inboundStreamKey(cs.prefix)), 0);
  });

  test('backfill accepts every call of the range through the inbound log to the routed sinks; a second run adds nothing', async () => {
    const r = await cli(['backfill', '--from', '2026-10-05', '--to', '2026-10-06', '--page-size', '10']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /backfill done: 25 entries read, 25 accepted, 0 updates, 0 duplicates, 0 skipped/);
    // Plain progress lines (this io is no terminal), one per page.
    assert.match(r.out, /^backfill: 10\/25 /m);
    assert.doesNotMatch(r.out, /\r/);
    await waitFor(() => hook.records.size >= 25, { what: '25 webhooks', timeoutMs: 60_000 });
    const keys = await waitFor(
      async () => {
        const k = (await s3.list('transcripts/2026/10/05/')).filter(
          (x) => x.endsWith('.json') && !x.endsWith('.vcon.json'),
        );
        return k.length >= 25 ? k : null;
      },
      { what: '25 archived records', timeoutMs: 60_000 },
    );
    assert.equal(keys.length, 25);
    const records = await Promise.all(keys.map(async (k) => JSON.parse((await s3.get(k)).body).call));
    const byId = new Map(records.map((c) => [c.eventId, c]));
    assert.deepEqual(
      [0, 1, 2, 3].map((i) => {
        const c = byId.get(`oct5-${i}`);
        return [c.source, c.key, c.direction, c.outcome, c.callId];
      }),
      [
        ['history', 'history:-:oct5-0', 'in', 'answered', 'call-oct5-0'],
        ['history', 'history:-:oct5-1', 'out', 'missed', 'call-oct5-1'],
        ['history', 'history:-:oct5-2', 'in', 'busy', 'call-oct5-2'],
        ['history', 'history:-:oct5-3', 'out', 'transferred', 'call-oct5-3'],
      ],
    );
    assert.equal(byId.get('oct5-0').durationSec, 30);
    assert.equal(byId.get('oct5-0').from, '+4921155550100');

    const again = await cli(['backfill', '--from', '2026-10-05', '--to', '2026-10-06', '--page-size', '10']);
    assert.equal(again.code, 0, again.err);
    assert.match(again.out, /25 entries read, 0 accepted, 0 updates, 25 duplicates/);
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(hook.records.size, 25);
    for (const rec of hook.records.values()) assert.equal(rec.deliveries, 1);
    for (const ids of hook.byCall.values()) assert.equal(ids.size, 1);
  });

  test('an interrupted backfill continues where it stopped', async () => {
    const config = loadConfig(env);
    const client = createTelephonyClient(config.telephony!);
    let reads = 0;
    // The process dies (here: the history read throws) after two pages were accepted.
    const interrupted = {
      readHistory: async (query: Parameters<typeof client.readHistory>[0]) => {
        if (++reads === 3) throw new Error('interrupted');
        return client.readHistory(query);
      },
    };
    const io: CliIo = { env, out: () => undefined, err: () => undefined };
    const options = { from: '2026-10-06T00:00:00.000Z', to: '2026-10-07T00:00:00.000Z', dryRun: false, pageSize: 10 };
    const conn = new Redis(REDIS_URL);
    try {
      await assert.rejects(
        backfill(config, conn, options, io, { isTTY: false, write: () => undefined }, interrupted),
        /interrupted/,
      );
      assert.equal(await conn.hget(backfillCursorKey(cs.prefix, options), 'offset'), '20');
      // Kept as long as the markers of the calls it queued, not for ever.
      const ttl = await conn.ttl(backfillCursorKey(cs.prefix, options));
      assert.ok(ttl > BACKFILL_CURSOR_TTL_S - 60 && ttl <= BACKFILL_CURSOR_TTL_S, `cursor TTL ${ttl} s`);
    } finally {
      conn.disconnect();
    }
    const before = api.requests.length;
    const r = await cli(['backfill', '--from', '2026-10-06', '--to', '2026-10-07', '--page-size', '10']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /resuming the backfill of 2026-10-06T00:00:00.000Z \.\. 2026-10-07T00:00:00.000Z at entry 20/);
    assert.match(r.out, /backfill done: 3 entries read, 3 accepted, 0 updates, 0 duplicates/);
    assert.deepEqual(
      api.requests
        .slice(before)
        .filter((q) => q.path === '/v2/history')
        .map((q) => q.query.offset),
      ['20'],
    );
    // Done: the cursor is gone; every one of the 23 calls arrived once.
    assert.equal(await redis.exists(backfillCursorKey(cs.prefix, options)), 0);
    await waitFor(() => [...hook.records.values()].filter((x) => x.callId.startsWith('call-oct6-')).length >= 23, {
      what: '23 webhooks',
      timeoutMs: 60_000,
    });
    assert.equal([...hook.records.values()].filter((x) => x.callId.startsWith('call-oct6-')).length, 23);
  });

  test('the platform failing mid-backfill: exit 1, saying how far it got and that the same command continues there', async () => {
    const out: string[] = [];
    const err: string[] = [];
    let pages = 0;
    const io: CliIo = {
      env,
      out: (l) => out.push(l),
      err: (l) => err.push(l),
      // After the first page, the platform refuses the rest.
      progress: { isTTY: false, write: () => void (++pages === 1 && api.inject({ on: 'history', status: 403 })) },
    };
    const argv = ['backfill', '--from', '2026-10-05T00:00:00Z', '--to', '2026-10-05T12:00:00Z', '--page-size', '10'];
    const code = await runCli(argv, io);
    assert.equal(code, 1);
    assert.match(
      err.join('\n'),
      /^callsync backfill: Telephony API GET \/history answered 403: .*; 10 entries of the range were read and kept: run the same command again to continue at entry 10$/,
    );
    const again = await cli(argv);
    assert.equal(again.code, 0, again.err);
    assert.match(again.out, /at entry 10/);
    assert.match(again.out, /backfill done: 15 entries read/);
  });

  test('backfill --sink queues to that sink only, skipping the routes; again adds nothing', async () => {
    const r = await cli(['backfill', '--from', '2026-10-09', '--to', '2026-10-10', '--sink', 'late']);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /7 entries read, 7 queued to sink late/);
    await waitFor(() => late.records.size >= 7, { what: '7 webhooks to late', timeoutMs: 60_000 });
    const again = await cli(['backfill', '--from', '2026-10-09', '--to', '2026-10-10', '--sink', 'late']);
    assert.match(again.out, /7 entries read, 0 queued to sink late, 0 updates, 7 duplicates/);
    await new Promise((res) => setTimeout(res, 500));
    assert.equal(late.records.size, 7);
    // Not through the inbound log: the routed sinks never saw these calls.
    assert.equal([...hook.records.values()].filter((x) => x.callId.startsWith('call-oct9-')).length, 0);
    assert.deepEqual(await s3.list('transcripts/2026/10/09/'), []);
    const unknown = await cli(['backfill', '--from', '2026-10-09', '--to', '2026-10-10', '--sink', 'nope']);
    assert.equal(unknown.code, 2);
    assert.match(unknown.err, /no sink "nope"/);
  });

  test('replay queues the archived calls of a range to one sink, old-layout names too; a second replay adds nothing', async () => {
    // An AI-agent call archived the same day, and a record of the older layout (`<callId>.json`).
    const posted = await postJson(
      `${cs.url}/webhooks/ai-agent/agent-7`,
      webhookPayload(
        'ai-oct5',
        (p) => (
          (p.call.startTime = Date.parse('2026-10-05T12:00:00Z')),
          (p.call.endTime = Date.parse('2026-10-05T12:01:00Z'))
        ),
      ),
    );
    assert.equal(posted.status, 202);
    await waitFor(
      async () =>
        (await s3.list('transcripts/2026/10/05/')).filter((k) => k.endsWith('.json') && !k.endsWith('.vcon.json'))
          .length >= 26,
      { what: 'the AI call archived', timeoutMs: 60_000 },
    );
    const old = {
      schema: 'callsync.archive.v1',
      call: {
        source: 'ai-agent',
        callId: 'old-1',
        agentId: 'agent-7',
        startedAt: '2026-10-05T13:00:00.000Z',
        direction: 'in',
        from: null,
        to: null,
        fromRaw: null,
        toRaw: null,
        endedAt: null,
        durationSec: null,
        outcome: 'answered',
        users: [],
        summary: null,
        scenarios: [],
        transcript: null,
        recordings: [],
        channelId: null,
        eventId: null,
        owner: null,
        forwarding: null,
        channel: null,
        payloadVersion: 'v1',
        receivedAt: '2026-10-05T13:00:00.000Z',
      },
      original: {},
    };
    await s3.client.send(
      new PutObjectCommand({ Bucket: s3.bucket, Key: 'transcripts/2026/10/05/old-1.json', Body: JSON.stringify(old) }),
    );
    await s3.client.send(
      new PutObjectCommand({ Bucket: s3.bucket, Key: 'transcripts/2026/10/05/garbage.json', Body: '{"not":"a call"}' }),
    );
    const lateBefore = late.records.size;

    const agentOnly = await cli([
      'replay',
      '--from',
      '2026-10-05',
      '--to',
      '2026-10-05',
      '--sink',
      'late',
      '--agent',
      'agent-7',
      '--dry-run',
    ]);
    assert.equal(agentOnly.code, 0, agentOnly.err);
    assert.match(
      agentOnly.out,
      /dry run: 2 archived calls of 2026-10-05 \.\. 2026-10-05 in s3:\/\/callsync-test would be queued to sink late, 25 of other agents left out, 1 unreadable; nothing queued/,
    );

    const r = await cli(['replay', '--from', '2026-10-04', '--to', '2026-10-06', '--sink', 'late']);
    assert.equal(r.code, 0, r.err);
    // 25 + 1 + 1 of Oct 5, 23 of Oct 6 (Oct 9 went to `late` only, never archived).
    assert.match(
      r.out,
      /replay done: 51 records read from s3:\/\/callsync-test, 50 queued to sink late, 0 replayed before, 1 unreadable/,
    );
    assert.match(r.err, /skipped transcripts\/2026\/10\/05\/garbage.json: not an archived call record/);
    await waitFor(() => late.records.size >= lateBefore + 50, { what: '50 replayed webhooks', timeoutMs: 90_000 });
    assert.ok(late.byCall.has('old-1'));
    assert.ok(late.byCall.has('ai-oct5'));
    // The sink's rate limit held (10 a second): the jobs went through its queue and worker, so no 21
    // deliveries fall within one second (without the limiter all 50 arrive within a fraction of one).
    const times = [...late.records.values()]
      .map((x) => x.firstAt)
      .sort((a, b) => a - b)
      .slice(lateBefore);
    for (let i = 0; i + 20 < times.length; i++)
      assert.ok(
        times[i + 20]! - times[i]! >= 900,
        `deliveries ${i}..${i + 20} within ${times[i + 20]! - times[i]!} ms`,
      );

    const again = await cli(['replay', '--from', '2026-10-04', '--to', '2026-10-06', '--sink', 'late']);
    assert.match(again.out, /0 queued to sink late, 50 replayed before/);
    await new Promise((res) => setTimeout(res, 1000));
    assert.equal(late.records.size, lateBefore + 50);
    for (const ids of late.byCall.values()) assert.equal(ids.size, 1);
    const queue = new Queue(sinkQueueName('late'), { connection: redis, prefix: cs.prefix });
    try {
      assert.equal((await queue.getJobCounts('completed')).completed, 7 + 50);
    } finally {
      await queue.close();
    }
  });

  test('replay skips a record deleted after it was listed (retention, forget) and queues the rest', async () => {
    const record = (callId: string) =>
      JSON.stringify({
        schema: 'callsync.archive.v1',
        call: {
          source: 'ai-agent',
          callId,
          agentId: 'agent-gone',
          startedAt: '2026-10-12T09:00:00.000Z',
          direction: 'in',
          outcome: 'answered',
          receivedAt: '2026-10-12T09:00:00.000Z',
        },
        original: {},
      });
    for (const id of ['gone-1', 'kept-1'])
      await s3.client.send(
        new PutObjectCommand({ Bucket: s3.bucket, Key: `transcripts/2026/10/12/${id}.json`, Body: record(id) }),
      );
    const config = loadConfig(env);
    const store = await createObjectStore(config.sinks.archive!.options as ArchiveOptions);
    const listAll = store.list.bind(store);
    // The retention sweep deletes one record between replay's listing and its reading.
    store.list = async function* (prefix: string) {
      const keys: string[] = [];
      for await (const key of listAll(prefix)) keys.push(key);
      if (keys.length > 0)
        await s3.client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: 'transcripts/2026/10/12/gone-1.json' }));
      yield* keys;
    };
    const out: string[] = [];
    const err: string[] = [];
    const io: CliIo = { env, out: (l) => out.push(l), err: (l) => err.push(l) };
    const conn = new Redis(REDIS_URL);
    try {
      const options = { from: '2026-10-12', to: '2026-10-12', sink: 'late', dryRun: false };
      assert.equal(await replay(config, conn, options, io, { isTTY: false, write: () => undefined }, store), 0);
    } finally {
      conn.disconnect();
    }
    assert.match(
      out.join('\n'),
      /replay done: 2 records read from s3:\/\/callsync-test, 1 queued to sink late, 0 replayed before, 1 gone/,
    );
    assert.match(err.join('\n'), /skipped transcripts\/2026\/10\/12\/gone-1\.json: gone since it was listed/);
    await waitFor(() => late.byCall.has('kept-1'), { what: 'kept-1 replayed', timeoutMs: 30_000 });
  });

  test('backfill and replay refuse a notification sink without maxAge: it would message the callers of old calls', async () => {
    const configPath = join(dir, 'notify.yaml');
    await writeFile(
      configPath,
      `
sinks:
${S3_ARCHIVE_SINK_YAML}  texts:
    type: sms
    smsId: s0
    message: "Sorry we missed your call"
  mail: { type: email, to: team@example.com }
  recent: { type: sms, smsId: s0, message: "Sorry we missed your call", maxAge: 6h }
routes:
  - to: [archive]
`,
    );
    const notifyEnv = {
      ...env,
      CALLSYNC_CONFIG: configPath,
      SMTP_URL: 'smtp://127.0.0.1:2525',
      SMTP_FROM: 'a@example.com',
    };
    const run = async (argv: string[]) => {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(argv, { env: notifyEnv, out: (l) => out.push(l), err: (l) => err.push(l) });
      return { code, out: out.join('\n'), err: err.join('\n') };
    };
    const requests = api.requests.length;
    for (const [argv, sink] of [
      [['backfill', '--from', '2026-10-05', '--to', '2026-10-06', '--sink', 'texts', '--dry-run'], 'texts'],
      [['backfill', '--from', '2026-10-05', '--to', '2026-10-06', '--sink', 'mail'], 'mail'],
      [['replay', '--from', '2026-10-05', '--to', '2026-10-05', '--sink', 'texts'], 'texts'],
      [['replay', '--from', '2026-10-05', '--to', '2026-10-05', '--sink', 'mail', '--dry-run'], 'mail'],
    ] as const) {
      const r = await run([...argv]);
      assert.equal(r.code, 2, `${argv.join(' ')}: ${r.out}${r.err}`);
      assert.match(r.err, new RegExp(`--sink: sink "${sink}" \\((sms|email)\\) has no maxAge`));
    }
    assert.equal(api.requests.length, requests, 'the history was not read');
    // With maxAge the sink skips the old calls itself: allowed.
    const dry = await run(['backfill', '--from', '2026-10-09', '--to', '2026-10-10', '--sink', 'recent', '--dry-run']);
    assert.equal(dry.code, 0, dry.err);
  });

  test('backfill without --sink refuses when a route would send the old calls to a notification sink without maxAge', async () => {
    // The routes fan the history calls out like any other: a "missed calls get an SMS" route texted
    // the callers of every missed call of the range, weeks later.
    const write = async (name: string, routes: string) => {
      const path = join(dir, name);
      await writeFile(
        path,
        `
sinks:
${S3_ARCHIVE_SINK_YAML}  texts: { type: sms, smsId: s0, message: "Sorry we missed your call" }
  mail: { type: email, to: team@example.com }
  recent: { type: sms, smsId: s0, message: "Sorry we missed your call", maxAge: 6h }
routes:
  - to: [archive]
${routes}`,
      );
      return path;
    };
    const run = async (configPath: string, extra: string[] = []) => {
      const out: string[] = [];
      const err: string[] = [];
      const argv = ['backfill', '--from', '2026-10-09', '--to', '2026-10-10', '--dry-run', ...extra];
      const code = await runCli(argv, {
        env: { ...env, CALLSYNC_CONFIG: configPath, SMTP_URL: 'smtp://127.0.0.1:2525', SMTP_FROM: 'a@example.com' },
        out: (l) => out.push(l),
        err: (l) => err.push(l),
      });
      return { code, err: err.join('\n') };
    };
    const requests = api.requests.length;
    const missed = await run(
      await write(
        'routes-missed.yaml',
        '  - name: missed calls\n    when: { outcome: missed }\n    to: [texts, recent]\n',
      ),
    );
    assert.equal(missed.code, 2, missed.err);
    assert.match(
      missed.err,
      /route "missed calls" sends the history's calls to sink "texts" \(sms\), which has no maxAge/,
    );
    assert.doesNotMatch(missed.err, /"recent"/, 'a sink with maxAge skips old calls itself');
    const any = await run(await write('routes-any.yaml', '  - to: mail\n'));
    assert.equal(any.code, 2, any.err);
    assert.match(any.err, /route 2 sends the history's calls to sink "mail" \(email\)/);
    assert.equal(api.requests.length, requests, 'the history was not read');
    // Routes that cannot take a history call: other sources only, or calls with a summary (a
    // history entry has none). And --sink skips the routes.
    for (const routes of [
      '  - when: { source: [ai-agent, channel, push], outcome: missed }\n    to: texts\n',
      '  - when: { hasSummary: true }\n    to: [mail, texts]\n',
    ]) {
      const r = await run(await write('routes-ok.yaml', routes));
      assert.equal(r.code, 0, `${routes}: ${r.err}`);
    }
    const direct = await run(await write('routes-direct.yaml', '  - to: texts\n'), ['--sink', 'archive']);
    assert.equal(direct.code, 0, direct.err);
  });

  test('a vCon posted to the AI-agent route is accepted as a call and archived with its .vcon.json beside it', async () => {
    const vcon = {
      uuid: '019f15a6-a752-826f-b9a2-279e0d16bc46',
      created_at: '2026-10-07T09:05:00Z',
      parties: [
        { tel: '+4921155550100', name: 'Alice' },
        { tel: '+4915112345678', name: 'Bob' },
      ],
      dialog: [
        {
          type: 'text',
          start: '2026-10-07T09:00:00Z',
          duration: 3,
          parties: [0, 1],
          originator: 0,
          mediatype: 'text/plain',
          encoding: 'none',
          body: 'I need an appointment.',
        },
        {
          type: 'text',
          start: '2026-10-07T09:00:04Z',
          duration: 2,
          parties: [0, 1],
          originator: 1,
          mediatype: 'text/plain',
          encoding: 'none',
          body: 'Tuesday at ten?',
        },
      ],
      analysis: [
        { type: 'summary', dialog: [0, 1], vendor: 'acme', encoding: 'none', body: 'Appointment on Tuesday.' },
        { type: 'topics', dialog: [0, 1], vendor: 'acme', encoding: 'json', body: ['appointment'] },
      ],
      attachments: [],
    };
    const posted = await postJson(`${cs.url}/webhooks/ai-agent/agent-v`, vcon);
    assert.equal(posted.status, 202, JSON.stringify(posted.body));
    const keys = await waitFor(
      async () => {
        const k = (await s3.list('transcripts/2026/10/07/')).filter((x) =>
          x.startsWith('transcripts/2026/10/07/019f15a6'),
        );
        return k.length >= 3 ? k : null;
      },
      { what: 'the vCon call archived', timeoutMs: 60_000 },
    );
    assert.deepEqual(keys.map((k) => k.replace(/^.*-[0-9a-f]{16}/, '')).sort(), ['.json', '.txt', '.vcon.json']);
    const record = JSON.parse((await s3.get(keys.find((k) => k.endsWith('.json') && !k.endsWith('.vcon.json'))!)).body);
    assert.equal(record.call.callId, vcon.uuid);
    assert.equal(record.call.agentId, 'agent-v');
    assert.deepEqual(
      record.call.transcript.chunks.map((c: { speaker: string; content: string }) => [c.speaker, c.content]),
      [
        ['caller', 'I need an appointment.'],
        ['callee', 'Tuesday at ten?'],
      ],
    );
    assert.equal(record.call.summary.content, 'Appointment on Tuesday.');
    const written = JSON.parse((await s3.get(keys.find((k) => k.endsWith('.vcon.json'))!)).body);
    assert.equal(written.uuid, vcon.uuid);
    assert.deepEqual(
      written.dialog.map((d: { body: string }) => d.body),
      ['I need an appointment.', 'Tuesday at ten?'],
    );
    assert.deepEqual(written.analysis.find((a: { type: string }) => a.type === 'topics').body, ['appointment']);
    // Only the uuid refuses a vCon: a 400 with the spec's error body, never a 5xx. A dialog without
    // a start is read as absent: the call is taken.
    const bad = await postJson(`${cs.url}/webhooks/ai-agent/agent-v`, {
      uuid: ' ',
      parties: [],
      dialog: [{ type: 'text' }],
    });
    assert.equal(bad.status, 400);
    assert.match(JSON.stringify(bad.body), /"pointer":"\/uuid"/);
    const odd = await postJson(`${cs.url}/webhooks/ai-agent/agent-v`, {
      uuid: 'x-odd',
      parties: [],
      dialog: [{ type: 'text' }],
    });
    assert.equal(odd.status, 202, JSON.stringify(odd.body));
  });

  test('the S3 store lists every key across ListObjectsV2 pages (continuation tokens)', async () => {
    const script = new URL('./support/s3-list-process.ts', import.meta.url).pathname;
    const { stdout } = await run(process.execPath, ['--openssl-legacy-provider', '--import', 'tsx', script], {
      timeout: 60_000,
    });
    const { pages, keys, expected } = JSON.parse(stdout) as { pages: number; keys: string[]; expected: string[] };
    assert.deepEqual(keys, expected);
    assert.equal(pages, 3);
  });
});
