// Sink state per job in two round trips (issue 26): the call's lock taken together with what the
// job reads (the revision stamp, a "sent" marker), and what it writes set as the lock is released —
// by script SHA (EVALSHA), the script text sent only when the server does not know it yet. Watched
// with MONITOR on a private redis-server: every command the store's client sends is counted.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { RetryLaterError } from '../src/errors.js';
import { callHash } from '../src/model/call.js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ArchiveSink } from '../src/sinks/archive/index.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { WebhookSink, webhookSinkType } from '../src/sinks/crm/webhook.js';
import { RevisionGuard } from '../src/sinks/revisions.js';
import { sampleCall } from './support/calls.js';
import { crmTestDeps } from './support/crm-deps.js';
import { FakeWebhookReceiver } from './support/fake-sink-server.js';
import { RedisKeyValueStore } from '../src/state/kv.js';
import { startPrivateRedis, type PrivateRedis } from './support/redis-server.js';
import { createLogger } from '../src/log.js';
import { PermanentError } from '../src/errors.js';
import { OptOutList } from '../src/sinks/notify/opt-out.js';
import { smsSinkType } from '../src/sinks/notify/sms.js';

/** What the SMS sink type builds its sinks with (SinkDeps with its settings). */
type NotifySinkDeps = Parameters<typeof smsSinkType.create>[2];
import { createTelephonyClient } from '../src/telephony/client.js';
import { FakeTelephony } from './support/fake-telephony.js';
import { monitorOf } from './support/monitor.js';

interface Sent {
  name: string;
  lua: boolean;
}

describe('sink state round trips', () => {
  let server: PrivateRedis;
  let redis: Redis;
  let watcher: Redis;
  let monitor: {
    on(e: 'monitor', fn: (time: string, args: string[], source: string) => void): void;
    disconnect(): void;
  };
  const seen: Sent[] = [];

  before(async () => {
    server = await startPrivateRedis({ appendonly: false });
    redis = new Redis(server.url, { maxRetriesPerRequest: 1 });
    await redis.ping();
    watcher = new Redis(server.url, { maxRetriesPerRequest: 1 });
    monitor = (await monitorOf(watcher)) as unknown as typeof monitor;
    monitor.on('monitor', (_time, args, source) =>
      seen.push({ name: String(args[0]).toLowerCase(), lua: source === 'lua' }),
    );
  });

  after(async () => {
    monitor.disconnect();
    watcher.disconnect();
    redis.disconnect();
    await server.destroy();
  });

  /** The commands the client sent while `fn` ran (MONITOR's lines arrive just after: waited for with a PING marker). */
  async function sentDuring(fn: () => Promise<unknown>): Promise<string[]> {
    await settle();
    seen.length = 0;
    await fn().catch((err: unknown) => err);
    await settle();
    return seen.filter((c) => !c.lua && c.name !== 'ping').map((c) => c.name);
  }
  async function settle(): Promise<void> {
    const before = seen.filter((c) => c.name === 'ping').length;
    await redis.ping();
    for (let i = 0; i < 200 && seen.filter((c) => c.name === 'ping').length === before; i++)
      await new Promise((r) => setTimeout(r, 10));
  }

  const guard = () =>
    new RevisionGuard(new RedisKeyValueStore(redis, 'rt:{q}:').scoped('sink'), {
      what: 'the test sink',
      lockTtlMs: 60_000,
    });
  const r1 = { stamp: '1775642600000-0', update: false, content: 'a' };
  const r2 = { stamp: '1775642600000-1', update: true, content: 'b' };

  it('a delivery: one script takes the lock and reads, one writes the stamp and releases; never the script text again', async () => {
    // The first ever run may send each script's text once (NOSCRIPT, then EVAL): not counted.
    await guard().deliver('warm-up', { jobId: 'w', revision: r1 }, async () => ({ status: 'done' }));

    const written = await sentDuring(() =>
      guard().deliver('call-1', { jobId: 'job-2', revision: r2 }, async () => ({ status: 'done' })),
    );
    assert.deepEqual(written, ['evalsha', 'evalsha']);
    assert.equal(await redis.get(`rt:{q}:sink:lock:${callHash('call-1')}`), null, 'the lock is released');

    let ran = false;
    const older = await sentDuring(async () => {
      const result = await guard().deliver('call-1', { jobId: 'job-1', revision: r1 }, async () => {
        ran = true;
        return { status: 'done' };
      });
      assert.equal(result.status, 'skipped');
    });
    assert.equal(ran, false, 'an older revision is not written');
    assert.deepEqual(older, ['evalsha', 'evalsha']);
  });

  it('a lock held by another job: one round trip, then a wait; an earlier attempt of the same job is taken over', async () => {
    const lockKey = `rt:{q}:sink:lock:${callHash('call-2')}`;
    await redis.set(lockKey, 'other-job 0a0b0c', 'PX', 60_000);
    let thrown: unknown;
    const waited = await sentDuring(async () => {
      thrown = await guard()
        .deliver('call-2', { jobId: 'job-9', revision: r1 }, async () => ({ status: 'done' }))
        .catch((err: unknown) => err);
    });
    assert.ok(thrown instanceof RetryLaterError, 'another job holds the lock: wait');
    assert.deepEqual(waited, ['evalsha']);
    assert.equal(await redis.get(lockKey), 'other-job 0a0b0c', 'the other job keeps its lock');

    // A job id with spaces in it is compared up to the token's last space.
    await redis.set(lockKey, 'job 9 0d0e0f', 'PX', 60_000);
    const tookOver = await sentDuring(() =>
      guard().deliver('call-2', { jobId: 'job 9', revision: r1 }, async () => ({ status: 'done' })),
    );
    assert.deepEqual(tookOver, ['evalsha', 'evalsha']);
    assert.equal(await redis.get(lockKey), null);
    assert.equal(await redis.get(`rt:{q}:sink:rev:${callHash('call-2')}`), r1.stamp);
  });

  it('a failed write keeps nothing of the job: no stamp, the lock released', async () => {
    await assert.rejects(
      guard().deliver('call-3', { jobId: 'job-3', revision: r2 }, async () => {
        throw new Error('remote down');
      }),
      /remote down/,
    );
    assert.equal(await redis.get(`rt:{q}:sink:rev:${callHash('call-3')}`), null);
    assert.equal(await redis.get(`rt:{q}:sink:lock:${callHash('call-3')}`), null);
  });

  it('the archive and the signed webhook: two round trips of sink state per job, a redelivery too', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-rt-'));
    const secret = `whsec_${randomBytes(32).toString('base64')}`;
    const deps = crmTestDeps({ CRM_WEBHOOK_SECRET: secret });
    deps.clock.now = Date.now(); // the receiver checks the signature's timestamp against the real clock
    const receiver = await new FakeWebhookReceiver(secret).start();
    try {
      const state = new RedisKeyValueStore(redis, 'rt:{q}:');
      const call = sampleCall('rt-call');
      const revision = { stamp: '1775642600000-0', update: false, content: 'a' };
      const ctx = { ...deps.ctx(), jobId: 'job-a', revision };
      const archive = new ArchiveSink('archive', new LocalFolderStore(dir), undefined, null, state.scoped('archive'));
      const webhook = new WebhookSink('webhook', webhookSinkType.options.parse({ urls: [receiver.url] }), {
        ...deps,
        state: state.scoped('webhook'),
      });
      await archive.deliver(sampleCall('rt-warm-up'), ctx);

      assert.deepEqual(await sentDuring(() => archive.deliver(call, ctx)), ['evalsha', 'evalsha']);
      assert.equal(
        await redis.get(`rt:{q}:archive:day:${callHash(call.key)}`),
        '2026/04/08',
        'the day the call was filed under is remembered',
      );
      assert.deepEqual(await sentDuring(() => archive.deliver(call, ctx)), ['evalsha', 'evalsha']);

      assert.deepEqual(await sentDuring(() => webhook.deliver(call, ctx)), ['evalsha', 'evalsha']);
      const again = await sentDuring(async () => {
        const result = await webhook.deliver(call, ctx);
        assert.match(result.reason ?? '', /already had this message/);
      });
      assert.deepEqual(again, ['evalsha', 'evalsha']);
      assert.equal(receiver.requests, 1, 'a redelivery sends nothing');
    } finally {
      await receiver.stop();
      await deps.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
  it('the SMS sink: one script reads the marker, tests the opt-out list and takes the marker; one SET after the send', async () => {
    const api = await FakeTelephony.start();
    try {
      const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, timeoutMs: 300 });
      const optOut = new OptOutList(redis, 'rt:{q}', 'test-privacy-key');
      const sms = smsSinkType.create(
        'sms',
        smsSinkType.options.parse({ smsId: 's0', message: 'Hi {{time}}', timeZone: 'Europe/Berlin' }),
        {
          log: createLogger({ level: 'silent' }),
          state: new RedisKeyValueStore(redis, 'rt:{q}:state:').scoped('sms'),
          telephony: client,
          now: () => new Date('2026-04-08T10:05:00Z'),
          settings: { PRIVACY_HMAC_SECRET: 'test-privacy-key' },
          optOut,
        } as unknown as NotifySinkDeps,
      );
      const ctx = {
        jobId: 'sms-job',
        attempt: 1,
        log: createLogger({ level: 'silent' }),
        signal: new AbortController().signal,
      };
      const mobile = '+4915112345678';
      const call = (id: string, from = mobile) => ({
        ...sampleCall(id),
        from,
        fromRaw: from,
        direction: 'in' as const,
      });
      await sms.deliver(call('sms-warm-up', '+4915112340000'), ctx);

      assert.deepEqual(await sentDuring(() => sms.deliver(call('sms-1'), ctx)), ['evalsha', 'set']);
      assert.equal(api.sms.length, 2);
      const again = await sentDuring(async () => {
        const result = await sms.deliver(call('sms-1'), ctx);
        assert.match(result.reason ?? '', /already sent/);
      });
      assert.deepEqual(again, ['evalsha'], 'a redelivery: one round trip, nothing sent');
      assert.equal(api.sms.length, 2);

      await optOut.add('+4917612345678');
      const opted = await sentDuring(async () => {
        const result = await sms.deliver(call('sms-2', '+4917612345678'), ctx);
        assert.match(result.reason ?? '', /opted out/);
      });
      assert.deepEqual(opted, ['evalsha'], 'the opt-out list is tested in the same script, no marker taken');
      assert.equal(api.sms.length, 2);
      assert.deepEqual(await redis.keys('rt:{q}:state:sms:sent:*').then((k) => k.length), 2);

      // An unknown outcome: the marker was taken before the send, so it becomes `unknown` (dead letters).
      api.inject({ on: 'sms', delayMs: 800 });
      const unknown = await sentDuring(async () => {
        await assert.rejects(sms.deliver(call('sms-3'), ctx), (err: unknown) => {
          assert.ok(err instanceof PermanentError);
          assert.match(err.message, /outcome unknown/);
          return true;
        });
      });
      assert.deepEqual(unknown, ['evalsha', 'set']);
      // A later delivery of the call (another job) is skipped, not resent.
      assert.match(
        (await sms.deliver(call('sms-3'), { ...ctx, jobId: 'sms-job-2' })).reason ?? '',
        /outcome is unknown; not resent/,
      );
      assert.equal(api.sms.length, 3, 'the late-answered one went out once, never again');
    } finally {
      await api.close();
    }
  });
  it("the SMS sink with the attempt's timeline entries: the last recipient's marker and the entries in one script", async () => {
    const api = await FakeTelephony.start();
    try {
      const client = createTelephonyClient({ baseUrl: api.url, auth: api.basicAuth, timeoutMs: 300 });
      const deps = {
        log: createLogger({ level: 'silent' }),
        state: new RedisKeyValueStore(redis, 'rt:{q}:state:').scoped('sms-tl'),
        telephony: client,
        now: () => new Date('2026-04-08T10:05:00Z'),
        settings: { PRIVACY_HMAC_SECRET: 'test-privacy-key' },
      } as unknown as NotifySinkDeps;
      const create = (to?: string[]) =>
        smsSinkType.create(
          'sms-tl',
          smsSinkType.options.parse({ smsId: 's0', message: 'Hi', ...(to ? { to } : {}) }),
          deps,
        );
      const list = 'rt:{q}:timeline:sms-tl';
      const written: unknown[] = [];
      // As workers/attempts.ts builds it: the attempt's start and outcome, for the result it ends with.
      const ctx = (jobId: string) => ({
        jobId,
        attempt: 1,
        log: createLogger({ level: 'silent' }),
        signal: new AbortController().signal,
        outcome: {
          entries: (r: { status: string }) => ({
            key: list,
            values: [JSON.stringify({ event: 'attempt', jobId }), JSON.stringify({ event: r.status, jobId })],
            max: 200,
            ttlMs: 60_000,
          }),
          written: (r: unknown) => void written.push(r),
        },
      });
      const call = (id: string) => ({
        ...sampleCall(id),
        from: '+4915112345678',
        fromRaw: '+4915112345678',
        direction: 'in' as const,
      });
      const sms = create();
      await sms.deliver(call('sms-tl-warm-up'), ctx('warm-up'));
      await redis.del(list);
      written.length = 0;

      let result: unknown;
      const commands = await sentDuring(async () => (result = await sms.deliver(call('sms-tl-1'), ctx('job-1'))));
      assert.deepEqual(commands, ['evalsha', 'evalsha'], 'the claim; then the marker and the entries together');
      assert.deepEqual(written, [result], 'the attempt hears that its entries are written, for this result');
      assert.deepEqual(
        (await redis.lrange(list, 0, -1)).map((t) => JSON.parse(t) as unknown),
        [
          { event: 'attempt', jobId: 'job-1' },
          { event: 'done', jobId: 'job-1' },
        ],
      );
      assert.ok((await redis.pttl(list)) > 0);
      const markers = await redis.keys('rt:{q}:state:sms-tl:sent:*');
      const states = await Promise.all(
        markers.map(async (k) => (JSON.parse((await redis.get(k))!) as { state: string }).state),
      );
      assert.deepEqual(states, ['sent', 'sent']);
      const again = await sms.deliver(call('sms-tl-1'), ctx('job-2'));
      assert.match(again.reason ?? '', /already sent/);
      assert.equal(api.sms.length, 2);

      // Two recipients: the first's marker is written as soon as it is sent, the last's with the entries.
      written.length = 0;
      const two = create(['+4915112340001', '+4915112340002']);
      assert.deepEqual(await sentDuring(() => two.deliver(call('sms-tl-2'), ctx('job-3'))), [
        'evalsha',
        'evalsha',
        'set',
        'evalsha',
      ]);
      assert.equal(written.length, 1);
      assert.equal(api.sms.length, 4);

      // An unknown outcome is written at once (`unknown`), as without entries; the attempt writes its own.
      written.length = 0;
      api.inject({ on: 'sms', delayMs: 800 });
      const unknown = await sentDuring(() =>
        assert.rejects(sms.deliver(call('sms-tl-3'), ctx('job-4')), /outcome unknown/),
      );
      assert.deepEqual(unknown, ['evalsha', 'set']);
      assert.deepEqual(written, []);

      // The marker's write fails after the send (Redis refuses writes while the SMS is on its way):
      // the attempt fails, nothing is written for it, and its retry finds the marker `sending` and
      // does not send again (it waits, then dead-letters as "outcome unknown").
      written.length = 0;
      const before = api.sms.length;
      api.inject({ on: 'sms', delayMs: 400 });
      const failing = sms.deliver(call('sms-tl-4'), ctx('job-5'));
      await new Promise((r) => setTimeout(r, 150));
      await redis.config('SET', 'maxmemory-policy', 'noeviction');
      await redis.config('SET', 'maxmemory', '1');
      try {
        await assert.rejects(failing, /OOM/);
      } finally {
        await redis.config('SET', 'maxmemory', '0');
      }
      assert.equal(api.sms.length, before + 1, 'the SMS went out');
      assert.deepEqual(written, []);
      assert.deepEqual(await redis.lrange(list, 0, -1).then((l) => l.filter((t) => t.includes('job-5'))), []);
      await assert.rejects(sms.deliver(call('sms-tl-4'), ctx('job-5')), RetryLaterError);
      assert.equal(api.sms.length, before + 1, 'never twice');
    } finally {
      await api.close();
    }
  });
});
