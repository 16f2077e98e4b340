// The `callsync` command line: help on every command, check-config, dlq list/retry/purge against
// real queues, send-sample against a running ingress, opt-out against Redis, and the bin launcher.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Queue, UnrecoverableError, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import { InboundLog } from '../queues/inbound.js';
import { sinkQueueName } from '../queues/registry.js';
import type { TimelineEntry } from '../queues/timeline.js';
import { callCommand, callsCommand, refusedCommand } from '../src/cli/calls.js';
import { help, runCli } from '../src/cli/index.js';
import type { CliIo } from '../src/cli/io.js';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { FlakySink } from './support/flaky-sink.js';
import { jobIn } from './support/jobs.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix, waitFor } from './support/redis.js';
import { startPrivateRedis } from './support/redis-server.js';
import { cli } from './support/cli.js';

const run = promisify(execFile);
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

describe('help', () => {
  test('the main help lists every command; every command has --help', async () => {
    const main = await cli(['--help']);
    assert.equal(main.code, 0);
    for (const cmd of [
      'start',
      'check-config',
      'dlq',
      'resume',
      'send-sample',
      'opt-out',
      'backfill',
      'replay',
      'migrate-keys',
    ]) {
      assert.match(main.out, new RegExp(`^  ${cmd}`, 'm'));
      const r = await cli([cmd, '--help']);
      assert.equal(r.code, 0, cmd);
      assert.match(r.out, new RegExp(`^Usage: callsync ${cmd}`), cmd);
    }
  });

  test('--version and -v print the version of package.json, exit 0', async () => {
    const { version } = JSON.parse(await readFile(new URL('../package.json', import.meta.url), 'utf8')) as {
      version: string;
    };
    for (const flag of ['--version', '-v']) {
      const r = await cli([flag]);
      assert.deepEqual([r.code, r.out, r.err], [0, version, ''], flag);
    }
  });

  test("the main help, README's command table and the command's Usage line name every option of its help", async () => {
    const main = (await cli(['--help'])).out;
    const readme = await readFile(new URL('../README.md', import.meta.url), 'utf8');
    for (const [cmd, text] of Object.entries(help)) {
      if (cmd === 'main') continue;
      const options = [...text.matchAll(/^ {2}(--[a-z-]+)/gm)].map((m) => m[1]!).filter((o) => o !== '--help');
      // The command's lines in the main help: from "  <cmd> " to the next command.
      const entry = new RegExp(`^ {2}${cmd} [\\s\\S]*?(?=^ {2}[a-z-]+ |\\n\\n)`, 'm').exec(main)?.[0];
      assert.ok(entry, `${cmd} in the main help`);
      const rows = readme
        .split('\n')
        .filter((l) => l.startsWith(`| \`callsync ${cmd} `))
        .map((l) => l.split('` |')[0])
        .join(' ');
      assert.ok(rows, `${cmd} in the README's table`);
      const usage = text.split('\n')[0]!;
      for (const option of options) {
        assert.ok(usage.includes(option), `the Usage line of callsync ${cmd} --help names ${option}`);
        assert.ok(entry.includes(option), `the main help's ${cmd} names ${option}`);
        assert.ok(rows.includes(option), `the README's ${cmd} names ${option}`);
      }
    }
    // A signed webhook's endpoint has a queue of its own, which --queue takes.
    assert.match(help.dlq, /--queue NAME +one queue: .*sink-<name>\.<endpoint>/);
  });

  test("every option a command's help lists is one its parser takes", async () => {
    const io: CliIo = { env: {}, out: () => undefined, err: () => undefined };
    // With --help a command parses its arguments and prints its help (exit 0) before it reads the
    // configuration; an option it does not know is a usage error (exit 2). `call` and `calls` answer
    // --help before parsing in runCli (and `refused`), so their own parsers are asked.
    const takes = async (cmd: string, option: string) => {
      for (const args of [
        [`${option}=x`, '--help'],
        [option, '--help'],
      ]) {
        const own = { call: callCommand, calls: callsCommand, refused: refusedCommand }[cmd];
        const code = own
          ? await own(null as never, null as never, args, io).catch(() => 2)
          : await runCli([cmd, ...args], io);
        if (code === 0) return true;
      }
      return false;
    };
    for (const [cmd, text] of Object.entries(help)) {
      if (cmd === 'main') continue;
      const options = [...text.matchAll(/^ {2}(?:-[a-z], )?(--[a-z-]+)/gm)].map((m) => m[1]!);
      assert.ok(options.includes('--help'), `${cmd} lists --help`);
      for (const option of options) assert.ok(await takes(cmd, option), `callsync ${cmd} takes ${option}`);
      assert.equal(await takes(cmd, '--no-such-option'), false, `callsync ${cmd} refuses an option it does not list`);
    }
  });

  test("wrong usage exits 2 with one line in callsync's words and where the help is, on stderr", async () => {
    const none = await cli([]);
    assert.equal(none.code, 2);
    assert.match(none.err, /Usage: callsync <command>/);
    for (const [argv, line] of [
      [['frobnicate'], 'callsync: unknown command "frobnicate"'],
      [['chek-config'], 'callsync: unknown command "chek-config" (did you mean check-config?)'],
    ] as const) {
      const r = await cli([...argv]);
      assert.equal(r.code, 2, argv.join(' '));
      assert.equal(r.err, `${line}\nsee callsync --help`);
    }
    // Node's parseArgs said these in its words: "argument is ambiguous. Did you forget … '--since=-XYZ'",
    // "Unknown option '--sinse'. To specify a positional argument starting with a '-' …".
    for (const [argv, line] of [
      [['calls', '--since', '-2h'], 'callsync calls: --since needs a value: a duration like 2h or a time'],
      [['calls', '--since'], 'callsync calls: --since needs a value: a duration like 2h or a time'],
      [['calls', '--sinse', '2h'], 'callsync calls: unknown option --sinse (did you mean --since?)'],
      [['dlq', 'list', '--color'], 'callsync dlq: unknown option --color'],
      [['dlq', 'list', '--json=yes'], 'callsync dlq: --json takes no value'],
      [['forget', '--dry-rn', 'c-1'], 'callsync forget: unknown option --dry-rn (did you mean --dry-run?)'],
      [['retention', 'sweep', '--jsn'], 'callsync retention: unknown option --jsn (did you mean --json?)'],
      [['start', '--role'], 'callsync start: --role needs a value'],
      [['opt-out', 'add'], 'callsync opt-out: opt-out add needs at least one NUMBER (E.164, e.g. +4915112345678)'],
    ] as const) {
      const r = await cli([...argv]);
      assert.equal(r.code, 2, argv.join(' '));
      assert.equal(r.err, `${line}\nsee callsync ${argv[0]} --help`, argv.join(' '));
    }
    // --help itself is unchanged: the whole help on stdout, exit 0.
    const calls = await cli(['calls', '--help']);
    assert.equal(calls.code, 0);
    assert.equal(calls.out, help.calls);
    for (const [argv, message] of [
      [['backfill', '--to', '2026-10-02'], /--from is required/],
      [['backfill', '--from', 'last tuesday', '--to', '2026-10-02'], /--from must be an ISO-8601 date/],
      [['backfill', '--from', '2026-10-02', '--to', '2026-10-01'], /--from must be before --to/],
      [
        ['backfill', '--from', '2026-10-01', '--to', '2026-10-02', '--page-size', '0'],
        /--page-size must be a whole number from 1 to 1000/,
      ],
      // Decimal digits only: Number() reads 1e2 as 100 and 0x10 as 16, " 5" as 5.
      [
        ['backfill', '--from', '2026-10-01', '--to', '2026-10-02', '--page-size', '1e2'],
        /--page-size must be a whole number from 1 to 1000/,
      ],
      [['dlq', 'list', '--limit', '0x10'], /--limit must be a whole number >= 1/],
      [['dlq', 'list', '--limit', '1e3'], /--limit must be a whole number >= 1/],
      [['calls', '--since', '2h', '--limit', '0x10'], /limit must be a whole number from 1 to 1000/],
      [['replay', '--from', '2026-10-01', '--to', '2026-10-02'], /--sink is required/],
      [['replay', '--from', '2026-10-01', '--to', '2026-02-30', '--sink', 'x'], /--to must be a day YYYY-MM-DD/],
      [['replay', '--from', '2026-10-03', '--to', '2026-10-02', '--sink', 'x'], /--from must not be after --to/],
    ] as const) {
      const r = await cli([...argv]);
      assert.equal(r.code, 2, argv.join(' '));
      assert.match(r.err, message, argv.join(' '));
    }
    const badRole = await cli(['start', '--role', 'boss']);
    assert.equal(badRole.code, 2);
    assert.match(badRole.err, /--role must be one of ingress, worker, poller, all/);
    assert.equal((await cli(['dlq', 'shred'])).code, 2);
  });
});

describe('check-config', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-cli-config-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  test('prints the effective sinks and routes, secrets redacted', async () => {
    const file = join(dir, 'callsync.yaml');
    await writeFile(
      file,
      [
        'sinks:',
        '  vault:',
        '    type: archive',
        '    bucket: calls',
        '    accessKeyId: AKIAEXAMPLE',
        '    secretAccessKey: ${VAULT_SECRET}',
        'routes:',
        '  - name: summaries',
        '    when: { hasSummary: true, direction: in }',
        '    to: vault',
        '  - when: [{ agent: [a1, a2] }, { outcome: missed }]',
        '    to: [vault]',
      ].join('\n'),
    );
    const r = await cli(['check-config'], { CALLSYNC_CONFIG: file, VAULT_SECRET: 'super-secret-value-1' });
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /^configuration OK/);
    assert.match(r.out, /redis in use: configured, redis:\/\/127\.0\.0\.1:6379\/?: answers/);
    assert.match(r.out, /^redis: +redis:\/\/127\.0\.0\.1:6379\/? +prefix "/m);
    // A configured Redis nobody answers at: check-config connects, so it is a problem, and the password is never printed.
    const wrong = await cli(['check-config'], {
      CALLSYNC_CONFIG: file,
      VAULT_SECRET: 'super-secret-value-1',
      REDIS_URL: 'redis://:redis-pass@127.0.0.1:1',
    });
    assert.equal(wrong.code, 2);
    assert.match(wrong.out, /^problem: Redis unreachable \(configured, redis:\/\/:\*\*\*@127\.0\.0\.1:1/);
    assert.doesNotMatch(wrong.out + wrong.err, /redis-pass/);
    assert.match(r.out, /vault\s+archive\s+from file/);
    assert.match(r.out, /^sinks \(1\): from the config file: vault; from environment shortcuts: none$/m);
    assert.match(r.out, /summaries: direction=in and hasSummary=true -> vault/);
    assert.match(r.out, /#2: \(agent=a1\|a2\) or \(outcome=missed\) -> vault/);
    assert.match(r.out, /queues:\s+inbound, sink-vault, poll-dead-letters/);
    assert.doesNotMatch(r.out, /super-secret-value-1|redis-pass/);
    assert.match(r.out, /"secretAccessKey":"\[redacted\]"/);

    const json = await cli(['check-config', '--json'], { CALLSYNC_CONFIG: file, VAULT_SECRET: 'super-secret-value-1' });
    assert.equal(json.code, 0);
    const parsed = JSON.parse(json.out);
    assert.equal(parsed.routes.length, 2);
    assert.equal(parsed.sinks[0].options.secretAccessKey, '[redacted]');
  });

  test('redacts custom header values, secret-looking values and URL credentials; a sink that cannot start is never OK', async () => {
    const file = join(dir, 'hook.yaml');
    await writeFile(
      file,
      [
        'sinks:',
        '  crm-hook:',
        '    type: webhook',
        // A query value may be the credential (an Azure Function's `?code=`, a `?token=`).
        '    urls: [ "https://hook-user:hook-pass-3141@crm.example.com/hooks/calls", "https://fn.example.net/api/calls?code=fn-key-5772&tenant=acme" ]',
        '    headers: { X-Api-Key: "${CRM_HOOK_API_KEY}", X-Tenant: acme-tenant-2718 }',
        '    secrets: [ "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" ]',
        '    eventType: "Bearer eyJhbGciOiJIUzI1NiJ9.payload"',
        'routes:',
        '  - to: crm-hook',
      ].join('\n'),
    );
    const env = { CALLSYNC_CONFIG: file, CRM_HOOK_API_KEY: 'api-key-value-1618' };
    for (const json of [false, true]) {
      const r = await cli(json ? ['check-config', '--json'] : ['check-config'], env);
      assert.equal(r.code, 0, r.err);
      for (const secret of [
        'api-key-value-1618',
        'acme-tenant-2718',
        'hook-pass-3141',
        'MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
        'eyJhbGciOiJIUzI1NiJ9',
        'fn-key-5772',
      ]) {
        assert.ok(!r.out.includes(secret), `${secret} is not printed (${json ? 'json' : 'text'}):\n${r.out}`);
      }
      assert.match(r.out, /X-Api-Key/, 'header names stay');
      assert.match(r.out, /crm\.example\.com/, 'the host stays');
      assert.match(
        r.out,
        /fn\.example\.net\/api\/calls\?code=\*\*\*&tenant=\*\*\*/,
        'the path and the query names stay',
      );
    }
    // The same file without the secret: the sink could not start, so check-config does not say OK.
    const noSecret = join(dir, 'hook-no-secret.yaml');
    await writeFile(
      noSecret,
      'sinks:\n  crm-hook: { type: webhook, urls: ["https://crm.example.com/h"] }\nroutes:\n  - to: crm-hook\n',
    );
    const r = await cli(['check-config'], { CALLSYNC_CONFIG: noSecret });
    assert.equal(r.code, 2);
    assert.doesNotMatch(r.out, /configuration OK/);
    assert.match(r.err, /sinks\.crm-hook \(webhook\): no signing secret: set CRM_WEBHOOK_SECRET/);
  });

  test('lists every problem and exits 2', async () => {
    const file = join(dir, 'bad.yaml');
    await writeFile(file, 'routes:\n  - to: nowhere\n');
    const r = await cli(['check-config'], { CALLSYNC_CONFIG: file, PORT: 'eighty', OPS_PORT: '70000' });
    assert.equal(r.code, 2);
    assert.match(r.err, /PORT: expected a whole number/);
    assert.match(r.err, /OPS_PORT: expected a port number or "off"/);
    assert.match(r.err, /routes\[0\]\.to: no sink named "nowhere"/);
  });

  test('TRUST_PROXY_HOPS without TRUSTED_PROXIES exits 2 naming both; with them the proxies are shown', async () => {
    const r = await cli(['check-config'], { TRUST_PROXY_HOPS: '1' });
    assert.equal(r.code, 2);
    assert.match(r.err, /TRUST_PROXY_HOPS: set without TRUSTED_PROXIES/);
    const ok = await cli(['check-config'], { TRUST_PROXY_HOPS: '1', TRUSTED_PROXIES: '10.0.0.0/8' });
    assert.equal(ok.code, 0, ok.err);
    assert.match(ok.out, /proxies:\s+X-Forwarded-For read from 10\.0\.0\.0\/8 \(at most 1 hop\)/);
  });
});

describe('dlq and send-sample against a running callsync', () => {
  let cs: OpsCallsync;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  const sink = new FlakySink();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-cli-dlq-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir }, { sinks: new Map([['archive', sink]]) });
    env = { QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir };
    for (const id of ['gate-cli-1', 'gate-cli-2', 'gate-cli-3'])
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload(id))).status, 202);
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getFailedCount()) === 3, {
      timeoutMs: 20_000,
      what: 'three dead letters',
    });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('list shows each dead letter with its queue, call and error', async () => {
    const r = await cli(['dlq', 'list'], env);
    assert.equal(r.code, 0, r.err);
    const lines = r.out.split('\n');
    assert.match(lines[0]!, /^QUEUE\s+ID\s+FAILED AT\s+TRIES\s+CALL\s+REASON$/);
    for (const id of ['gate-cli-1', 'gate-cli-2', 'gate-cli-3']) {
      assert.ok(
        lines.some((l) => l.startsWith('sink-archive') && l.includes(id) && l.includes('field "subject" too long')),
        id,
      );
    }
    const json = JSON.parse((await cli(['dlq', 'list', '--queue', 'archive', '--json'], env)).out);
    assert.equal(json.length, 3);
    assert.ok(json.every((row: { queue: string }) => row.queue === 'sink-archive'));
    const inbound = await cli(['dlq', 'list', '--queue', 'inbound'], env);
    assert.match(inbound.out, /no dead letters in inbound/);
    const bogus = await cli(['dlq', 'list', '--queue', 'nope'], env);
    assert.equal(bogus.code, 2);
    assert.match(bogus.err, /unknown queue "nope" \(known: inbound, sink-archive, poll-dead-letters\)/);
  });

  test('list --call shows the dead letters of one call; an unknown call is exit 1, --call with retry or --id is a usage error', async () => {
    const r = await cli(['dlq', 'list', '--call', 'gate-cli-2'], env);
    assert.equal(r.code, 0, r.err);
    const lines = r.out.split('\n');
    assert.match(lines[0]!, /^QUEUE\s+ID\s+FAILED AT\s+TRIES\s+CALL\s+REASON$/);
    assert.equal(lines.length, 2, r.out);
    assert.match(lines[1]!, /^sink-archive\s.*\sgate-cli-2\s+remote rejected the record/);
    const json = JSON.parse(
      (await cli(['dlq', 'list', '--call', 'gate-cli-3', '--queue', 'archive', '--json'], env)).out,
    ) as { call: string; queue: string }[];
    assert.deepEqual(
      json.map((row) => [row.queue, row.call]),
      [['sink-archive', 'gate-cli-3']],
    );
    const none = await cli(['dlq', 'list', '--call', 'no-such-call'], env);
    assert.equal(none.code, 1);
    assert.match(none.err, /no dead letter of call no-such-call in inbound, sink-archive, poll-dead-letters/);
    const retry = await cli(['dlq', 'retry', '--call', 'gate-cli-2'], env);
    assert.equal(retry.code, 2);
    assert.match(retry.err, /--call is for dlq list/);
    assert.equal((await cli(['dlq', 'list', '--call', 'gate-cli-2', '--id', '1'], env)).code, 2);
  });

  test('retry --id puts one job back; it completes once the remote is fixed', async () => {
    const rows = JSON.parse((await cli(['dlq', 'list', '--json'], env)).out) as { id: string; call: string }[];
    const target = rows.find((r) => r.call === 'gate-cli-1')!;
    sink.failing = false;
    const r = await cli(['dlq', 'retry', '--id', target.id], env);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, new RegExp(`retrying sink-archive job ${target.id}`));
    await waitFor(() => sink.delivered.includes('gate-cli-1'), { what: 'the retried job delivered' });
    const again = await cli(['dlq', 'retry', '--id', target.id], env);
    assert.equal(again.code, 1);
    assert.match(again.err, /is not a dead letter: in sink-archive it is (completed|active|waiting)$/);
    const missing = await cli(['dlq', 'retry', '--id', 'no-such-job'], env);
    assert.equal(missing.code, 1);
    assert.match(missing.err, /no job no-such-job/);
    sink.failing = true;
  });

  test('purge removes dead letters only with --yes (or one --id)', async () => {
    const dry = await cli(['dlq', 'purge', '--queue', 'sink-archive'], env);
    assert.equal(dry.code, 1);
    assert.match(dry.err, /would remove 2 dead letter\(s\) of sink-archive/);
    assert.match(dry.err, /add --yes/);
    const rows = JSON.parse((await cli(['dlq', 'list', '--json'], env)).out) as { id: string }[];
    assert.equal(rows.length, 2, 'nothing removed without --yes');
    const one = await cli(['dlq', 'purge', '--id', rows[0]!.id], env);
    assert.equal(one.code, 0, one.err);
    const all = await cli(['dlq', 'purge', '--yes'], env);
    assert.equal(all.code, 0, all.err);
    assert.match(all.out, /removed 1 dead letter\(s\) of sink-archive/);
    assert.match((await cli(['dlq', 'list'], env)).out, /no dead letters in inbound, sink-archive, poll-dead-letters/);
  });

  test('retry without --id retries every dead letter of the queue', async () => {
    sink.failing = true;
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload('gate-cli-4'))).status, 202);
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getFailedCount()) === 1, { timeoutMs: 20_000, what: 'a dead letter' });
    sink.failing = false;
    const r = await cli(['dlq', 'retry', '--queue', 'archive'], env);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, /retrying 1 dead letter\(s\) of sink-archive/);
    await waitFor(() => sink.delivered.includes('gate-cli-4'), { what: 'the retried job delivered' });
  });

  test('send-sample posts a call that travels to the sink, and prints the job id the sink queue (and dashboard) shows', async () => {
    sink.failing = false;
    const r = await cli(['send-sample', '--url', `${cs.url}/webhooks/ai-agent/sample-agent`], env);
    assert.equal(r.code, 0, r.err);
    const [, callId, inboundId] = /^accepted: call (sample-\S+) \(inbound log id (\S+)\)$/m.exec(r.out) ?? [];
    assert.ok(callId && inboundId, r.out);
    // The dashboard is off here (no ADMIN_PASSWORD or ADMIN_TOKEN: /admin/queues answers 404), so
    // the line points at `callsync call`, which finds the call by the id it names.
    const jobId = new RegExp(
      `^job ([0-9a-f]{32}) in sink-archive: follow it with \`callsync call ${callId}\`$`,
      'm',
    ).exec(r.out)?.[1];
    assert.ok(jobId, r.out);
    assert.doesNotMatch(r.out, /admin\/queues/);
    assert.doesNotMatch(r.out, /spooled/, 'Redis is up: nothing said about a spool');
    await waitFor(() => sink.delivered.includes(callId), { what: 'the sample delivered to the sink' });
    const followed = await cli(['call', callId], env);
    assert.equal(followed.code, 0, followed.err);
    assert.match(followed.out, new RegExp(`^call ${callId} `, 'm'));
    // With the dashboard on, it is named too.
    const withDashboard = await cli(['send-sample', '--url', `${cs.url}/webhooks/ai-agent/sample-agent`], {
      ...env,
      ADMIN_PASSWORD: 'change-me-please',
    });
    assert.match(
      withDashboard.out,
      /^job [0-9a-f]{32} in sink-archive: follow it with `callsync call sample-\S+` or on \/admin\/queues$/m,
    );
    // The printed id is the sink job's (what /admin/queues lists), not the inbound log's.
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    const job = await archive.getJob(jobId);
    assert.equal((job?.data as { call: { callId: string } } | undefined)?.call.callId, callId);
    assert.equal(await archive.getJob(inboundId), undefined);
    const port = new URL(cs.url).port;
    const byPort = await cli(['send-sample'], { ...env, PORT: port });
    assert.equal(byPort.code, 0, `default URL from PORT: ${byPort.err}`);
  });

  test('send-sample explains a refusal and an unreachable ingress', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const closedPort = (server.address() as AddressInfo).port;
    await new Promise((resolve) => server.close(resolve));
    const refused = await cli(['send-sample', '--url', `http://127.0.0.1:${closedPort}/webhooks/ai-agent`], env);
    assert.equal(refused.code, 1);
    assert.match(refused.err, /could not reach .*ECONNREFUSED/);
    assert.match(refused.err, /is callsync running\?/);
    // Not a URL at all: a usage error (exit 2) that says so, not "could not reach … is callsync running?".
    for (const url of ['notaurl', 'ftp://127.0.0.1/webhooks/ai-agent', '127.0.0.1:3000/webhooks/ai-agent']) {
      for (const extra of [[], ['--outcome', 'missed']]) {
        const bad = await cli(['send-sample', '--url', url, ...extra], env);
        assert.equal(bad.code, 2, `${url} ${extra.join(' ')}: ${bad.err}`);
        assert.match(
          bad.err,
          new RegExp(
            `^callsync send-sample: --url "${url.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}" is not a valid URL: give the ingress's webhook URL with http:// or https://`,
          ),
        );
        assert.doesNotMatch(bad.err, /could not reach|is callsync running/);
      }
    }
  });
});

describe('dlq sees the queues in Redis, not only those of its own configuration', () => {
  const prefix = uniquePrefix('cli-dlq-found');
  let connection: Redis;
  before(async () => {
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    // A queue this environment does not configure (a sink another process runs, or one since removed) with a dead letter.
    const queue = new Queue('sink-legacy-crm', { connection, prefix });
    await queue.add(
      'sink.deliver',
      { kind: 'sink.deliver', sink: 'legacy-crm', call: { callId: 'legacy-1' } },
      { jobId: 'legacy-job', attempts: 1 },
    );
    const worker = new Worker(
      'sink-legacy-crm',
      async () => {
        throw new UnrecoverableError('Legacy CRM answered 400: gone');
      },
      { connection, prefix },
    );
    await waitFor(async () => (await queue.getFailedCount()) === 1, { what: 'the legacy dead letter' });
    await worker.close();
    await queue.close();
    // Keys that only look like queues: nested under a queue, or not BullMQ's meta hash.
    await connection.hset(`${prefix}:sink-x:nested:meta`, 'version', 'bullmq:5');
    await connection.set(`${prefix}:not-a-queue:meta`, 'plain string');
  });
  after(async () => {
    connection.disconnect();
    await cleanupPrefix(prefix);
  });

  test('list without --queue shows the dead letters of a queue found only in Redis', async () => {
    const r = await cli(['dlq', 'list'], { QUEUE_PREFIX: prefix });
    assert.equal(r.code, 0, r.err);
    assert.ok(
      r.out
        .split('\n')
        .some(
          (l) =>
            l.startsWith('sink-legacy-crm') &&
            l.includes('legacy-job') &&
            l.includes('legacy-1') &&
            l.includes('Legacy CRM answered 400'),
        ),
      r.out,
    );
    const json = JSON.parse((await cli(['dlq', 'list', '--json'], { QUEUE_PREFIX: prefix })).out) as {
      queue: string;
    }[];
    assert.deepEqual(
      json.map((row) => row.queue),
      ['sink-legacy-crm'],
    );
  });

  test('--queue takes a queue found in Redis, by queue or sink name; the unknown list names it', async () => {
    for (const name of ['sink-legacy-crm', 'legacy-crm']) {
      const r = await cli(['dlq', 'list', '--queue', name, '--json'], { QUEUE_PREFIX: prefix });
      assert.equal(r.code, 0, r.err);
      assert.equal((JSON.parse(r.out) as unknown[]).length, 1);
    }
    const bogus = await cli(['dlq', 'list', '--queue', 'nope'], { QUEUE_PREFIX: prefix });
    assert.equal(bogus.code, 2);
    assert.match(
      bogus.err,
      /unknown queue "nope" \(known: inbound, sink-archive, poll-dead-letters, sink-legacy-crm\)/,
    );
    assert.doesNotMatch(bogus.err, /nested|not-a-queue/);
  });

  test('retry without --queue leaves a queue no sink here works (and says so); with --queue it retries', async () => {
    const all = await cli(['dlq', 'retry'], { QUEUE_PREFIX: prefix });
    assert.equal(all.code, 0, all.err);
    assert.match(
      all.err,
      /sink-legacy-crm: 1 dead letter\(s\) not retried: no sink of this configuration works that queue/,
    );
    assert.doesNotMatch(all.out, /no dead letters/);
    const queue = new Queue('sink-legacy-crm', { connection, prefix });
    try {
      assert.equal(await queue.getFailedCount(), 1);
      const one = await cli(['dlq', 'retry', '--queue', 'sink-legacy-crm'], { QUEUE_PREFIX: prefix });
      assert.equal(one.code, 0, one.err);
      assert.match(one.out, /retrying 1 dead letter\(s\) of sink-legacy-crm/);
      assert.equal(await queue.getFailedCount(), 0);
    } finally {
      await queue.close();
    }
  });
});

describe('dlq retry gives a dead letter a whole new round of attempts', () => {
  const ADMIN = 'cli-round-admin-token-7c2e';
  let cs: OpsCallsync;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  let archive: Queue;
  const sink = new FlakySink();
  const tries = (callId: string) => sink.attempted.filter((id) => id === callId).length;
  const callIdOf = (job: Job) => (job.data as { call?: { callId?: string } }).call?.callId;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-cli-round-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, JOB_ATTEMPTS: '3', ADMIN_TOKEN: ADMIN },
      { sinks: new Map([['archive', sink]]) },
    );
    env = { QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir, JOB_ATTEMPTS: '3' };
    archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  /** Posts a call the sink fails transiently and waits for its dead letter (all 3 attempts used). */
  async function deadLetter(callId: string): Promise<Job> {
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent`, webhookPayload(callId))).status, 202);
    const job = await waitFor(
      async () => {
        const failed = (await archive.getFailed(0, 100)).find((j) => callIdOf(j) === callId);
        return failed ? jobIn(archive, failed.id!, 'failed') : null;
      },
      { timeoutMs: 20_000, what: `${callId} dead-lettered` },
    );
    assert.equal(job.attemptsMade, 3);
    assert.equal(tries(callId), 3);
    return job;
  }

  /** The job dead-lettered again after `retried`, once the sink has seen `attempts` attempts in all. */
  async function deadAgain(id: string, callId: string, attempts: number): Promise<Job> {
    await waitFor(() => tries(callId) >= attempts, { timeoutMs: 20_000, what: `${attempts} attempts of ${callId}` });
    return waitFor(() => jobIn(archive, id, 'failed'), { timeoutMs: 20_000, what: `${callId} dead-lettered again` });
  }

  /**
   * The sink entries of the call's timeline from the operator's retry on: event and attempt number.
   * Read once the timeline ends in the dead letter: an entry whose write was slow (a loaded machine)
   * is sent again in the background, after the job is in the failed set.
   */
  async function roundAfterRetry(callId: string): Promise<string[]> {
    type Shown = { calls: { entries: TimelineEntry[]; sinks: Record<string, string> }[] };
    const shown = async () => {
      const r = await cli(['call', callId, '--json'], env);
      assert.equal(r.code, 0, r.err);
      return JSON.parse(r.out) as Shown;
    };
    await waitFor(async () => (await shown()).calls[0]?.entries.at(-1)?.event === 'dead-lettered' || null, {
      timeoutMs: 20_000,
      what: `the timeline of ${callId} to end in its dead letter`,
    });
    const [call] = (await shown()).calls;
    const from = call!.entries.findIndex((e) => e.event === 'retried');
    assert.ok(from > 0, `the timeline says the dead letter was retried: ${JSON.stringify(call!.entries)}`);
    assert.equal(call!.sinks.archive, 'failed');
    return call!.entries.slice(from).map((e) => `${e.event}${e.attempt === undefined ? '' : ` ${e.attempt}`}`);
  }

  test('retry --id: a transient failure after it is retried with backoff, dead-lettered only after a whole round', async () => {
    const first = await deadLetter('down-round-1');
    // As BullMQ leaves a job that stalled twice before it failed: a new round forgets the stalls too
    // (before, the next stall of the retried job dead-lettered it at once).
    await (await archive.getBackend().client).hset(archive.toKey(first.id!), { stc: '2' });
    const r = await cli(['dlq', 'retry', '--id', first.id!], env);
    assert.equal(r.code, 0, r.err);
    assert.match(r.out, new RegExp(`^retrying sink-archive job ${first.id}$`, 'm'));
    // Before the fix: one attempt more (attemptsMade 4), dead-lettered at once on its failure.
    const again = await deadAgain(first.id!, 'down-round-1', 6);
    assert.equal(tries('down-round-1'), 6, 'three more attempts');
    assert.equal(again.attemptsMade, 3);
    assert.equal(again.stalledCounter, 0, 'the stalls of the round before are forgotten');
    assert.deepEqual(again.data, first.data, 'the same data');
    assert.equal(again.opts.attempts, 3, 'the same options');
    assert.deepEqual(await roundAfterRetry('down-round-1'), [
      'retried',
      'attempt 1',
      'retry 1',
      'attempt 2',
      'retry 2',
      'attempt 3',
      'dead-lettered 3',
    ]);
  });

  test('retry of a whole queue: each dead letter gets a new round too, and is delivered once the remote is back', async () => {
    const [first, second] = [await deadLetter('down-round-2'), await deadLetter('down-round-3')];
    const r = await cli(['dlq', 'retry', '--queue', 'archive'], env);
    assert.equal(r.code, 0, r.err);
    // And the first test's, dead-lettered again.
    assert.match(r.out, /^retrying 3 dead letter\(s\) of sink-archive$/m);
    const again = await deadAgain(first.id!, 'down-round-2', 6);
    assert.equal(again.attemptsMade, 3);
    assert.equal(tries('down-round-2'), 6);
    assert.deepEqual(await roundAfterRetry('down-round-2'), [
      'retried',
      'attempt 1',
      'retry 1',
      'attempt 2',
      'retry 2',
      'attempt 3',
      'dead-lettered 3',
    ]);
    await deadAgain(second.id!, 'down-round-3', 6);
    sink.failing = false;
    assert.equal((await cli(['dlq', 'retry'], env)).code, 0);
    await waitFor(() => sink.delivered.includes('down-round-2') && sink.delivered.includes('down-round-3'), {
      what: 'both delivered',
    });
    sink.failing = true;
  });

  test("the dashboard's Retry buttons (the Calls page's, Bull Board's) start a new round too", async () => {
    const [byPage, byBoard] = [await deadLetter('down-round-4'), await deadLetter('down-round-5')];
    const headers = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const page = await fetch(`${cs.url}/admin/queues/calls/${byPage.id!.slice(0, 32)}/retry`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ sink: 'archive' }),
    });
    assert.equal(page.status, 200, await page.text());
    const board = await fetch(`${cs.url}/admin/queues/api/queues/sink-archive/${byBoard.id}/retry`, {
      method: 'PUT',
      headers,
    });
    assert.equal(board.status, 204, await board.text());
    for (const [job, callId] of [
      [byPage, 'down-round-4'],
      [byBoard, 'down-round-5'],
    ] as const) {
      const again = await deadAgain(job.id!, callId, 6);
      assert.equal(again.attemptsMade, 3, callId);
      assert.equal(tries(callId), 6, callId);
      assert.equal((await roundAfterRetry(callId)).length, 7, callId);
    }
  });
});

describe('dlq retry and purge --id act on every dead letter of that id (one call, several queues)', () => {
  const prefix = uniquePrefix('cli-dlq-ids');
  const id = 'c0ffee00c0ffee00c0ffee00c0ffee00';
  let connection: Redis;
  let dir: string;
  let env: NodeJS.ProcessEnv;
  // A webhook sink with three endpoints: one call's job, under one id, in each endpoint's queue.
  const [E500, E422, OK] = [sinkQueueName('hook', 'e500'), sinkQueueName('hook', 'e422'), sinkQueueName('hook', 'ok')];
  const queues = new Map<string, Queue>();

  /** The call's job in each endpoint queue: dead-lettered in e500 and e422, completed in ok. */
  async function seed(): Promise<void> {
    for (const q of queues.values()) await q.obliterate({ force: true });
    const worker = (name: string) =>
      new Worker(
        name,
        async () => {
          if (name !== OK) throw new UnrecoverableError(`${name} refused the call`);
        },
        { connection, prefix },
      );
    const workers = [E500, E422, OK].map(worker);
    try {
      for (const q of queues.values())
        await q.add('sink.deliver', { kind: 'sink.deliver', sink: 'hook', call: { callId: 'ids-1' } }, { jobId: id });
      await waitFor(
        async () =>
          (await queues.get(E500)!.getFailedCount()) === 1 &&
          (await queues.get(E422)!.getFailedCount()) === 1 &&
          (await queues.get(OK)!.getCompletedCount()) === 1,
        { what: 'two dead letters and a completed job' },
      );
    } finally {
      await Promise.all(workers.map((w) => w.close()));
    }
  }

  before(async () => {
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    dir = await mkdtemp(join(tmpdir(), 'callsync-cli-ids-'));
    const config = join(dir, 'callsync.yaml');
    await writeFile(
      config,
      `
sinks:
  hook:
    type: webhook
    secrets: ["whsec_${Buffer.from('a'.repeat(32)).toString('base64')}"]
    endpoints:
      - { name: e500, url: "http://127.0.0.1:9/a" }
      - { name: e422, url: "http://127.0.0.1:9/b" }
      - { name: ok, url: "http://127.0.0.1:9/c" }
routes:
  - to: [hook]
`,
    );
    env = { QUEUE_PREFIX: prefix, CALLSYNC_CONFIG: config };
    for (const name of [E500, E422, OK]) queues.set(name, new Queue(name, { connection, prefix }));
  });
  after(async () => {
    await Promise.all([...queues.values()].map((q) => q.close()));
    connection.disconnect();
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  const states = async () => Promise.all([E500, E422, OK].map((name) => queues.get(name)!.getJobState(id)));

  test('retry --id without --queue retries the dead letter of every queue, and leaves the completed job', async () => {
    await seed();
    const r = await cli(['dlq', 'retry', '--id', id], env);
    assert.equal(r.code, 0, r.err);
    assert.deepEqual(r.out.split('\n'), [`retrying ${E500} job ${id}`, `retrying ${E422} job ${id}`]);
    assert.deepEqual(await states(), ['waiting', 'waiting', 'completed']);
    const again = await cli(['dlq', 'retry', '--id', id], env);
    assert.equal(again.code, 1);
    assert.equal(
      again.err,
      `callsync dlq: job ${id} is not a dead letter: in ${E500} it is waiting; in ${E422} it is waiting; in ${OK} it is completed`,
    );
  });

  test('retry --queue <sink> --id retries the dead letters of all its endpoint queues', async () => {
    await seed();
    const r = await cli(['dlq', 'retry', '--queue', 'hook', '--id', id], env);
    assert.equal(r.code, 0, r.err);
    assert.deepEqual(r.out.split('\n'), [`retrying ${E500} job ${id}`, `retrying ${E422} job ${id}`]);
    assert.deepEqual(await states(), ['waiting', 'waiting', 'completed']);
    const one = await cli(['dlq', 'retry', '--queue', OK, '--id', id], env);
    assert.equal(one.code, 1);
    assert.equal(one.err, `callsync dlq: job ${id} is not a dead letter: in ${OK} it is completed`);
  });

  test('list --id shows both; purge --id removes both, with --yes only', async () => {
    await seed();
    const listed = JSON.parse((await cli(['dlq', 'list', '--id', id, '--json'], env)).out) as { queue: string }[];
    assert.deepEqual(
      listed.map((row) => row.queue),
      [E500, E422],
    );
    const dry = await cli(['dlq', 'purge', '--id', id], env);
    assert.equal(dry.code, 1);
    assert.match(dry.err, new RegExp(`would remove ${E500.replace('.', '\\.')} job ${id}`));
    assert.match(dry.err, new RegExp(`would remove ${E422.replace('.', '\\.')} job ${id}`));
    assert.match(dry.err, /add --yes/);
    assert.deepEqual(await states(), ['failed', 'failed', 'completed'], 'nothing removed without --yes');
    const purged = await cli(['dlq', 'purge', '--id', id, '--yes'], env);
    assert.equal(purged.code, 0, purged.err);
    assert.deepEqual(purged.out.split('\n'), [`removed ${E500} job ${id}`, `removed ${E422} job ${id}`]);
    assert.deepEqual(await states(), ['unknown', 'unknown', 'completed']);
    // One dead letter alone needs no --yes, as before.
    await seed();
    await queues.get(E422)!.remove(id);
    const one = await cli(['dlq', 'purge', '--id', id], env);
    assert.equal(one.code, 0, one.err);
    assert.equal(one.out, `removed ${E500} job ${id}`);
  });
});

describe('send-sample while Redis is away', () => {
  test('says the call was only spooled to local disk, and it reaches the queue once Redis is back', async () => {
    const redis = await startPrivateRedis();
    const spool = await mkdtemp(join(tmpdir(), 'callsync-cli-spool-'));
    const prefix = uniquePrefix('cli-spool');
    const cs = await startOpsCallsync({
      REDIS_URL: redis.url,
      QUEUE_PREFIX: prefix,
      CALLSYNC_ROLE: 'ingress',
      SPOOL_DIR: spool,
      ARCHIVE_DIR: spool,
    });
    try {
      await redis.stop();
      const r = await cli(['send-sample', '--url', `${cs.url}/webhooks/ai-agent/sample-agent`], {
        REDIS_URL: redis.url,
        QUEUE_PREFIX: prefix,
        ARCHIVE_DIR: spool,
      });
      assert.equal(r.code, 0, r.err);
      assert.match(r.out, /^spooled to local disk \(Redis unavailable\); it reaches the queues when Redis is back$/m);
      const inboundId = /\(inbound log id (\S+)\)/.exec(r.out)?.[1];
      assert.match(
        r.out,
        /^job [0-9a-f]{32} in sink-archive \(once Redis is back\): follow it with `callsync call sample-\S+`$/m,
      );
      // No archive path that does not exist yet: only spooled, nothing is archived.
      assert.match(r.out, /^archive archive: spooled — not archived yet/m);
      assert.doesNotMatch(r.out, /transcripts\//);
      await redis.start();
      // Drained into the inbound log under the id it was acknowledged with.
      const reader = new Redis(redis.url, { maxRetriesPerRequest: 1 });
      try {
        const entry = await waitFor(
          async () => (await new InboundLog(reader, prefix).entries()).find((e) => e.id === inboundId) ?? null,
          {
            timeoutMs: 20_000,
            what: 'the spooled sample in the inbound log',
          },
        );
        assert.match(entry.call?.callId ?? '', /^sample-/);
      } finally {
        reader.disconnect();
      }
    } finally {
      if (!redis.running) await redis.start();
      await cs.stop();
      await redis.destroy();
      await rm(spool, { recursive: true, force: true });
    }
  });
});

describe('send-sample prints where the archive writes the call', () => {
  test('the printed path is the object the real archive sink writes (the agent from the URL is part of it)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-cli-sample-'));
    const cs = await startOpsCallsync({ ARCHIVE_DIR: dir, ARCHIVE_S3_PREFIX: 'calls/' });
    try {
      const env = { QUEUE_PREFIX: cs.prefix, ARCHIVE_DIR: dir, ARCHIVE_S3_PREFIX: 'calls/' };
      for (const agent of ['sample-agent', 'other-agent']) {
        const r = await cli(['send-sample', '--url', `${cs.url}/webhooks/ai-agent/${agent}`], env);
        assert.equal(r.code, 0, r.err);
        const callId = /accepted: call (sample-\S+) \(/.exec(r.out)?.[1];
        const path = /^archive archive: (\S+\.json) \(and \.txt beside it\)$/m.exec(r.out)?.[1];
        assert.ok(callId && path, r.out);
        assert.ok(
          path.startsWith(join(dir, 'calls/transcripts/')),
          `${path} is in the archive folder, under the prefix`,
        );
        const doc = await waitFor(
          () =>
            readFile(path, 'utf8')
              .then((t) => JSON.parse(t) as { call: { callId: string; agentId: string } })
              .catch(() => null),
          {
            what: `the archived sample at ${path}`,
            timeoutMs: 20_000,
          },
        );
        assert.deepEqual([doc.call.callId, doc.call.agentId], [callId, agent]);
        // The record and its text are two objects, written one after the other: the text may come a moment later.
        const text = await waitFor(() => readFile(path.replace(/\.json$/, '.txt'), 'utf8').catch(() => null), {
          what: `the archived text beside ${path}`,
          timeoutMs: 20_000,
        });
        assert.ok(text.startsWith(`Call ${callId}`));
      }
    } finally {
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('send-sample to an ingress that does not allow this address', () => {
  test('shows the 403 and how to allow local tries', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'callsync-cli-403-'));
    const cs = await startOpsCallsync({ ARCHIVE_DIR: dir, WEBHOOK_ALLOWED_IPS: '192.0.2.1', CALLSYNC_ROLE: 'ingress' });
    try {
      const r = await cli(['send-sample', '--url', `${cs.url}/webhooks/ai-agent`], { QUEUE_PREFIX: cs.prefix });
      assert.equal(r.code, 1);
      assert.match(r.err, /answered 403/);
      assert.match(r.err, /WEBHOOK_ALLOWED_IPS=127\.0\.0\.1,::1/);
    } finally {
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('opt-out', () => {
  const prefix = uniquePrefix('cli-optout');
  after(() => cleanupPrefix(prefix));

  test('add, list and remove numbers, normalized to E.164', async () => {
    const env = { QUEUE_PREFIX: prefix };
    const add = await cli(['opt-out', 'add', '+49 151 1234 5678', '+4930901820'], env);
    assert.equal(add.code, 0, add.err);
    assert.match(add.out, /added 2 number\(s\)/);
    assert.doesNotMatch(add.out, /4915112345678/, 'numbers are masked in the output');
    const again = await cli(['opt-out', 'add', '+4915112345678'], env);
    assert.match(again.out, /added 0 number\(s\) \(1 already on the list\)/);
    assert.deepEqual((await cli(['opt-out', 'list'], env)).out.split('\n'), ['+4915112345678', '+4930901820']);
    const redis = new Redis(REDIS_URL);
    assert.deepEqual((await redis.smembers(`${prefix}:optout`)).sort(), ['+4915112345678', '+4930901820']);
    redis.disconnect();
    const rm1 = await cli(['opt-out', 'remove', '+4930901820'], env);
    assert.match(rm1.out, /removed 1 number\(s\)/);
    assert.deepEqual((await cli(['opt-out', 'list'], env)).out.split('\n'), ['+4915112345678']);
    const bad = await cli(['opt-out', 'add', '12345'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /not a valid phone number: "12345"/);
  });

  test("a number may come as several words, as the shell splits the help's unquoted `0151 12345678`", async () => {
    const env = { QUEUE_PREFIX: `${prefix}-words` };
    assert.match(help['opt-out'], /0151 12345678/);
    const add = await cli(['opt-out', 'add', '0151', '12345678', '+49', '30', '901820', '0171', '2345', '6789'], env);
    assert.equal(add.code, 0, add.err);
    assert.match(add.out, /added 3 number\(s\)/);
    assert.deepEqual((await cli(['opt-out', 'list'], env)).out.split('\n'), [
      '+4915112345678',
      '+4917123456789',
      '+4930901820',
    ]);
    const rm1 = await cli(['opt-out', 'remove', '0151', '12345678'], env);
    assert.match(rm1.out, /removed 1 number\(s\)/);
    const bad = await cli(['opt-out', 'add', '0151', '12345678', '99'], env);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /not a valid phone number: "99"/);
    await cleanupPrefix(`${prefix}-words`);
  });

  test('national numbers are read in PHONE_DEFAULT_REGION (default DE)', async () => {
    const env = { QUEUE_PREFIX: prefix };
    const de = await cli(['opt-out', 'add', '0151 2345 6789'], env);
    assert.equal(de.code, 0, de.err);
    const at = await cli(['opt-out', 'add', '0664 1234567'], { ...env, PHONE_DEFAULT_REGION: 'at' });
    assert.equal(at.code, 0, at.err);
    const list = (await cli(['opt-out', 'list'], env)).out.split('\n');
    assert.ok(list.includes('+4915123456789'), list.join(', '));
    assert.ok(list.includes('+436641234567'), list.join(', '));
    // Removing by the national form finds the E.164 entry.
    assert.match(
      (await cli(['opt-out', 'remove', '0664 1234567'], { ...env, PHONE_DEFAULT_REGION: 'AT' })).out,
      /removed 1 number\(s\)/,
    );
    // Read in the wrong region, a number that is not valid there is refused, not stored wrongly.
    const wrong = await cli(['opt-out', 'add', '0664 1234567'], { ...env, PHONE_DEFAULT_REGION: 'US' });
    assert.equal(wrong.code, 2);
    assert.match(wrong.err, /not a valid phone number.*national number in US/);
  });

  test('says so when Redis cannot be reached', async () => {
    const r = await cli(['opt-out', 'list'], { QUEUE_PREFIX: prefix, REDIS_URL: 'redis://127.0.0.1:1' });
    assert.equal(r.code, 1);
    assert.match(r.err, /cannot reach Redis at redis:\/\/127\.0\.0\.1:1/);
  });
});

describe('forget and call: what their arguments may be', () => {
  const prefix = uniquePrefix('cli-forget-words');
  let dir: string;
  let env: Record<string, string>;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-cli-forget-'));
    env = {
      QUEUE_PREFIX: prefix,
      ARCHIVE_DIR: join(dir, 'archive'),
      SPOOL_DIR: join(dir, 'spool'),
      PRIVACY_HMAC_SECRET: 'a-test-key-of-some-length-0123456789',
    };
  });
  after(async () => {
    await cleanupPrefix(prefix);
    await rm(dir, { recursive: true, force: true });
  });

  test('forget takes a number in several words, as opt-out does (the help says "with or without spaces")', async () => {
    assert.match(help.forget, /with or without spaces/);
    assert.equal((await cli(['opt-out', 'add', '+4915112345678', '+4930901820'], env)).code, 0);
    const r = await cli(['forget', '+49', '151', '1234', '5678', '--json'], env);
    assert.equal(r.code, 0, r.err);
    assert.equal((JSON.parse(r.out) as { target: string }).target, 'number');
    // That number, and only it, left the opt-out list in clear (kept as its keyed hash).
    const redis = new Redis(REDIS_URL);
    try {
      const listed = await redis.smembers(`${prefix}:optout`);
      assert.ok(!listed.includes('+4915112345678'), listed.join(', '));
      assert.ok(listed.includes('+4930901820'), listed.join(', '));
      assert.ok(
        listed.some((n) => n.startsWith('h1.')),
        listed.join(', '),
      );
    } finally {
      redis.disconnect();
    }
    // A national number in two words, as the shell splits the help's unquoted example.
    const national = await cli(['forget', '0151', '12345678', '--dry-run'], env);
    assert.equal(national.code, 0, national.err);
    assert.match(national.out, /call\(s\) of this number/);
  });

  test('several words are one number or a usage error (exit 2): never a call id, never two numbers', async () => {
    for (const [argv, message] of [
      [['forget', 'c-2026', 'extra'], /unexpected argument "extra": give one call id \(one word\) or one phone number/],
      [['forget', '+49', '151', 'abc'], /unexpected argument "abc"/],
      [['forget', '+49', '151', '1234', '5678', '+49', '30', '901820'], /reads as 2 phone numbers: forget takes one/],
      [['forget', '0151', '12345678', '0170', '1234567'], /reads as 2 phone numbers/],
      [['forget', '12', '34'], /not a valid phone number/],
      [['forget', ''], /expected a phone number/],
      [['call', ''], /expected one call id, job id or phone number, not an empty argument/],
      [['call', '  '], /not an empty argument/],
    ] as const) {
      const r = await cli([...argv], env);
      assert.equal(r.code, 2, `${argv.join(' ')}: ${r.err}`);
      assert.match(r.err, message, argv.join(' '));
    }
  });
});

describe('bin/callsync.js', () => {
  test('runs the CLI from the TypeScript source (as `npx callsync` does before a build)', async () => {
    const env = { ...process.env, CALLSYNC_FROM_SOURCE: '1', REDIS_URL };
    const helpOut = await run(process.execPath, [BIN, '--help'], { env });
    assert.match(helpOut.stdout, /Usage: callsync <command>/);
    const check = await run(process.execPath, [BIN, 'check-config'], {
      env: { ...env, ARCHIVE_DIR: '/tmp/callsync-never-written' },
    });
    assert.match(check.stdout, /configuration OK/);
    await assert.rejects(
      run(process.execPath, [BIN, 'check-config'], { env: { ...env, PORT: 'x' } }),
      (err: { code: number; stderr: string }) => {
        assert.equal(err.code, 2);
        assert.match(err.stderr, /PORT: expected a whole number/);
        return true;
      },
    );
  });
});
