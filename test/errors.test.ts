// The error classes at the root (src/errors.ts): HTTP answers and network failures sorted into
// classes, told apart with instanceof — what the queue runner, the poller and the SMS channel rely on.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AuthError,
  PermanentError,
  RetryLaterError,
  SinkError,
  TransientError,
  UnprocessableJobError,
  classify,
  errorFromHttp,
  errorFromNetwork,
  isRedisCondition,
  parseRetryAfter,
} from '../src/errors.js';

test('HTTP answers become the class of their behaviour', () => {
  const cases: [number, string | null, new (...args: never[]) => SinkError][] = [
    [400, null, PermanentError],
    [404, null, PermanentError],
    [422, null, PermanentError],
    [401, null, AuthError],
    [403, null, AuthError],
    [408, null, TransientError],
    [500, null, TransientError],
    [503, null, TransientError],
    [503, '7', RetryLaterError],
    [429, null, RetryLaterError],
  ];
  for (const [status, retryAfter, cls] of cases) {
    const err = errorFromHttp({ status, what: 'CRM POST /x', retryAfter });
    assert.ok(
      err instanceof cls,
      `${status}${retryAfter ? ` Retry-After ${retryAfter}` : ''} → ${cls.name}, got ${err.name}`,
    );
    assert.ok(err instanceof SinkError && err instanceof Error);
    assert.equal(err.status, status);
    assert.equal(err.name, cls.name);
  }
});

test('retry-later carries its delay and scope; a 429 without Retry-After waits the default', () => {
  const queue = errorFromHttp({ status: 429, what: 'w', retryAfter: '2', rateLimitScope: 'queue' });
  assert.ok(queue instanceof RetryLaterError);
  assert.equal(queue.delayMs, 2000);
  assert.equal(queue.scope, 'queue');
  const fallback = errorFromHttp({ status: 429, what: 'w', defaultRetryAfterMs: 1234 });
  assert.ok(fallback instanceof RetryLaterError);
  assert.equal(fallback.delayMs, 1234);
  assert.equal(fallback.scope, 'job');
});

test('network failures are transient and keep their cause; unknown throwables classify as transient', () => {
  const cause = Object.assign(new Error('t'), { name: 'TimeoutError' });
  const err = errorFromNetwork('HubSpot GET /x', cause);
  assert.ok(err instanceof TransientError);
  assert.equal(err.cause, cause);
  assert.match(err.message, /timed out/);
  assert.equal(classify(new Error('plain')), 'transient');
  assert.equal(classify('a string'), 'transient');
  assert.equal(classify(new AuthError('no')), 'auth');
});

test('a job nothing can process (fan-out, delivery wrapper, poller) is permanent without being a sink error', () => {
  const redisFull = Object.assign(new Error("OOM command not allowed when used memory > 'maxmemory'."), {
    name: 'ReplyError',
  });
  const err = new UnprocessableJobError('sink jobs of call c1 cannot be stored: RangeError: Invalid string length', {
    cause: redisFull,
  });
  assert.ok(!(err instanceof SinkError));
  assert.equal(err.name, 'UnprocessableJobError');
  assert.equal(err.cause, redisFull);
  // Permanent even when what it wraps is Redis' (as the PermanentError it replaces was).
  assert.equal(classify(err), 'permanent');
  assert.equal(classify(new UnprocessableJobError('Connection is closed.')), 'permanent');
});

test('Retry-After: seconds, HTTP dates, and nonsense', () => {
  const now = Date.parse('2026-11-22T12:00:00Z');
  assert.equal(parseRetryAfter('3', now), 3000);
  assert.equal(parseRetryAfter('1.5', now), 1500);
  assert.equal(parseRetryAfter('Sun, 22 Nov 2026 12:00:10 GMT', now), 10_000);
  assert.equal(parseRetryAfter('Sun, 22 Nov 2026 11:00:00 GMT', now), 0);
  assert.equal(parseRetryAfter('soon', now), undefined);
  assert.equal(parseRetryAfter('', now), undefined);
  assert.equal(parseRetryAfter(null, now), undefined);
});

/** What ioredis throws for an error reply (its ReplyError: the name and Redis' text). */
class ReplyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ReplyError';
  }
}

test('Redis failing under a job is its own kind (no attempt spent); a remote network error stays transient', () => {
  for (const reply of [
    "OOM command not allowed when used memory > 'maxmemory'.",
    "READONLY You can't write against a read only replica.",
    'LOADING Redis is loading the dataset in memory',
    'MASTERDOWN Link with MASTER is down',
  ]) {
    assert.equal(classify(new ReplyError(reply)), 'redis', reply);
  }
  assert.equal(classify(new Error('Connection is closed.')), 'redis');
  assert.equal(
    classify(
      Object.assign(new Error('Reached the max retries per request limit (which is 1).'), {
        name: 'MaxRetriesPerRequestError',
      }),
    ),
    'redis',
  );
  // Wrapped by a sink as transient: still Redis.
  assert.equal(
    classify(new TransientError('lock failed', { cause: new ReplyError('OOM command not allowed') })),
    'redis',
  );
  // A reply about the data sent, and network codes (a CRM's or S3's reset as much as Redis'): transient.
  assert.equal(classify(new ReplyError('ERR value is not an integer or out of range')), 'transient');
  assert.equal(
    classify(new ReplyError('WRONGTYPE Operation against a key holding the wrong kind of value')),
    'transient',
  );
  assert.equal(
    classify(
      errorFromNetwork(
        'HubSpot POST /crm/v3/objects/calls',
        Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }),
      ),
    ),
    'transient',
  );
  assert.equal(
    classify(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:443'), { code: 'ECONNREFUSED' })),
    'transient',
  );
  // Typed kinds other than transient keep theirs, whatever they wrap.
  assert.equal(classify(new PermanentError('bad', { cause: new ReplyError('OOM command not allowed') })), 'permanent');
  assert.equal(isRedisCondition('OOM'), false);
});
