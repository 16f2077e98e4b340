// A call's `received` and `fanned-out` entries reach its timeline when Redis is unavailable for a moment as it is
// written (issue 24): the ingress stores the call, Redis stops before the entry is written, and the
// call — delivered later like every acknowledged one — would have no receipt (the chaos run's Redis
// restart found three). The entry is sent again until Redis is back (queues/timeline.ts). A private
// redis-server, the producer connection the ingress writes with.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createRedis } from '../queues/connection.js';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline, timelineId } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { sampleCall } from './support/calls.js';
import { startPrivateRedis } from './support/redis-server.js';
import { waitFor } from './support/redis.js';

test('a receipt written while Redis is stopped is in the timeline once Redis is back', async () => {
  const server = await startPrivateRedis({ appendfsync: 'always' });
  const settings = loadConfig({ REDIS_URL: server.url, QUEUE_PREFIX: 'tlreceived' }).redis;
  const conn = createRedis(settings, 'producer');
  conn.on('error', () => undefined);
  try {
    const timeline = new CallTimeline(conn, redisKeys(settings), { ttlDays: 1, privacySecret: 'test-key' });
    const call = sampleCall('received-outage');
    if (conn.status !== 'ready') await new Promise((r) => conn.once('ready', r));
    await server.stop();
    const written = timeline.received(call, { jobId: 'ack-1', revision: 'new' });
    await new Promise((r) => setTimeout(r, 500));
    await server.start();
    await written;
    if (conn.status !== 'ready') await new Promise((r) => conn.once('ready', r));
    const entries = await timeline.read(timelineId(call));
    assert.deepEqual(
      entries.map((e) => [e.event, e.jobId]),
      [['received', 'ack-1']],
    );
    assert.deepEqual(await timeline.byCallId(call.callId), [timelineId(call)], 'the lookups too');
  } finally {
    conn.disconnect();
    await server.destroy();
  }
});

test('fan-out entries written while Redis is stopped (one call, and a batch) are in the timelines once Redis is back', async () => {
  const server = await startPrivateRedis({ appendfsync: 'always' });
  const settings = loadConfig({ REDIS_URL: server.url, QUEUE_PREFIX: 'tlfanned' }).redis;
  // The fan-out writes over the worker connection, which holds commands while Redis is away; on a
  // cluster whose master fails over it gives up after its redirections. A connection that gives up
  // at once (the producer's) stands for that here.
  const conn = createRedis(settings, 'producer');
  conn.on('error', () => undefined);
  try {
    const timeline = new CallTimeline(conn, redisKeys(settings), { ttlDays: 1, privacySecret: 'test-key' });
    const calls = ['fanned-1', 'fanned-2', 'fanned-3'].map((id) => sampleCall(id));
    const info = (call: (typeof calls)[number]) => ({
      call,
      jobId: `${timelineId(call)}-a`,
      routes: ['#0'],
      sinks: ['archive'],
    });
    if (conn.status !== 'ready') await new Promise((r) => conn.once('ready', r));
    await server.stop();
    // The fan-out waits for the first try only; the entries are sent again in the background.
    await Promise.all([timeline.fannedOutMany([info(calls[0]!)]), timeline.fannedOutMany(calls.slice(1).map(info))]);
    await server.start();
    if (conn.status !== 'ready') await new Promise((r) => conn.once('ready', r));
    for (const call of calls) {
      await waitFor(async () => (await timeline.read(timelineId(call))).length > 0, {
        timeoutMs: 15_000,
        what: `the fanned-out entry of ${call.callId}`,
      });
      assert.deepEqual(
        (await timeline.read(timelineId(call))).map((e) => [e.event, e.sinks]),
        [['fanned-out', ['archive']]],
        call.callId,
      );
    }
  } finally {
    conn.disconnect();
    await server.destroy();
  }
});
