// The dashboard (Bull Board at /admin/queues): behind its login page, basic auth or a bearer token,
// off without credentials; and in a real headless browser (Debian's chromium via playwright-core):
// log in on the login page, see a dead-lettered job with its error, retry it, see it complete.
// Screenshots go to test-artifacts/. Other sites' requests: test/dashboard-cross-site.redis.test.ts.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import { postJson } from './support/callsync.js';
import { webhookPayload } from './support/calls.js';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url);
const PASSWORD = 'dashboard-pass-7c1e';
const TOKEN = 'dashboard-token-90ab';
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('dashboard', () => {
  let cs: OpsCallsync;
  let dir: string;
  let archive: Queue;
  const sink = new FlakySink();

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-dashboard-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_PASSWORD: PASSWORD, ADMIN_TOKEN: TOKEN },
      { sinks: new Map([['archive', sink]]) },
    );
    archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('asks for credentials, and takes the password or the token', async () => {
    const anonymous = await fetch(`${cs.url}/admin/queues`);
    assert.equal(anonymous.status, 401);
    // No Basic challenge: the browser would prompt, cache the password and send it with other sites' requests.
    assert.equal(anonymous.headers.get('www-authenticate'), 'Bearer realm="callsync"');
    assert.equal(((await anonymous.json()) as any).errors[0].status, 401);
    const browsing = await fetch(`${cs.url}/admin/queues`, { headers: { accept: 'text/html' }, redirect: 'manual' });
    assert.equal(browsing.status, 302);
    assert.equal(browsing.headers.get('location'), '/admin/login?next=%2Fadmin%2Fqueues');
    assert.equal(
      (await fetch(`${cs.url}/admin/queues`, { headers: { authorization: basic('admin', 'guess') } })).status,
      401,
    );
    assert.equal(
      (await fetch(`${cs.url}/admin/queues`, { headers: { authorization: basic('root', PASSWORD) } })).status,
      401,
    );
    assert.equal(
      (await fetch(`${cs.url}/admin/queues/api/queues`)).status,
      401,
      'the API behind the page is protected too',
    );

    const page = await fetch(`${cs.url}/admin/queues`, { headers: { authorization: basic('admin', PASSWORD) } });
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>callsync<\/title>|callsync/);
    const api = await fetch(`${cs.url}/admin/queues/api/queues`, { headers: { authorization: `Bearer ${TOKEN}` } });
    assert.equal(api.status, 200);
    const names = ((await api.json()) as { queues: { name: string }[] }).queues.map((q) => q.name).sort();
    assert.deepEqual(names, ['inbound', 'poll-dead-letters', 'sink-archive']);
    assert.ok(cs.logs.some((l) => l.msg === 'dashboard enabled'));
  });

  test('in a browser: log in, see the failed job and its error, retry it, see it complete', async (t) => {
    if (!existsSync(CHROMIUM)) {
      t.skip(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) to run the browser test`);
      return;
    }
    const { chromium } = await import('playwright-core');
    sink.failing = true;
    const res = await postJson(`${cs.url}/webhooks/ai-agent/agent-1`, webhookPayload('gate-dash-1'));
    assert.equal(res.status, 202);
    const failed = await waitFor(async () => (await archive.getFailed())[0], {
      timeoutMs: 20_000,
      what: 'a dead-lettered archive job',
    });
    const jobId = failed.id!;

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
      await page.goto(`${cs.url}/admin/queues/queue/sink-archive?status=failed`);
      await page.getByLabel('User').fill('admin');
      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Log in' }).click();
      await page.waitForURL(`${cs.url}/admin/queues/queue/sink-archive?status=failed`);
      await page.getByText(jobId).waitFor();
      await page.getByText('remote rejected the record: field "subject" too long').first().waitFor();
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'dashboard-failed-job.png'), fullPage: true });

      sink.failing = false;
      // The job card's first action is Retry (its tooltip says so); the UI asks to confirm.
      const retry = page.locator('button[class*="button-GXX8BV"]').first();
      await retry.hover();
      await page.getByText('Retry', { exact: true }).waitFor();
      await retry.click();
      await page.getByText('Are you sure that you want to retry this job?').waitFor();
      await page.getByRole('button', { name: 'Confirm' }).click();

      await waitFor(async () => (await archive.getJob(jobId))?.isCompleted(), {
        timeoutMs: 20_000,
        what: 'the retried job to complete',
      });
      assert.deepEqual(sink.delivered, ['gate-dash-1']);
      await page.goto(`${cs.url}/admin/queues/queue/sink-archive?status=completed`);
      await page.getByText(jobId).waitFor();
      await page.screenshot({ path: join(ARTIFACTS.pathname, 'dashboard-retried-job-completed.png'), fullPage: true });
    } finally {
      await browser.close();
    }
  });
});

describe('dashboard without credentials', () => {
  let cs: OpsCallsync;
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-dashboard-off-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('is off, and a log line says how to turn it on', async () => {
    assert.equal((await fetch(`${cs.url}/admin/queues`)).status, 404);
    assert.equal((await fetch(`${cs.url}/admin/queues/api/queues`)).status, 404);
    const line = cs.logs.find((l) => String(l.msg).startsWith('dashboard off'));
    assert.ok(line, 'a log line says the dashboard is off');
    assert.match(String(line.msg), /ADMIN_PASSWORD/);
  });
});
