// Pipedrive's rate limits as the Pipedrive sink keeps them (https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting):
//   - a daily token budget per company: once spent, every request is refused until the budget
//     resets "at the start of the next day" -> the whole sink queue waits for that, not 2 s at a time;
//   - a burst limit per token in 2-second windows (x-ratelimit-* headers), kept by CrmHttp;
//   - the search API's own limit, 10 requests per 2 s on every plan -> a window of its own here,
//     so searches wait among themselves and never use up the window of the call log writes.
import { untilUtcMidnight } from './common.js';
import type { AnswerHeaders } from '../../http-request.js';
import { numberHeader } from './http.js';

const HOUR_MS = 3600_000;

/**
 * The company's daily token budget. Spent when an answer says so: `x-daily-ratelimit-token-remaining: 0`
 * (sent by the live API, not on the documented list) or the documented `x-daily-requests-left: 0`
 * (POST/PUT requests left today, counted in UTC).
 *
 * Pipedrive's page does not name the time zone of "the next day". callsync waits for the next UTC
 * midnight (the day of `x-daily-requests-left`); when the budget is still spent after a reset it
 * waited for, before any answer said otherwise (a company whose day starts elsewhere), it tries
 * again hourly instead of waiting a whole day.
 */
export class DailyBudget {
  private blockedUntil = 0;
  /** The reset (UTC midnight) the last wait ended at, until an answer shows the budget back. */
  private waitedFor: number | null = null;

  constructor(private readonly now: () => Date) {}

  /** True when the headers say the budget is spent. */
  static spent(headers: AnswerHeaders): boolean {
    return (
      numberHeader(headers, 'x-daily-ratelimit-token-remaining') === 0 ||
      numberHeader(headers, 'x-daily-requests-left') === 0
    );
  }

  /** Reads an answer's headers; when they say the budget is spent, blocks and returns how long. */
  observe(headers: AnswerHeaders): number | undefined {
    const now = this.now().getTime();
    if (!DailyBudget.spent(headers)) {
      if (this.waitedFor !== null && now >= this.waitedFor) this.waitedFor = null;
      return undefined;
    }
    if (now < this.blockedUntil) return this.blockedUntil - now;
    const midnight = now + untilUtcMidnight(new Date(now));
    const resetDidNotHelp = this.waitedFor !== null && now >= this.waitedFor;
    const until = resetDidNotHelp ? Math.min(midnight, now + HOUR_MS) : midnight;
    if (!resetDidNotHelp) this.waitedFor = midnight;
    this.blockedUntil = until;
    return until - now;
  }

  /** Milliseconds until requests may be made again (0: now). */
  pausedForMs(): number {
    return Math.max(0, this.blockedUntil - this.now().getTime());
  }
}
