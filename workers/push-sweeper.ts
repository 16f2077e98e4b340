// Closes Push API calls whose hangup never came (outcome `unknown`), run by the worker role: every
// quarter of PUSH_CALL_TIMEOUT_SECONDS (between 250 ms and a minute) the open calls past their
// deadline are claimed (one sweeper wins each, src/sources/push-assembly.ts) and accepted into the
// inbound log like any other call.
import type { Logger } from 'pino';
import type { CallAcceptor } from '../src/ingress/accept.js';
import type { PushAssembly } from '../src/sources/push-assembly.js';

export interface PushSweeper {
  close(): Promise<void>;
}

export function startPushSweeper(assembly: PushAssembly, acceptor: CallAcceptor, timeoutMs: number, log: Logger): PushSweeper {
  const everyMs = Math.min(60_000, Math.max(250, Math.floor(timeoutMs / 4)));
  let running: Promise<void> | null = null;
  let stopped = false;
  const tick = () => {
    if (running || stopped) return;
    running = assembly
      .sweep((call) => acceptor.accept(call))
      .then(
        (closed) => {
          if (closed > 0) log.info({ closed }, 'push calls without hangup closed as unknown');
        },
        (err: unknown) => log.warn({ err: { message: (err as Error).message } }, 'push call sweep failed; retried next time'),
      )
      .finally(() => {
        running = null;
      });
  };
  const timer = setInterval(tick, everyMs);
  timer.unref();
  return {
    async close() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
