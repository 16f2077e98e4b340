// A sink's own retry schedule (`retry` in its options), for remotes whose guidance asks for one
// instead of callsync's global doubling backoff (JOB_ATTEMPTS, JOB_BACKOFF_MS): the signed webhook
// follows the Standard Webhooks spec, whose example schedule spans three days.
import { z } from 'zod';
import type { RetryPolicy } from '../../queues/registry.js';
import { durationSchema } from './notify/options.js';

const S = 1000;
const MIN = 60 * S;
const H = 60 * MIN;

/**
 * The delays before retries 1…9 of the Standard Webhooks spec's example retry schedule
 * ("Deliverability and reliability", github.com/standard-webhooks/standard-webhooks
 * spec/standard-webhooks.md): immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 14 h, 20 h and
 * 24 h — ten attempts over about 75 hours.
 */
export const STANDARD_WEBHOOKS_SCHEDULE: readonly number[] = [
  5 * S,
  5 * MIN,
  30 * MIN,
  2 * H,
  5 * H,
  10 * H,
  14 * H,
  20 * H,
  24 * H,
];

export const retryOptionsSchema = z.strictObject({
  /** Delays before retry 1, 2, … (`5s`, `30m`, `2h`, `1d`, or seconds); the last one repeats. */
  schedule: z.array(durationSchema).min(1).max(100).optional(),
  /** Tries in all before the dead letters. Default: one more than the schedule has delays. */
  attempts: z.int().min(1).max(1000).optional(),
});

export type RetryOptions = z.infer<typeof retryOptionsSchema>;

/** The retry policy of a sink's queues from its `retry` option, with `defaultSchedule` when it names none. */
export function retryPolicy(
  options: RetryOptions | undefined,
  defaultSchedule: readonly number[],
  global: RetryPolicy,
): RetryPolicy {
  const schedule = options?.schedule ?? defaultSchedule;
  return { ...global, attempts: options?.attempts ?? schedule.length + 1, schedule };
}

/** A schedule as text for messages and docs: `5s, 5m, 30m, 2h`. */
export function describeSchedule(schedule: readonly number[]): string {
  const unit = (ms: number) => {
    for (const [u, size] of [
      ['d', 24 * H],
      ['h', H],
      ['m', MIN],
      ['s', S],
    ] as const)
      if (ms >= size && ms % size === 0) return `${ms / size}${u}`;
    return `${ms}ms`;
  };
  return schedule.map(unit).join(', ');
}
