// Capped exponential backoff with jitter: the one formula behind the queue workers' retry delays
// (workers/runner.ts) and the poller's waits after failed polls (workers/poller.ts); and the fixed
// schedule a sink may choose instead (the signed webhook's, spanning days). Imports nothing from
// the project.

/**
 * The delay before retry number `attempt` (1 = the first retry): `baseMs * 2^(attempt - 1)`,
 * capped at `maxMs`, with "equal jitter": half of it fixed, half random. So the delay never drops
 * below half the capped value (no retry storm right after an outage) and never exceeds `maxMs`,
 * while the random half spreads clients that failed together. `attempt` below 1 counts as 1.
 */
export function backoffDelay(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const capped = Math.min(maxMs, baseMs * 2 ** Math.max(0, attempt - 1));
  return Math.round(capped / 2 + (random() * capped) / 2);
}

/**
 * The delay before retry number `attempt` (1 = the first retry) of a fixed schedule: the
 * schedule's delay for it (the last one repeating once the schedule is used up), plus up to a
 * tenth of it at random, so receivers that failed together are not retried all in the same instant.
 * `attempt` below 1 counts as 1; an empty schedule retries at once.
 */
export function scheduleDelay(
  attempt: number,
  schedule: readonly number[],
  random: () => number = Math.random,
): number {
  if (schedule.length === 0) return 0;
  const base = schedule[Math.min(Math.max(1, attempt), schedule.length) - 1]!;
  return Math.round(base + (random() * base) / 10);
}
