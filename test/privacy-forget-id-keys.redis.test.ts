// `callsync forget <call id>` deletes for its name only a key named after that call id, the id the
// whole rest of the name (src/privacy/forget.ts CALL_ID_KEYS: `push:<id>`, `push-seen:<id>`,
// `calls:id:<id>`), not every key that holds the id as a segment. A call id is any text the platform
// chose, so calls whose ids are words of callsync's own key names — `privacy-key`, `recent`, `open`,
// `rec`, `calls` — and `pbx:4711` beside a call `x:pbx:4711` are forgotten one after another: each
// time the call's keys go (those named after its id and its hash), and a scan of every key under
// the prefix before and after finds nothing else deleted (the privacy key, `calls:recent`,
// `push:open`, another call's CRM memory, the other calls' keys). Once with the keys a callsync
// writes (Push API ingress, one-slot layout), once with the spread layout's names (`{P:push}:…`,
// `{P:calls}:…`) written by the same writers (PushAssembly, CallTimeline).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { RedisClient } from '../queues/connection.js';
import { RedisKeys } from '../queues/keys.js';
import { InboundShard } from '../queues/inbound.js';
import { globEscape, scanKeys } from '../queues/scan.js';
import { CallTimeline } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { callHash, callKey } from '../src/model/call.js';
import { parseTarget } from '../src/model/number-words.js';
import { parsePushEvent } from '../src/model/push.js';
import { forget } from '../src/privacy/forget.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { RecordMemory } from '../src/sinks/crm/common.js';
import { PushAssembly } from '../src/sources/push-assembly.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { hangup, newCall } from './support/fake-push.js';
import { testRedis, waitFor } from './support/redis.js';

const DAY_MS = 24 * 3600_000;
/** Calls never forgotten: one whose id ends in `pbx:4711`, one still open (so `push:open` holds it). */
const KEPT = 'x:pbx:4711';
const STILL_OPEN = 'still-open';

const hashOf = (callId: string) => callHash(callKey('push', null, callId));

/**
 * The calls forgotten, in this order, each with the keys of something else its id is a segment of
 * (an earlier version deleted them; `…*`: the keys that begin so). Each test would fail on its own
 * there: `calls` is checked by its number index, which the others' forget left.
 */
const FORGOTTEN: { id: string; others: (keys: RedisKeys) => string[] }[] = [
  { id: 'privacy-key', others: (keys) => [keys.privacyKey()] },
  { id: 'recent', others: (keys) => [`${keys.area('calls')}:calls:recent`] },
  { id: 'open', others: (keys) => [`${keys.area('push')}:push:open`] },
  { id: 'rec', others: (keys) => [`${keys.sinkState('crm')}rec:${hashOf(KEPT)}`] },
  { id: 'pbx:4711', others: (keys) => namedAfter(keys, KEPT) },
  { id: 'calls', others: (keys) => [`${keys.area('calls')}:calls:number:*`] },
];

/** Every key under `prefix` in either layout (`P:…`, `{P:…}…`). */
async function keysUnder(conn: RedisClient, prefix: string): Promise<Set<string>> {
  return new Set([
    ...(await scanKeys(conn, `${globEscape(prefix)}:*`)),
    ...(await scanKeys(conn, `{${globEscape(prefix)}:*`)),
  ]);
}

async function deleteUnder(conn: RedisClient, prefix: string): Promise<void> {
  for (const key of await keysUnder(conn, prefix)) await conn.del(key);
}

/** The names the writers give the keys named after `callId` (the Push hash of the id `open` is `push:%open`). */
function namedAfter(keys: RedisKeys, callId: string): string[] {
  return [
    `${keys.area('push')}:push:${callId === 'open' ? '%open' : callId}`,
    `${keys.area('push')}:push-seen:${callId}`,
    `${keys.area('calls')}:calls:id:${callId}`,
  ];
}

/**
 * Forgets `id`: before, its keys named after it, a key naming its call hash and `others` are there;
 * after, its keys are gone (named after it, or naming its hash), and no other key is.
 */
async function forgetOne(
  conn: RedisClient,
  env: Record<string, string>,
  keys: RedisKeys,
  id: string,
  others: string[],
) {
  const before = await keysUnder(conn, keys.prefix);
  const hash = hashOf(id);
  const ofCall = (key: string) => namedAfter(keys, id).includes(key) || key.includes(hash);
  for (const key of [...namedAfter(keys, id), ...others])
    assert.ok(
      key.endsWith('*') ? [...before].some((k) => k.startsWith(key.slice(0, -1))) : before.has(key),
      `before forget: ${key}`,
    );
  assert.ok(
    [...before].some((k) => k.includes(hash)),
    `before forget: a key naming the call's hash`,
  );

  const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
    target: parseTarget(id, 'DE'),
    dryRun: false,
    crm: false,
  });
  const after = await keysUnder(conn, keys.prefix);
  const detail = `receipt ${JSON.stringify(receipt)}`;
  assert.equal(receipt.calls, 1, detail);
  assert.deepEqual([...after].filter(ofCall), [], `the keys named after the call id or its hash go; ${detail}`);
  // BullMQ's own short-lived keys (a queue's stalled-check mark, a lock) come and go on their own.
  const transient = (key: string) => /:(?:stalled-check|lock)$/.test(key);
  assert.deepEqual(
    [...before].filter((k) => !after.has(k) && !ofCall(k) && !transient(k)),
    [],
    `no other key is deleted; ${detail}`,
  );
}

/** What stays of the calls never forgotten. */
async function keptCallsStay(conn: RedisClient, keys: RedisKeys): Promise<void> {
  const left = await keysUnder(conn, keys.prefix);
  for (const key of [...namedAfter(keys, KEPT), `${keys.area('push')}:push:${STILL_OPEN}`])
    assert.ok(left.has(key), key);
  assert.deepEqual(await conn.zrange(`${keys.area('push')}:push:open`, 0, -1), [STILL_OPEN], 'the open call stays');
  assert.deepEqual(await conn.zrange(`${keys.area('calls')}:calls:id:${KEPT}`, 0, -1), [hashOf(KEPT)]);
  assert.deepEqual(await conn.zrange(`${keys.area('calls')}:calls:recent`, 0, -1), [hashOf(KEPT)]);
}

/** A callsync configuration whose one sink is an archive folder in `dir`, QUEUE_PREFIX `prefix`. */
async function archiveEnv(dir: string, prefix: string, more: Record<string, string>): Promise<Record<string, string>> {
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    `sinks:\n  local:\n    type: archive\n    dir: ${join(dir, 'archive')}\nroutes:\n  - to: [local]\n`,
  );
  return testEnv(prefix, { CALLSYNC_CONFIG: configPath, SPOOL_ENABLED: 'false', ...more });
}

describe('forget <call id> whose id is a word of the key names: Push API calls through the ingress', () => {
  let cs: TestCallsync | undefined;
  let conn: RedisClient;
  let dir: string;
  let env: Record<string, string>;
  let keys: RedisKeys;
  before(async () => {
    const target = await testRedis();
    dir = await mkdtemp(join(tmpdir(), 'forgetidkeys-'));
    const prefix = await target.prefix('forgetidkeys');
    keys = target.keys(prefix);
    env = await archiveEnv(dir, prefix, { ...target.env(), PUSH_API_VERIFY: 'false' });
    cs = await startTestCallsync(env);
    conn = target.connect();

    const push = async (body: string) => {
      const res = await fetch(`${cs!.url}/webhooks/push`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body,
      });
      assert.equal(res.status, 200, await res.text());
    };
    const ids = [...FORGOTTEN.map((f) => f.id), KEPT];
    for (const id of ids) {
      await push(newCall(id));
      await push(hangup(id));
    }
    await push(newCall(STILL_OPEN));
    // Another call's CRM record memory (`state:<sink>:rec:<call hash>`), as a CRM sink keeps it.
    await new RecordMemory(new RedisKeyValueStore(conn, keys.sinkState('crm'))).set(callKey('push', null, KEPT), {
      id: '901',
    });
    const archive = new RedisKeyValueStore(conn, keys.sinkState('local'));
    await waitFor(
      async () =>
        (await Promise.all(ids.map((id) => archive.get(`day:${hashOf(id)}`)))).every((d) => d !== null) || null,
      { what: 'every call archived', timeoutMs: 30_000 },
    );
    // The callsync stops (no job or marker of its own comes and goes meanwhile), its keys kept; two
    // days later its delivered jobs are swept: the call's keys are those named after it and its hash.
    await cs.close();
    await sweepRetention(loadConfig(env), conn, pino({ level: 'silent' }), Date.now() + 2 * DAY_MS);
  });
  after(async () => {
    if (conn) await deleteUnder(conn, keys.prefix);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const { id, others } of FORGOTTEN)
    test(`forget ${id}: its call's keys go, nothing else`, () => forgetOne(conn, env, keys, id, others(keys)));

  test('the calls never forgotten keep their keys', () => keptCallsStay(conn, keys));
});

describe("forget <call id> whose id is a word of the key names: the spread layout's names", () => {
  let conn: RedisClient;
  let dir: string;
  let env: Record<string, string>;
  let keys: RedisKeys;
  before(async () => {
    const target = await testRedis();
    dir = await mkdtemp(join(tmpdir(), 'forgetidkeys-spread-'));
    const prefix = await target.prefix('forgetidkeysspread');
    keys = new RedisKeys(prefix, 'spread', 1);
    env = await archiveEnv(dir, prefix, target.env());
    conn = target.connect();

    const assembly = new PushAssembly(conn, { prefix: keys.area('push'), timeoutMs: 3600_000 });
    const timeline = new CallTimeline(conn, keys, { ttlDays: 30 });
    // Each call waits in the inbound log (no fan-out here): forget finds it there, by its call id.
    const log = new InboundShard(conn, keys.inboundShard(0));
    for (const id of [...FORGOTTEN.map((f) => f.id), KEPT]) {
      await assembly.recordEvent(parsePushEvent(newCall(id)));
      const { call } = await assembly.recordEvent(parsePushEvent(hangup(id)));
      assert.ok(call, `${id} closed`);
      await timeline.received(call, { jobId: hashOf(id), revision: 'new' });
      await log.append([{ dedupeId: hashOf(id), id: `${hashOf(id)}-t1`, call: JSON.stringify(call) }], DAY_MS);
    }
    await assembly.recordEvent(parsePushEvent(newCall(STILL_OPEN)));
    await new RecordMemory(new RedisKeyValueStore(conn, keys.sinkState('crm'))).set(callKey('push', null, KEPT), {
      id: '901',
    });
  });
  after(async () => {
    if (conn) await deleteUnder(conn, keys.prefix);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const { id, others } of FORGOTTEN)
    test(`forget ${id}: its call's keys go, nothing else`, () => forgetOne(conn, env, keys, id, others(keys)));

  test('the calls never forgotten keep their keys', () => keptCallsStay(conn, keys));
});
