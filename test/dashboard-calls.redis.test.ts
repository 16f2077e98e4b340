// The dashboard's Calls page (src/ops/calls-page.ts) in a real headless browser (Debian's chromium via
// playwright-core, as test/dashboard.redis.test.ts): log in, search a call, open its page, retry
// its failed sink, see the chip turn to done. Screenshots go to test-artifacts/ (README and
// docs/operations.md "Where is my call?"). Plus its login and CSRF rules without a browser.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { redisKeys } from '../queues/keys.js';
import { CallTimeline } from '../queues/timeline.js';
import { callHash } from '../src/model/call.js';
import { postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL, waitFor } from './support/redis.js';
import { startS3, type TestS3 } from './support/s3.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url);
const PASSWORD = 'calls-page-pass-3e9d';
const TOKEN = 'calls-page-token-51af';

describe('dashboard: the Calls page', () => {
  let cs: OpsCallsync;
  let dir: string;
  const sink = new FlakySink();
  let failedId: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-calls-page-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_PASSWORD: PASSWORD, ADMIN_TOKEN: TOKEN },
      { sinks: new Map([['archive', sink]]) },
    );
    sink.failing = true;
    for (const id of ['gate-page-1', 'ok-page-1'])
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    failedId = callHash('ai-agent:agent-1:gate-page-1');
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getFailed()).length === 1 && (await archive.getCompleted()).length === 1, {
      timeoutMs: 20_000,
      what: 'one call failed, one done',
    });
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('behind the login; its retry refuses other sites and non-failed sinks', async () => {
    assert.equal((await fetch(`${cs.url}/admin/queues/calls`)).status, 401);
    const page = await fetch(`${cs.url}/admin/queues/calls?q=ok-page-1`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(page.status, 200);
    const text = await page.text();
    assert.match(text, /ok-page-1/);
    assert.match(text, /archive: done/);
    assert.ok(!text.includes('6355340'), 'no number in clear');
    const crossSite = await fetch(`${cs.url}/admin/queues/calls/${failedId}/retry`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, origin: 'https://evil.example', 'content-type': 'application/json' },
      body: JSON.stringify({ sink: 'archive' }),
    });
    assert.equal(crossSite.status, 403);
    const notFailed = await fetch(`${cs.url}/admin/queues/calls/${callHash('ai-agent:agent-1:ok-page-1')}/retry`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ sink: 'archive' }),
    });
    assert.equal(notFailed.status, 409);

    // Replay to one sink: a new job of its queue with the call; the timeline shows the new attempt.
    const replay = await fetch(`${cs.url}/admin/queues/calls/${callHash('ai-agent:agent-1:ok-page-1')}/replay`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ sink: 'archive' }),
    });
    assert.equal(replay.status, 200, await replay.clone().text());
    const { replayed } = (await replay.json()) as { replayed: { jobId: string } };
    assert.match(replayed.jobId, /^[0-9a-f]{32}-replay-/);
    // With the call's job's retry policy and retention, not BullMQ's one attempt kept for ever.
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    const original = await archive.getJob(callHash('ai-agent:agent-1:ok-page-1'));
    const replayJob = await archive.getJob(replayed.jobId);
    for (const option of ['attempts', 'backoff', 'removeOnComplete', 'removeOnFail'] as const)
      assert.deepEqual(replayJob?.opts[option], original?.opts[option], `the replay's ${option}`);
    assert.ok((replayJob?.opts.attempts ?? 1) > 1, 'retried on a failure');
    await waitFor(() => sink.delivered.filter((id) => id === 'ok-page-1').length === 2, {
      what: 'the replay delivered',
    });
    const unrouted = await fetch(`${cs.url}/admin/queues/calls/${callHash('ai-agent:agent-1:ok-page-1')}/replay`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ sink: 'hubspot' }),
    });
    assert.equal(unrouted.status, 404);
  });

  test('a bad filter shows its error with 400, not a 200 page listing nothing', async () => {
    for (const query of ['status=bogus', 'limit=100000000', 'since=-1', 'since=1h&until=2h']) {
      const res = await fetch(`${cs.url}/admin/queues/calls?${query}`, {
        headers: { authorization: `Bearer ${TOKEN}` },
      });
      assert.equal(res.status, 400, query);
      assert.match(await res.text(), /<p class="err" role="alert">/, query);
    }
    const fine = await fetch(`${cs.url}/admin/queues/calls?since=2h&status=failed`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(fine.status, 200);
  });

  test('in a browser: search → call page → retry → the chip turns to done', async (t) => {
    if (!existsSync(CHROMIUM)) {
      t.skip(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) to run the browser test`);
      return;
    }
    const { chromium } = await import('playwright-core');
    await mkdir(ARTIFACTS, { recursive: true });
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    try {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await page.goto(`${cs.url}/admin/queues/calls`);
      await page.getByLabel('User').fill('admin');
      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Log in' }).click();
      await page.waitForURL(`${cs.url}/admin/queues/calls`);
      await page.getByText('archive: failed').waitFor();
      await page.getByText('archive: done').waitFor();
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'calls-list.png'), fullPage: true });

      await page.getByLabel('Call id, job id or number').fill('gate-page-1');
      await page.getByRole('button', { name: 'Search' }).click();
      await page.waitForURL(/q=gate-page-1/);
      assert.equal(await page.getByText('ok-page-1').count(), 0, 'the search shows the call asked for only');
      await page.getByRole('link', { name: 'gate-page-1' }).click();
      await page.waitForURL(`${cs.url}/admin/queues/calls/${failedId}`);
      const chip = page.locator('#sinks .chip[data-sink="archive"]');
      assert.equal(await chip.textContent(), 'archive: failed');
      await page.getByText('remote rejected the record: field "subject" too long').first().waitFor();
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'calls-call-failed.png'), fullPage: true });

      sink.failing = false;
      await page.getByRole('button', { name: 'Retry archive' }).click();
      await waitFor(async () => (await chip.textContent().catch(() => null)) === 'archive: done', {
        timeoutMs: 20_000,
        what: 'the chip to turn to done',
      });
      assert.deepEqual(
        sink.delivered.filter((id) => id === 'gate-page-1'),
        ['gate-page-1'],
      );
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'calls-call-retried.png'), fullPage: true });
    } finally {
      await browser.close();
    }
  });

  test('retries of one dead letter at once: one retries it, the others are told it is not a dead letter (409), none fails (500)', async () => {
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    // gate-*: refused for good while the sink fails, delivered once it is fixed — so the retried job
    // ends done, never a dead letter again that a later request could rightly retry once more.
    sink.failing = true;
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('gate-page-9'))).status, 202);
    const id = callHash('ai-agent:agent-1:gate-page-9');
    await waitFor(
      async () =>
        (await archive.getJob(id))?.failedReason !== undefined && (await archive.getJob(id))!.finishedOn !== undefined,
      {
        timeoutMs: 20_000,
        what: 'gate-page-9 dead-lettered',
      },
    );
    // Its timeline says failed (what the page checks first).
    await waitFor(
      async () => {
        const page = await fetch(`${cs.url}/api/calls/gate-page-9`, { headers: { authorization: `Bearer ${TOKEN}` } });
        const body = (await page.json()) as { calls?: { sinks: Record<string, string> }[] };
        return body.calls?.[0]?.sinks.archive === 'failed';
      },
      { what: 'gate-page-9 failed in its timeline' },
    );
    sink.failing = false;
    const statuses = await Promise.all(
      Array.from({ length: 6 }, () =>
        fetch(`${cs.url}/admin/queues/calls/${id}/retry`, {
          method: 'POST',
          headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
          body: JSON.stringify({ sink: 'archive' }),
        }).then((r) => r.status),
      ),
    );
    assert.equal(statuses.filter((s) => s === 200).length, 1, statuses.join(' '));
    assert.deepEqual(
      statuses.filter((s) => s !== 200),
      [409, 409, 409, 409, 409],
      statuses.join(' '),
    );
  });
});

// The call page's ways out: the archived objects (served by the dashboard, only keys the timeline
// names) and the CRM records (links when HUBSPOT_PORTAL_ID / PIPEDRIVE_COMPANY_DOMAIN are set).
describe('dashboard: a call page opens the archived objects and the CRM records', () => {
  let cs: OpsCallsync;
  let dir: string;
  let redis: Redis;
  const callId = callHash('ai-agent:agent-1:links-1');
  const otherId = callHash('ai-agent:agent-1:links-2');
  const auth = { authorization: `Bearer ${TOKEN}` };
  const archiveKeys = async (id: string) => {
    const text = await (await fetch(`${cs.url}/admin/queues/calls/${id}`, { headers: auth })).text();
    return [...text.matchAll(/<a href="([^"]+)" data-archive-key="([^"]+)"/g)].map((m) => ({
      href: m[1]!.replaceAll('&amp;', '&'),
      key: m[2]!,
    }));
  };

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-calls-links-'));
    cs = await startOpsCallsync({
      ARCHIVE_DIR: dir,
      ADMIN_PASSWORD: PASSWORD,
      ADMIN_TOKEN: TOKEN,
      HUBSPOT_PORTAL_ID: '4711',
      PIPEDRIVE_COMPANY_DOMAIN: 'acme',
    });
    redis = new Redis(REDIS_URL);
    for (const id of ['links-1', 'links-2'])
      assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getCompleted()).length === 2, {
      timeoutMs: 20_000,
      what: 'both calls archived',
    });
    const done = async (id: string) =>
      /archive: done/.test(await (await fetch(`${cs.url}/admin/queues/calls/${id}`, { headers: auth })).text());
    await waitFor(async () => (await done(callId)) && (await done(otherId)), {
      timeoutMs: 10_000,
      what: 'archive done on both call pages',
    });
    // What a HubSpot and a Pipedrive sink report when done (src/sinks/crm/*.ts refs), in the call's timeline.
    const timeline = new CallTimeline(redis, redisKeys(cs.callsync.config.redis), { ttlDays: 1 });
    await timeline.append(callId, {
      event: 'done',
      sink: 'hubspot',
      jobId: callId,
      attempt: 1,
      refs: { hubspotCallId: '90210', hubspotContactId: '501' },
    });
    await timeline.append(callId, {
      event: 'done',
      sink: 'pipedrive',
      jobId: callId,
      attempt: 1,
      refs: { pipedriveActivityId: '33', pipedrivePersonId: '77', pipedriveDealId: '8' },
    });
  });
  after(async () => {
    redis?.disconnect();
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test("the archive links open the call's objects as inert text or JSON; other keys are 404; logged out is refused", async () => {
    const links = await archiveKeys(callId);
    assert.deepEqual(
      links.map((l) => l.key.replace(/^.*\./, '')).sort(),
      ['json', 'json', 'txt'],
      'the .json record, the .txt transcript and the .vcon.json',
    );
    for (const { href, key } of links) {
      const res = await fetch(`${cs.url}${href}`, { headers: auth });
      assert.equal(res.status, 200, key);
      assert.equal(
        res.headers.get('content-type'),
        key.endsWith('.txt') ? 'text/plain; charset=utf-8' : 'application/json; charset=utf-8',
      );
      assert.equal(res.headers.get('content-disposition'), 'inline');
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(await res.text(), await readFile(join(dir, key), 'utf8'), `the stored object ${key}`);
    }
    const { href, key } = links.find((l) => l.key.endsWith('.txt'))!;
    assert.equal((await fetch(`${cs.url}${href}`)).status, 401, 'logged out');
    const object = (sink: string, k: string, id = callId) =>
      fetch(`${cs.url}/admin/queues/calls/${id}/object?${new URLSearchParams({ sink, key: k }).toString()}`, {
        headers: auth,
      });
    // Another call's object (it exists in the store), a traversal, a key beside the call's, another sink, another call's page.
    const other = (await archiveKeys(otherId)).find((l) => l.key.endsWith('.txt'))!.key;
    for (const [sink, k] of [
      ['archive', other],
      ['archive', `${key}/../../../../../../etc/passwd`],
      ['archive', '../../etc/passwd'],
      ['archive', key.replace(/\.txt$/, '.md')],
      ['hubspot', key],
    ]) {
      const res = await object(sink!, k!);
      assert.equal(res.status, 404, `${sink} ${k}`);
      assert.equal(((await res.json()) as { errors: { status: number }[] }).errors[0]!.status, 404);
    }
    assert.equal((await object('archive', key, otherId)).status, 404, "a key of one call through another call's page");
  });

  test('CRM ids link to their records in the web apps', async () => {
    const text = await (await fetch(`${cs.url}/admin/queues/calls/${callId}`, { headers: auth })).text();
    const hrefs = Object.fromEntries(
      [...text.matchAll(/<a href="([^"]+)" data-crm="([^"]+)"/g)].map((m) => [m[2]!, m[1]!]),
    );
    assert.deepEqual(hrefs, {
      hubspotCallId: 'https://app.hubspot.com/contacts/4711/record/0-48/90210',
      hubspotContactId: 'https://app.hubspot.com/contacts/4711/record/0-1/501',
      pipedrivePersonId: 'https://acme.pipedrive.com/person/77',
      pipedriveDealId: 'https://acme.pipedrive.com/deal/8',
    });
    assert.match(text, /pipedriveActivityId <code>33<\/code>/, 'an activity has no page of its own: its id stays text');
  });

  test('in a browser: the transcript link opens the transcript', async (t) => {
    if (!existsSync(CHROMIUM)) {
      t.skip(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) to run the browser test`);
      return;
    }
    const { chromium } = await import('playwright-core');
    const browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: [
        '--headless',
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    try {
      const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await page.goto(`${cs.url}/admin/queues/calls/${callId}`);
      await page.getByLabel('User').fill('admin');
      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Log in' }).click();
      await page.waitForURL(`${cs.url}/admin/queues/calls/${callId}`);
      assert.equal(
        await page.locator('a[data-crm="hubspotCallId"]').getAttribute('href'),
        'https://app.hubspot.com/contacts/4711/record/0-48/90210',
      );
      const link = page.locator('a[data-archive-key$=".txt"]');
      const key = (await link.getAttribute('data-archive-key'))!;
      const [opened] = await Promise.all([context.waitForEvent('page'), link.click()]);
      await opened.waitForLoadState();
      assert.equal(
        (await opened.locator('body').innerText()).trim(),
        (await readFile(join(dir, key), 'utf8')).trim(),
        'the archived transcript, shown as text',
      );
    } finally {
      await browser.close();
    }
  });
});

describe('dashboard: a call page opens the archived objects in S3 (s3rver)', () => {
  let cs: OpsCallsync;
  let server: TestS3;
  const callId = callHash('ai-agent:agent-1:links-s3-1');
  const auth = { authorization: `Bearer ${TOKEN}` };

  before(async () => {
    server = await startS3('calls-page-links');
    cs = await startOpsCallsync({ ...server.env, ADMIN_TOKEN: TOKEN });
    assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('links-s3-1'))).status, 202);
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getCompleted()).length === 1, {
      timeoutMs: 20_000,
      what: 'the call archived',
    });
  });
  after(async () => {
    await cs?.stop();
    await server?.destroy();
  });

  test('the record opens from the bucket; once deleted it is 404', async () => {
    let links: { href: string; key: string }[] = [];
    await waitFor(
      async () => {
        const text = await (await fetch(`${cs.url}/admin/queues/calls/${callId}`, { headers: auth })).text();
        links = [...text.matchAll(/<a href="([^"]+)" data-archive-key="([^"]+)"/g)].map((m) => ({
          href: m[1]!.replaceAll('&amp;', '&'),
          key: m[2]!,
        }));
        return links.length === 3;
      },
      { timeoutMs: 10_000, what: 'the archive keys on the call page' },
    );
    const record = links.find((l) => l.key.endsWith('.json') && !l.key.endsWith('.vcon.json'))!;
    const res = await fetch(`${cs.url}${record.href}`, { headers: auth });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'application/json; charset=utf-8');
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(await res.text(), (await server.get(record.key)).body);
    const { DeleteObjectCommand } = await import('@aws-sdk/client-s3');
    await server.client.send(new DeleteObjectCommand({ Bucket: server.bucket, Key: record.key }));
    assert.equal((await fetch(`${cs.url}${record.href}`, { headers: auth })).status, 404, 'an object deleted since');
  });
});
