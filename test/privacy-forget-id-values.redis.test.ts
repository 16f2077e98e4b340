// `callsync forget <call id>` takes a stored value for the call's only when the id is the value of a
// call-id field (`"callId":"<id>"`, a channel event's `callSid`, a payload's `call.id`) or the value
// names one of the call's hashes — not when the id is merely some JSON string in it. A call id is
// any text the platform chose: calls named `in`, `newCall`, `normalClearing`, `local` (Push API),
// `archive` and `done` (AI-agent webhook) are forgotten one after another beside calls whose data
// holds those words as values (`"direction":"in"`, a Push event `"newCall"`, a hangup's cause, the
// sinks `local` and `archive`, a timeline's `"event":"done"`, key points, an open Push call, a
// channel event's dead letter): each time, a scan of every key, member, field and stream entry under
// the prefix and of both archive folders finds nothing of the call left (its hashes, its call-id
// fields) and nothing else changed. Before, forget `in` erased every Push assembly, timeline entry
// and job with `"direction":"in"`.
// And a call whose jobs were swept (and that no archive holds) is found through its call-id lookup
// (`calls:id:<id>`): its timeline and its entries in `calls:recent`, `calls:number:*` go; for an id
// of 200 characters or more (a lookup shared by the ids that begin alike) only the call whose
// timeline says that id. Before, only the lookup itself and the timeline's `received` entry went.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { Queue } from 'bullmq';
import type { RedisClient } from '../queues/connection.js';
import type { RedisKeys } from '../queues/keys.js';
import { JobName, POLL_DEAD_LETTER_QUEUE } from '../queues/registry.js';
import { globEscape, scanKeys } from '../queues/scan.js';
import { CallTimeline, refusedCallsKey } from '../queues/timeline.js';
import { loadConfig } from '../src/config/index.js';
import { callHash, callKey } from '../src/model/call.js';
import { parseTarget } from '../src/model/number-words.js';
import { forget } from '../src/privacy/forget.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { hangup, newCall } from './support/fake-push.js';
import { testRedis, valuesUnder, waitFor } from './support/redis.js';

const DAY_MS = 24 * 3600_000;

const AGENT = 'agent-1';
/** The values other calls hold, each also the id of a call forgotten. */
const WORDS = ['in', 'newCall', 'normalClearing', 'local', 'archive', 'done'];
const PUSH_FORGOTTEN = ['in', 'newCall', 'normalClearing', 'local'];
const HOOK_FORGOTTEN = ['archive', 'done'];
/** Calls kept: Push calls (inbound, cleared normally), one still open, webhook calls whose key points are WORDS. */
const PUSH_KEPT = ['keep-push-1', 'keep-push-2'];
const STILL_OPEN = 'keep-open';
const HOOK_KEPT = ['in-keep', 'archive-keep', 'done-keep'];

/** The hashes a call of this id has, from either source. */
const hashesOf = (id: string) => [callHash(callKey('push', null, id)), callHash(callKey('ai-agent', AGENT, id))];

/** Every key under `prefix` in either layout. */
async function keysUnder(conn: RedisClient, prefix: string): Promise<string[]> {
  return [
    ...new Set([
      ...(await scanKeys(conn, `${globEscape(prefix)}:*`)),
      ...(await scanKeys(conn, `{${globEscape(prefix)}:*`)),
    ]),
  ];
}

/**
 * Every item under the prefix and in the archive folders, one string each: `<key>\u0001<type>\u0001<item>`
 * — a string's value, a hash's field and value, a list's item, a set's member, a sorted set's member
 * and score, a stream entry (id and fields); `file:<path>\u0001file\u0001<text>` for an archived file.
 * Not BullMQ's `stalled-check` keys: they expire on their own, a second after their workers stopped.
 */
async function snapshot(conn: RedisClient, prefix: string, dir: string): Promise<Set<string>> {
  const out = new Set<string>();
  for (const key of await keysUnder(conn, prefix)) {
    if (key.endsWith(':stalled-check')) continue;
    const type = await conn.type(key);
    const add = (item: string) => out.add(`${key}\u0001${type}\u0001${item}`);
    if (type === 'string') add(`=${await conn.get(key)}`);
    else if (type === 'hash') for (const [f, v] of Object.entries(await conn.hgetall(key))) add(`${f}=${v}`);
    else if (type === 'list') for (const item of await conn.lrange(key, 0, -1)) add(item);
    else if (type === 'set') for (const m of await conn.smembers(key)) add(m);
    else if (type === 'zset') {
      const flat = await conn.zrange(key, 0, -1, 'WITHSCORES');
      for (let i = 0; i < flat.length; i += 2) add(`${flat[i]} @${flat[i + 1]}`);
    } else if (type === 'stream')
      for (const [id, fields] of (await conn.xrange(key, '-', '+')) as [string, string[]][])
        add(`${id} ${JSON.stringify(fields)}`);
    else add(`(${type})`);
  }
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (!e.isFile() || !e.parentPath.includes('archive-')) continue;
    const path = join(e.parentPath, e.name);
    out.add(`file:${path.slice(dir.length)}\u0001file\u0001${await readFile(path, 'utf8')}`);
  }
  return out;
}

/**
 * The items of the call `id` among `items`: those naming one of its hashes (the archive's file
 * names hold the first 16 digits), of a key named after the id, holding the id as a call-id field's
 * value (also in JSON inside JSON), its member of `push:open`; every field of a hash (a job, an
 * assembly) one of whose fields is the call's. `jobEntry`: the items naming the job id of a dead
 * letter of the call's (not its hash: `dl-…`) — the queue's lists and BullMQ's event entries, which
 * hold the job id and nothing else; forget may leave those (and BullMQ adds a `removed` one).
 */
function ofCall(
  keys: RedisKeys,
  id: string,
  items: ReadonlySet<string>,
): { item: (item: string) => boolean; jobEntry: (item: string) => boolean } {
  const hashes = hashesOf(id).flatMap((h) => [h, h.slice(0, 16)]);
  const quoted = JSON.stringify(id);
  const fields = ['callId', 'callSid'].flatMap((f) => [
    `"${f}":${quoted}`,
    JSON.stringify(`"${f}":${quoted}`).slice(1, -1),
  ]);
  const named = [
    `${keys.area('push')}:push:${id === 'open' ? '%open' : id}\u0001`,
    `${keys.area('push')}:push-seen:${id}\u0001`,
    `${keys.area('calls')}:calls:id:${id}\u0001`,
    `${keys.area('push')}:push:open\u0001zset\u0001${id} @`,
  ];
  const direct = (item: string) =>
    hashes.some((h) => item.includes(h)) ||
    named.some((n) => item.startsWith(n)) ||
    fields.some((f) => item.includes(f));
  const keyOf = (item: string) => item.slice(0, item.indexOf('\u0001'));
  const owned = new Set([...items].filter((i) => i.includes('\u0001hash\u0001') && direct(i)).map(keyOf));
  const deadLetters = [...owned].flatMap((k) => /:poll-dead-letters:(dl-[^:]+)$/.exec(k)?.[1] ?? []);
  return {
    item: (item) => direct(item) || owned.has(keyOf(item)),
    jobEntry: (item) =>
      deadLetters.some((j) => item.endsWith(`\u0001${j}`) || item.includes(`\u0001${j} @`) || item.includes(`"${j}"`)),
  };
}

/** A callsync configuration: archive folders `local` and `archive` in `dir`, both routed to. */
async function archiveEnv(dir: string, prefix: string, more: Record<string, string>): Promise<Record<string, string>> {
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    [
      'sinks:',
      '  local:',
      '    type: archive',
      `    dir: ${join(dir, 'archive-local')}`,
      '  archive:',
      '    type: archive',
      `    dir: ${join(dir, 'archive-archive')}`,
      'routes:',
      '  - to: [local, archive]',
      '',
    ].join('\n'),
  );
  return testEnv(prefix, { CALLSYNC_CONFIG: configPath, SPOOL_ENABLED: 'false', ...more });
}

describe('forget <call id> whose id is a value other calls hold', () => {
  let cs: TestCallsync | undefined;
  let conn: RedisClient;
  let dir: string;
  let env: Record<string, string>;
  let keys: RedisKeys;
  let prefix: string;
  before(async () => {
    const target = await testRedis();
    dir = await mkdtemp(join(tmpdir(), 'forgetidvalues-'));
    prefix = await target.prefix('forgetidvalues');
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
    for (const id of [...PUSH_FORGOTTEN, ...PUSH_KEPT]) {
      await push(newCall(id));
      await push(hangup(id));
    }
    await push(newCall(STILL_OPEN));
    for (const id of [...HOOK_FORGOTTEN, ...HOOK_KEPT]) {
      const payload = webhookPayload(id, (p) => {
        p.assist.summary.keyPoints = WORDS;
        p.assist.summary.topics = WORDS;
      });
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, payload)).status, 202);
    }
    // Refused (no `from`): kept under their call ids.
    for (const id of ['done', 'done-keep']) {
      const payload = webhookPayload(id, (p) => delete p.call.from);
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, payload)).status, 400);
    }
    const finished = [
      ...[...PUSH_FORGOTTEN, ...PUSH_KEPT].map((id) => hashesOf(id)[0]!),
      ...[...HOOK_FORGOTTEN, ...HOOK_KEPT].map((id) => hashesOf(id)[1]!),
    ];
    const timeline = new CallTimeline(conn, keys, loadConfig(env).timeline);
    await waitFor(
      async () =>
        (await Promise.all(finished.map((h) => timeline.read(h)))).every(
          (entries) => entries.filter((e) => e.event === 'done').length === 2,
        ) || null,
      { what: 'every call archived by both sinks', timeoutMs: 60_000 },
    );
    await waitFor(async () => (await conn.zcard(refusedCallsKey(keys))) === 2 || null, {
      what: 'both refusals kept',
      timeoutMs: 10_000,
    });
    // The callsync stops, its keys kept: nothing comes and goes meanwhile but what forget does.
    await cs.close();
    // Channel events the poller could not read, as it queues them (poll-dead-letters, workers/poller.ts).
    const queue = new Queue(POLL_DEAD_LETTER_QUEUE, {
      connection: conn,
      prefix: keys.queuePrefix(POLL_DEAD_LETTER_QUEUE),
    });
    try {
      // The call `in`'s (a direction callsync cannot read), and another call's holding the WORDS as values.
      const events = [
        { eventId: 'ev-in', type: 'CALL', call: { callSid: 'in', direction: 'sideways' } },
        {
          eventId: 'ev-keep',
          type: 'CALL',
          call: { callSid: 'keep-channel', direction: 'in', state: 'done', owner: 'local', labels: WORDS },
        },
      ];
      for (const event of events)
        await queue.add(
          JobName.pollDeadLetter,
          { kind: JobName.pollDeadLetter, channelId: 'ch-1', reason: 'channel ch-1: no readable start', event },
          { jobId: `dl-${event.eventId}`, attempts: 1 },
        );
    } finally {
      await queue.close();
    }
  });
  after(async () => {
    if (conn) for (const key of await keysUnder(conn, prefix)) await conn.del(key);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  for (const id of [...PUSH_FORGOTTEN, ...HOOK_FORGOTTEN])
    test(`forget ${id}: the call goes whole, nothing of the other calls changes`, async () => {
      const beforeItems = await snapshot(conn, prefix, dir);
      const { item: mine, jobEntry } = ofCall(keys, id, beforeItems);
      const ofCallBefore = [...beforeItems].filter(mine);
      assert.ok(
        ofCallBefore.some((i) => i.startsWith('file:/archive-local/')) &&
          ofCallBefore.some((i) => i.startsWith('file:/archive-archive/')),
        'before: the call is in both archives',
      );
      assert.ok(
        ofCallBefore.some((i) => i.includes(':timeline\u0001')),
        'before: the call has a timeline',
      );

      const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(id, 'DE'),
        dryRun: false,
        crm: false,
      });
      const afterItems = await snapshot(conn, prefix, dir);
      const detail = `receipt ${JSON.stringify(receipt)}`;
      const short = (items: string[]) => items.map((i) => i.slice(0, 300));
      assert.equal(receipt.calls, 1, detail);
      assert.deepEqual(short([...afterItems].filter(mine)), [], `nothing of the call is left; ${detail}`);
      assert.deepEqual(
        short([...beforeItems].filter((i) => !mine(i) && !jobEntry(i) && !afterItems.has(i))),
        [],
        `nothing of the other calls is erased or changed; ${detail}`,
      );
      assert.deepEqual(
        short([...afterItems].filter((i) => !beforeItems.has(i) && !jobEntry(i))),
        [],
        `nothing is added; ${detail}`,
      );
    });

  test('the other calls are all there', async () => {
    const items = await snapshot(conn, prefix, dir);
    for (const id of [...PUSH_KEPT, ...HOOK_KEPT]) {
      const theirs = [...items].filter(ofCall(keys, id, items).item);
      assert.equal(
        theirs.filter((i) => i.startsWith('file:')).length,
        6,
        `${id}: record, text and vCon in both archives`,
      );
      assert.ok(
        theirs.some((i) => i.includes(':timeline\u0001')),
        `${id}: its timeline`,
      );
    }
    assert.ok(
      [...items].some((i) => i.startsWith(`${keys.area('push')}:push:${STILL_OPEN}\u0001hash\u0001newCall=`)),
      'the open Push call is assembled still',
    );
    const deadLetters = `${keys.queuePrefix(POLL_DEAD_LETTER_QUEUE)}:${POLL_DEAD_LETTER_QUEUE}`;
    assert.equal(await conn.exists(`${deadLetters}:dl-ev-keep`), 1, "the other call's dead letter stays");
    assert.ok(
      (await conn.zrange(refusedCallsKey(keys), 0, -1)).some(
        (m) => (JSON.parse(m) as { callId: string }).callId === 'done-keep',
      ),
      "the other call's refusal stays",
    );
  });
});

describe('forget <call id> of a call whose jobs were swept: found through its call-id lookup', () => {
  let cs: TestCallsync | undefined;
  let conn: RedisClient;
  let dir: string;
  let env: Record<string, string>;
  let keys: RedisKeys;
  let prefix: string;
  let receiver: FakeWebhookReceiver;
  const LONG = `swept-${'y'.repeat(200)}`;
  const SWEPT = ['swept-1', `${LONG}-a`, `${LONG}-b`, 'swept-keep'];
  const hashOf = (id: string) => hashesOf(id)[1]!;

  before(async () => {
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const target = await testRedis();
    receiver = await new FakeWebhookReceiver(secret).start();
    dir = await mkdtemp(join(tmpdir(), 'forgetidswept-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `sinks:\n  hooks:\n    type: webhook\n    endpoints: [{ name: r, url: "${receiver.url}" }]\nroutes:\n  - to: [hooks]\n`,
    );
    prefix = await target.prefix('forgetidswept');
    keys = target.keys(prefix);
    env = testEnv(prefix, {
      ...target.env(),
      CALLSYNC_CONFIG: configPath,
      CRM_WEBHOOK_SECRET: secret,
      SPOOL_ENABLED: 'false',
    });
    cs = await startTestCallsync(env);
    conn = target.connect();
    for (const id of SWEPT)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/${AGENT}`, webhookPayload(id))).status, 202);
    const timeline = new CallTimeline(conn, keys, loadConfig(env).timeline);
    await waitFor(
      async () =>
        (await Promise.all(SWEPT.map((id) => timeline.read(hashOf(id))))).every((entries) =>
          entries.some((e) => e.event === 'done'),
        ) || null,
      { what: 'every call delivered', timeoutMs: 30_000 },
    );
    await cs.close();
    // Two days later the delivered jobs are swept; the timelines stay CALL_TIMELINE_TTL_DAYS (30).
    const swept = await sweepRetention(loadConfig(env), conn, pino({ level: 'silent' }), Date.now() + 2 * DAY_MS);
    assert.equal(swept.removed.completed_jobs, SWEPT.length);
  });
  after(async () => {
    await receiver?.stop();
    if (conn) for (const key of await keysUnder(conn, prefix)) await conn.del(key);
    conn?.disconnect();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Where each call's hash or call-id field is, under the prefix: `<key> ×<times>` (key name and value). */
  async function whereIs(id: string): Promise<string[]> {
    const needles = [hashOf(id), JSON.stringify(`"callId":${JSON.stringify(id)}`).slice(1, -1)];
    return (await valuesUnder(conn, prefix))
      .map((v) => ({ where: v.where, times: needles.reduce((n, x) => n + v.text.split(x).length - 1, 0) }))
      .filter((v) => v.times > 0)
      .map((v) => `${v.where} ×${v.times}`)
      .sort();
  }

  for (const [id, others] of [
    ['swept-1', [`${LONG}-a`, `${LONG}-b`, 'swept-keep']],
    [`${LONG}-a`, [`${LONG}-b`, 'swept-keep']],
  ] as const)
    test(`forget ${id.slice(0, 20)}… (${id.length} characters): its timeline and lookup entries go, the others' stay`, async () => {
      const timeline = new CallTimeline(conn, keys, loadConfig(env).timeline);
      assert.ok((await timeline.read(hashOf(id))).length > 0, 'before: the timeline is there');
      assert.ok((await timeline.byCallId(id)).includes(hashOf(id)), 'before: the call-id lookup lists it');
      const othersBefore = await Promise.all(
        others.map(async (o) => [o, await whereIs(o), await timeline.read(hashOf(o))] as const),
      );

      const receipt = await forget(loadConfig(env), conn, pino({ level: 'silent' }), {
        target: parseTarget(id, 'DE'),
        dryRun: false,
        crm: false,
      });
      const detail = `receipt ${JSON.stringify(receipt)}`;
      assert.deepEqual(
        { calls: receipt.calls, left: await whereIs(id), byCallId: (await timeline.byCallId(id)).includes(hashOf(id)) },
        { calls: 1, left: [], byCallId: false },
        detail,
      );
      for (const [o, where, entries] of othersBefore) {
        assert.ok(where.length > 0 && entries.length > 0, `${o}: kept before`);
        assert.deepEqual(await whereIs(o), where, `${o}: its keys and lookup entries stay; ${detail}`);
        assert.deepEqual(await timeline.read(hashOf(o)), entries, `${o}: its timeline stays; ${detail}`);
      }
      const shared = await timeline.byCallId(`${LONG}-b`);
      assert.ok(
        shared.includes(hashOf(`${LONG}-b`)) && !shared.includes(hashOf(id)),
        'the lookup the long ids share keeps the other call',
      );
    });
});
