// A shutdown that outlives its grace period says what it still waits for: every closer stack
// (the process's, each role's) reports the steps running now, and forgets each once it ended —
// also when it failed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Closers, closersRunning } from '../workers/roles/lifecycle.js';

test('closersRunning names the steps still running, across nested stacks, and none once they ended', async () => {
  const log = pino({ level: 'silent' });
  const outer = new Closers(log);
  const inner = new Closers(log);
  let release!: () => void;
  const hanging = new Promise<void>((resolve) => (release = resolve));
  inner.add('close workers', () => hanging);
  inner.add('stop fan-out', () => Promise.reject(new Error('fails, and still ends')));
  outer.add('close redis', () => undefined);
  outer.add('stop worker role', () => inner.close());

  const closing = outer.close();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(closersRunning(), ['stop worker role', 'close workers']);
  release();
  await closing;
  assert.deepEqual(closersRunning(), []);
});

test('two stacks running a step of the same name: the one still running stays named when the other ends', async () => {
  const log = pino({ level: 'silent' });
  const [a, b] = [new Closers(log), new Closers(log)];
  let release!: () => void;
  a.add('close redis', () => undefined);
  b.add('close redis', () => new Promise<void>((resolve) => (release = resolve)));
  const closingB = b.close();
  await a.close();
  assert.deepEqual(closersRunning(), ['close redis']);
  release();
  await closingB;
  assert.deepEqual(closersRunning(), []);
});
