// Every key derived from a call's identity is injective: distinct calls (one call id for two agents,
// ids that differ only in characters a path cannot hold, a long id and its prefix, ids that differ
// only by case) get distinct call keys, archive objects, recording objects, job / dedupe ids, CRM
// record memory and external ids, and notification markers. Pure functions, a local folder and an
// in-memory key/value store: no Redis needed.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import {
  callHash,
  callKey,
  callKeySegment,
  contentHash,
  encodeCall,
  type CallSource,
  type CanonicalCall,
} from '../src/model/call.js';
import { normalizeChannelEvent } from '../src/model/channel-event.js';
import { normalizeWebhook, readWebhook, transcriptFromPayload } from '../src/model/webhook.js';
import { archiveKeys, archiveUrl, recordingKey, transcriptLink } from '../src/sinks/archive/keys.js';
import { ArchiveSink } from '../src/sinks/archive/index.js';
import { LocalFolderStore, type ObjectStore } from '../src/sinks/archive/store.js';
import { RecordMemory } from '../src/sinks/crm/common.js';
import { callVars } from '../src/sinks/crm/vars.js';
import { NotificationLedger } from '../src/sinks/notify/ledger.js';
import type { ClaimRequest, KeyValueStore, LockRequest, TimedWrite } from '../src/state/kv.js';
import { memoryLog } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { channelEvent } from './support/fake-telephony.js';

/** The same door the sinks use (KeyValueStore), kept in a Map: it records every key written. */
class MemoryKeyValueStore implements KeyValueStore {
  constructor(
    readonly data = new Map<string, string>(),
    private readonly prefix = '',
  ) {}
  async get(key: string) {
    return this.data.get(this.prefix + key) ?? null;
  }
  async set(key: string, value: string) {
    this.data.set(this.prefix + key, value);
  }
  async setIfAbsent(key: string, value: string) {
    if (this.data.has(this.prefix + key)) return false;
    this.data.set(this.prefix + key, value);
    return true;
  }
  async delete(key: string) {
    this.data.delete(this.prefix + key);
  }
  async deleteIfEquals(key: string, value: string) {
    if (this.data.get(this.prefix + key) !== value) return false;
    return this.data.delete(this.prefix + key);
  }
  async acquire(lockKey: string, lock: LockRequest, reads: string[]) {
    const holder = this.data.get(this.prefix + lockKey);
    const tookOver =
      holder !== undefined && lock.jobId !== '' && holder.slice(0, holder.lastIndexOf(' ')) === lock.jobId;
    const acquired = holder === undefined || tookOver;
    if (acquired) this.data.set(this.prefix + lockKey, lock.token);
    return { acquired, tookOver, values: reads.map((k) => this.data.get(this.prefix + k) ?? null) };
  }
  async claim(key: string, value: string, _ttlMs: number, c: ClaimRequest) {
    const values = c.reads.map((k) => this.data.get(this.prefix + k) ?? null);
    const taken = c.take && !values.some((v) => v !== null) && !this.data.has(this.prefix + key);
    if (taken) this.data.set(this.prefix + key, value);
    return { values, inSet: false, taken };
  }
  async release(lockKey: string, token: string, writes: TimedWrite[]) {
    for (const w of writes) this.data.set(this.prefix + w.key, w.value);
    return this.deleteIfEquals(lockKey, token);
  }
  scoped(namespace: string): KeyValueStore {
    return new MemoryKeyValueStore(this.data, `${this.prefix}${namespace}:`);
  }
}

const received = new Date('2026-04-08T10:03:00Z');
const webhookCall = (agentId: string | null, callId: string): CanonicalCall =>
  normalizeWebhook(webhookPayload(callId), { agentId, receivedAt: received });
const channelCall = (channelId: string, eventId: string, callSid = 'sid-1'): CanonicalCall =>
  normalizeChannelEvent(channelEvent({ eventId, call: { callSid, startedAt: '2026-04-08T10:00:00Z' } }), received, {
    channelId,
  });

const long = 'L'.repeat(300);
/** Distinct identities that today's readable names (or today's call keys) would merge. */
const identities: [string, CanonicalCall][] = [
  ['agent-a / same-id', webhookCall('agent-a', 'same-id')],
  ['agent-b / same-id', webhookCall('agent-b', 'same-id')],
  ['no agent / same-id', webhookCall(null, 'same-id')],
  ['agent "-" / same-id', webhookCall('-', 'same-id')],
  ['a/1', webhookCall('agent-a', 'a/1')],
  ['a_1', webhookCall('agent-a', 'a_1')],
  ['a 1', webhookCall('agent-a', 'a 1')],
  ['A_1 (case only)', webhookCall('agent-a', 'A_1')],
  ['300-char id', webhookCall('agent-a', long)],
  ['its 200-char prefix', webhookCall('agent-a', long.slice(0, 200))],
  ['its 100-char prefix', webhookCall('agent-a', long.slice(0, 100))],
  ['agent a:b / call c', webhookCall('a:b', 'c')],
  ['agent a / call b:c', webhookCall('a', 'b:c')],
  ['agent a / call b%3Ac', webhookCall('a', 'b%3Ac')],
  ['channel x:y / event z', channelCall('x:y', 'z')],
  ['channel x / event y:z', channelCall('x', 'y:z')],
  ['channel x / event e1 (one callSid)', channelCall('x', 'e1')],
  ['channel x / event e2 (one callSid)', channelCall('x', 'e2')],
];

function assertDistinct(what: string, derive: (call: CanonicalCall) => string): void {
  const seen = new Map<string, string>();
  for (const [label, call] of identities) {
    const key = derive(call);
    assert.ok(!seen.has(key), `${what}: "${label}" and "${seen.get(key)}" share ${key}`);
    seen.set(key, label);
  }
}

describe('the call key', () => {
  test('keeps the form of earlier versions for ordinary ids (dedupe, CRM memory and ledgers survive the upgrade)', () => {
    assert.equal(webhookCall('agent-1', 'c-1').key, 'ai-agent:agent-1:c-1');
    assert.equal(webhookCall(null, 'c-1').key, 'ai-agent:-:c-1');
    assert.equal(webhookCall('sales:berlin', 'c-1').key, 'ai-agent:sales:berlin:c-1');
    assert.equal(channelCall('ch1', 'ev-1').key, 'channel:ch1:ev-1');
  });

  test('is injective: the scope and the id are read back from any key (property, 2,000 runs)', () => {
    // The key splits at its first and last `:`; the id has `%` and `:` encoded, the scope `%` and a lone `-`.
    const decode = (key: string) => {
      const first = key.indexOf(':');
      const last = key.lastIndexOf(':');
      const scope = key.slice(first + 1, last);
      return {
        source: key.slice(0, first),
        scope: scope === '-' ? null : scope === '%2D' ? '-' : scope.replace(/%25/g, '%'),
        id: key.slice(last + 1).replace(/%(25|3A)/g, (_, hex: string) => (hex === '25' ? '%' : ':')),
      };
    };
    const part = fc.string({
      unit: fc.constantFrom(':', '%', '-', '2', '5', 'A', 'D', 'a', '/', ' ', '_'),
      maxLength: 8,
    });
    fc.assert(
      fc.property(
        fc.constantFrom<CallSource>('ai-agent', 'channel'),
        fc.option(part, { nil: null }),
        part,
        (source, scope, id) => {
          assert.deepEqual(decode(callKey(source, scope, id)), { source, scope, id });
        },
      ),
      { numRuns: 2000 },
    );
  });

  test('distinct identities have distinct call keys (today "a:b"/"c" and "a"/"b:c" are one key, and so are no agent and agent "-")', () => {
    assertDistinct('call key', (c) => c.key);
  });
});

describe('keys derived from the identity', () => {
  test('archive objects: distinct, also on a case-insensitive file system', () => {
    assertDistinct('transcript JSON', (c) => archiveKeys(c, 'callsync/').json);
    assertDistinct('transcript text', (c) => archiveKeys(c, 'callsync/').text);
    assertDistinct('transcript JSON, case folded (macOS, Windows)', (c) =>
      archiveKeys(c, undefined).json.toLowerCase(),
    );
    assertDistinct('recording', (c) => recordingKey(c, 'voicemail', 0, 'wav', undefined).toLowerCase());
  });

  test('the layout: transcripts/YYYY/MM/DD/<readable>-<16 hex of sha256(call key)>.json|.txt|.vcon.json; the hash begins the job id', () => {
    const call = webhookCall('agent-a', 'a/1');
    const hash = callHash(call.key);
    assert.deepEqual(archiveKeys(call, 'callsync'), {
      json: `callsync/transcripts/2026/04/08/a_1-${hash.slice(0, 16)}.json`,
      text: `callsync/transcripts/2026/04/08/a_1-${hash.slice(0, 16)}.txt`,
      vcon: `callsync/transcripts/2026/04/08/a_1-${hash.slice(0, 16)}.vcon.json`,
    });
    assert.equal(
      recordingKey(call, 'in_call_feature', 1, '.MP3', undefined),
      `recordings/2026/04/08/a_1-${hash.slice(0, 16)}-in_call_feature-2.mp3`,
    );
    // A type or an extension from outside cannot add separators that would make two names one.
    assert.equal(
      recordingKey(call, 'x-1/../y', 0, 'w.a-v', undefined),
      `recordings/2026/04/08/a_1-${hash.slice(0, 16)}-x_1____y-1.w_a_v`,
    );
  });

  test('the readable part is safe as a path segment anywhere: ASCII, bounded, no leading dot, no separators', () => {
    for (const id of [
      '..',
      '.',
      '.hidden',
      '../../etc/passwd',
      'a\\b',
      'CON',
      'nul.txt',
      '日本語',
      'x'.repeat(5000),
      'a\u0000b',
    ]) {
      const segment = callKeySegment(webhookCall('agent-a', id));
      assert.match(
        segment,
        /^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}-[0-9a-f]{16}$/,
        `${JSON.stringify(id.slice(0, 20))} -> ${segment}`,
      );
    }
  });

  test('job ids, the dedupe key, the HubSpot external id and the e-mail Message-ID (callHash): distinct, 128 bits', () => {
    assertDistinct('callHash', (c) => callHash(c.key));
    for (const [, c] of identities) assert.match(callHash(c.key), /^[0-9a-f]{32}$/);
  });

  test('CRM record memory: each identity keeps its own record and its own "create pending" marker', async () => {
    const kv = new MemoryKeyValueStore();
    const memory = new RecordMemory(kv.scoped('hubspot'));
    for (const [label, c] of identities) {
      await memory.set(c.key, { id: label });
      assert.equal(await memory.beginCreate(c.key, received), true, `${label}: no earlier create of another call`);
    }
    for (const [label, c] of identities) assert.equal((await memory.get(c.key))?.id, label);
    assert.equal(kv.data.size, identities.length * 2);
  });

  test('notification markers: one per identity and recipient', async () => {
    const ledger = new NotificationLedger(new MemoryKeyValueStore().scoped('missed-sms'));
    for (const [label, c] of identities)
      assert.equal(await ledger.claim(c.key, '+4915112345678', received), null, `${label}: claimed`);
    for (const [label, c] of identities)
      assert.equal((await ledger.claim(c.key, '+4915112345678', received))?.state, 'sending', `${label}: taken`);
  });
});

describe('the archive sink and its users', () => {
  let dir: string;
  const { log } = memoryLog('warn');
  const ctx = () => ({ jobId: 'j', attempt: 1, log, signal: new AbortController().signal });
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'identity-keys-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('writes one object pair per identity into a local folder, each holding its own call', async () => {
    const sink = new ArchiveSink('archive', new LocalFolderStore(dir), 'callsync/');
    for (const [, c] of identities) await sink.deliver(c, ctx());
    const files = (await readdir(join(dir, 'callsync/transcripts'), { recursive: true })).map(String);
    const json = files.filter((f) => f.endsWith('.json') && !f.endsWith('.vcon.json'));
    assert.equal(json.length, identities.length, files.join('\n'));
    assert.equal(files.filter((f) => f.endsWith('.txt')).length, identities.length);
    assert.equal(files.filter((f) => f.endsWith('.vcon.json')).length, identities.length);
    for (const [label, c] of identities) {
      const doc = JSON.parse(await readFile(join(dir, archiveKeys(c, 'callsync/').json), 'utf8'));
      assert.equal(doc.call.key, c.key, label);
    }
  });

  test('a recording of a call with a long id fits the file system (name + temp suffix under 255 bytes)', async () => {
    const store: ObjectStore = new LocalFolderStore(dir);
    const call = webhookCall('agent-a', 'r'.repeat(400));
    const key = recordingKey(call, 'in_call_feature', 999, 'flac', 'callsync/');
    await store.put(key, Buffer.from('x'), { contentType: 'audio/flac' });
    assert.equal(await readFile(join(dir, key), 'utf8'), 'x');
  });

  test('the CRM links the key the archive writes, and a URL under baseUrl built by the archive', () => {
    const call = webhookCall('agent-a', 'a 1');
    const vars = callVars(call, {
      defaultRegion: 'DE',
      archive: { enabled: true, prefix: 'call logs', baseUrl: 'https://files.example.com/a/' },
    });
    assert.equal(vars.transcriptKey, archiveKeys(call, 'call logs').text);
    assert.equal(vars.transcriptJsonKey, archiveKeys(call, 'call logs').json);
    assert.equal(
      vars.transcriptUrl,
      `https://files.example.com/a/call%20logs/transcripts/2026/04/08/a_1-${callHash(call.key).slice(0, 16)}.txt`,
    );
    assert.equal(
      vars.transcriptUrl,
      transcriptLink(call, { prefix: 'call logs', baseUrl: 'https://files.example.com/a' }).url,
    );
    assert.equal(archiveUrl('https://x.test///', 'p/a b.txt'), 'https://x.test/p/a%20b.txt');
  });
});

// Ids and hashes are stored (job ids, dedupe keys, object keys, external ids, the inbound log's
// content hash): computing them another way must not move them.
describe('the hashes stay what they were', () => {
  test('callHash: the first 128 bits of SHA-256 over the key as UTF-8, lone surrogates too', () => {
    // Computed by the createHash implementation before the change.
    assert.equal(callHash('ai-agent:agent-1:c-1'), 'a314ae88aa3f2978e1508ad22e014510');
    assert.equal(callHash('ai-agent:-:\ud800x'), '5cc682a99050f8ec62b8ad377d090968');
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 300 }), (units) => {
        const key = String.fromCharCode(...units);
        assert.equal(callHash(key), createHash('sha256').update(key).digest('hex').slice(0, 32));
      }),
      { numRuns: 2_000 },
    );
  });

  test("the content hash of the documented payload's call, with its transcript in place or stored in the payload", () => {
    const text = JSON.stringify(webhookPayload());
    const { call } = readWebhook(JSON.parse(text), {
      agentId: 'agent-1',
      receivedAt: new Date('2026-04-08T10:00:00Z'),
    });
    // Computed by the createHash implementation before the change.
    assert.equal(contentHash(call), 'c2331534fc63036d');
    assert.equal(encodeCall(call, text, transcriptFromPayload(call)).contentHash, 'c2331534fc63036d');
  });
});
