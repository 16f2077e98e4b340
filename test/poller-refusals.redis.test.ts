// A channel event the poller dead-letters (a `direction` the spec does not have) whose call id
// (`call.callSid`) can be read is kept as a refusal under that call id, as a refused webhook is:
// `callsync call <callSid>`, GET /api/calls/<callSid> and `callsync refused` say why the call is
// missing and where its dead letter is (`poll-dead-letters`, the job id `callsync dlq` takes) —
// without a phone number. An event without a readable call id is kept under none (`callsync refused`
// lists it), and a refusal store that fails never fails the dead letter. Against the loopback fake API and real Redis.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Queue } from 'bullmq';
import { POLL_DEAD_LETTER_QUEUE, type PollDeadLetterJob } from '../queues/index.js';
import { InboundLog } from '../queues/inbound.js';
import { redisKeys } from '../queues/keys.js';
import type { Refusal } from '../queues/timeline.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { createTelephonyClient } from '../src/telephony/client.js';
import { startPoller } from '../workers/poller.js';
import { memoryLog } from './support/callsync.js';
import { cli } from './support/cli.js';
import { FakeTelephony, channelEvent } from './support/fake-telephony.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { pollerRunner } from './support/poller.js';
import { testRedis, waitFor } from './support/redis.js';

const TOKEN = 'poller-refusals-admin-token-5c1e';

describe('a dead-lettered channel event is kept as a refusal under its call id', () => {
  let api: FakeTelephony;
  let cs: OpsCallsync;
  let dir: string;
  let env: Record<string, string>;
  let deadLetters: Queue<PollDeadLetterJob>;

  before(async () => {
    api = await FakeTelephony.start();
    dir = await mkdtemp(join(tmpdir(), 'callsync-poller-refusals-'));
    api.addEvents('ch-ref', [
      // Its call id is readable; its direction is not one the spec has: dead-lettered.
      channelEvent({ eventId: 'ev-1', channelId: 'ch-ref', call: { callSid: 'chan-ref-1', direction: 'SIDEWAYS' } }),
      // No call id at all: dead-lettered, kept under no call id.
      channelEvent({ eventId: 'ev-2', channelId: 'ch-ref', call: { callSid: undefined } }),
    ]);
    env = {
      ARCHIVE_DIR: dir,
      ADMIN_TOKEN: TOKEN,
      TELEPHONY_API_URL: api.url,
      TELEPHONY_TOKEN_ID: 'token-id',
      TELEPHONY_TOKEN: 'token-secret',
      POLL_CHANNEL_IDS: 'ch-ref',
      POLL_INTERVAL_MS: '200',
    };
    cs = await startOpsCallsync(env);
    env.QUEUE_PREFIX = cs.prefix;
    deadLetters = new Queue(POLL_DEAD_LETTER_QUEUE, {
      connection: cs.callsync.redis.producer,
      prefix: redisKeys(cs.callsync.config.redis).queuePrefix(POLL_DEAD_LETTER_QUEUE),
    });
  });
  after(async () => {
    await deadLetters?.close();
    await cs?.stop();
    await api?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('callsync call, the JSON API and callsync refused say why and where its dead letter is', async () => {
    const failed = await waitFor(
      async () => {
        const jobs = await deadLetters.getFailed();
        return jobs.length === 2 ? jobs : null;
      },
      { what: 'the dead letters of ev-1 and ev-2', timeoutMs: 20_000 },
    );
    const job = failed.find((j) => j.data.reason.startsWith('ChannelEvent ev-1:'));
    assert.ok(job?.id, failed.map((j) => j.failedReason).join('\n'));
    const status = `dead letter in poll-dead-letters, id ${job.id}`;

    const shown = await waitFor(
      async () => {
        const r = await cli(['call', 'chan-ref-1'], env);
        return /was refused/.test(r.out) ? r : null;
      },
      { what: 'the refusal of chan-ref-1 kept' },
    );
    assert.equal(shown.code, 1);
    const lines = shown.out.split('\n');
    assert.equal(lines[0], 'call "chan-ref-1" was refused, never stored (1 refusal(s), newest first):');
    assert.match(lines[1]!, /^time\s+source\s+status\s+pointer\s+detail\s+request$/);
    assert.match(
      lines[2]!,
      new RegExp(
        `^\\S+Z\\s+channel\\s+${status}\\s+/call/direction\\s+channel ch-ref: ChannelEvent ev-1: call\\.direction: `,
      ),
    );

    const json = await cli(['call', 'chan-ref-1', '--json'], env);
    const body = JSON.parse(json.out) as { calls: unknown[]; refused: Refusal[] };
    assert.deepEqual(body.calls, []);
    assert.equal(body.refused.length, 1);
    const refusal = body.refused[0]!;
    assert.deepEqual(
      { ...refusal, at: 0, detail: '' },
      { at: 0, callId: 'chan-ref-1', source: 'channel', status, pointer: '/call/direction', detail: '' },
    );
    assert.match(refusal.detail, /^channel ch-ref: ChannelEvent ev-1: call\.direction: /);
    // No number of the event (its from and to), no text of it.
    for (const digits of ['4921112345', '4930987654', 'SIDEWAYS', 'user-1'])
      assert.ok(!JSON.stringify(refusal).includes(digits), `${digits} in ${JSON.stringify(refusal)}`);

    // The status names a dead letter `callsync dlq` finds.
    const listed = await cli(['dlq', 'list', '--queue', POLL_DEAD_LETTER_QUEUE, '--id', job.id, '--json'], env);
    assert.equal(listed.code, 0, listed.err);
    assert.equal((JSON.parse(listed.out) as { id: string }[])[0]?.id, job.id);

    const notFound = await fetch(`${cs.url}/api/calls/chan-ref-1`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(notFound.status, 404);
    const error = (await notFound.json()) as { errors: { detail: string }[] };
    assert.match(
      error.errors[0]!.detail,
      new RegExp(
        `^no call stored for "chan-ref-1": refused 1 time\\(s\\), the last at \\S+ \\(${status} /call/direction: `,
      ),
    );

    // ev-2's call id could not be read: kept under none, listed with ev-1's.
    const range = await cli(['refused', '--since', '1h', '--json'], env);
    const kept = JSON.parse(range.out) as { refused: Refusal[]; total: number };
    assert.deepEqual(
      kept.refused.map((r) => [r.callId, r.source]).sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
      [
        ['chan-ref-1', 'channel'],
        [null, 'channel'],
      ],
    );
  });
});

it('a refusal store that throws never fails the dead letter: it is kept with its reason all the same', async () => {
  const api = await FakeTelephony.start();
  const target = await testRedis();
  const prefix = await target.prefix('poll-refusals-throws');
  const keys = target.keys(prefix);
  const producer = target.connect('producer');
  const worker = target.connect('worker');
  const logs = memoryLog('debug');
  api.addEvents('ch1', [channelEvent({ eventId: 'ev-1', channelId: 'ch1', call: { direction: 'SIDEWAYS' } })]);
  const running = startPoller({
    settings: { channelIds: ['ch1'], intervalMs: 200, pageSize: 50, maxBackoffMs: 1000, lockTtlMs: 1000 },
    client: createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, retryMinDelayMs: 20, retryMaxDelayMs: 50 }),
    acceptor: new InboundAcceptor(new InboundLog(producer, keys), { dedupeWindowMs: 3_600_000, timeoutMs: 2000 }),
    redis: producer,
    workerConnection: worker,
    prefix: keys,
    log: logs.log,
    runner: pollerRunner,
    refusals: {
      refused() {
        throw new Error('refusal store away');
      },
    },
  });
  try {
    const failed = await waitFor(
      async () => {
        const jobs = await running.deadLetterQueue.getFailed();
        return jobs.length === 1 ? jobs : null;
      },
      { what: 'the dead letter of ev-1', timeoutMs: 20_000 },
    );
    assert.match(failed[0]!.failedReason, /^channel ch1: ChannelEvent ev-1: call\.direction: /);
    assert.ok(
      logs.lines.some(
        (l) => l.msg === 'refusal of a dead-lettered channel event not kept' && l.jobId === failed[0]!.id,
      ),
    );
  } finally {
    await running.close();
    await Promise.all([producer, worker].map((r) => r.quit().catch(() => undefined)));
    await target.cleanup(prefix);
    await api.close();
  }
});
