// `callsync forget <number>` and a number spoken in a transcript: an AI agent's transcript in which
// the caller reads their number out, written by speech-to-text as digit words (English, German,
// digits among the words). Such a call, archived to S3 (s3rver), is the number's call although
// its caller is another number: forget erases it whole — its jobs and its objects (record, text,
// vCon) — and its own look afterwards finds nothing left (it would exit 1); a scan of every key under
// the prefix and every object in the bucket finds none of the spoken number's words, and a dry run
// counts nothing. A call whose transcript says another number in words stays.
// (The forms found, and the near-misses not: test/spoken-number-finder.test.ts.)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import type { RedisClient } from '../queues/connection.js';
import { callHash, callKey } from '../src/model/call.js';
import { loadConfig } from '../src/config/index.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { S3_ARCHIVE_SINK_YAML, startS3, type TestS3 } from './support/s3.js';
import { testRedis, waitFor, type TestRedis, valuesUnder } from './support/redis.js';

/** 0170 1234567, fictitious: the number to forget. No call has it as caller or callee. */
const A = '+491701234567';
/** The transcripts, each of one call: the number read out, and another number read out. */
const SPOKEN: Record<string, string> = {
  'w-en': 'my number is zero one seven zero, one two three four five six seven',
  'w-de': 'meine Nummer ist null eins sieben null, eins zwo drei vier fünf sechs sieben',
  'w-mixed': 'it is 0170 one two three four five six seven',
  // Read in pairs, as numbers (`twelve`, `vierunddreißig`), and run on into the next word.
  'w-pairs': 'oh one seven oh, twelve thirty-four fifty-six seven',
  'w-de-pairs': 'null eins sieben null, zwölf vierunddreißig sechsundfünfzig sieben',
  'w-run-on': 'zero one seven zero one two three four five six seven one moment please',
  'w-other': 'my number is zero one seven zero, one two three four five six seven eight',
  'w-other-pairs': 'oh one seven oh, twelve thirty-four fifty-six seventy',
};
const OURS = ['w-en', 'w-de', 'w-mixed', 'w-pairs', 'w-de-pairs', 'w-run-on'];

describe('forget <number> and the number spoken as words in an archived transcript', () => {
  let target: TestRedis;
  let conn: RedisClient;
  let s3: TestS3;
  let cs: TestCallsync;
  let dir: string;
  let env: Record<string, string>;
  let prefix: string;

  before(async () => {
    target = await testRedis();
    conn = target.connect();
    s3 = await startS3();
    dir = await mkdtemp(join(tmpdir(), 'forget-spoken-'));
    await writeFile(join(dir, 'callsync.yaml'), `sinks:\n${S3_ARCHIVE_SINK_YAML}routes:\n  - to: [archive]\n`);
    prefix = await target.prefix('forgetspoken');
    env = testEnv(prefix, {
      ...target.env(),
      ...s3.env,
      CALLSYNC_CONFIG: join(dir, 'callsync.yaml'),
      SPOOL_ENABLED: 'false',
      PHONE_DEFAULT_REGION: 'DE',
    });
    cs = await startTestCallsync(env);
  });
  after(async () => {
    await cs?.stop();
    await s3?.destroy();
    if (target && prefix) await target.cleanup(prefix);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Every value under the prefix and every object in the bucket, as text, with where it is. */
  async function everything(): Promise<{ where: string; text: string }[]> {
    const out: { where: string; text: string }[] = [];
    out.push(...(await valuesUnder(conn, prefix)));
    for (const key of await s3.list('')) out.push({ where: `s3:${key}`, text: (await s3.get(key)).body });
    return out;
  }
  /** Whether a text holds one of our transcripts' spoken numbers, its full stop too (w-other's goes on: `… seven eight.`). */
  const holdsOurs = (text: string) =>
    OURS.some(
      (id) => text.includes(`${SPOKEN[id]!}.`) || text.includes(JSON.stringify(`${SPOKEN[id]!}.`).slice(1, -1)),
    );

  test('every call whose transcript says the number in words goes whole, from Redis and S3; the other stays', async () => {
    for (const [id, said] of Object.entries(SPOKEN)) {
      const payload = webhookPayload(id, (p) => {
        p.assist.transcription.content = `Callee: Your number, please?\nCaller: ${said}.`;
        p.assist.transcription.chunks[0].content = `${said}.`;
      });
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    }
    const name = sinkQueueName('archive');
    const queue = new Queue(name, { connection: conn, prefix: target.keys(prefix).queuePrefix(name) });
    const jobId = (id: string) => callHash(callKey('ai-agent', 'agent-1', id));
    try {
      await waitFor(
        async () =>
          (
            await Promise.all(Object.keys(SPOKEN).map(async (id) => (await queue.getJob(jobId(id)))?.isCompleted()))
          ).every(Boolean) || null,
        { what: 'the calls archived', timeoutMs: 30_000 },
      );
      const objects = await s3.list('');
      for (const id of Object.keys(SPOKEN))
        assert.ok(
          objects.some((k) => k.includes(`/${id}-`) && k.endsWith('.vcon.json')) &&
            objects.some((k) => k.includes(`/${id}-`) && k.endsWith('.txt')),
          `${id} archived (${objects.join(', ')})`,
        );
      assert.ok(
        (await everything()).some((v) => holdsOurs(v.text)),
        'the scan sees the spoken number before forget',
      );

      // Resolves only when its own look afterwards finds nothing of the number (else ForgetIncompleteError).
      const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: false,
        crm: false,
      });
      assert.equal(receipt.calls, OURS.length, `the calls found (receipt ${JSON.stringify(receipt)})`);

      const left = (await everything()).filter((v) => holdsOurs(v.text)).map((v) => v.where);
      assert.deepEqual(left, [], `nothing of the spoken number is left (receipt ${JSON.stringify(receipt)})`);
      const after = await s3.list('');
      for (const id of OURS) {
        assert.deepEqual(
          after.filter((k) => k.includes(`/${id}-`)),
          [],
          `${id}: its record, text and vCon are gone`,
        );
        assert.equal(await queue.getJob(jobId(id)), undefined, `${id}: its job is gone`);
      }
      for (const id of ['w-other', 'w-other-pairs']) {
        assert.ok(await queue.getJob(jobId(id)), `${id}: the other number's call stays`);
        assert.ok(
          after.some((k) => k.includes(`/${id}-`) && k.endsWith('.txt')),
          `${id}: the other number's archived call stays`,
        );
      }

      const again = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(A, 'DE'),
        dryRun: true,
        crm: false,
      });
      assert.equal(again.calls, 0, `a dry run finds nothing more (${JSON.stringify(again)})`);
      assert.deepEqual(again.stores, {}, `a dry run finds nothing more (${JSON.stringify(again)})`);
    } finally {
      await queue.close();
    }
  });
});
