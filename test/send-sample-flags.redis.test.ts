// `callsync send-sample --from --to --direction --outcome`: the sample call as chosen reaches the
// sinks (an answered one as a webhook, another outcome as the Push API's events), so rules on the
// number, direction and outcome can be tried; a bad value is a usage error that says what to give.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sampleOptions } from '../src/cli/sample.js';
import type { CanonicalCall } from '../src/model/call.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';
import { cli } from './support/cli.js';

/** A sink that keeps the calls it is given. */
class RecordingSink implements Sink {
  readonly type = 'archive';
  readonly calls: CanonicalCall[] = [];
  constructor(readonly name: string) {}
  async deliver(call: CanonicalCall): Promise<SinkResult> {
    this.calls.push(call);
    return { status: 'done' };
  }
}

describe('send-sample flags: bad values', () => {
  test('each is a usage error (exit 2) naming the flag and what to give', async () => {
    const cases: [string[], RegExp][] = [
      [['--from', '12'], /--from "12" is not a number the ingress reads: give it with its country code/],
      [['--from', '0151 12345678'], /--from "0151 12345678" .*a national number \(0151 …\) is kept as text only/],
      [['--to', 'nobody'], /--to "nobody" is not a number the ingress reads/],
      [['--direction', 'sideways'], /--direction "sideways": use in or out/],
      [['--outcome', 'lost'], /--outcome "lost": use answered, missed, busy, transferred, failed or unknown\n/],
      [['--outcome', 'rejected'], /--outcome rejected: only channel events/],
    ];
    for (const [args, expected] of cases) {
      const r = await cli(['send-sample', ...args, '--url', 'http://127.0.0.1:9/webhooks/ai-agent']);
      assert.equal(r.code, 2, args.join(' '));
      assert.match(r.err, expected);
    }
  });

  test('the outcomes the error offers are the ones --help and the README list, and each is accepted', async () => {
    const offered = /use (.*)\n/.exec((await cli(['send-sample', '--outcome', 'lost'])).err)?.[1];
    assert.ok(offered);
    const words = offered.replace(' or ', ', ').split(', ');
    const help = (await cli(['send-sample', '--help'])).out.replace(/\s+/g, ' ');
    assert.match(
      help,
      new RegExp(`--outcome OUTCOME ${words[0]} \\(default\\), ${words.slice(1, -1).join(', ')} or ${words.at(-1)}\\.`),
    );
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
    assert.ok(readme.includes(`\`--outcome ${words.join('\\|')}\``), 'README lists the same outcomes');
    assert.deepEqual(words, ['answered', 'missed', 'busy', 'transferred', 'failed', 'unknown']);
    for (const outcome of words) assert.equal(sampleOptions({ outcome }).outcome, outcome);
  });
});

describe('send-sample flags against a running callsync', () => {
  let dir: string;
  let cs: OpsCallsync;
  let env: Record<string, string>;
  const sink = new RecordingSink('everything');

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-sample-flags-'));
    const file = join(dir, 'callsync.yaml');
    await writeFile(
      file,
      `sinks:\n  everything: { type: archive, dir: ${join(dir, 'archive')} }\nroutes:\n  - to: everything\n`,
    );
    env = { CALLSYNC_CONFIG: file, PUSH_API_VERIFY: 'false', SPOOL_DIR: join(dir, 'spool') };
    cs = await startOpsCallsync(env, { sinks: new Map([['everything', sink]]) });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const received = (id: string) =>
    waitFor(() => sink.calls.find((c) => c.callId === id), { timeoutMs: 20_000, what: `call ${id} delivered` });
  const callIdOf = (out: string) => /accepted: call (\S+)/.exec(out)?.[1] ?? assert.fail(out);

  test('--from, --to and --direction: the webhook call carries them, the numbers read as E.164', async () => {
    const r = await cli(
      [
        'send-sample',
        '--url',
        `${cs.url}/webhooks/ai-agent/sample-agent`,
        '--from',
        '+49 151 1234 5678',
        '--to',
        '004940809010',
        '--direction',
        'inbound',
      ],
      { ...env, QUEUE_PREFIX: cs.prefix },
    );
    assert.equal(r.code, 0, r.err);
    const call = await received(callIdOf(r.out));
    assert.deepEqual(
      [call.source, call.from, call.to, call.direction, call.outcome],
      ['ai-agent', '+4915112345678', '+4940809010', 'in', 'answered'],
    );
  });

  test('--outcome missed: the Push API events of a missed call, which the routes see as such', async () => {
    const r = await cli(
      [
        'send-sample',
        '--url',
        `${cs.url}/webhooks/ai-agent/sample-agent`,
        '--from',
        '4915112345678',
        '--outcome',
        'missed',
      ],
      { ...env, QUEUE_PREFIX: cs.prefix },
    );
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /as Push API events \(newCall, hangup cause noAnswer\): outcome missed, direction in/);
    assert.match(r.out, /job [0-9a-f]+ in sink-everything/);
    const call = await received(callIdOf(r.out));
    assert.deepEqual(
      [call.source, call.from, call.direction, call.outcome],
      ['push', '+4915112345678', 'in', 'missed'],
    );
    const out = await cli(
      [
        'send-sample',
        '--url',
        `${cs.url}/webhooks/ai-agent`,
        '--direction',
        'out',
        '--to',
        '+4915112345678',
        '--outcome',
        'busy',
      ],
      { ...env, QUEUE_PREFIX: cs.prefix },
    );
    assert.equal(out.code, 0, out.err);
    const busy = await received(callIdOf(out.out));
    assert.deepEqual([busy.direction, busy.to, busy.outcome], ['out', '+4915112345678', 'busy']);
  });

  test('an ingress that checks Push API signatures refuses them, and the hint says why', async () => {
    const checking = await startOpsCallsync({ ...env, PUSH_API_VERIFY: 'true', SPOOL_DIR: join(dir, 'spool-2') });
    try {
      const r = await cli(['send-sample', '--url', `${checking.url}/webhooks/ai-agent`, '--outcome', 'missed'], {
        ...env,
        QUEUE_PREFIX: checking.prefix,
      });
      assert.equal(r.code, 1);
      assert.match(r.err, /answered 401 to the newCall event/);
      assert.match(r.err, /hint: .*PUSH_API_VERIFY=false/);
    } finally {
      await checking.stop();
    }
  });
});
