// The CRM sinks' memory of a number they just created a contact or person for (HubSpot's
// `contact:<…>`, Pipedrive's `newperson:<…>` and its lock) names the number by its keyed hash
// (docs/privacy.md, "The keyed hash"), as the notification ledger and the timeline's number index
// do. Before, it was the number's plain SHA-256: unkeyed, so anyone reading Redis got the number
// back by hashing the few billion numbers of a country. `callsync forget` still finds the memory.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import pino from 'pino';
import { sinkQueueName } from '../queues/registry.js';
import { redisKeys } from '../queues/keys.js';
import { storedPrivacyKey } from '../queues/privacy-key.js';
import { callHash, callKey } from '../src/model/call.js';
import { parseTarget } from '../src/model/number-words.js';
import { forget } from '../src/privacy/forget.js';
import { recipientHash } from '../src/sinks/notify/ledger.js';
import { webhookPayload } from './support/calls.js';
import { postJson, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { FakeHubSpot } from './support/fake-hubspot.js';
import { FakePipedrive } from './support/fake-pipedrive.js';
import { waitFor } from './support/redis.js';

const A = '+491701234567';

describe("the CRM sinks' memory of new contacts and persons: the number as its keyed hash", () => {
  let hubspot: FakeHubSpot;
  let pipedrive: FakePipedrive;
  let cs: TestCallsync;
  let dir: string;

  before(async () => {
    [hubspot, pipedrive] = await Promise.all([new FakeHubSpot().start(), new FakePipedrive().start()]);
    dir = await mkdtemp(join(tmpdir(), 'crm-memory-'));
    const configPath = join(dir, 'callsync.yaml');
    await writeFile(
      configPath,
      `
sinks:
  hubspot: { type: hubspot, apiUrl: "${hubspot.url}", createContacts: true }
  pipedrive: { type: pipedrive, apiUrl: "${pipedrive.url}", createPerson: true }
routes:
  - to: [hubspot, pipedrive]
`,
    );
    // No PRIVACY_HMAC_SECRET: the key kept in Redis.
    cs = await startTestCallsync({
      CALLSYNC_CONFIG: configPath,
      HUBSPOT_ACCESS_TOKEN: hubspot.token,
      PIPEDRIVE_API_TOKEN: pipedrive.token,
      SPOOL_ENABLED: 'false',
    });
  });
  after(async () => {
    await cs?.stop();
    await Promise.all([hubspot?.stop(), pipedrive?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  test('no key names the number by its plain hash; forget erases the memory', async () => {
    const payload = webhookPayload('crm-mem-1', (p) => {
      p.call.from = A;
    });
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, payload)).status, 202);
    const id = callHash(callKey('ai-agent', 'agent-1', 'crm-mem-1'));
    const keys = redisKeys(cs.config.redis);
    for (const sink of ['hubspot', 'pipedrive']) {
      const name = sinkQueueName(sink);
      const queue = new Queue(name, { connection: cs.redis.worker, prefix: keys.queuePrefix(name) });
      try {
        await waitFor(async () => (await queue.getJob(id))?.isCompleted(), {
          what: `${sink} delivered`,
          timeoutMs: 30_000,
        });
      } finally {
        await queue.close();
      }
    }
    assert.ok(hubspot.contacts.size > 0 && pipedrive.persons.size > 0, 'a contact and a person were created');

    const plain = callHash(A);
    const keyed = recipientHash(await storedPrivacyKey(cs.redis.worker, keys), A);
    const names = await cs.redis.worker.keys(`*${cs.prefix}*`);
    assert.deepEqual(
      names.filter((k) => k.includes(plain)),
      [],
      'no key names the number by its plain SHA-256',
    );
    const memory = names.filter((k) => /:(contact|newperson):/.test(k));
    assert.deepEqual(
      memory.map((k) => k.slice(k.lastIndexOf(':', k.lastIndexOf(':') - 1) + 1)).sort(),
      [`contact:${keyed}`, `newperson:${keyed}`],
      names.join('\n'),
    );

    const conn = cs.redis.worker;
    await forget(cs.config, conn, pino({ level: 'silent' }), {
      target: parseTarget(A, 'DE'),
      dryRun: false,
      crm: false,
    });
    assert.deepEqual(
      (await conn.keys(`*${cs.prefix}*`)).filter((k) => /:(contact|newperson):/.test(k)),
      [],
      'forget erased the memory',
    );
  });
});
