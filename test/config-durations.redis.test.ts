// Durations beyond what their timer or Redis TTL can hold are configuration errors naming the
// variable (a value in the wrong unit, most often): Node fires a timer longer than 2^31 - 1 ms after
// 1 ms, so RETENTION_SWEEP_INTERVAL_SECONDS=3600000 (an hour written in ms) once had the worker's
// retention sweeper send Redis a SET about every millisecond, and SHUTDOWN_GRACE_MS that long gave
// no grace at all. At the largest accepted interval, the sweeper sends one SET in a second (MONITOR
// on the test Redis counts them).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import pino from 'pino';
import { ConfigError, loadConfig } from '../src/config/index.js';
import { envVariables } from '../src/config/env.js';
import { startRetentionSweeper, sweepMarkerKey } from '../workers/retention-sweeper.js';
import type { RedisClient } from '../queues/connection.js';
import { REDIS_URL, cleanupPrefix, uniquePrefix } from './support/redis.js';
import { configProblems } from './support/config.js';
import { monitorOf } from './support/monitor.js';

const MAX_TIMER_MS = 2 ** 31 - 1;

/** A value each variable accepts besides the limit (the ones with a lower bound above 1 or cross-checks). */
const FITS: Record<string, Record<string, string>> = {
  HTTP_HEADERS_TIMEOUT_MS: { WEBHOOK_REQUEST_TIMEOUT_MS: String(MAX_TIMER_MS) },
  WEBHOOK_BODY_WAIT_MS: { WEBHOOK_REQUEST_TIMEOUT_MS: String(MAX_TIMER_MS) },
};

test('every …_MS variable: more than 2^31 - 1 ms is refused, naming it; 2^31 - 1 is taken', () => {
  const names = envVariables().filter((name) => name.endsWith('_MS'));
  assert.ok(names.length >= 15, names.join(', '));
  for (const name of names) {
    const problems = configProblems({ [name]: String(MAX_TIMER_MS + 1) });
    assert.ok(
      problems.some((p) => p.startsWith(`${name}: ${MAX_TIMER_MS + 1} is more than ${MAX_TIMER_MS} ms`)),
      `${name}: ${problems.join('; ')}`,
    );
    const atLimit = { ...FITS[name], [name]: String(MAX_TIMER_MS) };
    const left = (() => {
      try {
        loadConfig(atLimit);
        return [];
      } catch (err) {
        return err instanceof ConfigError ? err.problems.filter((p) => /timer|100 years/.test(p)) : [String(err)];
      }
    })();
    assert.deepEqual(left, [], name);
  }
});

test('an hour written in ms into RETENTION_SWEEP_INTERVAL_SECONDS, huge TTLs: refused, naming the variable', () => {
  assert.deepEqual(configProblems({ RETENTION_SWEEP_INTERVAL_SECONDS: '3600000' }), [
    'RETENTION_SWEEP_INTERVAL_SECONDS: 3600000 is more than 2147483 seconds, the longest delay a timer can wait (24.8 days) (the value is in seconds)',
  ]);
  assert.match(configProblems({ SHUTDOWN_GRACE_MS: '3000000000' })[0]!, /^SHUTDOWN_GRACE_MS: 3000000000 is more than/);
  // 10^9 days in ms is no integer Redis takes for PEXPIRE: every timeline write failed.
  assert.match(configProblems({ CALL_TIMELINE_TTL_DAYS: '1000000000' })[0]!, /^CALL_TIMELINE_TTL_DAYS: .*100 years/);
  assert.match(
    configProblems({ DEDUPE_WINDOW_SECONDS: '9000000000000000' })[0]!,
    /^DEDUPE_WINDOW_SECONDS: .*100 years/,
  );
  // Reported with the other bad variables.
  const both = configProblems({ LOG_LEVEL: 'loud', POLL_INTERVAL_MS: '9999999999' });
  assert.equal(both.length, 2, both.join('; '));
  assert.equal(loadConfig({ RETENTION_SWEEP_INTERVAL_SECONDS: '2147483' }).retention.sweepIntervalMs, 2_147_483_000);
  assert.equal(loadConfig({ CALL_TIMELINE_TTL_DAYS: '36500' }).timeline.ttlDays, 36_500);
});

test('the sweeper at the largest accepted interval: one marker SET in a second, no timer overflow', async () => {
  const prefix = uniquePrefix('durations');
  const config = loadConfig({ REDIS_URL, QUEUE_PREFIX: prefix, RETENTION_SWEEP_INTERVAL_SECONDS: '2147483' });
  const redis = new Redis(REDIS_URL);
  const monitorBase = new Redis(REDIS_URL);
  const marker = sweepMarkerKey(config);
  const monitor = await monitorOf(monitorBase);
  const sets: string[] = [];
  monitor.on('monitor', (_time: string, args: string[]) => {
    if (String(args[0]).toLowerCase() === 'set' && String(args[1]) === marker) sets.push(String(args[1]));
  });
  const warnings: string[] = [];
  const onWarning = (w: Error) => warnings.push(w.name);
  process.on('warning', onWarning);
  try {
    const sweeper = startRetentionSweeper(config, redis as unknown as RedisClient, pino({ level: 'silent' }), 10)!;
    await new Promise((r) => setTimeout(r, 1000));
    await sweeper.close();
    assert.deepEqual(warnings, []);
    assert.equal(sets.length, 1, `${sets.length} SETs of the sweep marker in a second`);
  } finally {
    process.off('warning', onWarning);
    monitor.disconnect();
    monitorBase.disconnect();
    redis.disconnect();
    await cleanupPrefix(prefix);
  }
});
