// A disabled queue: paused because its remote said it takes no more messages there (a webhook
// endpoint's 410 Gone or a redirect, src/errors.ts EndpointDisabledError), and marked with the
// reason in a key beside the queue's own (`<prefix>:<queue>:callsync-disabled`). The runner
// disables; the dashboard shows the reason and its resume button re-enables; `callsync resume`
// does the same from a shell; the metrics read the marker (callsync_webhook_endpoint_disabled).
// Jobs stay in the paused queue meanwhile: nothing is dropped.
import type { Queue } from 'bullmq';
import type { RedisClient } from './connection.js';

const MARKER = 'callsync-disabled';

export interface DisabledMarker {
  reason: string;
  /** ISO time it was disabled. */
  at: string;
}

function parse(raw: string | null): DisabledMarker | null {
  if (raw === null) return null;
  try {
    const v = JSON.parse(raw) as Partial<DisabledMarker>;
    if (typeof v.reason === 'string' && typeof v.at === 'string') return { reason: v.reason, at: v.at };
  } catch {
    // not ours: fall through
  }
  return { reason: raw, at: '' };
}

/**
 * Pauses the queue and marks it disabled with the reason (through `redis`, the connection of the
 * queue's Redis: the marker is set only when absent). True when this call disabled it (the queue
 * was running, or had no marker): the caller logs it once; false when it was disabled already.
 */
export async function disableQueue(
  queue: Queue,
  redis: RedisClient,
  reason: string,
  now: Date = new Date(),
): Promise<boolean> {
  const client = redis;
  const key = queue.toKey(MARKER);
  const wasPaused = await queue.isPaused();
  await queue.pause();
  const value = JSON.stringify({ reason, at: now.toISOString() } satisfies DisabledMarker);
  if ((await client.set(key, value, 'NX')) === 'OK') return true;
  // A marker left from before while the queue ran: it was resumed some other way; this is news again.
  if (!wasPaused) {
    await client.set(key, value);
    return true;
  }
  return false;
}

/** Why the queue was disabled, or null when it is not marked. */
async function disabledMarker(queue: Queue): Promise<DisabledMarker | null> {
  const client = await queue.getBackend().client;
  return parse(await client.get(queue.toKey(MARKER)));
}

/** True while the queue is paused and marked disabled. */
export async function isDisabled(queue: Queue): Promise<boolean> {
  const [marker, paused] = await Promise.all([disabledMarker(queue), queue.isPaused()]);
  return marker !== null && paused;
}

/** Re-enables the queue: the markers go (disabled, paused), the queue resumes. Answers the disabled marker it removed, if any. */
export async function enableQueue(queue: Queue): Promise<DisabledMarker | null> {
  const marker = await disabledMarker(queue);
  const client = await queue.getBackend().client;
  await client.del(queue.toKey(MARKER), queue.toKey(PAUSE_MARKER));
  await queue.resume();
  return marker;
}

// A paused queue says why: the runner pauses a sink's queue when its remote rejects the credentials
// (src/errors.ts AuthError) and keeps the reason and time beside it (`…:callsync-paused`), which
// `callsync resume`, the dashboard and /readyz show. Resuming removes it.
const PAUSE_MARKER = 'callsync-paused';

/** Pauses the queue, keeping why (the redacted error, e.g. `HubSpot … answered 401: …`) and when. */
export async function pauseQueue(
  queue: Queue,
  redis: RedisClient,
  reason: string,
  now: Date = new Date(),
): Promise<void> {
  await redis.set(
    queue.toKey(PAUSE_MARKER),
    JSON.stringify({ reason, at: now.toISOString() } satisfies DisabledMarker),
  );
  await queue.pause();
}

export interface PauseState {
  /** `disabled`: an endpoint that takes no more messages; `paused`: paused for `reason`, or by hand (no reason). */
  state: 'disabled' | 'paused';
  reason: string | null;
  /** ISO time, when known. */
  at: string | null;
}

/** Why a paused queue is paused (disabled, or paused with its stored reason, or by hand: no reason); null while it runs. */
export async function pauseState(queue: Queue): Promise<PauseState | null> {
  if (!(await queue.isPaused())) return null;
  const disabled = await disabledMarker(queue);
  if (disabled) return { state: 'disabled', reason: disabled.reason, at: disabled.at || null };
  const client = await queue.getBackend().client;
  const paused = parse(await client.get(queue.toKey(PAUSE_MARKER)));
  return { state: 'paused', reason: paused?.reason ?? null, at: paused?.at || null };
}

/**
 * pauseState read by the queue's keys (`base`: `<its prefix>:<name>`, as Queue.toKey puts them), for
 * a reader without a Queue handle (a call's timeline, queues/timeline.ts).
 */
export async function pauseStateOf(redis: RedisClient, base: string): Promise<PauseState | null> {
  const [paused, disabled, why] = await Promise.all([
    redis.hexists(`${base}:meta`, 'paused'),
    redis.get(`${base}:${MARKER}`),
    redis.get(`${base}:${PAUSE_MARKER}`),
  ]);
  if (paused !== 1) return null;
  const marker = parse(disabled);
  if (marker) return { state: 'disabled', reason: marker.reason, at: marker.at || null };
  const pausedFor = parse(why);
  return { state: 'paused', reason: pausedFor?.reason ?? null, at: pausedFor?.at || null };
}

/** The paused queues among `queues`, each with why; a queue that does not answer within `timeoutMs` is left out. */
export async function pausedQueues(
  queues: Iterable<Queue>,
  timeoutMs = 1000,
): Promise<({ queue: string } & PauseState)[]> {
  const states = await Promise.all(
    [...queues].map(async (queue) => {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), timeoutMs)));
      const state = await Promise.race([pauseState(queue).catch(() => null), late]).finally(() => clearTimeout(timer));
      return state ? { queue: queue.name, ...state } : null;
    }),
  );
  return states.filter((s) => s !== null);
}

/** A pause state as one line: `paused: HubSpot … answered 401: … (since 2026-…)`, or `paused` (by hand). */
export function describePause(p: PauseState): string {
  return p.reason === null ? p.state : `${p.state}: ${p.reason}${p.at ? ` (since ${p.at})` : ''}`;
}
