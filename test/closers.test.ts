// A shutdown that outlives its grace period says what it still waits for: every closer stack
// (the process's, and each role's under it) reports the steps running now to the process' stack,
// and forgets each once it ended — also when it failed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import pino from 'pino';
import { Closers } from '../workers/roles/lifecycle.js';

test('runningSteps names the steps still running, across nested stacks, and none once they ended', async () => {
  const log = pino({ level: 'silent' });
  const outer = new Closers(log);
  const inner = new Closers(log, outer);
  let release!: () => void;
  const hanging = new Promise<void>((resolve) => (release = resolve));
  inner.add('close workers', () => hanging);
  inner.add('stop fan-out', () => Promise.reject(new Error('fails, and still ends')));
  outer.add('close redis', () => undefined);
  outer.add('stop worker role', () => inner.close());

  const closing = outer.close();
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(outer.runningSteps(), ['stop worker role', 'close workers']);
  release();
  await closing;
  assert.deepEqual(outer.runningSteps(), []);
});

test("steps of the same name in two stacks of one process count apart; another instance's steps are not its", async () => {
  const log = pino({ level: 'silent' });
  const root = new Closers(log);
  const [a, b] = [new Closers(log, root), new Closers(log, root)];
  const other = new Closers(log);
  const releases: (() => void)[] = [];
  const held = () => new Promise<void>((resolve) => releases.push(resolve));
  a.add('close queue', () => undefined);
  b.add('close queue', held);
  other.add('close redis', held);
  const closing = [b.close(), other.close()];
  await a.close();
  assert.deepEqual(root.runningSteps(), ['close queue']);
  assert.deepEqual(other.runningSteps(), ['close redis']);
  for (const release of releases) release();
  await Promise.all(closing);
  assert.deepEqual(root.runningSteps(), []);
  assert.deepEqual(other.runningSteps(), []);
});
