// The dashboard's "Calls" page (/admin/queues/calls): search calls (call id, job id, number, time
// range, sink state), a list with one status chip per sink, and a call's page with its timeline
// (queues/timeline.ts), the retry of a failed sink, a replay to one sink, its archived objects and
// links to its CRM records (./call-links.ts). Behind the dashboard's login and CSRF rules
// (./app.ts: operatorAuth on /admin/queues/*, sameOriginOnly: the retry is a same-origin JSON POST).
import { randomBytes } from 'node:crypto';
import { Hono, type Context } from 'hono';
import { html, raw } from 'hono/html';
import type { Queue } from 'bullmq';
import type { CountryCode } from 'libphonenumber-js';
import { retryDeadLetter } from '../../queues/dead-letters.js';
import { INBOUND_QUEUE, sinkQueueName } from '../../queues/registry.js';
import {
  callsNamed,
  CallQueryError,
  describeEntry,
  findCalls,
  type FoundCalls,
  listedCallId,
  lookupsOfText,
  parseCallQuery,
  sinkLabel,
  type CallSummary,
  type CallTimeline,
  type Refusal,
  type TimelineEntry,
} from '../../queues/timeline.js';
import { errorBody } from '../ingress/errors.js';
import { archivedObjects, crmRecordUrl, type ArchiveStores, type CrmLinkSettings } from './call-links.js';
import { checkedCallQuery, type OpenPushCallLookup } from './calls-api.js';
import { describeOpenPushCall, type OpenPushCall } from '../sources/push-assembly.js';

export interface CallsPageOptions {
  timeline: CallTimeline;
  /** The queues of this deployment, by name (the retry finds the sink's job there). */
  queues: readonly Queue[];
  /** Where the page is, e.g. /admin/queues/calls. */
  path: string;
  /** The dashboard (Bull Board), for links to a queue. */
  dashboardPath: string;
  /** The archive sinks' stores, by sink name: the page opens the objects a call's timeline names (./call-links.ts). */
  archives?: ArchiveStores;
  /** The CRM accounts a record id links to (HUBSPOT_PORTAL_ID, PIPEDRIVE_COMPANY_DOMAIN). */
  crmLinks?: CrmLinkSettings;
  /** A Push API call still assembled (no timeline yet), for a search by its call id. */
  inProgress?: OpenPushCallLookup;
  /** Where a national number searched for is read (PHONE_DEFAULT_REGION). */
  region: CountryCode;
}

const STYLE = `body{font-family:system-ui,sans-serif;margin:1.5rem;background:#f4f5f7;color:#222}
a{color:#2251c9}table{border-collapse:collapse;width:100%;background:#fff}td,th{padding:.35rem .6rem;border-bottom:1px solid #e3e5e8;text-align:left;vertical-align:top;font-size:.9rem}
form.search{display:flex;gap:.5rem;flex-wrap:wrap;margin:1rem 0}input,select,button{font:inherit;padding:.35rem .5rem}
.chip{display:inline-block;border-radius:1rem;padding:.1rem .6rem;margin:0 .25rem .25rem 0;font-size:.8rem;color:#fff;background:#777}
.chip.done{background:#23863a}.chip.skipped{background:#6b6f76}.chip.failed{background:#c62828}.chip.pending,.chip.retrying{background:#b26a00}.chip.paused{background:#7b1fa2}
.err{color:#c62828}nav{margin-bottom:1rem}`;

const iso = (ms: number | null | undefined) =>
  ms === null || ms === undefined ? '–' : new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

function chips(summary: CallSummary) {
  const sinks = Object.entries(summary.sinks);
  const fanOut = summary.fanOutFailed
    ? html`<span class="chip failed" data-fan-out title="${summary.fanOutFailed.reason}">fan-out: failed</span>`
    : summary.fanOutPending
      ? html`<span class="chip pending" data-fan-out title="waits in the inbound log for a worker's fan-out"
          >fan-out: pending</span
        >`
      : '';
  if (sinks.length === 0) return fanOut || html`<span class="chip">no sink</span>`;
  return [
    fanOut,
    ...sinks.map(
      ([sink, state]) =>
        html`<span class="chip ${state}" data-sink="${sink}" title="${summary.reasons[sink] ?? state}"
          >${sink}: ${state}${summary.unconfigured?.[sink] ? ' (not configured)' : ''}</span
        >`,
    ),
  ];
}

/** A ref's value as a link when it is an http(s) URL (a CRM record, a pre-signed object), else text. */
function refValue(value: string) {
  return /^https?:\/\//.test(value)
    ? html`<a href="${value}" rel="noreferrer noopener" target="_blank">${value}</a>`
    : html`<code>${value}</code>`;
}

/** A done entry's refs: an archived object opens through the page, a CRM id links to its record. */
function detail(
  e: TimelineEntry,
  objectUrl: (sink: string, key: string) => string | null,
  crmLinks: CrmLinkSettings | undefined,
) {
  if (e.event === 'done' && e.refs) {
    const value = (k: string, v: string) => {
      const object = e.sink ? objectUrl(e.sink, v) : null;
      if (object) return html`<a href="${object}" data-archive-key="${v}" target="_blank" rel="noopener">${v}</a>`;
      const record = crmRecordUrl(k, v, crmLinks);
      if (record) return html`<a href="${record}" data-crm="${k}" rel="noreferrer noopener" target="_blank">${v}</a>`;
      return refValue(v);
    };
    return html`${Object.entries(e.refs).map(([k, v]) => html`${k} ${value(k, v)} `)}${e.reason ? ` ${e.reason}` : ''}`;
  }
  return describeEntry(e);
}

export function callsPage(options: CallsPageOptions): Hono {
  const app = new Hono();
  const { path, timeline } = options;
  const queues = new Map(options.queues.map((q) => [q.name, q]));
  /** A link to the same list with up to 1000 rows (a list cut at its limit). */
  const upTo1000 = (params: Record<string, string>) =>
    html`<a href="${path}?${new URLSearchParams({ ...params, limit: '1000' }).toString()}">up to 1000</a>`;

  const page = (c: Context, title: string, body: unknown, script = '') => {
    const nonce = randomBytes(16).toString('base64');
    c.header('cache-control', 'no-store');
    c.header(
      'content-security-policy',
      `default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-${nonce}'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
    );
    return c.html(
      html`<!doctype html>
        <html lang="en">
          <head>
            <meta charset="utf-8" />
            <meta name="viewport" content="width=device-width" />
            <title>${title}</title>
            <style>
              ${raw(STYLE)}
            </style>
          </head>
          <body>
            <nav><a href="${path}">Calls</a> · <a href="${options.dashboardPath}">Queues</a></nav>
            ${body}${
              script
                ? html`<script nonce="${nonce}">
                    ${raw(script)};
                  </script>`
                : ''
            }
          </body>
        </html>`,
    );
  };

  // The list: a reference (call id, job id, +number) or a query (time range, sink, state).
  app.get(path, async (c) => {
    const q = (c.req.query('q') ?? '').trim();
    const values: Record<string, string> = {
      since: c.req.query('since') || '24h',
      ...pick(c.req.query(), ['until', 'sink', 'status', 'limit']),
    };
    let calls: CallSummary[] = [];
    let refused: Refusal[] = [];
    let refusedTotal = 0;
    /** The list stopped at its limit with older calls of the range not looked at (`more`), or at the bound of a query's work (`truncated`); `next`: the `until` of the rest. */
    let rest: Pick<FoundCalls, 'more' | 'truncated' | 'scanned' | 'next'> = {
      more: false,
      truncated: false,
      scanned: 0,
    };
    /** A Push API call searched for that is still assembled. */
    let open: OpenPushCall | null = null;
    let error: string | null = null;
    // A range without a sink or a state other than "failed" also lists the webhooks refused in it
    // (after a change of the platform's payload: which calls, on which field), each with its call id.
    const inRange = q === '';
    // A number as `callsync call` reads one (E.164, 00, national in PHONE_DEFAULT_REGION): its calls
    // in the range; digits only that read as a number may be a call id too, whose calls come first.
    const lookups = q === '' ? null : lookupsOfText(q, options.region);
    try {
      if (lookups?.number) {
        const query = await checkedCallQuery(timeline, values, options.region);
        const [named, found] = await Promise.all([
          lookups.callId === null ? [] : callsNamed(timeline, lookups.callId),
          findCalls(timeline, { ...query, number: lookups.number }),
        ]);
        rest = found;
        calls = [...named, ...found.calls.filter((f) => !named.some((n) => n.id === f.id))];
      } else if (q.startsWith('+')) {
        // Not a valid number: as the API's number filter answers it.
        ({ calls, ...rest } = await findCalls(timeline, {
          ...parseCallQuery({ ...values, number: q }, options.region),
        }));
      } else if (q !== '') {
        [calls, refused] = await Promise.all([callsNamed(timeline, q), timeline.refusals(q)]);
        if (calls.length === 0) open = (await options.inProgress?.(q)) ?? null;
      } else {
        const query = await checkedCallQuery(timeline, values, options.region);
        const withRefusals = query.sink === undefined && (query.status === undefined || query.status === 'failed');
        let kept;
        [calls, kept] = await Promise.all([
          findCalls(timeline, query).then((found) => {
            rest = found;
            return found.calls;
          }),
          withRefusals ? timeline.refusalsBetween(query.since, query.until ?? Date.now(), query.limit ?? 50) : null,
        ]);
        refused = kept?.refused ?? [];
        refusedTotal = kept?.total ?? 0;
      }
    } catch (err) {
      if (!(err instanceof CallQueryError)) throw err;
      error = err.message;
      // The form with the error, as the JSON routes answer a bad parameter: 400, not a 200 page of no calls.
      c.status(400);
    }
    const status = c.req.query('status') ?? '';
    /** A link to the rest of the range: the same query up to `next`. */
    const older = (next: string | undefined) =>
      next === undefined
        ? 'an earlier until'
        : html`<a
            class="older"
            href="${path}?${new URLSearchParams({ ...values, ...(q ? { q } : {}), until: next }).toString()}"
            >the older ones</a
          >`;
    const body = html`<h1>Calls</h1>
      <form class="search" method="get" action="${path}" role="search">
        <label>Call id, job id or number <input name="q" value="${q}" placeholder="+4915112345678" /></label>
        <label>Since <input name="since" value="${values.since}" size="6" /></label>
        <label>Sink <input name="sink" value="${values.sink ?? ''}" size="10" /></label>
        <label
          >Status
          <select name="status">
            ${['', 'failed', 'skipped', 'pending', 'retrying', 'paused', 'done'].map((s) => html`<option value="${s}" ${s === status ? raw(' selected') : ''}>${s || 'any'}</option>`)}
          </select></label
        >
        <button type="submit">Search</button>
      </form>
      ${error ? html`<p class="err" role="alert">${error}</p>` : ''}
      <table>
        <thead>
          <tr>
            <th>received</th>
            <th>call</th>
            <th>source</th>
            <th>from → to</th>
            <th>sinks</th>
          </tr>
        </thead>
        <tbody>
          ${
            calls.length === 0
              ? html`<tr>
                  <td colspan="5">
                    ${open ? html`<span class="in-progress">${describeOpenPushCall(open)}</span>` : 'no calls match'}
                  </td>
                </tr>`
              : ''
          }
          ${calls.map(
            (s) =>
              html`<tr>
                <td>${iso(s.receivedAt)}</td>
                <td><a href="${path}/${s.id}">${listedCallId(s.callId ?? s.id)}</a></td>
                <td>${s.source ?? '?'}</td>
                <td>${s.from ?? 'anonymous'} → ${s.to ?? '?'}</td>
                <td>${chips(s)}</td>
              </tr>`,
          )}
        </tbody>
      </table>
      ${
        rest.more
          ? html`<p class="more">
              The newest ${calls.length} that match; older calls of the range were not looked at
              (${calls.length < 1000 ? html`${upTo1000({ ...values, ...(q ? { q } : {}) })}, or ` : ''}${older(rest.next)}).
            </p>`
          : rest.truncated
            ? html`<p class="more">
                Only the newest ${rest.scanned} calls of the range were looked at, the most one query reads: narrow the
                query (since, sink, a number), or ${older(rest.next)}.
              </p>`
            : ''
      }
      ${
        refused.length > 0
          ? html`<h2>Refused</h2>
              <p>
                ${
                  inRange
                    ? html`Webhooks of this range answered with an error, and channel events the poller dead-lettered
                      (never stored), newest
                      first${
                        refusedTotal > refused.length
                          ? html`, the newest ${refused.length} of
                            ${refusedTotal}${refused.length < 1000 ? html` (${upTo1000(values)})` : ''}`
                          : ''
                      }:`
                    : 'Webhooks with this call id answered with an error, and its channel events the poller dead-lettered (never stored), newest first:'
                }
              </p>
              <table id="refused">
                <thead>
                  <tr>
                    <th>time</th>
                    ${inRange ? html`<th>call</th>` : ''}
                    <th>source</th>
                    <th>status</th>
                    <th>field</th>
                    <th>why</th>
                    <th>request</th>
                  </tr>
                </thead>
                <tbody>
                  ${refused.map(
                    (r) =>
                      html`<tr>
                        <td>${iso(r.at)}</td>
                        ${
                          inRange
                            ? html`<td>
                                ${
                                  r.callId === null
                                    ? html`<span title="its call id could not be read">-</span>`
                                    : html`<a href="${path}?q=${encodeURIComponent(r.callId)}">${r.callId}</a>`
                                }
                              </td>`
                            : ''
                        }
                        <td>${r.source}</td>
                        <td>${r.status}</td>
                        <td><code>${r.pointer}</code></td>
                        <td>${r.detail}</td>
                        <td>${r.requestId ?? ''}</td>
                      </tr>`,
                  )}
                </tbody>
              </table>`
          : ''
      }`;
    return page(c, 'callsync: calls', body);
  });

  // One call: its sinks and timeline; a failed sink can be retried.
  app.get(`${path}/:id`, async (c) => {
    const id = c.req.param('id');
    const [call] = /^[0-9a-f]{32}$/.test(id) ? await callsNamed(timeline, id, 1) : [];
    if (!call) {
      c.status(404);
      return page(
        c,
        'callsync: call not found',
        html`<h1>Call not found</h1>
          <p>No timeline for ${id} (kept CALL_TIMELINE_TTL_DAYS).</p>`,
      );
    }
    const failed = Object.entries(call.sinks)
      .filter(([, state]) => state === 'failed')
      .map(([sink]) => sink);
    const settled = Object.entries(call.sinks)
      .filter(([, state]) => state === 'done' || state === 'skipped')
      .map(([sink]) => sink);
    // A sink this configuration lacks waits for another worker: no reason to refresh for it.
    const waiting = Object.entries(call.sinks).some(
      ([sink, state]) => (state === 'pending' || state === 'retrying') && !call.unconfigured?.[sink],
    );
    const objects = new Set(archivedObjects(call.entries, options.archives).map((o) => `${o.sink}\n${o.key}`));
    const objectUrl = (sink: string, key: string) =>
      objects.has(`${sink}\n${key}`)
        ? `${path}/${call.id}/object?${new URLSearchParams({ sink, key }).toString()}`
        : null;
    const body = html`<h1>Call ${call.callId ?? call.id}</h1>
      <p>
        ${call.source ?? '?'}, ${call.direction ?? '?'}, ${call.from ?? 'anonymous'} → ${call.to ?? '?'}, received
        ${iso(call.receivedAt)}; job id <code>${call.id}</code>
      </p>
      <p id="sinks">${chips(call)}</p>
      ${
        call.fanOutFailed
          ? html`<p id="fan-out">
              <button type="button" data-action="retry-fan-out" data-sink="fan-out">Retry fan-out</button>
              <span class="err"
                >Its fan-out failed, no sink got a job: ${call.fanOutFailed.reason}. It is an inbound dead letter:
                <code>callsync dlq retry --queue inbound --id ${call.fanOutFailed.jobId}</code> fans it out again.</span
              >
            </p>`
          : ''
      }
      ${Object.keys(call.unconfigured ?? {}).map((sink) => html`<p class="unconfigured" data-sink="${sink}">${call.reasons[sink]}</p>`)}
      ${failed.map((sink) => html`<p><button type="button" data-action="retry" data-sink="${sink}">Retry ${sink}</button> <span class="err">${call.reasons[sink] ?? ''}</span></p>`)}
      <p>
        ${settled.map((sink) => html`<button type="button" data-action="replay" data-sink="${sink}">Replay to ${sink}</button> `)}
      </p>
      <p id="message" role="status"></p>
      <table>
        <thead>
          <tr>
            <th>time</th>
            <th>event</th>
            <th>sink</th>
            <th>try</th>
            <th>detail</th>
          </tr>
        </thead>
        <tbody>
          ${call.entries.map(
            (e) =>
              html`<tr>
                <td>${iso(e.at)}</td>
                <td>${e.event}</td>
                <td>${e.sink ? sinkLabel(e) : ''}</td>
                <td>${e.attempt ?? ''}</td>
                <td>${detail(e, objectUrl, options.crmLinks)}</td>
              </tr>`,
          )}
        </tbody>
      </table>`;
    // Retry: a same-origin JSON POST (the CSRF rule of the ops endpoints); the page then refreshes
    // while a sink is pending, so a retried chip turns to its outcome.
    const script = `
for (const b of document.querySelectorAll('button[data-action]')) b.addEventListener('click', async () => {
  b.disabled = true;
  const res = await fetch(location.pathname + '/' + b.dataset.action, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ sink: b.dataset.sink }) });
  const out = await res.json().catch(() => ({}));
  document.getElementById('message').textContent = res.ok ? b.dataset.action + ': ' + b.dataset.sink : ((out.errors && out.errors[0] && out.errors[0].detail) || b.dataset.action + ' failed');
  if (res.ok) setTimeout(() => location.reload(), 700); else b.disabled = false;
});
${waiting ? 'setTimeout(() => location.reload(), 1500);' : ''}`;
    return page(c, `callsync: call ${call.callId ?? call.id}`, body, script);
  });

  // Opens an archived object of the call: only a key its timeline names as written by that archive
  // sink (never a key of the request's choosing), as text or JSON the browser shows and never runs.
  app.get(`${path}/:id/object`, async (c) => {
    const id = c.req.param('id');
    const sink = c.req.query('sink') ?? '';
    const key = c.req.query('key') ?? '';
    const [call] = /^[0-9a-f]{32}$/.test(id) ? await callsNamed(timeline, id, 1) : [];
    const object = call
      ? archivedObjects(call.entries, options.archives).find((o) => o.sink === sink && o.key === key)
      : undefined;
    const open = object ? options.archives?.get(object.sink) : undefined;
    if (!object || !open) return c.json(errorBody(404, 'no such archived object of this call'), 404);
    let body: string;
    try {
      body = await (await open()).get(object.key);
    } catch (err) {
      // The folder: ENOENT; S3: its 404 as a SinkError's status (s3-store.ts errorFromS3).
      const failure = err as { code?: unknown; status?: unknown };
      if (failure.code === 'ENOENT' || failure.status === 404) {
        return c.json(errorBody(404, 'the archived object is gone (deleted by retention or `callsync forget`)'), 404);
      }
      throw err;
    }
    return c.body(body, 200, {
      'content-type': object.contentType,
      'content-disposition': 'inline',
      'x-content-type-options': 'nosniff',
      'cache-control': 'no-store',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'; sandbox",
    });
  });

  /** The call a retry or replay names in its path and the sink in its body `{"sink": …}`, or the error answer. */
  const callAndSink = async (c: Context) => {
    const id = c.req.param('id') ?? '';
    const body = (await c.req.json().catch(() => null)) as { sink?: unknown } | null;
    const sink = typeof body?.sink === 'string' ? body.sink : null;
    if (!sink) return { answer: c.json(errorBody(400, 'expected {"sink": "<sink or sink.endpoint>"}', '/sink'), 400) };
    const [call] = /^[0-9a-f]{32}$/.test(id) ? await callsNamed(timeline, id, 1) : [];
    if (!call) return { answer: c.json(errorBody(404, `no call ${id}`), 404) };
    return { call, sink };
  };

  // Retries the dead letter of one sink of the call (the job its timeline names, in its queue) for a new round of attempts.
  app.post(`${path}/:id/retry`, async (c) => {
    const named = await callAndSink(c);
    if ('answer' in named) return named.answer;
    const { call, sink } = named;
    const dead = call.entries.filter((e) => e.event === 'dead-lettered' && e.sink && sinkLabel(e) === sink).at(-1);
    if (!dead?.jobId || call.sinks[sink] !== 'failed')
      return c.json(errorBody(409, `sink "${sink}" of this call is not failed`, '/sink'), 409);
    const queue = queues.get(sinkQueueName(dead.sink!, dead.endpoint));
    const job = queue ? await queue.getJob(dead.jobId) : undefined;
    if (!queue || !job)
      return c.json(
        errorBody(
          404,
          `the dead letter of "${sink}" is gone (dead letters are kept FAILED_JOB_RETENTION_SECONDS, 14 days by default)`,
        ),
        404,
      );
    if (!(await job.isFailed()))
      return c.json(
        errorBody(409, `the job of "${sink}" is not in the dead letters (it is ${await job.getState()})`),
        409,
      );
    try {
      await retryDeadLetter(queue, job, timeline, 'the Calls page');
    } catch (err) {
      // Retried (or removed) by someone else between the check and the retry: say so, not a 500.
      const state = await job.getState().catch(() => 'unknown');
      if (state !== 'failed')
        return c.json(errorBody(409, `the job of "${sink}" is not in the dead letters (it is ${state})`), 409);
      throw err;
    }
    return c.json({ retried: { sink, queue: queue.name, jobId: job.id } });
  });

  // Retries a call whose fan-out failed: its inbound dead letter, fanned out again (a new round).
  app.post(`${path}/:id/retry-fan-out`, async (c) => {
    const id = c.req.param('id');
    const [call] = /^[0-9a-f]{32}$/.test(id) ? await callsNamed(timeline, id, 1) : [];
    if (!call) return c.json(errorBody(404, `no call ${id}`), 404);
    if (!call.fanOutFailed) return c.json(errorBody(409, 'the fan-out of this call did not fail'), 409);
    const queue = queues.get(INBOUND_QUEUE);
    const job = queue ? await queue.getJob(call.fanOutFailed.jobId) : undefined;
    if (!queue || !job)
      return c.json(
        errorBody(
          404,
          'its inbound dead letter is gone (dead letters are kept FAILED_JOB_RETENTION_SECONDS, 14 days by default)',
        ),
        404,
      );
    const state = await job.getState();
    if (state !== 'failed')
      return c.json(errorBody(409, `its inbound dead letter is not in the dead letters (it is ${state})`), 409);
    await retryDeadLetter(queue, job, timeline, 'the Calls page');
    return c.json({ retried: { queue: queue.name, jobId: job.id } });
  });

  // Replays the call to one sink: its latest job's data as a new job of that sink's queue (sinks
  // are idempotent: one that has it already may answer done or skipped without writing again).
  app.post(`${path}/:id/replay`, async (c) => {
    const named = await callAndSink(c);
    if ('answer' in named) return named.answer;
    const { call, sink } = named;
    const last = call.entries.filter((e) => e.sink && e.jobId && sinkLabel(e) === sink).at(-1);
    if (!last) return c.json(errorBody(404, `the call was never routed to "${sink}"`, '/sink'), 404);
    const queue = queues.get(sinkQueueName(last.sink!, last.endpoint));
    const job = queue ? await queue.getJob(last.jobId!) : undefined;
    if (!queue || !job)
      return c.json(
        errorBody(
          404,
          `the job of "${sink}" is gone (done jobs are kept COMPLETED_JOB_RETENTION_SECONDS, a day by default): replay from the archive with \`callsync replay\``,
        ),
        404,
      );
    const replayId = `${last.jobId!.slice(0, 32)}-replay-${Date.now().toString(36)}`;
    // The job's own retry policy and retention (a sink's own `retry`, JOB_ATTEMPTS, how long done
    // and dead jobs are kept): this page's queue handles have none, and a job added with none had
    // one attempt — a remote's hiccup was a dead letter — and stayed in Redis when done.
    const { attempts, backoff, removeOnComplete, removeOnFail } = job.opts;
    await queue.add(job.name, job.data, { attempts, backoff, removeOnComplete, removeOnFail, jobId: replayId });
    return c.json({ replayed: { sink, queue: queue.name, jobId: replayId } });
  });

  return app;
}

function pick(values: Record<string, string>, names: string[]): Record<string, string> {
  return Object.fromEntries(
    names.filter((n) => values[n] !== undefined && values[n] !== '').map((n) => [n, values[n]!]),
  );
}
