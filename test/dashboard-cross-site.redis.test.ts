// Cross-site request forgery against the dashboard, in a real browser (Debian's chromium via
// playwright-core): a page on another site (http://evil.test, a second server on loopback) that an
// operator opens while logged in submits forms (text/plain, urlencoded, multipart) and a fetch to
// the dashboard's add-job endpoint. Whether the browser holds Basic credentials for the dashboard
// (the issue's case) or the login page's session cookie, no job is added; and the dashboard's own
// buttons (add a job, pause and resume a queue) still work. Screenshots go to test-artifacts/.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Queue } from 'bullmq';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { FlakySink } from './support/flaky-sink.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { waitFor } from './support/redis.js';

const CHROMIUM = '/usr/bin/chromium';
const ARTIFACTS = new URL('../test-artifacts/', import.meta.url);
const PASSWORD = 'cross-site-browser-pass-4f0c';
const ADD = '/admin/queues/api/queues/sink-archive/add';
/** What the attack page sends to ADD: three forms and a fetch (a PUT would need a preflight we never grant). */
const FORGED = ['forged-form-text', 'forged-form-urlencoded', 'forged-form-multipart', 'forged-fetch'];

/** The other site: a page that fires its forms and a fetch at the dashboard as soon as it loads, and a plain link to it. */
function attackPage(dashboard: string): string {
  const target = `${dashboard}${ADD}`;
  return `<!doctype html><meta charset="utf-8"><title>cheap flights</title>
<iframe name="f1"></iframe><iframe name="f2"></iframe><iframe name="f3"></iframe>
<form id="text" method="post" enctype="text/plain" target="f1" action="${target}"><input name='{"name":"forged-form-text","data":{"callId":"forged-1"},"pad":"' value='"}'></form>
<form id="urlencoded" method="post" target="f2" action="${target}"><input name="name" value="forged-form-urlencoded"></form>
<form id="multipart" method="post" enctype="multipart/form-data" target="f3" action="${target}"><input name="name" value="forged-form-multipart"></form>
<a id="link" href="${dashboard}/admin/queues/queue/sink-archive">the dashboard</a>
<script>
if (location.hash === '#go') {
  for (const id of ['text', 'urlencoded', 'multipart']) document.getElementById(id).submit();
  fetch(${JSON.stringify(target)}, { method: 'POST', mode: 'no-cors', credentials: 'include', headers: { 'content-type': 'text/plain' }, body: JSON.stringify({ name: 'forged-fetch', data: {} }) });
  fetch(${JSON.stringify(`${dashboard}/admin/queues/api/queues/sink-archive/pause`)}, { method: 'PUT', credentials: 'include' }).catch(() => {});
}
</script>`;
}

describe("dashboard against another site's requests, in a browser", () => {
  let cs: OpsCallsync;
  let dir: string;
  let archive: Queue;
  let evil: Server;
  let evilUrl: string;
  let browser: Browser | null = null;
  const sink = new FlakySink();

  const jobNames = async () =>
    (await archive.getJobs(['waiting', 'delayed', 'active', 'completed', 'failed', 'prioritized'])).map((j) => j.name);
  /** The ingress' access log lines for POSTs to the add endpoint: proof the forged requests arrived, and their answers. */
  const addRequests = () => cs.logs.filter((l) => l.msg === 'request' && l.method === 'POST' && l.path === ADD);

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-dashboard-xsite-'));
    cs = await startOpsCallsync(
      { ARCHIVE_DIR: dir, ADMIN_PASSWORD: PASSWORD },
      { sinks: new Map([['archive', sink]]) },
    );
    archive = cs.operations.queues.find((q) => q.name === 'sink-archive')!;
    evil = createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' });
      res.end(attackPage(cs.url));
    });
    await new Promise<void>((resolve) => evil.listen(0, '127.0.0.1', resolve));
    // Another site: evil.test is mapped to loopback by the browser's resolver (see launch()).
    evilUrl = `http://evil.test:${(evil.address() as AddressInfo).port}/`;
    await mkdir(ARTIFACTS, { recursive: true });
  });
  after(async () => {
    await browser?.close();
    await new Promise((resolve) => evil.close(resolve));
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  async function launch(t: { skip(message: string): void }): Promise<Browser | null> {
    if (!existsSync(CHROMIUM)) {
      t.skip(`${CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) to run the browser test`);
      return null;
    }
    if (browser) return browser;
    const { chromium } = await import('playwright-core');
    // playwright-core gives every launch a fresh temporary profile (its own --user-data-dir).
    browser = await chromium.launch({
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
        '--host-resolver-rules=MAP evil.test 127.0.0.1',
      ],
    });
    return browser;
  }

  /**
   * Opens the other site in `context`, waits until the dashboard has answered all its forged
   * requests, and checks that sink-archive holds the same jobs as before (a urlencoded form that
   * got through would add a job without a name). Returns the answers' statuses.
   */
  async function attack(context: BrowserContext, screenshot: string): Promise<unknown[]> {
    const jobsBefore = (await jobNames()).sort();
    const before = addRequests().length;
    const page = await context.newPage();
    await page.goto(`${evilUrl}#go`);
    const answered = await waitFor(
      () => (addRequests().length - before >= FORGED.length ? addRequests().slice(before) : null),
      {
        timeoutMs: 20_000,
        what: `${FORGED.length} forged requests to reach the dashboard`,
      },
    );
    await page.screenshot({ path: join(ARTIFACTS.pathname, screenshot), fullPage: true });
    await page.close();
    assert.deepEqual((await jobNames()).sort(), jobsBefore, 'no job added to sink-archive');
    assert.equal(await archive.isPaused(), false, 'sink-archive not paused');
    return answered.map((l) => l.status);
  }

  async function addJobFromTheDashboard(page: Page, name: string) {
    await page.goto(`${cs.url}/admin/queues/queue/sink-archive`);
    await page.locator('button[class*="trigger-"]').first().click();
    await page.getByRole('menuitem', { name: 'Add job' }).click();
    await page.locator('#job-name').fill(name);
    await page.getByRole('button', { name: 'Add', exact: true }).click();
    await waitFor(async () => (await jobNames()).includes(name), {
      timeoutMs: 20_000,
      what: `the job ${name} added on the dashboard`,
    });
  }

  test("holding Basic credentials for the dashboard (the issue): the other site's forms and fetch add nothing", async (t) => {
    const b = await launch(t);
    if (!b) return;
    // As a browser that has cached the password: it sends it with every request to the dashboard,
    // other sites' included. (Since the login page, the dashboard never asks a browser for Basic
    // credentials; an operator who typed them into a URL would still have them cached.)
    const context = await b.newContext({ viewport: { width: 1280, height: 800 } });
    await context.setExtraHTTPHeaders({
      authorization: `Basic ${Buffer.from(`admin:${PASSWORD}`).toString('base64')}`,
    });
    try {
      const statuses = await attack(context, 'dashboard-cross-site-basic.png');
      assert.deepEqual(
        statuses,
        FORGED.map(() => 403),
        'every forged request is refused',
      );

      // The same browser on the dashboard itself: its own button adds a job.
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await addJobFromTheDashboard(page, 'added-with-basic');
    } finally {
      await context.close();
    }
  });

  test("logged in on the login page: the other site's forms and fetch add nothing; its link opens the dashboard; the dashboard's buttons work", async (t) => {
    const b = await launch(t);
    if (!b) return;
    const context = await b.newContext({ viewport: { width: 1280, height: 800 } });
    try {
      const page = await context.newPage();
      page.setDefaultTimeout(30_000);
      await page.goto(`${cs.url}/admin/queues`);
      await page.getByLabel('User').fill('admin');
      await page.getByLabel('Password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Log in' }).click();
      await page.waitForURL(`${cs.url}/admin/queues`);
      const cookie = (await context.cookies(`${cs.url}/admin/queues`)).find((c) => c.name === 'callsync_session');
      assert.ok(cookie, 'the login set the session cookie');
      assert.equal(cookie.httpOnly, true);
      assert.equal(cookie.sameSite, 'Strict');

      assert.deepEqual(
        await attack(context, 'dashboard-cross-site-session.png'),
        FORGED.map(() => 403),
      );

      // A link on another site (a chat, an alert mail) leads to the dashboard, still logged in.
      const other = await context.newPage();
      await other.goto(evilUrl);
      await other.locator('#link').click();
      await other.waitForURL(`${cs.url}/admin/queues/queue/sink-archive`);
      await other.getByText('sink-archive').first().waitFor();
      await other.close();

      // The dashboard's own buttons: add a job (a JSON POST), pause and resume the queue (PUTs without a body).
      await addJobFromTheDashboard(page, 'added-from-the-dashboard');
      await page.locator('button[class*="trigger-"]').first().click();
      await page.getByRole('menuitem', { name: 'Pause' }).click();
      await page.getByRole('button', { name: 'Confirm' }).click();
      await waitFor(() => archive.isPaused(), { timeoutMs: 20_000, what: 'the queue paused from the dashboard' });
      await page.screenshot({
        path: join(ARTIFACTS.pathname, 'dashboard-paused-by-its-own-button.png'),
        fullPage: true,
      });
      await page.locator('button[class*="trigger-"]').first().click();
      await page.getByRole('menuitem', { name: 'Resume' }).click();
      await page.getByRole('button', { name: 'Confirm' }).click();
      await waitFor(async () => !(await archive.isPaused()), {
        timeoutMs: 20_000,
        what: 'the queue resumed from the dashboard',
      });

      // Neither the password typed into the login form nor the session cookie is logged.
      const logged = JSON.stringify(cs.logs);
      assert.ok(!logged.includes(PASSWORD), 'the password is not logged');
      assert.ok(!logged.includes(cookie.value), 'the session cookie is not logged');
    } finally {
      await context.close();
    }
  });
});
