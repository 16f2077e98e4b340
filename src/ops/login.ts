// The dashboard's login page: user and password in a plain form (same-origin POST), answered with a
// session cookie that is HttpOnly, SameSite=Strict, Secure on https, and expires (./session.ts);
// and the logout that clears it. ./app.ts mounts it and guards its POSTs with `sameOriginOnly`.
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import { html } from 'hono/html';
import { errorBody } from '../ingress/errors.js';
import type { Logger } from 'pino';
import { attempt, basicCredentialsMatch, throttled } from './auth.js';
import { retryAfterSeconds, type LoginThrottle } from './throttle.js';
import { requestOrigin } from './same-origin.js';
import { SESSION_COOKIE, type Sessions } from './session.js';

export interface LoginOptions {
  username: string;
  password: string;
  sessions: Sessions;
  /** Where the login page is, e.g. /admin/login. */
  loginPath: string;
  /** Where the logout page is, e.g. /admin/logout. */
  logoutPath: string;
  /** The dashboard: the only place `?next=` may lead, and where it leads by default. */
  dashboardPath: string;
  /** Path of the cookie; covers the three paths above. */
  cookiePath: string;
  /** Shown in the page's title. Default `callsync`. */
  title?: string;
  /** Throttles wrong passwords per peer and account (./throttle.ts). Default none. */
  throttle?: LoginThrottle;
  /** Who tries (see clientAddressOf in ./auth.ts). Default the socket's peer. */
  clientAddress?: (c: Context) => string;
  /** Where wrong passwords and throttling are logged (never the password). */
  log?: Logger;
}

const PAGE_HEADERS = {
  'cache-control': 'no-store',
  'content-security-policy':
    "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  'x-frame-options': 'DENY',
};

function wantsHtml(c: Context): boolean {
  return (c.req.header('accept') ?? '').includes('text/html');
}

export function loginRoutes(options: LoginOptions): Hono {
  const { sessions, dashboardPath } = options;
  const title = options.title ?? 'callsync';
  const app = new Hono();

  /** `next` when it names a page of the dashboard (never another site), else the dashboard. */
  const safeNext = (next: unknown): string =>
    typeof next === 'string' &&
    (next === dashboardPath || next.startsWith(`${dashboardPath}/`) || next.startsWith(`${dashboardPath}?`)) &&
    !/[\\\r\n]/.test(next)
      ? next
      : dashboardPath;

  const page = (c: Context, status: 200 | 400 | 401 | 429, next: string, message: string | null) => {
    c.status(status);
    for (const [name, value] of Object.entries(PAGE_HEADERS)) c.header(name, value);
    return c.html(
      html`<!doctype html>
        <html lang="en">
          <head>
            <meta charset="utf-8" />
            <meta name="viewport" content="width=device-width" />
            <title>${title}: log in</title>
            <style>
              body {
                font-family: system-ui, sans-serif;
                display: grid;
                place-items: center;
                min-height: 90vh;
                background: #f4f5f7;
              }
              form {
                background: #fff;
                padding: 2rem;
                border-radius: 8px;
                box-shadow: 0 1px 4px #0002;
                display: grid;
                gap: 0.75rem;
                min-width: 18rem;
              }
              input,
              button {
                font: inherit;
                padding: 0.5rem;
              }
              p {
                margin: 0;
                color: #b00020;
              }
            </style>
          </head>
          <body>
            <form method="post" action="${options.loginPath}">
              <h1>${title}</h1>
              ${message ? html`<p role="alert">${message}</p>` : ''}
              <label>User <input name="username" autocomplete="username" required /></label>
              <label>Password <input name="password" type="password" autocomplete="current-password" required /></label>
              <input type="hidden" name="next" value="${next}" />
              <button type="submit">Log in</button>
            </form>
          </body>
        </html>`,
    );
  };

  const refuse = (c: Context, status: 400 | 401, next: string, message: string, pointer = '') =>
    wantsHtml(c) ? page(c, status, next, message) : c.json(errorBody(status, message, pointer), status);

  app.get(options.loginPath, (c) => {
    const next = safeNext(c.req.query('next'));
    if (sessions.verify(getCookie(c, SESSION_COOKIE))) return c.redirect(next, 303);
    // A link from another site (a chat, an alert mail) arrives without the SameSite=Strict cookie.
    // Loading the page again from here is a same-site navigation: the cookie comes along, if there is one.
    const site = c.req.header('sec-fetch-site');
    if (site === 'cross-site' || site === 'same-site') {
      for (const [name, value] of Object.entries(PAGE_HEADERS)) c.header(name, value);
      return c.html(
        html`<!doctype html><meta charset="utf-8" /><meta http-equiv="refresh" content="0" /><title>${title}</title>`,
      );
    }
    return page(c, 200, next, null);
  });

  app.post(
    options.loginPath,
    bodyLimit({
      maxSize: 8 * 1024,
      onError: (c) => c.json(errorBody(413, 'a login is a user and a password: at most 8 KiB'), 413),
    }),
    async (c) => {
      const form = await c.req.parseBody().catch(() => ({}) as Record<string, unknown>);
      const next = safeNext(form.next);
      const { username, password } = form;
      if (typeof username !== 'string' || typeof password !== 'string' || username === '' || password === '') {
        return refuse(
          c,
          400,
          next,
          'enter the user and the password',
          typeof username === 'string' && username !== '' ? '/password' : '/username',
        );
      }
      const tried = attempt(c, options, username, 'login');
      if (tried.waitMs > 0) {
        if (!wantsHtml(c)) return throttled(c, tried.waitMs);
        c.header('retry-after', retryAfterSeconds(tried.waitMs));
        return page(c, 429, next, `too many failed logins: try again in ${retryAfterSeconds(tried.waitMs)} s`);
      }
      const ok = basicCredentialsMatch(options, username, password);
      tried.done(ok);
      if (!ok) return refuse(c, 401, next, 'wrong user or password');
      // Secure whenever the browser speaks https to us (Origin names what it sees, also behind a proxy).
      const secure = (c.req.header('origin') ?? requestOrigin(c) ?? '').startsWith('https:');
      setCookie(c, SESSION_COOKIE, sessions.issue(username), {
        path: options.cookiePath,
        httpOnly: true,
        sameSite: 'Strict',
        secure,
        maxAge: Math.floor(sessions.ttlMs / 1000),
      });
      c.header('cache-control', 'no-store');
      return c.redirect(next, 303);
    },
  );

  app.get(options.logoutPath, (c) => {
    for (const [name, value] of Object.entries(PAGE_HEADERS)) c.header(name, value);
    return c.html(
      html`<!doctype html>
        <html lang="en">
          <head>
            <meta charset="utf-8" />
            <title>${title}: log out</title>
          </head>
          <body>
            <form method="post" action="${options.logoutPath}"><button type="submit">Log out</button></form>
          </body>
        </html>`,
    );
  });

  app.post(options.logoutPath, (c) => {
    deleteCookie(c, SESSION_COOKIE, { path: options.cookiePath, httpOnly: true, sameSite: 'Strict' });
    return c.redirect(options.loginPath, 303);
  });

  return app;
}
