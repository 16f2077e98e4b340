// A source is a plugin (issue 21): one SourceType — here a tiny example defined in this file, with
// a secret in an environment variable, a route and a sweeper — registered with one line, and its
// variable is checked with the rest of the configuration, its route is mounted on the ingress and
// its sweeper runs in the worker role, feeding the inbound log like the ingress does. Real Redis,
// the whole process (ingress + worker roles), a local archive folder.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { envVariables } from '../src/config/env.js';
import { envString } from '../src/env-values.js';
import { registerSourceType } from '../src/sources/registry.js';
import { defineSourceType, every, sourceEnvOf, SourceRefusal } from '../src/sources/types.js';
import { sampleCall } from './support/calls.js';
import { startTestCallsync, type TestCallsync } from './support/callsync.js';
import { waitFor } from './support/redis.js';

const pingEnv = {
  /** The example source's shared secret (X-Ping-Secret). */
  PING_SECRET: envString,
};

/** The whole example source: its variable, its check, its route and its sweeper. */
const pingSourceType = defineSourceType<{ secret: string }>({
  name: 'ping',
  env: pingEnv,
  options(raw, { problems }) {
    const env = sourceEnvOf(pingEnv, raw);
    if (!env.PING_SECRET || env.PING_SECRET.length < 8)
      problems.push("PING_SECRET: required, at least 8 characters (the ping source's shared secret)");
    return { secret: env.PING_SECRET ?? '' };
  },
  routes: ({ secret }) => ({
    name: 'ping',
    paths: ['/webhooks/ping/:callId'],
    body: 'raw',
    maxBodyBytes: 1024,
    async receive(request) {
      if (request.headers.get('x-ping-secret') !== secret)
        throw new SourceRefusal(401, 'X-Ping-Secret is missing or wrong');
      return {
        calls: [{ call: sampleCall(request.params.callId!) }],
        reply: ([accepted]) => ({
          status: 202,
          contentType: 'application/json',
          body: JSON.stringify({ id: accepted!.id }),
        }),
      };
    },
  }),
  // Accepts one call of its own, once, and leaves a mark under its own Redis area.
  background: (_options, deps) => {
    let done = false;
    return [
      every('ping sweeper', 100, async () => {
        if (done) return;
        await deps.accept(sampleCall('ping-swept'));
        await deps.redis.set(`${deps.keys.area('ping')}:ping:swept`, '1', 'EX', 600);
        done = true;
      }),
    ];
  },
});

/** The archived call document of `callId`, once the archive sink has written it. */
async function archived(dir: string, callId: string): Promise<Record<string, any> | null> {
  const names = await readdir(dir, { recursive: true }).catch(() => [] as string[]);
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const doc = JSON.parse(await readFile(join(dir, name), 'utf8')) as Record<string, any>;
    if (doc.call?.callId === callId) return doc;
  }
  return null;
}

describe('a source type registered with one line', () => {
  let unregister: () => void;
  let dir: string;
  let cs: TestCallsync | null = null;

  before(async () => {
    unregister = registerSourceType(pingSourceType);
    dir = await mkdtemp(join(tmpdir(), 'source-plugin-'));
  });
  after(async () => {
    await cs?.stop();
    unregister();
    await rm(dir, { recursive: true, force: true });
  });

  test('its environment variable joins the one schema and its check the configuration', () => {
    assert.ok(envVariables().includes('PING_SECRET'));
    assert.throws(
      () => loadConfig({ ARCHIVE_DIR: dir, PING_SECRET: 'short' }),
      (err: unknown) => err instanceof ConfigError && err.problems.some((p) => p.startsWith('PING_SECRET: required')),
    );
    assert.deepEqual(loadConfig({ ARCHIVE_DIR: dir, PING_SECRET: 'a-long-secret' }).sources.ping, {
      secret: 'a-long-secret',
    });
  });

  test('its route is mounted on the ingress and its sweeper runs in the worker role', async () => {
    cs = await startTestCallsync({ ARCHIVE_DIR: dir, PING_SECRET: 'a-long-secret' });
    const wrong = await fetch(`${cs.url}/webhooks/ping/ping-1`, {
      method: 'POST',
      headers: { 'x-ping-secret': 'nope' },
      body: '',
    });
    assert.equal(wrong.status, 401);
    assert.equal(
      ((await wrong.json()) as { errors: { detail: string }[] }).errors[0]?.detail,
      'X-Ping-Secret is missing or wrong',
    );
    const right = await fetch(`${cs.url}/webhooks/ping/ping-1`, {
      method: 'POST',
      headers: { 'x-ping-secret': 'a-long-secret' },
      body: '',
    });
    assert.equal(right.status, 202);
    assert.ok(((await right.json()) as { id?: string }).id);
    // Both calls reach the sinks: the one the route accepted and the one the sweeper accepted.
    const fromRoute = await waitFor(() => archived(dir, 'ping-1'), { what: "the route's call archived" });
    assert.equal(fromRoute.call.callId, 'ping-1');
    const swept = await waitFor(() => archived(dir, 'ping-swept'), { what: "the sweeper's call archived" });
    assert.equal(swept.call.callId, 'ping-swept');
  });
});
