// Cross-site request forgery on the operator's endpoints, through app.request(): another origin's
// request that would change something is refused (Origin, Sec-Fetch-Site), request bodies must be
// JSON, scripts without those headers still get in with credentials; and the login page's session
// cookie (HttpOnly, SameSite=Strict, signed, expiring), the redirect of browsers to it, and the
// headers that keep the pages out of other sites' frames. The dashboard runs on real queues.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Queue } from 'bullmq';
import { Hono } from 'hono';
import { Redis } from 'ioredis';
import { createOpsApp, type OpsApp } from '../src/ops/app.js';
import { sameOriginOnly, type SameOriginOptions } from '../src/ops/same-origin.js';
import { createSessions, SESSION_COOKIE } from '../src/ops/session.js';
import { loadConfig } from '../src/config/index.js';
import { memoryLog, testEnv } from './support/callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './support/redis.js';

const HERE = 'http://ops.internal:9464';
const PASSWORD = 'cross-site-pass-5d2a';
const TOKEN = 'cross-site-token-77e1';
const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

interface Sent {
  status: number;
  body: any;
  headers: Headers;
}

async function send(
  app: { request: Hono['request'] },
  path: string,
  init: RequestInit & { headers?: Record<string, string> } = {},
): Promise<Sent> {
  const res = await app.request(`${HERE}${path}`, init);
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // HTML or empty
  }
  return { status: res.status, body, headers: res.headers };
}

function assertRefused(res: Sent, status: number, detail: RegExp) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.errors[0].status, status);
  assert.match(res.body.errors[0].detail, detail);
}

describe('sameOriginOnly', () => {
  const changes: string[] = [];
  const appWith = (options: SameOriginOptions = {}) => {
    const app = new Hono();
    app.use('*', sameOriginOnly(options));
    app.all('/thing', (c) => {
      changes.push(c.req.method);
      return c.json({ done: true });
    });
    return app;
  };
  const app = appWith();
  const json = { 'content-type': 'application/json' };

  test('refuses a request from another origin, whatever its body', async () => {
    changes.length = 0;
    for (const method of ['POST', 'PUT', 'PATCH', 'DELETE']) {
      assertRefused(
        await send(app, '/thing', { method, headers: { ...json, origin: 'https://evil.example' }, body: '{}' }),
        403,
        /Origin "https:\/\/evil.example"/,
      );
      assertRefused(
        await send(app, '/thing', { method, headers: { origin: 'https://evil.example' } }),
        403,
        /cross-origin/,
      );
    }
    // Another port or scheme of the same host is another origin; `null` is an opaque one (sandboxed frames, data: URLs).
    for (const origin of ['http://ops.internal:9465', 'https://ops.internal:9464', 'http://ops.internal', 'null']) {
      assertRefused(
        await send(app, '/thing', { method: 'POST', headers: { ...json, origin }, body: '{}' }),
        403,
        /cross-origin/,
      );
    }
    assert.deepEqual(changes, []);
  });

  test('refuses what the browser says is not same-origin, even with a matching Origin', async () => {
    changes.length = 0;
    for (const site of ['cross-site', 'same-site', 'none', 'bogus']) {
      assertRefused(
        await send(app, '/thing', { method: 'POST', headers: { ...json, 'sec-fetch-site': site }, body: '{}' }),
        403,
        new RegExp(`Sec-Fetch-Site is "${site}"`),
      );
      assertRefused(
        await send(app, '/thing', { method: 'PUT', headers: { 'sec-fetch-site': site, origin: HERE } }),
        403,
        /cross-site/,
      );
    }
    // The reverse too: a same-origin Sec-Fetch-Site with a foreign Origin.
    assertRefused(
      await send(app, '/thing', {
        method: 'POST',
        headers: { ...json, 'sec-fetch-site': 'same-origin', origin: 'https://evil.example' },
        body: '{}',
      }),
      403,
      /cross-origin/,
    );
    assert.deepEqual(changes, []);
  });

  test('requires JSON bodies: the types a cross-site form can send without asking are refused', async () => {
    changes.length = 0;
    const sameOrigin = { origin: HERE, 'sec-fetch-site': 'same-origin' };
    for (const type of [
      'text/plain',
      'text/plain;charset=UTF-8',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/jsonp',
      'text/json',
    ]) {
      assertRefused(
        await send(app, '/thing', {
          method: 'POST',
          headers: { ...sameOrigin, 'content-type': type },
          body: '{"name":"x"}',
        }),
        415,
        /application\/json/,
      );
      // Without Origin (a script): the same rule.
      assertRefused(
        await send(app, '/thing', { method: 'POST', headers: { 'content-type': type }, body: '{"name":"x"}' }),
        415,
        /application\/json/,
      );
    }
    // A body without any type (a byte body gets none), and an empty body declared as text.
    assertRefused(
      await send(app, '/thing', {
        method: 'POST',
        headers: { 'content-length': '7' },
        body: new TextEncoder().encode('{"a":1}'),
      }),
      415,
      /application\/json/,
    );
    assertRefused(
      await send(app, '/thing', { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '' }),
      415,
      /application\/json/,
    );
    assert.deepEqual(changes, []);
  });

  test("lets the dashboard's own requests, scripts and reads through", async () => {
    changes.length = 0;
    const sameOrigin = { origin: HERE, 'sec-fetch-site': 'same-origin' };
    assert.equal(
      (await send(app, '/thing', { method: 'POST', headers: { ...sameOrigin, ...json }, body: '{"name":"x"}' })).status,
      200,
    );
    assert.equal(
      (
        await send(app, '/thing', {
          method: 'POST',
          headers: { ...sameOrigin, 'content-type': 'application/json; charset=utf-8' },
          body: '{}',
        })
      ).status,
      200,
    );
    // Bull Board's buttons: PUT without a body or a type.
    assert.equal(
      (await send(app, '/thing', { method: 'PUT', headers: { ...sameOrigin, 'content-length': '0' } })).status,
      200,
    );
    // Older browsers send Origin only; a script sends neither.
    assert.equal(
      (await send(app, '/thing', { method: 'PATCH', headers: { origin: HERE, ...json }, body: '{}' })).status,
      200,
    );
    assert.equal((await send(app, '/thing', { method: 'DELETE' })).status, 200);
    assert.equal((await send(app, '/thing', { method: 'POST', headers: json, body: '{}' })).status, 200);
    // Reads are never refused: another site cannot read the answer anyway.
    for (const method of ['GET', 'HEAD', 'OPTIONS']) {
      assert.equal(
        (
          await send(app, '/thing', {
            method,
            headers: { origin: 'https://evil.example', 'sec-fetch-site': 'cross-site', 'content-type': 'text/plain' },
          })
        ).status,
        200,
      );
    }
    assert.deepEqual(changes, ['POST', 'POST', 'PUT', 'PATCH', 'DELETE', 'POST', 'GET', 'HEAD', 'OPTIONS']);
  });

  test('behind a proxy: the forwarded scheme and host are the origin, or the configured ADMIN_ORIGIN', async () => {
    const tls = { 'x-forwarded-proto': 'https', 'content-type': 'application/json' };
    assert.equal(
      (
        await send(app, '/thing', {
          method: 'POST',
          headers: { ...tls, origin: 'https://ops.internal:9464' },
          body: '{}',
        })
      ).status,
      200,
    );
    assertRefused(
      await send(app, '/thing', { method: 'POST', headers: { ...tls, origin: HERE }, body: '{}' }),
      403,
      /is not https:\/\/ops.internal:9464/,
    );
    const host = {
      'x-forwarded-proto': 'https, http',
      'x-forwarded-host': 'Ops.Example.com',
      'content-type': 'application/json',
    };
    assert.equal(
      (
        await send(app, '/thing', {
          method: 'POST',
          headers: { ...host, origin: 'https://ops.example.com' },
          body: '{}',
        })
      ).status,
      200,
    );
    assertRefused(
      await send(app, '/thing', { method: 'POST', headers: { ...host, origin: HERE }, body: '{}' }),
      403,
      /ADMIN_ORIGIN/,
    );

    const configured = appWith({
      origins: loadConfig(testEnv('unused', { ADMIN_ORIGIN: 'https://ops.example.com:443/, http://10.0.0.5:8080' })).ops
        .admin.origins,
    });
    assert.equal(
      (
        await send(configured, '/thing', {
          method: 'POST',
          headers: { ...json, origin: 'https://ops.example.com' },
          body: '{}',
        })
      ).status,
      200,
    );
    assert.equal(
      (
        await send(configured, '/thing', {
          method: 'POST',
          headers: { ...json, origin: 'http://10.0.0.5:8080' },
          body: '{}',
        })
      ).status,
      200,
    );
    // With ADMIN_ORIGIN set, the request's own origin (Host) does not count: a rebinding name would match it.
    assertRefused(
      await send(configured, '/thing', { method: 'POST', headers: { ...json, origin: HERE }, body: '{}' }),
      403,
      /is not https:\/\/ops.example.com, http:\/\/10.0.0.5:8080/,
    );
  });

  test('ADMIN_ORIGIN takes origins only', () => {
    for (const bad of [
      'ops.example.com',
      'https://ops.example.com/admin',
      'ftp://ops.example.com',
      'https://u:p@ops.example.com',
    ]) {
      assert.throws(() => loadConfig(testEnv('unused', { ADMIN_ORIGIN: bad })), /ADMIN_ORIGIN/, bad);
    }
  });
});

describe('the dashboard against cross-site requests', () => {
  const prefix = uniquePrefix('xsite');
  let connection: Redis;
  let archive: Queue;
  let ops: OpsApp;
  const { log } = memoryLog('silent');
  const add = '/admin/queues/api/queues/sink-archive/add';
  const job = JSON.stringify({ name: 'forged', data: { callId: 'forged-1' } });
  const jobs = async () =>
    (await archive.getJobs(['waiting', 'delayed', 'active', 'completed', 'failed', 'prioritized']))
      .map((j) => j.name)
      .sort();

  before(async () => {
    connection = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    archive = new Queue('sink-archive', { connection, prefix });
    await archive.pause(); // nothing works the jobs off: they stay to be counted
    ops = createOpsApp({
      log,
      queues: [archive],
      auth: { username: 'admin', password: PASSWORD, token: TOKEN },
      ready: async () => true,
    });
  });
  after(async () => {
    await archive.close();
    connection.disconnect();
    await cleanupPrefix(prefix);
  });

  test("the issue's forged call (text/plain from another origin, cached Basic credentials) adds no job", async () => {
    const withPassword = { authorization: basic('admin', PASSWORD) };
    assertRefused(
      await send(ops.app, add, {
        method: 'POST',
        headers: {
          ...withPassword,
          origin: 'https://evil.example',
          'sec-fetch-site': 'cross-site',
          'content-type': 'text/plain',
        },
        body: job,
      }),
      403,
      /cross-site/,
    );
    assertRefused(
      await send(ops.app, add, {
        method: 'POST',
        headers: { ...withPassword, origin: 'https://evil.example', 'content-type': 'text/plain' },
        body: job,
      }),
      403,
      /cross-origin/,
    );
    assertRefused(
      await send(ops.app, add, {
        method: 'POST',
        headers: {
          ...withPassword,
          'sec-fetch-site': 'cross-site',
          'content-type': 'application/x-www-form-urlencoded',
        },
        body: `${job}=`,
      }),
      403,
      /cross-site/,
    );
    // Same origin, but a form's body: refused as well.
    assertRefused(
      await send(ops.app, add, {
        method: 'POST',
        headers: { ...withPassword, origin: HERE, 'sec-fetch-site': 'same-origin', 'content-type': 'text/plain' },
        body: job,
      }),
      415,
      /application\/json/,
    );
    // The other state-changing routes (PUT, no body) from another site: refused.
    for (const path of [
      '/admin/queues/api/queues/sink-archive/pause',
      '/admin/queues/api/queues/sink-archive/clean/completed',
      '/admin/queues/api/queues/sink-archive/empty',
      '/admin/queues/api/queues/pause',
    ]) {
      assertRefused(
        await send(ops.app, path, {
          method: 'PUT',
          headers: { ...withPassword, origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
        }),
        403,
        /cross-site/,
      );
    }
    // Anything else of the ops app that takes a POST: refused before it is looked at.
    for (const path of ['/metrics', '/healthz', '/admin/login', '/admin/logout']) {
      assertRefused(
        await send(ops.app, path, {
          method: 'POST',
          headers: { origin: 'https://evil.example', 'content-type': 'application/x-www-form-urlencoded' },
          body: 'username=admin',
        }),
        403,
        /cross-origin/,
      );
    }
    assert.deepEqual(await jobs(), []);
  });

  test("the dashboard's own JSON call and a script with the token still add jobs", async () => {
    const own = await send(ops.app, add, {
      method: 'POST',
      headers: {
        authorization: basic('admin', PASSWORD),
        origin: HERE,
        'sec-fetch-site': 'same-origin',
        'content-type': 'application/json',
      },
      body: JSON.stringify({ name: 'from-the-page', data: { callId: 'page-1' } }),
    });
    assert.equal(own.status, 200, JSON.stringify(own.body));
    const script = await send(ops.app, add, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'from-a-script', data: {} }),
    });
    assert.equal(script.status, 200, JSON.stringify(script.body));
    // Without credentials: still 401, same origin or not.
    assert.equal(
      (await send(ops.app, add, { method: 'POST', headers: { 'content-type': 'application/json' }, body: job })).status,
      401,
    );
    assert.deepEqual(await jobs(), ['from-a-script', 'from-the-page']);
    // A bodyless button of the page (pause the queue) works from the same origin.
    const pause = await send(ops.app, '/admin/queues/api/queues/sink-archive/resume', {
      method: 'PUT',
      headers: {
        authorization: basic('admin', PASSWORD),
        origin: HERE,
        'sec-fetch-site': 'same-origin',
        'content-length': '0',
      },
    });
    assert.ok(pause.status < 300, `resume answered ${pause.status}`);
    assert.equal(await archive.isPaused(), false);
    await archive.pause();
  });

  test('browsers without credentials go to the login page; 401s carry no Basic challenge the browser would cache', async () => {
    const page = await send(ops.app, '/admin/queues/queue/sink-archive?status=failed', {
      headers: { accept: 'text/html,application/xhtml+xml' },
    });
    assert.equal(page.status, 302);
    assert.equal(
      page.headers.get('location'),
      `/admin/login?next=${encodeURIComponent('/admin/queues/queue/sink-archive?status=failed')}`,
    );
    const api = await send(ops.app, '/admin/queues/api/queues', { headers: { accept: 'application/json' } });
    assert.equal(api.status, 401);
    assert.equal(api.headers.get('www-authenticate'), 'Bearer realm="callsync"');
    // Basic credentials sent unasked still work (curl -u).
    assert.equal(
      (await send(ops.app, '/admin/queues/api/queues', { headers: { authorization: basic('admin', PASSWORD) } }))
        .status,
      200,
    );
  });

  test('login: a same-origin form sets a strict, HttpOnly, expiring session cookie that opens the dashboard', async () => {
    const form = new URLSearchParams({
      username: 'admin',
      password: PASSWORD,
      next: '/admin/queues/queue/sink-archive',
    });
    const sameOrigin = {
      origin: HERE,
      'sec-fetch-site': 'same-origin',
      'content-type': 'application/x-www-form-urlencoded',
    };
    const res = await send(ops.app, '/admin/login', { method: 'POST', headers: sameOrigin, body: form.toString() });
    assert.equal(res.status, 303);
    assert.equal(res.headers.get('location'), '/admin/queues/queue/sink-archive');
    const setCookie = res.headers.get('set-cookie') ?? '';
    assert.match(setCookie, new RegExp(`^${SESSION_COOKIE}=[^;]+`));
    for (const attribute of [
      /; Path=\/admin(;|$)/,
      /; HttpOnly(;|$)/,
      /; SameSite=Strict(;|$)/,
      /; Max-Age=28800(;|$)/,
    ])
      assert.match(setCookie, attribute);
    assert.doesNotMatch(setCookie, /; Secure/, 'plain http: a Secure cookie would not come back');
    const cookie = setCookie.split(';')[0]!;

    assert.equal((await send(ops.app, '/admin/queues/api/queues', { headers: { cookie } })).status, 200);
    const added = await send(ops.app, add, {
      method: 'POST',
      headers: { cookie, origin: HERE, 'sec-fetch-site': 'same-origin', 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'with-a-session', data: {} }),
    });
    assert.equal(added.status, 200);
    // The cookie does not make a cross-site request acceptable (a browser would not even send it).
    assertRefused(
      await send(ops.app, add, {
        method: 'POST',
        headers: { cookie, origin: 'https://evil.example', 'content-type': 'text/plain' },
        body: job,
      }),
      403,
      /cross-origin/,
    );
    assert.ok((await jobs()).includes('with-a-session'));
    assert.ok(!(await jobs()).includes('forged'));

    // Logged in, the login page sends the browser on.
    const again = await send(ops.app, '/admin/login?next=/admin/queues', { headers: { cookie, accept: 'text/html' } });
    assert.equal(again.status, 303);
    assert.equal(again.headers.get('location'), '/admin/queues');

    // Logout clears it.
    const out = await send(ops.app, '/admin/logout', {
      method: 'POST',
      headers: { cookie, origin: HERE, 'sec-fetch-site': 'same-origin' },
    });
    assert.equal(out.status, 303);
    assert.match(out.headers.get('set-cookie') ?? '', new RegExp(`^${SESSION_COOKIE}=; Max-Age=0; Path=/admin`));
  });

  test('login: Secure on https (also behind a TLS proxy)', async () => {
    const form = new URLSearchParams({ username: 'admin', password: PASSWORD }).toString();
    const res = await send(ops.app, '/admin/login', {
      method: 'POST',
      headers: {
        origin: 'https://ops.internal:9464',
        'x-forwarded-proto': 'https',
        'sec-fetch-site': 'same-origin',
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: form,
    });
    assert.equal(res.status, 303);
    assert.match(res.headers.get('set-cookie') ?? '', /; Secure(;|$)/);
  });

  test('login: refused from another site, with wrong credentials, and never leads away from the dashboard', async () => {
    const form = (fields: Record<string, string>) =>
      new URLSearchParams({ username: 'admin', password: PASSWORD, ...fields }).toString();
    const urlencoded = { 'content-type': 'application/x-www-form-urlencoded' };
    // Login CSRF: another site logging the browser in.
    const forged = await send(ops.app, '/admin/login', {
      method: 'POST',
      headers: { ...urlencoded, origin: 'https://evil.example', 'sec-fetch-site': 'cross-site' },
      body: form({}),
    });
    assertRefused(forged, 403, /cross-site/);
    assert.equal(forged.headers.get('set-cookie'), null);

    const wrong = await send(ops.app, '/admin/login', {
      method: 'POST',
      headers: { ...urlencoded, origin: HERE },
      body: form({ password: 'guess' }),
    });
    assertRefused(wrong, 401, /wrong user or password/);
    assert.equal(wrong.headers.get('set-cookie'), null);
    const wrongUser = await send(ops.app, '/admin/login', {
      method: 'POST',
      headers: { ...urlencoded, origin: HERE, accept: 'text/html' },
      body: form({ username: 'root' }),
    });
    assert.equal(wrongUser.status, 401);
    assert.match(String(wrongUser.body), /wrong user or password/);
    assert.equal(wrongUser.headers.get('set-cookie'), null);
    assertRefused(
      await send(ops.app, '/admin/login', {
        method: 'POST',
        headers: { ...urlencoded, origin: HERE },
        body: 'username=admin',
      }),
      400,
      /user and the password/,
    );
    assertRefused(
      await send(ops.app, '/admin/login', {
        method: 'POST',
        headers: { ...urlencoded, origin: HERE },
        body: `username=admin&password=${'x'.repeat(9000)}`,
      }),
      413,
      /8 KiB/,
    );

    for (const next of [
      '//evil.example/admin/queues',
      'https://evil.example',
      '/admin/queuesX',
      '/admin/queues\\@evil.example',
      'javascript:alert(1)',
      '/metrics',
    ]) {
      const res = await send(ops.app, '/admin/login', {
        method: 'POST',
        headers: { ...urlencoded, origin: HERE },
        body: form({ next }),
      });
      assert.equal(res.status, 303, next);
      assert.equal(res.headers.get('location'), '/admin/queues', next);
    }
    // The page puts `next` in an attribute, escaped.
    const page = await send(
      ops.app,
      `/admin/login?next=${encodeURIComponent('/admin/queues"><script>alert(1)</script>')}`,
      { headers: { accept: 'text/html' } },
    );
    assert.equal(page.status, 200);
    assert.doesNotMatch(String(page.body), /<script>/);
  });

  test('session cookies: forged, altered or expired ones open nothing', async () => {
    const sessions = createSessions({ username: 'admin', password: PASSWORD });
    const now = Date.now();
    const good = sessions.issue('admin', now);
    assert.deepEqual(sessions.verify(good, now), { user: 'admin' });
    assert.equal(sessions.verify(good, now + sessions.ttlMs + 1000), null, 'expired');
    const [payload, mac] = good.split('.') as [string, string];
    const longer = Buffer.from(
      JSON.stringify({ u: 'admin', e: Math.floor(now / 1000) + 10 * 365 * 86400, n: 'x' }),
    ).toString('base64url');
    assert.equal(sessions.verify(`${longer}.${mac}`, now), null, 'payload changed');
    assert.equal(sessions.verify(`${payload}.${mac.slice(0, -2)}AA`, now), null, 'signature changed');
    assert.equal(sessions.verify(`${payload}.${mac}.x`, now), null);
    assert.equal(sessions.verify(payload, now), null);
    // Another password's sessions (another installation, or before a password change) do not count.
    assert.equal(createSessions({ username: 'admin', password: `${PASSWORD}-new` }).verify(good, now), null);

    for (const cookie of [
      `${SESSION_COOKIE}=${longer}.${mac}`,
      `${SESSION_COOKIE}=`,
      `${SESSION_COOKIE}=${createSessions({ username: 'admin', password: 'other-password-123' }).issue('admin')}`,
    ]) {
      assert.equal((await send(ops.app, '/admin/queues/api/queues', { headers: { cookie } })).status, 401, cookie);
    }
  });

  test('no other site may frame the pages (a click in a frame would be a same-origin request)', async () => {
    for (const [path, headers] of [
      ['/admin/queues', { authorization: basic('admin', PASSWORD) }],
      ['/admin/queues/api/queues', { authorization: basic('admin', PASSWORD) }],
      ['/admin/login', { accept: 'text/html' }],
      ['/admin/queues', { accept: 'text/html' }],
    ] as const) {
      const res = await send(ops.app, path, { headers });
      assert.equal(res.headers.get('x-frame-options'), 'DENY', path);
      assert.match(res.headers.get('content-security-policy') ?? '', /frame-ancestors 'none'/, path);
    }
  });

  test('with only a token: no login page, a bearer challenge', async () => {
    const tokenOnly = createOpsApp({ log, queues: [archive], auth: { token: TOKEN }, ready: async () => true });
    assert.equal((await send(tokenOnly.app, '/admin/login', { headers: { accept: 'text/html' } })).status, 404);
    assert.equal(tokenOnly.owns('/admin/login'), false);
    const res = await send(tokenOnly.app, '/admin/queues', { headers: { accept: 'text/html' } });
    assert.equal(res.status, 401);
    assert.equal(res.headers.get('www-authenticate'), 'Bearer realm="callsync"');
    assertRefused(
      await send(tokenOnly.app, add, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${TOKEN}`,
          origin: 'https://evil.example',
          'content-type': 'application/json',
        },
        body: job,
      }),
      403,
      /cross-origin/,
    );
  });
});
