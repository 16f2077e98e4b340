// Routes decide which sinks receive a call: `when` conditions (all must hold) -> `to` sink names.
import { z } from 'zod';
import { CALL_SOURCES, DIRECTIONS, OUTCOMES } from '../model/call.js';

const oneOrMany = <T extends z.ZodType>(item: T) =>
  z.union([item, z.array(item).min(1)]).transform((v) => (Array.isArray(v) ? v : [v]) as z.infer<T>[]);

const conditionSchema = z.strictObject({
  /** `ai-agent` (webhook) or `channel` (poller). */
  source: oneOrMany(z.enum(CALL_SOURCES)).optional(),
  /** AI agent ids (from the webhook path). */
  agent: oneOrMany(z.string().min(1)).optional(),
  /** Channel ids (channel events). */
  channel: oneOrMany(z.string().min(1)).optional(),
  direction: oneOrMany(z.enum(DIRECTIONS)).optional(),
  outcome: oneOrMany(z.enum(OUTCOMES)).optional(),
  hasSummary: z.boolean().optional(),
  hasTranscript: z.boolean().optional(),
  hasRecording: z.boolean().optional(),
  /** Any of these topics (case-insensitive) in the summary. */
  topics: oneOrMany(z.string().min(1)).optional(),
});

/** One condition object (all keys must hold), or a list of them (any one must hold). Absent: every call. */
const whenSchema = z
  .union([conditionSchema, z.array(conditionSchema).min(1)])
  .default({})
  .transform((v) => (Array.isArray(v) ? v : [v]));

export const routeSchema = z.strictObject({
  name: z.string().min(1).optional(),
  when: whenSchema,
  to: oneOrMany(z.string().min(1)),
});

export type Condition = z.infer<typeof conditionSchema>;
export type Route = z.input<typeof routeSchema>;
export type ParsedRoute = z.infer<typeof routeSchema>;
