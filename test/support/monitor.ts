// MONITOR on a connection like `connection`, for tests that count the commands Redis runs.
import { once } from 'node:events';
import type { Redis } from 'ioredis';

/**
 * What `connection.monitor()` answers, without its race: ioredis marks the connection "monitoring" a
 * microtask after MONITOR's `OK`, so lines that come in the same read as that `OK` (a busy Redis: the
 * suite's other files) were taken for replies — "Command queue state error", and `monitor()` rejected
 * (the timeline-trim suite's set-up failed so in CI). Those lines are of commands run before the test's
 * own: dropped, with that error.
 */
export async function monitorOf(connection: Redis): Promise<Redis> {
  const monitor = connection.duplicate({ monitor: true, lazyConnect: true });
  monitor.on('error', () => undefined);
  const monitoring = once(monitor, 'monitoring');
  await monitor.connect();
  await monitoring;
  return monitor;
}
