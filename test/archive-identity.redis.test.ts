// End to end over a real port (webhook -> Redis -> fan-out -> archive sink), into a local folder and
// into S3 (s3rver): distinct calls that share a readable name (one call id posted for two agents,
// `a/1` / `a_1` / `a 1`, a 300-character id and its 200-character prefix) end as distinct objects,
// each holding its own call; an object written under the layout before the upgrade stays untouched.
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { Queue } from 'bullmq';
import { sinkQueueName, type SinkDeliverJob } from '../queues/registry.js';
import { normalizeWebhook } from '../src/model/webhook.js';
import { archiveKeys } from '../src/sinks/archive/keys.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';

const long = `long-${'x'.repeat(295)}`;
/** [agent in the URL, call id]: every pair a distinct call. */
const posts: [string, string][] = [
  ['agent-a', 'same-id'],
  ['agent-b', 'same-id'],
  ['agent-a', 'a/1'],
  ['agent-a', 'a_1'],
  ['agent-a', 'a 1'],
  ['agent-a', long],
  ['agent-a', long.slice(0, 200)],
];

interface Backend {
  env: Record<string, string>;
  /** Every object key under `transcripts/`, with the archive prefix. */
  list(): Promise<string[]>;
  read(key: string): Promise<string>;
  /** Writes an object as an earlier version did, without callsync. */
  write(key: string, body: string): Promise<void>;
  close(): Promise<void>;
}

async function folder(): Promise<Backend> {
  const dir = await mkdtemp(join(tmpdir(), 'archive-identity-'));
  return {
    env: { ARCHIVE_DIR: dir, ARCHIVE_S3_PREFIX: 'callsync/' },
    async list() {
      const files = (await readdir(join(dir, 'callsync/transcripts'), { recursive: true }).catch(() => [])).map(String);
      return files
        .filter((f) => /\.(json|txt)$/.test(f))
        .map((f) => `callsync/transcripts/${f}`)
        .sort();
    },
    read: (key) => readFile(join(dir, key), 'utf8'),
    async write(key, body) {
      await mkdir(dirname(join(dir, key)), { recursive: true });
      await writeFile(join(dir, key), body);
    },
    close: () => rm(dir, { recursive: true, force: true }),
  };
}

async function s3(): Promise<Backend> {
  const server: TestS3 = await startS3('archive-identity');
  const { PutObjectCommand } = await import('@aws-sdk/client-s3');
  return {
    env: { ...server.env, ARCHIVE_S3_PREFIX: 'callsync/' },
    list: () => server.list('callsync/transcripts/'),
    read: async (key) => (await server.get(key)).body,
    async write(key, body) {
      await server.client.send(new PutObjectCommand({ Bucket: server.bucket, Key: key, Body: body }));
    },
    close: () => server.destroy(),
  };
}

for (const [name, open] of [
  ['a local folder', folder],
  ['S3 (s3rver)', s3],
] as const) {
  describe(`archive identity: ${name}`, () => {
    let backend: Backend;
    let cs: TestCallsync;
    let archiveQueue: Queue<SinkDeliverJob>;

    before(async () => {
      backend = await open();
      cs = await startTestCallsync(backend.env);
      archiveQueue = new Queue<SinkDeliverJob>(sinkQueueName('archive'), {
        connection: cs.redis.worker,
        prefix: cs.prefix,
      });
    });
    after(async () => {
      await archiveQueue.close();
      await cs.stop();
      await backend.close();
    });

    const completed = async () => (await archiveQueue.getJobCounts('completed')).completed ?? 0;

    test('one call id for two agents, and ids one name would merge, end as distinct objects', async () => {
      for (const [agent, callId] of posts) {
        const res = await postJson(`${cs.url}/webhooks/ai-agent/${agent}`, webhookPayload(callId));
        assert.equal(res.status, 202, `${agent}/${callId}`);
        assert.equal(res.body.duplicate, false, `${agent}/${callId} is a call of its own`);
      }
      await waitFor(async () => (await completed()) >= posts.length, {
        what: 'every archive job done',
        timeoutMs: 30_000,
      });

      const keys = await backend.list();
      const json = keys.filter((k) => k.endsWith('.json') && !k.endsWith('.vcon.json'));
      assert.equal(json.length, posts.length, `one JSON object per call:\n${keys.join('\n')}`);
      assert.equal(keys.length, posts.length * 3, 'and one text object and one vCon per call');
      const archived = await Promise.all(
        json.map(async (k) => JSON.parse(await backend.read(k)).call as { agentId: string; callId: string }),
      );
      assert.deepEqual(
        archived.map((c) => `${c.agentId} ${c.callId}`).sort(),
        posts.map(([a, c]) => `${a} ${c}`).sort(),
        'each object holds its own call',
      );
      // Each where the archive's layout says (the key the CRM links to and send-sample prints).
      for (const [agent, callId] of posts) {
        const call = normalizeWebhook(webhookPayload(callId), { agentId: agent, receivedAt: new Date() });
        const doc = JSON.parse(await backend.read(archiveKeys(call, 'callsync/').json));
        assert.deepEqual([doc.call.agentId, doc.call.callId], [agent, callId]);
      }
    });

    test('an object of the layout before the upgrade stays; the call redelivered is written under its new key', async () => {
      const oldKey = 'callsync/transcripts/2026/04/08/upgraded-1.json';
      await backend.write(oldKey, '{"schema":"callsync.archive.v1","written":"before the upgrade"}\n');
      const before = await completed();
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-a`, webhookPayload('upgraded-1'))).status, 202);
      await waitFor(async () => (await completed()) > before, { what: 'the archive job', timeoutMs: 30_000 });
      assert.equal(
        JSON.parse(await backend.read(oldKey)).written,
        'before the upgrade',
        'the old object is neither moved nor overwritten',
      );
      const call = normalizeWebhook(webhookPayload('upgraded-1'), { agentId: 'agent-a', receivedAt: new Date() });
      const fresh = archiveKeys(call, 'callsync/').json;
      assert.notEqual(fresh, oldKey);
      assert.equal(JSON.parse(await backend.read(fresh)).call.callId, 'upgraded-1');
    });
  });
}
