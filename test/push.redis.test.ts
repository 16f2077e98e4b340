// The Push API source against a fake platform: requests signed with a key pair made in the test,
// the events of a call assembled in Redis into one canonical call in the inbound log (order,
// repeats, a hangup that never comes), the XML answer to newCall, and who may post at all.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import type { Context } from 'hono';
import { createIngressApp } from '../src/ingress/app.js';
import { listen } from '../src/listen.js';
import { InboundAcceptor } from '../src/ingress/accept.js';
import { PUSH_CLAIM_LEASE_MS, PushAssembly, pushOpenKey } from '../src/sources/push-assembly.js';
import { pushSource } from '../src/sources/push.js';
import { aiAgentSource } from '../src/sources/ai-agent.js';
import { InboundLog } from '../queues/inbound.js';
import type { Config } from '../src/config/index.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink } from '../src/sinks/types.js';
import { memoryLog, startTestCallsync, type TestCallsync } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { answer, dtmf, hangup, newCall, sign, testKeyPair } from './support/fake-push.js';

const PLATFORM_IP = '217.116.118.254';
const keys = testKeyPair();
const otherKeys = testKeyPair();

const webhook: Config['webhook'] = {
  allowedIps: [PLATFORM_IP],
  trustedProxies: [],
  authHeader: 'x-callsync-token',
  authTokens: ['secret-for-the-ai-agent-webhook'],
  bodyLimitBytes: 1024 * 1024,
  dedupeWindowMs: 60_000,
  enqueueTimeoutMs: 1500,
};

/** One raw request over a socket; the whole answer, read until the server closes (HTTP/1.0). */
function rawHttp(port: number, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const socket = connect(port, '127.0.0.1', () => socket.write(request));
    socket.setTimeout(10_000, () => socket.destroy(new Error('no answer within 10 s')));
    socket.on('data', (d: Buffer) => chunks.push(d));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

describe('Push API source', () => {
  const prefix = uniquePrefix('push');
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, enableOfflineQueue: false });
  const inbound = new InboundLog(redis, prefix);
  const acceptor = new InboundAcceptor(inbound, { dedupeWindowMs: 60_000, timeoutMs: 1500 });
  let clock = Date.parse('2026-11-20T10:00:00Z');
  const now = () => new Date(clock);
  const assembly = new PushAssembly(redis, { prefix, timeoutMs: 3600_000, now });
  const memory = memoryLog('info');
  const makeApp = (over: Partial<Parameters<typeof pushSource>[0]> = {}) =>
    createIngressApp({
      webhook,
      acceptor,
      ready: async () => true,
      log: memory.log,
      now,
      remoteAddress: (c: Context) => c.req.header('x-test-peer'),
      sources: [
        aiAgentSource(),
        pushSource({
          assembly,
          publicKeyPem: keys.publicKeyPem,
          verify: true,
          publicUrl: 'https://calls.example.com/',
          ...over,
        }),
      ],
    });
  const app = makeApp();

  const post = (
    body: string,
    opts: { signature?: string | null; peer?: string; app?: ReturnType<typeof makeApp>; contentType?: string } = {},
  ) => {
    const headers: Record<string, string> = {
      'content-type': opts.contentType ?? 'application/x-www-form-urlencoded',
      'x-test-peer': opts.peer ?? PLATFORM_IP,
    };
    const signature = opts.signature === undefined ? sign(keys, body) : opts.signature;
    if (signature !== null) headers['x-sipgate-signature'] = signature;
    return (opts.app ?? app).request('/webhooks/push', { method: 'POST', headers, body });
  };
  const callsOf = async (callId: string): Promise<CanonicalCall[]> =>
    (await inbound.entries()).map((e) => e.call!).filter((c) => c?.callId === callId);
  const at = (iso: string) => {
    clock = Date.parse(iso);
  };

  before(async () => {
    await waitFor(() => redis.status === 'ready', { what: 'Redis connection' });
  });
  after(async () => {
    redis.disconnect();
    await cleanupPrefix(prefix);
  });

  test('unsigned, forged, tampered or wrongly keyed requests get 401 with the error body and store nothing', async () => {
    const body = newCall('sig-1');
    const cases: [string, Response][] = [
      ['unsigned', await post(body, { signature: null })],
      ['empty signature', await post(body, { signature: '' })],
      ['not base64', await post(body, { signature: '!!!not base64!!!' })],
      ['signed by another key', await post(body, { signature: sign(otherKeys, body) })],
      [
        'body changed after signing',
        await post(newCall('sig-1', { to: '4900000000' }), { signature: sign(keys, body) }),
      ],
      ['the signature of another event', await post(hangup('sig-1'), { signature: sign(keys, body) })],
      // Without PUSH_API_PUBLIC_KEY the platform's own key is used: a test-signed request is forged then.
      ['default key', await post(body, { app: makeApp({ publicKeyPem: undefined }) })],
    ];
    for (const [why, res] of cases) {
      assert.equal(res.status, 401, why);
      const json = (await res.json()) as { errors: { status: string; title: string; detail: string }[] };
      assert.equal(json.errors[0]!.title, 'Unauthorized', why);
      assert.match(json.errors[0]!.detail, /X-Sipgate-Signature/, why);
    }
    assert.equal(await redis.exists(`${prefix}:push:sig-1`), 0, 'nothing was recorded');
    assert.deepEqual(await callsOf('sig-1'), []);
  });

  test('the allow list applies: a correctly signed request from another address is 403', async () => {
    const res = await post(newCall('ip-1'), { peer: '203.0.113.9' });
    assert.equal(res.status, 403);
    assert.equal(await redis.exists(`${prefix}:push:ip-1`), 0);
  });

  test('the shared secret of the JSON webhook is not asked of the Push API (the signature is its credential)', async () => {
    const res = await post(newCall('secret-1'));
    assert.equal(res.status, 200);
    const agent = await app.request('/webhooks/ai-agent', {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-test-peer': PLATFORM_IP },
      body: '{}',
    });
    assert.equal(agent.status, 401, 'the AI-agent webhook still wants its secret');
  });

  test('newCall is answered with XML subscribing to answer and hangup at absolute URLs', async () => {
    const res = await post(newCall('xml-1'));
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/xml/);
    const xml = await res.text();
    assert.match(xml, /^<\?xml version="1.0" encoding="UTF-8"\?>/);
    assert.match(
      xml,
      /<Response onAnswer="https:\/\/calls\.example\.com\/webhooks\/push" onHangup="https:\/\/calls\.example\.com\/webhooks\/push"\/>/,
    );
    assert.deepEqual(await callsOf('xml-1'), [], 'an open call is not accepted yet');
    // Without PUSH_API_PUBLIC_URL: the URL the request came in on, still absolute.
    const derived = await (await post(newCall('xml-2'), { app: makeApp({ publicUrl: undefined }) })).text();
    assert.match(derived, /onAnswer="http:\/\/localhost\/webhooks\/push"/);
    const other = await post(dtmf('xml-1'));
    assert.equal(other.status, 200);
    assert.match(await other.text(), /<Response\/>/);
  });

  test('newCall over HTTP/1.0 without a Host header: the callback URL has the address and port the request came in on', async () => {
    // Before: `http://127.0.0.1/webhooks/push`, the listening host without its port.
    const listening = await listen(makeApp({ publicUrl: undefined }).fetch, { port: 0, host: '127.0.0.1' });
    try {
      const { port } = listening.server.address() as AddressInfo;
      const send = (callId: string, hostLine: string) => {
        const body = newCall(callId);
        return rawHttp(
          port,
          `POST /webhooks/push HTTP/1.0\r\n${hostLine}Content-Type: application/x-www-form-urlencoded\r\n` +
            `X-Sipgate-Signature: ${sign(keys, body)}\r\nX-Test-Peer: ${PLATFORM_IP}\r\n` +
            `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
        );
      };
      const bare = await send('h10-1', '');
      assert.match(bare, /^HTTP\/1\.[01] 200 /);
      assert.match(bare, new RegExp(`onAnswer="http://127\\.0\\.0\\.1:${port}/webhooks/push"`));
      assert.match(bare, new RegExp(`onHangup="http://127\\.0\\.0\\.1:${port}/webhooks/push"`));
      // A Host header still names the callback's authority.
      const named = await send('h10-2', 'Host: calls.internal:8443\r\n');
      assert.match(named, /onAnswer="http:\/\/calls\.internal:8443\/webhooks\/push"/);
      // So does an absolute request target without one.
      const body = newCall('h10-3');
      const absolute = await rawHttp(
        port,
        `POST http://calls.internal:9000/webhooks/push HTTP/1.0\r\nContent-Type: application/x-www-form-urlencoded\r\n` +
          `X-Sipgate-Signature: ${sign(keys, body)}\r\nX-Test-Peer: ${PLATFORM_IP}\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      assert.match(absolute, /onAnswer="http:\/\/calls\.internal:9000\/webhooks\/push"/);
    } finally {
      await listening.close();
    }
  });

  test('newCall, answer, hangup: one canonical call with outcome, duration from answer to hangup and the answering user', async () => {
    at('2026-11-20T10:00:00Z');
    assert.equal((await post(newCall('call-1'))).status, 200);
    at('2026-11-20T10:00:07Z');
    assert.equal((await post(answer('call-1'))).status, 200);
    assert.deepEqual(await callsOf('call-1'), [], 'answered but not hung up: still open');
    at('2026-11-20T10:01:49Z');
    const res = await post(hangup('call-1'));
    assert.equal(res.status, 200);
    assert.match(await res.text(), /<Response\/>/);
    const calls = await callsOf('call-1');
    assert.equal(calls.length, 1);
    const call = calls[0]!;
    assert.equal(call.source, 'push');
    assert.equal(call.key, 'push:-:call-1');
    assert.equal(call.outcome, 'answered');
    assert.equal(call.durationSec, 102);
    assert.equal(call.startedAt, '2026-11-20T10:00:00.000Z');
    assert.equal(call.endedAt, '2026-11-20T10:01:49.000Z');
    assert.equal(call.direction, 'in');
    assert.equal(call.from, '+492111234567');
    assert.equal(call.to, '+4915799912345');
    assert.deepEqual(
      call.users.map((u) => [u.userId, u.fullUserId, u.fullName]),
      [['w1', '1234567w1', 'Bob Example']],
    );
    assert.equal(call.owner, 'w1');
  });

  test('every event twice (and the hangup three times) still makes one record', async () => {
    at('2026-11-20T11:00:00Z');
    await post(newCall('rep-1'));
    at('2026-11-20T11:00:05Z');
    await post(newCall('rep-1'));
    await post(answer('rep-1'));
    at('2026-11-20T11:00:09Z');
    await post(answer('rep-1', { user: 'Someone Else', userId: 'w9' }));
    at('2026-11-20T11:00:35Z');
    await post(hangup('rep-1'));
    at('2026-11-20T11:00:50Z');
    await post(hangup('rep-1'));
    await post(hangup('rep-1', 'cancel'));
    const calls = await callsOf('rep-1');
    assert.equal(calls.length, 1, 'repeats are duplicates of the one call');
    assert.equal(calls[0]!.durationSec, 30, 'the first answer and the first hangup count');
    assert.equal(calls[0]!.users[0]!.userId, 'w1');
    assert.equal(calls[0]!.startedAt, '2026-11-20T11:00:00.000Z');
  });

  test('hangup before answer (out of order): one call key, the late answer an update of it', async () => {
    at('2026-11-20T12:00:00Z');
    await post(newCall('ooo-1'));
    at('2026-11-20T12:00:30Z');
    await post(hangup('ooo-1'));
    at('2026-11-20T12:00:31Z');
    await post(answer('ooo-1'));
    const calls = await callsOf('ooo-1');
    assert.ok(calls.length >= 1 && calls.length <= 2);
    assert.ok(
      calls.every((c) => c.key === 'push:-:ooo-1'),
      'one record: the same call key',
    );
    assert.ok(
      calls.every((c) => c.outcome === 'answered'),
      'a normal clearing with an answering number is answered',
    );
    const last = calls.at(-1)!;
    assert.equal(last.users[0]!.userId, 'w1', 'the late answer names the answering user');
    assert.equal(last.durationSec, null, 'an answer seen after the hangup gives no duration');
    if (calls.length === 2) assert.equal(last.revision?.update, true);

    // Hangup first, newCall last: still one call, started when its first event arrived.
    at('2026-11-20T12:10:00Z');
    await post(hangup('ooo-2', 'cancel'));
    at('2026-11-20T12:10:01Z');
    await post(newCall('ooo-2'));
    const second = await callsOf('ooo-2');
    assert.ok(second.every((c) => c.key === 'push:-:ooo-2' && c.outcome === 'missed'));
  });

  test('out of order: a newCall after the hangup never puts the start after the end; the start is the first event', async () => {
    at('2026-11-20T12:20:00Z');
    await post(hangup('ooo-3', 'normalClearing', { answeringNumber: '4921155550100' }));
    at('2026-11-20T12:20:02Z');
    await post(answer('ooo-3'));
    at('2026-11-20T12:20:05Z');
    await post(newCall('ooo-3'));
    const calls = await callsOf('ooo-3');
    assert.ok(calls.length >= 1);
    for (const c of calls) {
      assert.equal(c.startedAt, '2026-11-20T12:20:00.000Z', 'started when its first event (the hangup) arrived');
      assert.ok(
        c.endedAt !== null && Date.parse(c.startedAt) <= Date.parse(c.endedAt),
        `start ${c.startedAt} after end ${c.endedAt}`,
      );
      assert.equal(c.durationSec, null, 'an answer after the hangup gives no duration');
    }
  });

  test("an event replayed after the call's events expired is refused (409 with the error body), not delivered as a degraded record", async () => {
    at('2026-11-20T12:30:00Z');
    await post(newCall('replay-1'));
    at('2026-11-20T12:30:02Z');
    await post(answer('replay-1'));
    at('2026-11-20T12:31:00Z');
    const hangupBody = hangup('replay-1');
    assert.equal((await post(hangupBody)).status, 200);
    const before = await callsOf('replay-1');
    assert.equal(before.length, 1);
    assert.equal(before[0]!.outcome, 'answered');
    assert.equal(before[0]!.durationSec, 58);

    // The call's events expire (their TTL, PUSH_CALL_TIMEOUT_SECONDS + 24 h, passed) …
    await redis.del(`${prefix}:push:replay-1`);
    // … and the signed hangup is sent again, or a newCall: neither makes a record of its own.
    at('2026-11-22T12:31:00Z');
    for (const body of [hangupBody, newCall('replay-1')]) {
      const res = await post(body);
      assert.equal(res.status, 409);
      const problem = (
        (await res.json()) as { errors: { status: number; detail: string; source: { pointer: string } }[] }
      ).errors[0]!;
      assert.equal(problem.status, 409);
      assert.equal(problem.source.pointer, '/callId');
      assert.match(problem.detail, /closed and its events have expired/);
    }
    const after = await callsOf('replay-1');
    assert.equal(after.length, 1, 'no degraded update of the call in the inbound log');
    assert.equal(await redis.exists(`${prefix}:push:replay-1`), 0, 'nothing assembled anew');
  });

  test('causes: cancel and noAnswer are missed, busy is busy, forwarded is transferred, congestion failed', async () => {
    const cases: [string, string][] = [
      ['cancel', 'missed'],
      ['noAnswer', 'missed'],
      ['busy', 'busy'],
      ['forwarded', 'transferred'],
      ['congestion', 'failed'],
      ['notFound', 'failed'],
    ];
    for (const [cause, outcome] of cases) {
      const id = `cause-${cause}`;
      await post(newCall(id));
      await post(hangup(id, cause));
      const [call] = await callsOf(id);
      assert.equal(call?.outcome, outcome, cause);
      assert.equal(call?.durationSec, null, cause);
      assert.deepEqual(
        call?.users.map((u) => u.userId),
        ['w0', 'w1'],
        'not answered: the users the call rang',
      );
    }
  });

  test('a call whose hangup never comes is closed as unknown after the timeout, once; a late hangup updates it', async () => {
    const short = new PushAssembly(redis, { prefix: `${prefix}-t`, timeoutMs: 2000, now });
    const accepted: CanonicalCall[] = [];
    const acceptOne = async (call: CanonicalCall) => {
      accepted.push(call);
      return acceptor.accept(call);
    };
    at('2026-11-20T13:00:00Z');
    await short.record({
      event: 'newCall',
      callId: 'lost-1',
      fields: { event: 'newCall', callId: 'lost-1', direction: 'in', from: '492111234567', to: '4915799912345' },
      lists: {},
    });
    at('2026-11-20T13:00:01Z');
    await short.record({
      event: 'answer',
      callId: 'lost-1',
      fields: { event: 'answer', callId: 'lost-1', userId: 'w1' },
      lists: {},
    });
    assert.equal(await short.sweep(acceptOne), 0, 'before the deadline nothing closes');
    at('2026-11-20T13:00:02.500Z');
    const [a, b] = await Promise.all([short.sweep(acceptOne), short.sweep(acceptOne)]);
    assert.equal(a + b, 1, 'two sweepers at once close the call once');
    assert.equal(accepted.length, 1);
    assert.equal(accepted[0]!.outcome, 'unknown');
    assert.equal(accepted[0]!.endedAt, null);
    assert.equal(accepted[0]!.users[0]!.userId, 'w1');
    assert.equal(await short.sweep(acceptOne), 0, 'a closed call is not closed again');
    // The hangup arrives after all: the same call, now with its real outcome.
    at('2026-11-20T13:00:40Z');
    const late = await short.record({
      event: 'hangup',
      callId: 'lost-1',
      fields: { event: 'hangup', callId: 'lost-1', cause: 'normalClearing' },
      lists: {},
    });
    assert.equal(late?.key, accepted[0]!.key);
    assert.equal(late?.outcome, 'answered');
    assert.equal(late?.durationSec, 39);
  });

  test('a sweep whose accept fails leaves the call open for the next sweep', async () => {
    const short = new PushAssembly(redis, { prefix: `${prefix}-f`, timeoutMs: 1000, now });
    at('2026-11-20T14:00:00Z');
    await short.record({
      event: 'newCall',
      callId: 'retry-1',
      fields: { event: 'newCall', callId: 'retry-1' },
      lists: {},
    });
    at('2026-11-20T14:00:05Z');
    await assert.rejects(
      short.sweep(async () => {
        throw new Error('redis away');
      }),
      /redis away/,
    );
    const closed: CanonicalCall[] = [];
    assert.equal(await short.sweep(async (c) => closed.push(c)), 1);
    assert.equal(closed[0]!.outcome, 'unknown');
  });

  test('a sweeper that stops between its claim and the accept leaves the call to the next sweep after its lease', async () => {
    const short = new PushAssembly(redis, { prefix: `${prefix}-c`, timeoutMs: 1000, now });
    const open = pushOpenKey(`${prefix}-c`);
    at('2026-11-20T15:00:00Z');
    await short.record({
      event: 'newCall',
      callId: 'crash-1',
      fields: { event: 'newCall', callId: 'crash-1' },
      lists: {},
    });
    at('2026-11-20T15:00:05Z');
    // The accept never returns: the process died there (kill -9, a failover), nothing after it runs.
    let claimed = false;
    void short.sweep(() => {
      claimed = true;
      return new Promise(() => undefined);
    });
    await waitFor(async () => (claimed ? true : null), { what: 'the claim' });
    const closed: CanonicalCall[] = [];
    assert.equal(await short.sweep(async (c) => closed.push(c)), 0, 'within the lease no other sweeper takes it');
    // Before, the claim had taken it off the open set: no sweep ever closed it, its events expired.
    at(new Date(Date.parse('2026-11-20T15:00:05Z') + PUSH_CLAIM_LEASE_MS + 1000).toISOString());
    assert.equal(await short.sweep(async (c) => closed.push(c)), 1);
    assert.equal(closed[0]!.outcome, 'unknown');
    assert.equal(await redis.zscore(open, 'crash-1'), null, 'off the open set once accepted');
    assert.equal(await short.sweep(async (c) => closed.push(c)), 0);
  });

  test('a backlog of calls without hangup is closed batch after batch in one sweep, not 100 a tick', async () => {
    const short = new PushAssembly(redis, { prefix: `${prefix}-b`, timeoutMs: 1000, now });
    at('2026-11-20T16:00:00Z');
    for (let i = 0; i < 250; i++)
      await short.record({
        event: 'newCall',
        callId: `backlog-${i}`,
        fields: { event: 'newCall', callId: `backlog-${i}` },
        lists: {},
      });
    at('2026-11-20T16:00:05Z');
    const closed = new Set<string>();
    assert.equal(await short.sweepDue(async (c) => closed.add(c.callId), 30_000), 250);
    assert.equal(closed.size, 250);
    assert.equal(await redis.zcard(pushOpenKey(`${prefix}-b`)), 0);
  });

  test('bad input: not a form, no event, no call id, too large; dtmf stores nothing', async () => {
    const asJson = await post('{"event":"newCall"}', { contentType: 'application/json' });
    assert.equal(asJson.status, 415);
    const none = await post('callId=x1');
    assert.equal(none.status, 400);
    assert.equal(
      ((await none.json()) as { errors: { source: { pointer: string } }[] }).errors[0]!.source.pointer,
      '/event',
    );
    // An event of a kind callsync does not know is taken and not stored (as dtmf).
    const unknown = await post('event=ringing&callId=x1');
    assert.equal(unknown.status, 200);
    assert.match(await unknown.text(), /<Response\/>\n$/);
    assert.equal(await redis.exists(`${prefix}:push:x1`), 0);
    assert.equal((await post('event=answer')).status, 400);
    assert.equal((await post('event=answer&callId=a%2Fb')).status, 400);
    const big = `event=newCall&callId=big-1&pad=${'a'.repeat(70 * 1024)}`;
    assert.equal((await post(big)).status, 413);
    assert.equal((await post(dtmf('dtmf-1'))).status, 200);
    assert.equal(await redis.exists(`${prefix}:push:dtmf-1`), 0);
    assert.equal(
      (await app.request('/webhooks/push', { method: 'GET', headers: { 'x-test-peer': PLATFORM_IP } })).status,
      405,
    );
  });

  test('charsets: the declared one is decoded (escapes too); bytes that are not text in it are read as windows-1252 and counted, never a 400', async () => {
    // Before: 400 "the body is not UTF-8" for a declared ISO-8859-1 body, and for a name sent in
    // Latin-1 without a charset — the call's event was lost for a name nothing needs.
    const postBytes = (body: Buffer, contentType: string) =>
      app.request('/webhooks/push', {
        method: 'POST',
        headers: { 'content-type': contentType, 'x-test-peer': PLATFORM_IP, 'x-sipgate-signature': sign(keys, body) },
        body,
      });
    const form = 'application/x-www-form-urlencoded';
    const latin1 = (text: string) => Buffer.from(text, 'latin1');
    const userOf = async (callId: string, newCallBody: Buffer, contentType: string) => {
      assert.equal((await postBytes(newCallBody, contentType)).status, 200, callId);
      assert.equal((await post(hangup(callId, 'cancel'))).status, 200, callId);
      const [call] = await callsOf(callId);
      return call?.users[0]?.fullName;
    };
    const iso = `${form}; charset=ISO-8859-1`;
    assert.equal(await userOf('cs-1', latin1('event=newCall&callId=cs-1&user[]=M\xfcller'), iso), 'Müller');
    assert.equal(await userOf('cs-2', latin1('event=newCall&callId=cs-2&user%5B%5D=M%FCller+S.'), iso), 'Müller S.');
    assert.equal(
      await userOf('cs-3', Buffer.from('event=newCall&callId=cs-3&user[]=M%C3%BCller+%26+Co', 'utf8'), form),
      'Müller & Co',
      'UTF-8 as before',
    );
    const notRead = () =>
      memory.lines.filter((l) => l.field === 'user' && String(l.msg).startsWith('webhook field not read'));
    assert.equal(notRead().length, 0, 'text in its charset is read');
    // No charset, not UTF-8: read as windows-1252 (every byte kept), counted and logged once.
    assert.equal(await userOf('cs-4', latin1('event=newCall&callId=cs-4&user[]=M\xfcller'), form), 'Müller');
    assert.equal(await userOf('cs-5', latin1('event=newCall&callId=cs-5&user%5B%5D=M%FCller'), form), 'Müller');
    assert.equal(notRead().length, 1);
    assert.match(String(notRead()[0]!.detail), /windows-1252/);
    assert.ok(!JSON.stringify(memory.lines).includes('Müller'), 'no value reaches the log');
    // A charset callsync does not decode, or UTF-16 (a form's `&` and `=` are single bytes): 415.
    for (const charset of ['koi8-r', 'utf-16le']) {
      const res = await postBytes(latin1('event=newCall&callId=cs-6'), `${form}; charset=${charset}`);
      assert.equal(res.status, 415, charset);
      assert.equal(
        ((await res.json()) as { errors: { source: { pointer: string } }[] }).errors[0]!.source.pointer,
        'content-type',
      );
    }
  });

  test('PUSH_API_VERIFY=false: unsigned requests are taken', async () => {
    const open = makeApp({ verify: false });
    assert.equal((await post(newCall('nover-1'), { app: open, signature: null })).status, 200);
    assert.equal((await post(hangup('nover-1', 'busy'), { app: open, signature: null })).status, 200);
    assert.equal((await callsOf('nover-1'))[0]?.outcome, 'busy');
  });
});

describe('Push API through a running callsync', () => {
  let cs: TestCallsync;
  let dir: string;
  // Records what reaches the `archive` sink (routed by `when: { source: push }`): the calls made it
  // through the inbound log, the routes and the fan-out.
  const delivered: CanonicalCall[] = [];
  const sink: Sink = {
    name: 'archive',
    type: 'archive',
    async deliver(call) {
      delivered.push(call);
      return { status: 'done', refs: {} };
    },
  };
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-push-'));
    // A route on the new source: calls without transcript or summary go nowhere by default.
    await writeFile(
      join(dir, 'callsync.yaml'),
      `sinks:\n  archive:\n    type: archive\n    dir: ${dir}\nroutes:\n  - when: { source: push }\n    to: [archive]\n`,
    );
    cs = await startTestCallsync(
      {
        CALLSYNC_CONFIG: join(dir, 'callsync.yaml'),
        PUSH_API_PUBLIC_KEY: keys.publicKeyPem.replace(/\n/g, '\\n'),
        PUSH_API_PUBLIC_URL: 'https://calls.example.com',
        PUSH_CALL_TIMEOUT_SECONDS: '1',
        SPOOL_ENABLED: 'false',
      },
      { sinks: new Map([['archive', sink]]) },
    );
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const send = (body: string, signature = sign(keys, body)) =>
    fetch(`${cs.url}/webhooks/push`, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-sipgate-signature': signature },
      body,
    });

  test('signed events over HTTP become one call that reaches the sinks; a forged one is 401', async () => {
    const xml = await (await send(newCall('e2e-1'))).text();
    assert.match(xml, /onHangup="https:\/\/calls\.example\.com\/webhooks\/push"/);
    assert.equal((await send(answer('e2e-1'))).status, 200);
    assert.equal((await send(hangup('e2e-1'), sign(otherKeys, hangup('e2e-1')))).status, 401);
    assert.equal((await send(hangup('e2e-1'))).status, 200);
    assert.equal((await send(hangup('e2e-1'))).status, 200);
    const call = await waitFor(() => delivered.find((c) => c.callId === 'e2e-1'), {
      timeoutMs: 15_000,
      what: 'the push call delivered',
    });
    assert.equal(call.outcome, 'answered');
    assert.equal(call.source, 'push');
    assert.equal(call.users[0]!.userId, 'w1');
  });

  test('the worker role closes a call without hangup as unknown after PUSH_CALL_TIMEOUT_SECONDS', async () => {
    assert.equal((await send(newCall('e2e-lost'))).status, 200);
    const call = await waitFor(() => delivered.find((c) => c.callId === 'e2e-lost'), {
      timeoutMs: 15_000,
      what: 'the swept call',
    });
    assert.equal(call.outcome, 'unknown');
    assert.equal(call.source, 'push');
    assert.equal(delivered.filter((c) => c.callId === 'e2e-1').length, 1, 'the repeated hangup was a duplicate');
  });
});
