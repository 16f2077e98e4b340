// A callsync (test process) whose one sink is a signed webhook to a fake receiver, in a key prefix of
// its own: the set-up of the tests that follow a call's traces (forget, the timeline index).
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RedisClient } from '../../queues/connection.js';
import { startTestCallsync, testEnv, type TestCallsync } from './callsync.js';
import { FakeWebhookReceiver } from './fake-sink-server.js';
import { testRedis, type TestRedis } from './redis.js';

export interface WebhookCallsync {
  target: TestRedis;
  conn: RedisClient;
  receiver: FakeWebhookReceiver;
  cs: TestCallsync;
  dir: string;
  env: Record<string, string>;
  prefix: string;
}

/** Starts it: sink `hooks` with the endpoint `r`, routed every call; no spool. `name` names the prefix and folder. */
export async function startWebhookCallsync(name: string): Promise<WebhookCallsync> {
  const secret = `whsec_${randomBytes(32).toString('base64')}`;
  const target = await testRedis();
  const conn = target.connect();
  const receiver = await new FakeWebhookReceiver(secret).start();
  const dir = await mkdtemp(join(tmpdir(), `${name}-`));
  const configPath = join(dir, 'callsync.yaml');
  await writeFile(
    configPath,
    `sinks:\n  hooks:\n    type: webhook\n    endpoints: [{ name: r, url: "${receiver.url}" }]\nroutes:\n  - to: [hooks]\n`,
  );
  const prefix = await target.prefix(name);
  const env = testEnv(prefix, {
    ...target.env(),
    CALLSYNC_CONFIG: configPath,
    CRM_WEBHOOK_SECRET: secret,
    SPOOL_ENABLED: 'false',
  });
  const cs = await startTestCallsync(env);
  return { target, conn, receiver, cs, dir, env, prefix };
}

export async function stopWebhookCallsync(s: Partial<WebhookCallsync> | undefined): Promise<void> {
  await s?.cs?.stop();
  await s?.receiver?.stop();
  if (s?.target && s.prefix) await s.target.cleanup(s.prefix);
  s?.conn?.disconnect();
  if (s?.dir) await rm(s.dir, { recursive: true, force: true });
}
