// Option pieces both notification channels share: templates checked against the known fields,
// time zones, quiet hours and durations.
import { z } from 'zod';
import { isValidTimeZone } from './time.js';

export const timeZoneSchema = z
  .string()
  .min(1)
  .refine(isValidTimeZone, { message: 'expected an IANA time zone such as Europe/Berlin' });

/** A `{{variable}}` template (the one variable set shared with the CRM sinks). */
export { templateSchema } from '../template-vars.js';

const UNIT_MS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000, d: 86_400_000 };

/** A duration: `90s`, `30m`, `12h`, `2d`, or a number of seconds. Parsed to milliseconds. */
export const durationSchema = z.union([z.number().positive(), z.string()]).transform((v, ctx) => {
  if (typeof v === 'number') return Math.round(v * 1000);
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|min|m|h|d)\s*$/.exec(v);
  if (!m || Number(m[1]) <= 0) {
    ctx.addIssue({ code: 'custom', message: `expected a duration such as 30m, 12h or 2d, got "${v}"` });
    return z.NEVER;
  }
  return Math.round(Number(m[1]) * (UNIT_MS[m[2] as string] as number));
});

const clock = z.string().regex(/^([01]\d|2[0-3]):[0-5]\d$/, 'expected HH:MM (24 h)');

/** Local hours in which nothing is sent; `start` after `end` spans midnight (21:00 -> 08:00). */
const quietHoursSchema = z
  .strictObject({
    start: clock,
    end: clock,
    /** Default: the sink's `timeZone`. */
    timeZone: timeZoneSchema.optional(),
  })
  .refine((q) => q.start !== q.end, { message: 'start and end must differ' });

/** Options every notification sink has. */
export const commonOptions = {
  /** Time zone of the times shown in messages and of the quiet hours. Default UTC. */
  timeZone: timeZoneSchema.default('UTC'),
  quietHours: quietHoursSchema.optional(),
  /** Calls that started longer ago than this are not notified (e.g. after a backlog). Default: no limit. */
  maxAge: durationSchema.optional(),
};
