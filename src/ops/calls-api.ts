// The calls' timelines as JSON for other tools ("Where is my call?", docs/operations.md), on the ops
// endpoints behind the dashboard's credentials (./app.ts):
//   GET /api/calls?since=2h[&until=…][&sink=…][&status=failed|skipped|pending|retrying|paused|done][&number=+49…][&limit=N]
//   GET /api/calls/:ref   (a platform call id, a job id, or a number: every call with it)
//   GET /api/refusals?since=2h[&until=…][&limit=N]   (webhooks refused, callId null where unreadable)
import { Hono } from 'hono';
import { callsNamed, CallQueryError, findCalls, parseCallQuery, type CallTimeline } from '../../queues/timeline.js';
import { errorBody } from '../ingress/errors.js';
import { describeOpenPushCall, type OpenPushCall } from '../sources/push-assembly.js';

export const CALLS_API_PATH = '/api/calls';
export const REFUSALS_API_PATH = '/api/refusals';

/** A Push API call still assembled under a call id (src/sources/push-assembly.ts), or null. */
export type OpenPushCallLookup = (callId: string) => Promise<OpenPushCall | null>;

export function callsApi(timeline: CallTimeline, inProgress?: OpenPushCallLookup): Hono {
  const app = new Hono();
  app.get(CALLS_API_PATH, async (c) => {
    let query;
    try {
      query = parseCallQuery(c.req.query());
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
        return c.json(errorBody(400, `unknown parameter ${name} (since, until, limit)`, `/query/${name}`), 400);
    let query;
    try {
      query = parseCallQuery(values);
    } catch (err) {
      if (err instanceof CallQueryError) return c.json(errorBody(400, err.message, `/query/${err.param}`), 400);
      throw err;
    }
    // `total`: how many the range holds (more than listed when cut at `limit`).
    return c.json(await timeline.refusalsBetween(query.since, query.until ?? Date.now(), query.limit ?? 50));
  });
  app.get(`${CALLS_API_PATH}/:ref`, async (c) => {
    const ref = c.req.param('ref');
    const calls = await callsNamed(timeline, ref);
    const refused = ref.startsWith('+') ? [] : await timeline.refusals(ref);
    if (calls.length === 0) {
      const open = ref.startsWith('+') ? null : ((await inProgress?.(ref)) ?? null);
      if (open) return c.json({ ...errorBody(404, describeOpenPushCall(open)), inProgress: open }, 404);
      const last = refused[0];
      const named = ref.startsWith('+') ? 'that number' : `"${ref.slice(0, 200)}"`;
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
