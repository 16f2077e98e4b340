// `callsync forget <call id>` by the names the call's traces are kept under, a day later (the
// call's delivered jobs swept, so only those names and the archive find it), with a folder archive:
// - a call id longer than 100 characters: the archive names its objects after the id's first 100
//   characters (callKeySegment); forget reads those records and erases the call's, and keeps the
//   call of another id that begins with the same 100 characters.
// - a Push API call id holding `:` (`pbx:4711`): the keys named after the call id (`…:push-seen:pbx:4711`,
//   `…:push:…`, `…:calls:id:…`) go, those of `pbx:47111` stay.
// - the markers `callsync replay` and `backfill --sink` leave (`…:replay:<sink>:replay-<call hash>`,
//   180 days), whose name holds the call's hash after the command's word: the call's go, another's stay.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import type { RedisClient } from '../queues/connection.js';
import { runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { queuedMarkerKey } from '../src/cli/sink-queue.js';
import { loadConfig } from '../src/config/index.js';
import { callHash, callKey } from '../src/model/call.js';
import { forget } from '../src/privacy/forget.js';
import { parseTarget } from '../src/model/number-words.js';
import { sweepRetention } from '../src/privacy/retention.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, testEnv, type TestCallsync } from './support/callsync.js';
import { hangup, newCall } from './support/fake-push.js';
import { testRedis, valuesUnder, waitFor } from './support/redis.js';
import { scanKeys } from '../queues/scan.js';

const DAY_MS = 24 * 3600_000;

interface ArchiveCallsync {
  cs: TestCallsync;
  conn: RedisClient;
  dir: string;
  env: Record<string, string>;
  prefix: string;
}

/** A callsync (test process) whose one sink is the archive folder `<dir>/archive`, in a key prefix of its own. */
async function startArchiveCallsync(name: string, more: Record<string, string> = {}): Promise<ArchiveCallsync> {
  const target = await testRedis();
  const dir = await mkdtemp(join(tmpdir(), `${name}-`));
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    `sinks:\n  local:\n    type: archive\n    dir: ${join(dir, 'archive')}\nroutes:\n  - to: [local]\n`,
  );
  const prefix = await target.prefix(name);
  const env = testEnv(prefix, { ...target.env(), CALLSYNC_CONFIG: configPath, SPOOL_ENABLED: 'false', ...more });
  const cs = await startTestCallsync(env);
  return { cs, conn: target.connect(), dir, env, prefix };
}

async function stopArchiveCallsync(s: ArchiveCallsync | undefined): Promise<void> {
  await s?.cs.stop();
  s?.conn.disconnect();
  if (s?.dir) await rm(s.dir, { recursive: true, force: true });
}

/** The archive's files (path under `dir`) and their text. */
async function archived(dir: string): Promise<{ path: string; text: string }[]> {
  const root = join(dir, 'archive');
  const out: { path: string; text: string }[] = [];
  for (const e of await readdir(root, { withFileTypes: true, recursive: true }).catch(() => [])) {
    if (!e.isFile()) continue;
    const path = join(e.parentPath, e.name);
    out.push({ path: path.slice(root.length), text: await readFile(path, 'utf8') });
  }
  return out;
}

/** Forgets `callId` two days later: the retention sweep has removed the call's delivered jobs. */
async function forgetCallDaysLater(s: ArchiveCallsync, callId: string) {
  const config = loadConfig(s.env);
  const log = pino({ level: 'silent' });
  await sweepRetention(config, s.conn, log, Date.now() + 2 * DAY_MS);
  return forget(config, s.conn, log, { target: parseTarget(callId, 'DE'), dryRun: false, crm: false });
}

describe('forget <call id> of more than 100 characters: the archive names the call after the first 100', () => {
  const LONG = `call-${'x'.repeat(120)}`;
  const calls = [
    { id: `${LONG}-a`, from: '+491701234567', said: 'Zanzibar the cat ate my blue invoice on Tuesday.' },
    { id: `${LONG}-b`, from: '+491761234599', said: 'The parcel for Ulan Bator left on Friday.' },
  ];
  let s: ArchiveCallsync | undefined;
  before(async () => {
    s = await startArchiveCallsync('forgetlongid');
  });
  after(() => stopArchiveCallsync(s));

  test("the call's record, text and vCon go; the call whose id begins with the same 100 characters stays", async () => {
    const { cs, conn, dir, prefix } = s!;
    for (const c of calls) {
      const payload = webhookPayload(c.id, (p) => {
        p.call.from = c.from;
        p.assist.transcription.content = `Caller: ${c.said}`;
        p.assist.transcription.chunks[0].content = c.said;
      });
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    }
    await waitFor(async () => (await archived(dir)).length === 6 || null, {
      what: 'both calls archived (record, text, vCon each)',
      timeoutMs: 30_000,
    });
    const names = (await archived(dir)).map((f) => f.path.slice(f.path.lastIndexOf('/') + 1));
    assert.ok(
      names.every((n) => n.startsWith(`${LONG.slice(0, 100)}-`)),
      `both named after the first 100 characters: ${names.join(', ')}`,
    );

    const receipt = await forgetCallDaysLater(s!, calls[0]!.id);
    assert.equal(receipt.stores['archive objects (folder)'], 3, JSON.stringify(receipt));
    const [gone, kept] = calls as [(typeof calls)[0], (typeof calls)[0]];
    const mentions = (text: string, c: typeof gone) =>
      text.includes(JSON.stringify(c.id)) || text.includes(c.said) || text.includes(c.from);
    const files = await archived(dir);
    assert.deepEqual(
      files.filter((f) => mentions(f.text, gone)).map((f) => f.path),
      [],
      'nothing of the call in the archive',
    );
    assert.equal(files.filter((f) => mentions(f.text, kept)).length, 3, "the other call's objects stay");
    const left = (await valuesUnder(conn, prefix)).filter((v) => mentions(v.text, gone)).map((v) => v.where);
    assert.deepEqual(left, [], 'nothing of the call in Redis');
  });
});

describe('forget <call id> of a Push API call whose id holds `:`', () => {
  let s: ArchiveCallsync | undefined;
  before(async () => {
    s = await startArchiveCallsync('forgetpushcolon', { PUSH_API_VERIFY: 'false' });
  });
  after(() => stopArchiveCallsync(s));

  test('the keys named after the call id go; those of an id it begins (pbx:47111) stay', async () => {
    const { cs, conn, dir, prefix } = s!;
    const push = (body: string) =>
      fetch(`${cs.url}/webhooks/push`, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body,
      });
    const [gone, kept] = ['pbx:4711', 'pbx:47111'];
    for (const id of [gone!, kept!]) {
      assert.equal((await push(newCall(id))).status, 200);
      assert.equal((await push(hangup(id))).status, 200);
    }
    await waitFor(async () => (await archived(dir)).length === 6 || null, {
      what: 'both calls archived',
      timeoutMs: 30_000,
    });
    const named = async (id: string) =>
      (await scanKeys(conn, `${prefix}*`)).filter((k) => k.endsWith(`:${id}`)).map((k) => k.slice(prefix.length));
    const keptKeys = await named(kept!);
    assert.deepEqual(
      (await named(gone!)).sort(),
      [':calls:id:pbx:4711', ':push-seen:pbx:4711', ':push:pbx:4711'],
      'before forget: the keys named after the call id',
    );

    const receipt = await forgetCallDaysLater(s!, gone!);
    assert.deepEqual(await named(gone!), [], `no key named after the call id; receipt ${JSON.stringify(receipt)}`);
    const naming = /pbx:4711(?!\d)/;
    assert.deepEqual(
      (await valuesUnder(conn, prefix)).filter((v) => naming.test(v.text)).map((v) => v.where),
      [],
      'no key names or holds the call id',
    );
    assert.deepEqual(await named(kept!), keptKeys, 'the keys of pbx:47111 stay');
    const files = (await archived(dir)).map((f) => f.path.slice(f.path.lastIndexOf('/') + 1));
    assert.deepEqual(
      files.map((name) => name.slice(0, name.indexOf('-'))),
      ['pbx_47111', 'pbx_47111', 'pbx_47111'],
      "the archive keeps pbx:47111's record, text and vCon only",
    );
  });
});

describe('forget <call id> after `callsync replay` and `backfill --sink` queued the call again', () => {
  let s: ArchiveCallsync | undefined;
  before(async () => {
    s = await startArchiveCallsync('forgetreplayed');
  });
  after(() => stopArchiveCallsync(s));

  test("the call's replay and backfill markers go; another call's stay", async () => {
    const { cs, conn, dir, env, prefix } = s!;
    const ids = ['replayed-1', 'replayed-2'];
    for (const id of ids)
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    await waitFor(async () => (await archived(dir)).length === 6 || null, {
      what: 'both calls archived',
      timeoutMs: 30_000,
    });
    const day = /^\/transcripts\/(\d{4})\/(\d\d)\/(\d\d)\//
      .exec((await archived(dir))[0]!.path)!
      .slice(1)
      .join('-');
    const out: string[] = [];
    const io: CliIo = { env, out: (l) => out.push(l), err: (l) => out.push(l) };
    assert.equal(await runCli(['replay', '--from', day, '--to', day, '--sink', 'local'], io), 0, out.join('\n'));
    const markers = async (origin: string) =>
      (await scanKeys(conn, `${prefix}:${origin}:local:*`)).map((k) => k.slice(`${prefix}:${origin}:local:`.length));
    await waitFor(async () => (await markers('replay')).length === 2 || null, { what: 'the replay markers' });
    // `backfill --sink local` marks the calls it queued alike (src/cli/sink-queue.ts).
    for (const jobId of await markers('replay'))
      await conn.set(
        queuedMarkerKey(prefix, 'backfill', 'local', jobId.replace(/^replay-/, 'backfill-')),
        '1',
        'EX',
        3600,
      );
    const [gone, kept] = ids.map((id) => callHash(callKey('ai-agent', 'agent-1', id))) as [string, string];
    for (const origin of ['replay', 'backfill'])
      assert.deepEqual((await markers(origin)).sort(), [`${origin}-${gone}`, `${origin}-${kept}`].sort());
    // The replayed jobs delivered (archived once more) before forget runs.
    await waitFor(
      async () =>
        (await conn.zrange(`${prefix}:sink-local:completed`, 0, -1)).filter((id) => id.startsWith('replay-')).length ===
          2 || null,
      { what: 'the replayed jobs delivered', timeoutMs: 30_000 },
    );

    const receipt = await forgetCallDaysLater(s!, ids[0]!);
    for (const origin of ['replay', 'backfill'])
      assert.deepEqual(await markers(origin), [`${origin}-${kept}`], `receipt ${JSON.stringify(receipt)}`);
    const left = (await scanKeys(conn, `${prefix}*`)).filter((k) => k.includes(gone));
    assert.deepEqual(left, [], "no key's name holds the call's hash");
  });
});
