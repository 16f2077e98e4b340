// A start that fails half-way closes what it had opened: the worker role's queues and workers, the
// fan-out and the Redis connections are all closed when the ingress cannot listen, so the process
// ends by itself instead of hanging on open sockets (real Redis, a real taken port).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createServer, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('./support/failed-start-process.ts', import.meta.url));

test('a start that fails at listen closes every connection it opened: the process exits by itself', async () => {
  const blocker = createServer();
  await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
  const port = (blocker.address() as AddressInfo).port;
  try {
    const child = spawn(process.execPath, ['--import', 'tsx', CHILD], { env: { ...process.env, TAKEN_PORT: String(port) }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    // Generous: tsx start-up plus BullMQ's bounded waits; a process that keeps a socket open never ends.
    const exited = await new Promise<number | null | 'hung'>((resolve) => {
      const timer = setTimeout(() => resolve('hung'), 30_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
    if (exited === 'hung') child.kill('SIGKILL');
    assert.match(out, /start failed: .*EADDRINUSE/, out);
    assert.equal(exited, 0, `the process should end by itself once the failed start closed everything; it ${exited === 'hung' ? 'hung' : `exited ${exited}`}\n${out}`);
  } finally {
    blocker.close();
  }
});
