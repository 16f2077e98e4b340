// The calls' timelines as JSON for other tools ("Where is my call?", docs/operations.md), on the ops
// endpoints behind the dashboard's credentials (./app.ts):
//   GET /api/calls?since=2h[&until=…][&sink=…][&status=failed|skipped|pending|retrying|paused|done][&number=+49…][&limit=N]
//   GET /api/calls/:ref   (a platform call id, a job id, or a number: every call with it)
//   GET /api/refusals?since=2h[&until=…][&limit=N]   (webhooks refused, callId null where unreadable)
// Numbers and references are read as `callsync call` and `calls --number` read them (E.164, 00, or
// national in PHONE_DEFAULT_REGION: src/model/number-words.ts).
import { Hono } from 'hono';
import type { CountryCode } from 'libphonenumber-js';
import {
  CallQueryError,
  callsOf,
  findCalls,
  lookupsOfText,
  parseCallQuery,
  quoted,
  type CallQuery,
  type CallTimeline,
} from '../../queues/timeline.js';
import { errorBody } from '../ingress/errors.js';
import { describeOpenPushCall, type OpenPushCall } from '../sources/push-assembly.js';

export const CALLS_API_PATH = '/api/calls';
export const REFUSALS_API_PATH = '/api/refusals';

/** A Push API call still assembled under a call id (src/sources/push-assembly.ts), or null. */
export type OpenPushCallLookup = (callId: string) => Promise<OpenPushCall | null>;

export interface CallsApiOptions {
  /** A Push API call still assembled (no timeline yet), for a lookup by its call id. */
  inProgress?: OpenPushCallLookup;
  /** Where a national number is read (PHONE_DEFAULT_REGION). */
  region: CountryCode;
}

/**
 * A call query of request parameters, its `sink` one this deployment knows (CallTimeline.knownSinks,
 * as `calls --sink` checks it); throws CallQueryError. Shared by the API and the Calls page.
 */
export async function checkedCallQuery(
  timeline: CallTimeline,
  values: Record<string, string | undefined>,
  region: CountryCode,
): Promise<CallQuery> {
  const query = parseCallQuery(values, region);
  if (query.sink !== undefined) {
    const known = await timeline.knownSinks();
    if (!known.includes(query.sink))
      throw new CallQueryError('sink', `"${quoted(query.sink)}" is unknown (known: ${known.join(', ') || 'none'})`);
  }
  return query;
}

export function callsApi(timeline: CallTimeline, options: CallsApiOptions): Hono {
  const app = new Hono();
  const { inProgress, region } = options;
  app.get(CALLS_API_PATH, async (c) => {
    let query;
    try {
      query = await checkedCallQuery(timeline, c.req.query(), region);
    } catch (err) {
      if (err instanceof CallQueryError) return c.json(errorBody(400, err.message, `/query/${err.param}`), 400);
      throw err;
    }
    return c.json(await findCalls(timeline, query));
  });
  app.get(REFUSALS_API_PATH, async (c) => {
    const values = c.req.query();
    for (const name of Object.keys(values))
      if (!['since', 'until', 'limit'].includes(name))
        return c.json(
          errorBody(400, `unknown parameter ${quoted(name)} (since, until, limit)`, `/query/${quoted(name)}`),
          400,
        );
    let query;
    try {
      query = parseCallQuery(values, region);
    } catch (err) {
      if (err instanceof CallQueryError) return c.json(errorBody(400, err.message, `/query/${err.param}`), 400);
      throw err;
    }
    // `total`: how many the range holds (more than listed when cut at `limit`).
    return c.json(await timeline.refusalsBetween(query.since, query.until ?? Date.now(), query.limit ?? 50));
  });
  app.get(`${CALLS_API_PATH}/:ref`, async (c) => {
    const ref = c.req.param('ref');
    const lookups = lookupsOfText(ref, region);
    const calls = await callsOf(timeline, lookups);
    // A call id, not a number (`+…` that is no valid number is looked up as a number, as ever).
    const callId = lookups.callId !== null && !lookups.callId.startsWith('+') ? lookups.callId : null;
    const refused = callId === null ? [] : await timeline.refusals(callId);
    if (calls.length === 0) {
      const open = callId === null ? null : ((await inProgress?.(callId)) ?? null);
      if (open) return c.json({ ...errorBody(404, describeOpenPushCall(open)), inProgress: open }, 404);
      const last = refused[0];
      const named = callId === null ? 'that number' : `"${ref.slice(0, 200)}"`;
      return c.json(
        errorBody(
          404,
          last
            ? `no call stored for ${named}: refused ${refused.length} time(s), the last at ${new Date(last.at).toISOString()} (${last.status} ${last.pointer}: ${last.detail})`
            : `no call found for ${named}`,
        ),
        404,
      );
    }
    return c.json(refused.length > 0 ? { calls, refused } : { calls });
  });
  return app;
}
