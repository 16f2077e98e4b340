// Two processes on one QUEUE_PREFIX with different routing configurations: each worker process
// keeps its fingerprint in Redis with a heartbeat, and one that sees another live one with a
// different fingerprint says so once in its log, in /readyz (of the ingress and of the ops server)
// and `callsync check-config` shows it. The same configuration twice is no warning.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../src/config/index.js';
import { routingFingerprint } from '../src/config/fingerprint.js';
import { redisKeys } from '../queues/keys.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';
import { Redis } from 'ioredis';
import { cli } from './support/cli.js';

const WARNING = /another live process on this QUEUE_PREFIX routes with a different configuration/;

async function readyz(url: string): Promise<{ status: number; body: { status?: string; warnings?: string[] } }> {
  const res = await fetch(`${url}/readyz`);
  return { status: res.status, body: (await res.json()) as { status?: string; warnings?: string[] } };
}

test('the fingerprint covers sinks and routes, not secrets, key order or route names', () => {
  const file = (extra: string, token: string) =>
    loadConfig(
      { CALLSYNC_CONFIG: '/x.yaml', HUBSPOT_ACCESS_TOKEN: token },
      {
        readFile: () =>
          `sinks:\n  crm: { type: hubspot, createContacts: true }\n  archive: { type: archive, dir: /tmp/a }\nroutes:\n  - name: all\n    to: [archive, crm]\n${extra}`,
      },
    );
  const a = routingFingerprint(file('', 'pat-na1-secret-one'));
  assert.match(a, /^[0-9a-f]{64}$/);
  assert.equal(routingFingerprint(file('', 'pat-na1-secret-two')), a, 'another token: the same routing');
  const reordered = loadConfig(
    { CALLSYNC_CONFIG: '/x.yaml', HUBSPOT_ACCESS_TOKEN: 'pat-na1-secret-one' },
    {
      readFile: () =>
        `routes:\n  - name: renamed\n    to: [archive, crm]\nsinks:\n  archive: { dir: /tmp/a, type: archive }\n  crm: { createContacts: true, type: hubspot }\n`,
    },
  );
  assert.equal(routingFingerprint(reordered), a, 'key order and route names do not route');
  assert.notEqual(
    routingFingerprint(file('  - when: { outcome: missed }\n    to: crm\n', 'pat-na1-secret-one')),
    a,
    'another route',
  );
});

describe('two processes, two configurations, one prefix', () => {
  const prefix = uniquePrefix('fingerprint');
  let dir: string;
  let a: OpsCallsync;
  let b: OpsCallsync | undefined;
  let bEnv: Record<string, string>;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-fingerprint-'));
    const file = join(dir, 'callsync.yaml');
    await writeFile(
      file,
      `sinks:\n  archive: { type: archive, dir: ${join(dir, 'archive')} }\nroutes:\n  - when: { hasTranscript: true }\n    to: archive\n`,
    );
    // A: everything in one process (its /readyz is the ingress's), the archive shortcut's route.
    a = await startOpsCallsync({
      QUEUE_PREFIX: prefix,
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
    });
    // B: a worker with another route (its /readyz is the ops server's).
    bEnv = { QUEUE_PREFIX: prefix, CALLSYNC_CONFIG: file, CALLSYNC_ROLE: 'worker', OPS_PORT: '0' };
    b = await startOpsCallsync(bEnv);
  });
  after(async () => {
    await b?.shutdown('test over');
    await a.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('each says it once in its log and in /readyz (still ready); check-config shows the other', async () => {
    assert.notEqual(a.callsync.fingerprint, null);
    // B saw A at its start; A sees B at its next heartbeat.
    await a.callsync.fingerprint!.beat();
    await a.callsync.fingerprint!.beat();
    await b!.callsync.fingerprint!.beat();
    for (const [name, cs] of [
      ['a', a],
      ['b', b!],
    ] as const) {
      const lines = cs.logs.filter((l) => typeof l.msg === 'string' && WARNING.test(l.msg));
      assert.equal(lines.length, 1, `${name}: one log line, not one per heartbeat`);
      assert.equal(lines[0]?.level, 40);
      const r = await readyz(cs.url);
      assert.equal(r.status, 200, `${name}: still ready`);
      assert.equal(r.body.status, 'ready');
      assert.equal(r.body.warnings?.length, 1, JSON.stringify(r.body));
      assert.match(r.body.warnings![0]!, /differs from [0-9a-f]{12} of 1 other live process on this QUEUE_PREFIX/);
    }

    const check = await cli(['check-config'], bEnv);
    assert.equal(check.code, 0, check.err);
    assert.match(check.out, /fingerprint: [0-9a-f]{12} \(of the sinks and routes, without secrets\)/);
    assert.match(check.out, /live worker processes on this prefix: 1 with this configuration, 1 with another/);
    assert.match(check.out, /- 1 live worker process on this QUEUE_PREFIX routes with another configuration/);
    const json = JSON.parse((await cli(['check-config', '--json'], bEnv)).out) as {
      fingerprint: string;
      liveProcesses: { fingerprint: string }[];
    };
    assert.equal(json.fingerprint, routingFingerprint(b!.callsync.config));
    assert.equal(json.liveProcesses.length, 2);

    // Stored under the prefix's own key, without secrets: fingerprints and process ids only.
    const redis = new Redis(REDIS_URL);
    try {
      const stored = await redis.hgetall(redisKeys(a.callsync.config.redis).configFingerprintsKey());
      assert.equal(Object.keys(stored).length, 2);
      assert.ok(Object.values(stored).every((v) => /"fingerprint":"[0-9a-f]{64}"/.test(v)));
    } finally {
      redis.disconnect();
    }
  });

  test('once the other process stops, the warning goes', async () => {
    await b!.shutdown('test: the other process stops');
    b = undefined;
    await a.callsync.fingerprint!.beat();
    const r = await readyz(a.url);
    assert.deepEqual(r.body, { status: 'ready' });
    const check = await cli(['check-config'], { QUEUE_PREFIX: prefix, ARCHIVE_DIR: join(dir, 'archive') });
    assert.match(check.out, /live worker processes on this prefix: 1 with this configuration, 0 with another/);
    assert.doesNotMatch(check.out, /routes with another configuration/);
  });
});

describe('two processes, one configuration', () => {
  const prefix = uniquePrefix('fingerprint-same');
  let dir: string;
  after(async () => {
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('no warning', async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-fingerprint-same-'));
    const env = { QUEUE_PREFIX: prefix, ARCHIVE_DIR: join(dir, 'archive'), CALLSYNC_ROLE: 'worker', OPS_PORT: '0' };
    const one = await startOpsCallsync(env);
    const two = await startOpsCallsync(env);
    try {
      await one.callsync.fingerprint!.beat();
      for (const cs of [one, two]) {
        assert.equal(cs.logs.filter((l) => typeof l.msg === 'string' && WARNING.test(l.msg)).length, 0);
        assert.deepEqual((await readyz(cs.url)).body, { status: 'ready' });
      }
    } finally {
      await two.shutdown('test over');
      await one.stop();
    }
  });
});
