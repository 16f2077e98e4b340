// src/deadline.ts: a request's time limit that ends with the request (AbortSignal.timeout's timer
// lives for the whole limit and keeps the request's objects alive with it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { deadline } from '../src/deadline.js';

test('aborts after its time with a TimeoutError, as AbortSignal.timeout', async () => {
  const limit = deadline(20);
  await sleep(60);
  assert.equal(limit.signal.aborted, true);
  assert.equal((limit.signal.reason as Error).name, 'TimeoutError');
  limit.clear();
});

test('aborts with the parent signal and its reason', () => {
  const parent = new AbortController();
  const limit = deadline(60_000, parent.signal);
  parent.abort(new Error('worker shutting down'));
  assert.equal(limit.signal.aborted, true);
  assert.equal((limit.signal.reason as Error).message, 'worker shutting down');
  limit.clear();
  const late = deadline(60_000, parent.signal);
  assert.equal(late.signal.aborted, true, 'a parent aborted before is seen at once');
});

test('clear() ends the limit: no abort later, no listener left on the parent', async () => {
  const parent = new AbortController();
  let listeners = 0;
  const add = parent.signal.addEventListener.bind(parent.signal);
  const remove = parent.signal.removeEventListener.bind(parent.signal);
  parent.signal.addEventListener = ((...args: Parameters<typeof add>) => (listeners++, add(...args))) as typeof add;
  parent.signal.removeEventListener = ((...args: Parameters<typeof remove>) => (
    listeners--,
    remove(...args)
  )) as typeof remove;
  const limit = deadline(20, parent.signal);
  assert.equal(listeners, 1);
  limit.clear();
  limit.clear();
  assert.equal(listeners, 0, 'the listener on the parent is gone');
  await sleep(60);
  assert.equal(limit.signal.aborted, false);
  parent.abort();
  assert.equal(limit.signal.aborted, false, 'a cleared limit no longer follows its parent');
});
