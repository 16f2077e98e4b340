// The one backoff formula (src/backoff.ts) behind job retries and poll failures: doubling from the
// base, capped, with equal jitter; and no second copy of it in the workers.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test } from 'node:test';
import { backoffDelay, scheduleDelay } from '../src/backoff.js';
import { STANDARD_WEBHOOKS_SCHEDULE } from '../src/sinks/retry.js';

const low = () => 0;
const high = () => 1;

describe('backoffDelay', () => {
  test('doubles from the base each attempt; the random half spans [capped/2, capped]', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => backoffDelay(n, 1000, 1_000_000, high)),
      [1000, 2000, 4000, 8000, 16_000],
    );
    assert.deepEqual(
      [1, 2, 3, 4, 5].map((n) => backoffDelay(n, 1000, 1_000_000, low)),
      [500, 1000, 2000, 4000, 8000],
    );
    assert.equal(
      backoffDelay(3, 1000, 1_000_000, () => 0.5),
      3000,
    );
  });

  test('never exceeds the cap, also for attempts whose power overflows', () => {
    assert.equal(backoffDelay(11, 1000, 900_000, high), 900_000);
    assert.equal(backoffDelay(11, 1000, 900_000, low), 450_000);
    for (const attempt of [50, 1100, 1e6, Number.MAX_SAFE_INTEGER]) {
      assert.equal(backoffDelay(attempt, 1000, 900_000, high), 900_000, `attempt ${attempt}`);
      assert.equal(backoffDelay(attempt, 1000, 900_000, low), 450_000, `attempt ${attempt}`);
    }
  });

  test('an attempt below 1 counts as the first (BullMQ and the poller both start at 1)', () => {
    for (const attempt of [0, -1, -100]) assert.equal(backoffDelay(attempt, 1000, 900_000, high), 1000);
  });

  test('with Math.random: whole milliseconds within the bounds, and spread out', () => {
    const delays = Array.from({ length: 500 }, () => backoffDelay(4, 1000, 900_000));
    for (const d of delays) {
      assert.ok(Number.isInteger(d) && d >= 4000 && d <= 8000, String(d));
    }
    assert.ok(new Set(delays).size > 100, 'jitter spreads clients that failed together');
  });
});

describe('scheduleDelay', () => {
  test('follows the schedule, the last delay repeating, with up to a tenth of jitter on top', () => {
    const schedule = [5000, 300_000, 1_800_000];
    assert.deepEqual(
      [1, 2, 3, 4, 9].map((n) => scheduleDelay(n, schedule, low)),
      [5000, 300_000, 1_800_000, 1_800_000, 1_800_000],
    );
    assert.deepEqual(
      [1, 2, 3].map((n) => scheduleDelay(n, schedule, high)),
      [5500, 330_000, 1_980_000],
    );
    for (const attempt of [0, -3]) assert.equal(scheduleDelay(attempt, schedule, low), 5000);
    assert.equal(scheduleDelay(4, [], high), 0);
  });

  test('the Standard Webhooks default spans three days over ten attempts', () => {
    const total = STANDARD_WEBHOOKS_SCHEDULE.reduce(
      (sum, _d, i) => sum + scheduleDelay(i + 1, STANDARD_WEBHOOKS_SCHEDULE, low),
      0,
    );
    assert.equal(STANDARD_WEBHOOKS_SCHEDULE.length + 1, 10);
    // The spec's table: the last attempt 75:35:05 after the first.
    assert.equal(total, ((75 * 60 + 35) * 60 + 5) * 1000);
  });
});

test('no second backoff formula: the runner and the poller use src/backoff.ts', () => {
  for (const file of ['workers/runner.ts', 'workers/poller.ts']) {
    const source = readFileSync(new URL(`../${file}`, import.meta.url), 'utf8');
    assert.doesNotMatch(source, /\*\s*2\s*\*\*|Math\.pow/, `${file} computes its own exponential delay`);
    assert.match(source, /import \{ backoffDelay(, scheduleDelay)? \} from '\.\.\/src\/backoff\.js'/, file);
  }
});
