// The operator's HTTP endpoints: /metrics, the dashboard under /admin/queues with its login page,
// and (on the ops server of worker and poller processes) /healthz and /readyz. The ingress serves
// the same app for the paths it owns (see `opsRoutes`). No other site's page may change anything
// here (./same-origin.ts) or frame these pages (clicks in a frame would be our own requests).
import { Hono, type ErrorHandler, type MiddlewareHandler, type NotFoundHandler } from 'hono';
import type { Queue } from 'bullmq';
import type { CountryCode } from 'libphonenumber-js';
import type { Logger } from 'pino';
import { errorBody } from '../ingress/errors.js';
import { pausedQueues } from '../../queues/disabled.js';
import type { CallTimeline } from '../../queues/timeline.js';
import { CALLS_API_PATH, callsApi, REFUSALS_API_PATH, type OpenPushCallLookup } from './calls-api.js';
import { callsPage } from './calls-page.js';
import type { ArchiveStores, CrmLinkSettings } from './call-links.js';
import { requestLog } from '../log.js';
import { renderMetrics } from '../metrics.js';
import { authConfigured, clientAddressOf, operatorAuth, type OperatorAuthOptions } from './auth.js';
import { loginRoutes } from './login.js';
import { sameOriginOnly } from './same-origin.js';
import { createSessions } from './session.js';
import { LoginThrottle } from './throttle.js';

/** Where the dashboard is mounted (./dashboard.ts builds it). */
const DASHBOARD_PATH = '/admin/queues';
/** The login page (with a password configured) and the logout; the session cookie's path is /admin. */
const LOGIN_PATH = '/admin/login';
/** The dashboard's Calls page: a call's timeline, by call id, job id or number. */
const CALLS_PAGE_PATH = `${DASHBOARD_PATH}/calls`;
const LOGOUT_PATH = '/admin/logout';
const ADMIN_PATH = '/admin';

export interface OpsAppOptions {
  log: Logger;
  /** Queues shown on the dashboard. */
  queues: Queue[];
  /** Dashboard credentials; without any the dashboard is off. */
  auth: OperatorAuthOptions;
  /**
   * Origins browsers reach these endpoints at (ADMIN_ORIGIN); state-changing requests from any other
   * origin are refused. Default: the request's own origin.
   */
  origins?: string[];
  /** Lifetime of a login session. Default 8 h. */
  sessionTtlMs?: number;
  /** Bearer token /metrics requires. Default none. */
  metricsToken?: string;
  /** For /readyz: true when ready; false when Redis does not answer; a text: not ready, for that reason. */
  ready: () => Promise<boolean | string>;
  /** The calls' timelines: with the dashboard on, served as JSON at /api/calls behind its credentials. */
  calls?: CallTimeline;
  /** A Push API call still assembled (no timeline yet), for a search by its call id. */
  inProgress?: OpenPushCallLookup;
  /** Where the calls' API and the Calls page read a national number (PHONE_DEFAULT_REGION). Default DE, as its. */
  region?: CountryCode;
  /** The archive sinks' stores, by sink name: the Calls page opens a call's archived objects. */
  archives?: ArchiveStores;
  /** The CRM accounts the Calls page links record ids to. */
  crmLinks?: CrmLinkSettings;
  /** True once shutdown started: /readyz answers 503 so load balancers stop sending. */
  stopping?: () => boolean;
  /**
   * Proxies whose X-Forwarded-For names the client whose failed logins are throttled
   * (TRUSTED_PROXIES, TRUST_PROXY_HOPS). Default none: the socket's peer.
   */
  trustedProxies?: string[];
  trustProxyHops?: number;
}

export interface OpsApp {
  app: Hono;
  dashboard: boolean;
  /** True for the paths the ops app answers when mounted beside the ingress. */
  owns(path: string): boolean;
}

/** A path or method nothing here serves: 404 with the error body, as on the ingress. */
export const noRoute: NotFoundHandler = (c) =>
  c.json(errorBody(404, `no route for ${c.req.method} ${c.req.path}`), 404);

/** An unexpected error: logged, answered 500 with the error body. */
export function opsError(log: Logger): ErrorHandler {
  return (err, c) => {
    requestLog(log, c.get('requestId')).error({ err }, 'unexpected error in ops endpoint');
    return c.json(errorBody(500, 'internal error'), 500);
  };
}

export function createOpsApp(options: OpsAppOptions): OpsApp {
  const app = new Hono();
  const dashboard = authConfigured(options.auth);
  const { username, password } = options.auth;
  const login =
    dashboard && username && password
      ? { username, password, sessions: createSessions({ username, password, ttlMs: options.sessionTtlMs }) }
      : null;
  // One throttle for the login page, Basic auth and the tokens: a guess counts wherever it is made.
  const guarded = {
    throttle: new LoginThrottle(),
    clientAddress: clientAddressOf(options.trustedProxies, options.trustProxyHops),
    log: options.log,
  };
  const auth: OperatorAuthOptions = {
    ...options.auth,
    ...guarded,
    ...(login ? { sessions: login.sessions, loginPath: LOGIN_PATH } : {}),
  };

  // Before anything else, so a forged request is refused before it reaches a credential check. The
  // login and logout forms are the only bodies that are not JSON.
  const jsonOnly = sameOriginOnly({ origins: options.origins });
  const formsToo = sameOriginOnly({ origins: options.origins, requireJson: false });
  app.use('*', async function sameOriginOnlyRoutes(c, next) {
    return login && (c.req.path === LOGIN_PATH || c.req.path === LOGOUT_PATH) ? formsToo(c, next) : jsonOnly(c, next);
  });
  app.use(`${ADMIN_PATH}/*`, async function frameDenied(c, next) {
    await next();
    if (!c.res.headers.has('x-frame-options')) c.header('x-frame-options', 'DENY');
    if (!c.res.headers.has('content-security-policy')) c.header('content-security-policy', "frame-ancestors 'none'");
  });

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    if (options.stopping?.()) return c.json(errorBody(503, 'shutting down'), 503);
    const ok = await options.ready().catch(() => false);
    if (ok !== true) return c.json(errorBody(503, ok || 'Redis is not reachable'), 503, { 'retry-after': '5' });
    // Ready, and a paused queue says why (its sink waits for an operator; the process is fine).
    const paused = await pausedQueues(options.queues);
    return c.json(paused.length > 0 ? { status: 'ready', paused } : { status: 'ready' });
  });

  if (options.metricsToken)
    app.use('/metrics', operatorAuth({ token: options.metricsToken, realm: 'metrics', ...guarded }));
  app.get('/metrics', async (c) => {
    const { body, contentType } = await renderMetrics();
    return c.body(body, 200, { 'content-type': contentType });
  });

  if (login) {
    app.route(
      '/',
      loginRoutes({
        ...login,
        ...guarded,
        loginPath: LOGIN_PATH,
        logoutPath: LOGOUT_PATH,
        dashboardPath: DASHBOARD_PATH,
        cookiePath: ADMIN_PATH,
      }),
    );
  }
  const calls = dashboard ? options.calls : undefined;
  if (dashboard) {
    app.use(`${DASHBOARD_PATH}/*`, operatorAuth(auth));
    app.use(DASHBOARD_PATH, operatorAuth(auth));
    app.get(`${DASHBOARD_PATH}/`, (c) => c.redirect(DASHBOARD_PATH));
    // The Calls page (./calls-page.ts), before Bull Board takes the rest of the path.
    if (calls)
      app.route(
        '/',
        callsPage({
          timeline: calls,
          queues: options.queues,
          path: CALLS_PAGE_PATH,
          dashboardPath: DASHBOARD_PATH,
          archives: options.archives,
          crmLinks: options.crmLinks,
          inProgress: options.inProgress,
          region: options.region ?? 'DE',
        }),
      );
    // Bull Board (and ejs) is imported only when the dashboard is on: ~25 MB a process without it
    // saves. The import starts now, so the first page does not wait for it (and a failure shows early).
    const board = import('./dashboard.js').then(({ createDashboard }) => {
      const mounted = new Hono();
      mounted.route(
        DASHBOARD_PATH,
        createDashboard({ queues: options.queues, basePath: DASHBOARD_PATH, timeline: calls }),
      );
      mounted.notFound(noRoute);
      return mounted;
    });
    board.catch((err: unknown) => options.log.error({ err }, 'loading the dashboard failed'));
    const serveBoard: MiddlewareHandler = async (c) => (await board).fetch(c.req.raw, c.env);
    app.all(DASHBOARD_PATH, serveBoard);
    app.all(`${DASHBOARD_PATH}/*`, serveBoard);
  }

  if (calls) {
    app.use(CALLS_API_PATH, operatorAuth(auth));
    app.use(`${CALLS_API_PATH}/*`, operatorAuth(auth));
    app.use(REFUSALS_API_PATH, operatorAuth(auth));
    app.route('/', callsApi(calls, { inProgress: options.inProgress, region: options.region ?? 'DE' }));
  }

  app.notFound(noRoute);
  app.onError(opsError(options.log));

  const owns = (path: string) =>
    path === '/metrics' ||
    (dashboard && (path === DASHBOARD_PATH || path.startsWith(`${DASHBOARD_PATH}/`))) ||
    (calls !== undefined &&
      (path === CALLS_API_PATH || path.startsWith(`${CALLS_API_PATH}/`) || path === REFUSALS_API_PATH)) ||
    (login !== null && (path === LOGIN_PATH || path === LOGOUT_PATH));
  return { app, dashboard, owns };
}

/**
 * Adds what is worth knowing but does not make a process unready — e.g. another live process on the
 * prefix routing with a different configuration — to a ready answer of /readyz, whichever server
 * gives it (the ingress's or the ops server's): `{"status":"ready","warnings":["…"]}`.
 */
export function readyzWarnings(warnings: () => string[]): MiddlewareHandler {
  return async function readyzWarningsMiddleware(c, next) {
    await next();
    if (c.req.path !== '/readyz' || c.res.status !== 200) return;
    const list = warnings();
    if (list.length === 0) return;
    const body = (await c.res
      .clone()
      .json()
      .catch(() => null)) as Record<string, unknown> | null;
    if (body === null || typeof body !== 'object' || Array.isArray(body)) return;
    const headers = new Headers(c.res.headers);
    headers.delete('content-length');
    c.res = new Response(JSON.stringify({ ...body, warnings: list }), { status: 200, headers });
  };
}

/** Ingress middleware answering the ops app's paths (`owns`) from the ops app; everything else passes on. */
export function opsRoutes(ops: OpsApp): MiddlewareHandler {
  return async function opsRoutesMiddleware(c, next) {
    if (!ops.owns(c.req.path)) return next();
    return ops.app.fetch(c.req.raw, c.env);
  };
}
