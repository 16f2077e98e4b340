// ACK_REPLICAS: a 202 only once N replicas have the call (one WAIT per appended batch). A private
// master with one replica on loopback; the replica is paused (SIGSTOP) to stop it confirming.
import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inboundSeenPrefix } from '../queues/inbound.js';
import { callHash } from '../src/model/call.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { nodeCommand, startReplicatedRedis } from './support/redis-cluster.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

type Replicated = Awaited<ReturnType<typeof startReplicatedRedis>>;

const post = (cs: TestCallsync, callId: string) =>
  postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(callId));

async function archived(dir: string): Promise<number> {
  const files = (await readdir(join(dir, 'transcripts'), { recursive: true }).catch(() => [])).map(String);
  return archivedRecords(files).length;
}

describe('ACK_REPLICAS on a master with one replica', () => {
  let redis: Replicated;
  let dir: string;
  const running: TestCallsync[] = [];
  const start = async (env: Record<string, string>) => {
    const cs = await startTestCallsync({ REDIS_URL: redis.url, ARCHIVE_DIR: dir, SPOOL_ENABLED: 'false', ...env });
    running.push(cs);
    return cs;
  };
  const onReplica = async (prefix: string, callId: string) =>
    nodeCommand(redis.replica.port, ['GET', `${inboundSeenPrefix(prefix)}${callHash(`ai-agent:agent-1:${callId}`)}`]);

  before(async () => {
    redis = await startReplicatedRedis();
    dir = await mkdtemp(join(tmpdir(), 'ack-replicas-'));
  });
  afterEach(async () => {
    redis.replica.resume();
    for (const cs of running.splice(0)) await cs.stop();
  });
  after(async () => {
    await redis?.destroy();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  test('ACK_REPLICAS=1: every 202 is on the replica when it is sent', async () => {
    const prefix = uniquePrefix('ack');
    const cs = await start({ ACK_REPLICAS: '1', QUEUE_PREFIX: prefix });
    const results = await Promise.all(['a1', 'a2', 'a3', 'a4', 'a5'].map((id) => post(cs, id)));
    assert.deepEqual(
      results.map((r) => r.status),
      [202, 202, 202, 202, 202],
    );
    for (const id of ['a1', 'a2', 'a3', 'a4', 'a5']) assert.ok(await onReplica(prefix, id), `${id} is on the replica`);
  });

  test('ACK_REPLICAS=1 and the replica not confirming: 503, never 202; the redelivery after it is back: 202, archived once', async () => {
    const prefix = uniquePrefix('ack');
    const before = await archived(dir);
    const cs = await start({ ACK_REPLICAS: '1', ACK_REPLICAS_TIMEOUT_MS: '300', QUEUE_PREFIX: prefix });
    redis.replica.pause();
    const refused = await post(cs, 'stalled-1');
    assert.equal(refused.status, 503, `not acknowledged on one copy: ${JSON.stringify(refused.body)}`);
    // Asked again while the replica still hangs: the call is a duplicate on the master now, and still not acknowledged.
    assert.equal((await post(cs, 'stalled-1')).status, 503, 'a duplicate is not acknowledged on one copy either');
    redis.replica.resume();
    const again = await waitFor(
      async () => {
        const r = await post(cs, 'stalled-1');
        return r.status === 202 ? r : null;
      },
      { what: '202 once the replica confirms', timeoutMs: 15_000, intervalMs: 200 },
    );
    assert.equal(again.body.duplicate, true, 'the master had it already');
    assert.ok(await onReplica(prefix, 'stalled-1'), 'and the replica has it now');
    await waitFor(async () => (await archived(dir)) === before + 1, { what: 'archived', timeoutMs: 20_000 });
  });

  test('a duplicate stored by another connection is answered 202 only once the replica has it', async () => {
    const prefix = uniquePrefix('ack');
    // Two ingress processes on one Redis: the first stores the call (and is refused 503 for want
    // of a replica); the second, whose connection wrote nothing yet, sees a duplicate.
    const first = await start({
      ACK_REPLICAS: '1',
      ACK_REPLICAS_TIMEOUT_MS: '300',
      QUEUE_PREFIX: prefix,
      CALLSYNC_ROLE: 'ingress',
    });
    const second = await start({
      ACK_REPLICAS: '1',
      ACK_REPLICAS_TIMEOUT_MS: '300',
      QUEUE_PREFIX: prefix,
      CALLSYNC_ROLE: 'ingress',
    });
    redis.replica.pause();
    assert.equal((await post(first, 'two-ingress')).status, 503);
    const dup = await post(second, 'two-ingress');
    assert.equal(
      dup.status,
      503,
      `the duplicate is not acknowledged while the replica lacks the first delivery: ${JSON.stringify(dup.body)}`,
    );
  });

  test('ACK_REPLICAS=0 (default): acknowledged without waiting for the replica, as before', async () => {
    const prefix = uniquePrefix('ack');
    const cs = await start({ QUEUE_PREFIX: prefix });
    redis.replica.pause();
    assert.equal((await post(cs, 'no-wait')).status, 202);
  });

  test('ACK_REPLICAS=2 with one replica: 503, or the spool when it is on (202 from local disk)', async () => {
    const prefix = uniquePrefix('ack');
    const cs = await start({ ACK_REPLICAS: '2', ACK_REPLICAS_TIMEOUT_MS: '200', QUEUE_PREFIX: prefix });
    assert.equal((await post(cs, 'two-wanted')).status, 503);
    const spoolDir = await mkdtemp(join(tmpdir(), 'ack-spool-'));
    try {
      const spooling = await start({
        ACK_REPLICAS: '2',
        ACK_REPLICAS_TIMEOUT_MS: '200',
        QUEUE_PREFIX: uniquePrefix('ack'),
        SPOOL_ENABLED: 'true',
        SPOOL_DIR: spoolDir,
      });
      const res = await post(spooling, 'spooled');
      assert.equal(res.status, 202);
      assert.equal(res.body.spooled, true, `acknowledged from the spool: ${JSON.stringify(res.body)}`);
    } finally {
      for (const cs2 of running.splice(1)) await cs2.stop();
      await rm(spoolDir, { recursive: true, force: true });
    }
  });
});
