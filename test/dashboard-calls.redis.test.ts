// The dashboard's Calls page (src/ops/calls-page.ts) in a real headless browser (Debian's chromium via
// playwright-core, as test/dashboard.redis.test.ts): log in, search a call, open its page, retry
// its failed sink, see the chip turn to done. Screenshots go to test-artifacts/ (README and
// docs/operations.md "Where is my call?"). Plus its login and CSRF rules without a browser.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { callHash } from '../src/model/call.js';
import { postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

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
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir, ADMIN_PASSWORD: PASSWORD, ADMIN_TOKEN: TOKEN }, { sinks: new Map([['archive', sink]]) });
    sink.failing = true;
    for (const id of ['gate-page-1', 'ok-page-1']) assert.equal((await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload(id))).status, 202);
    failedId = callHash('ai-agent:agent-1:gate-page-1');
    const archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    await waitFor(async () => (await archive.getFailed()).length === 1 && (await archive.getCompleted()).length === 1, { timeoutMs: 20_000, what: 'one call failed, one done' });
  });
  after(async () => {
    await cs?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('behind the login; its retry refuses other sites and non-failed sinks', async () => {
    assert.equal((await fetch(`${cs.url}/admin/queues/calls`)).status, 401);
    const page = await fetch(`${cs.url}/admin/queues/calls?q=ok-page-1`, { headers: { authorization: `Bearer ${TOKEN}` } });
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
    await waitFor(() => sink.delivered.filter((id) => id === 'ok-page-1').length === 2, { what: 'the replay delivered' });
    const unrouted = await fetch(`${cs.url}/admin/queues/calls/${callHash('ai-agent:agent-1:ok-page-1')}/replay`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ sink: 'hubspot' }),
    });
    assert.equal(unrouted.status, 404);
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
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
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
      await waitFor(async () => (await chip.textContent().catch(() => null)) === 'archive: done', { timeoutMs: 20_000, what: 'the chip to turn to done' });
      assert.deepEqual(sink.delivered.filter((id) => id === 'gate-page-1'), ['gate-page-1']);
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'calls-call-retried.png'), fullPage: true });
    } finally {
      await browser.close();
    }
  });
});
