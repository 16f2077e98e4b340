// A sliding-window limiter for one kind of request of one sink in this process (HubSpot's and
// Pipedrive's searches, limited apart from the rest of their APIs). Slots are reserved in order, so concurrent jobs
// never start more than `max` requests in any `durationMs`; a job whose slot is too far away is
// told to come back later (RetryLaterError, job scope) instead of holding its worker.
import { RetryLaterError, waitText } from '../../errors.js';

export interface WindowLimit {
  max: number;
  durationMs: number;
}

export interface WindowLimiterOptions {
  /** Current time in ms. */
  now: () => number;
  /** Resolves at time `at` (ms, same clock as `now`). Default: a timer for `at - now()`. */
  waitUntil?: (at: number) => Promise<void>;
  /** A slot further away than this is not waited for: the job waits in the queue instead. */
  maxWaitMs: number;
  /** For messages, e.g. `HubSpot search`. */
  what: string;
}

export class WindowLimiter {
  /** Start times of the requests that count in the window (reserved ones may lie ahead), ascending. */
  private starts: number[] = [];
  private pausedUntil = 0;
  private readonly waitUntil: (at: number) => Promise<void>;

  constructor(
    private readonly limit: WindowLimit,
    private readonly options: WindowLimiterOptions,
  ) {
    this.waitUntil =
      options.waitUntil ?? ((at) => new Promise((resolve) => setTimeout(resolve, Math.max(0, at - options.now()))));
  }

  /** Reserves the next free slot and resolves when it starts. */
  async acquire(): Promise<void> {
    const now = this.options.now();
    this.starts = this.starts.filter((t) => t > now - this.limit.durationMs);
    let at = Math.max(now, this.pausedUntil);
    if (this.starts.length >= this.limit.max)
      at = Math.max(at, this.starts[this.starts.length - this.limit.max]! + this.limit.durationMs);
    const waitMs = at - now;
    if (waitMs > this.options.maxWaitMs) {
      throw new RetryLaterError(
        `${this.options.what} limit (${this.limit.max} per ${waitText(this.limit.durationMs)}) is used up; this job waits ${waitText(waitMs)}`,
        waitMs,
        {
          scope: 'job',
        },
      );
    }
    this.starts.push(at);
    this.starts.sort((a, b) => a - b);
    if (waitMs > 0) await this.waitUntil(at);
  }

  /** No slot starts before `ms` from now (the remote said so, e.g. a 429). */
  pauseFor(ms: number): void {
    this.pausedUntil = Math.max(this.pausedUntil, this.options.now() + ms);
  }
}
