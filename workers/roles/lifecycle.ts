// What every role shares: the dependencies handed in by workers/callsync.ts, and a stack of
// closers so that whatever was opened is closed in reverse order — at shutdown and after a start
// that failed half-way — with each step isolated (one failure does not skip the rest).
import type { RedisClient } from '../../queues/connection.js';
import type { Logger } from 'pino';
import type { Config } from '../../src/config/index.js';
import type { InboundLog } from '../../queues/inbound.js';
import type { CallTimeline } from '../../queues/timeline.js';
import type { IngressDeps } from '../../src/ingress/app.js';
import type { CallAcceptor } from '../../src/ingress/accept.js';
import type { Sink } from '../../src/sinks/types.js';
import type { TelephonyClient } from '../../src/telephony/types.js';
import type { LogFanOutEvents } from '../fanout.js';
import type { RunnerEvents, RunnerOptions } from '../runner.js';

export interface CallsyncOptions {
  log: Logger;
  /** Clock for sinks (tests pass a controllable one). */
  now?: () => Date;
  telephony?: TelephonyClient | null;
  /** Replaces sinks built from config (tests only). */
  sinks?: Map<string, Sink>;
  runnerEvents?: RunnerEvents;
  ingressEvents?: IngressDeps['events'];
  /** Extra middleware for the ingress (request ids, metrics, shutdown gate). */
  ingressBefore?: IngressDeps['before'];
  fanOutEvents?: LogFanOutEvents;
  /** false: no call timelines are written (bench/timeline.ts measures their cost). Default true. */
  timelines?: boolean;
  /** Wraps the acceptor (e.g. with a local spool). */
  wrapAcceptor?: (acceptor: CallAcceptor) => CallAcceptor;
}

export interface RoleDeps {
  config: Config;
  options: CallsyncOptions;
  log: Logger;
  /** `producer` fails fast (ingress, poller); `worker` retries forever (BullMQ workers, state). */
  redis: { producer: RedisClient; worker: RedisClient };
  /** True once the producer connection was ready (readiness: never reached is not an outage). */
  redisReached: () => boolean;
  /** The last error of that connection since it was ready (why it was never reached). */
  redisError: () => Error | undefined;
  /** The inbound log on the producer connection (the acceptors append to it). */
  inboundLog: InboundLog;
  /** The platform's API client (SMS and recordings for workers, channel events for the poller). */
  telephony: TelephonyClient | null;
  /** Queue runner settings shared by every worker of this process. */
  runner: RunnerOptions;
  /** The calls' timelines (queues/timeline.ts), written over the producer or the worker connection. */
  timelines: { producer?: CallTimeline; worker?: CallTimeline };
  /** The process' closers: a role's own stack is a part of it (what a shutdown waits for names its steps). */
  closers: Closers;
}

export interface Role {
  close(): Promise<void>;
}

export class Closers {
  private readonly steps: { what: string; close: () => unknown }[] = [];
  private closing: Promise<void> | undefined;
  /** The steps running now, of this stack and of the stacks opened under it (shared with them). */
  private readonly running: Map<object, string>;

  /** `parent`: the stack this one is a part of (a role's, under the process'): its steps count there too. */
  constructor(
    private readonly log: Logger,
    parent?: Closers,
  ) {
    this.running = parent?.running ?? new Map();
  }

  /** The steps still running, of this stack and those under it, outermost first (what a shutdown waits for). */
  runningSteps(): string[] {
    return [...this.running.values()];
  }

  /** Registers a closer; closers run last-in, first-out. */
  add(what: string, close: () => unknown): void {
    this.steps.push({ what, close });
  }

  /** Runs every closer once, newest first; later calls wait for the same run. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      for (let step = this.steps.pop(); step; step = this.steps.pop()) {
        const started = Date.now();
        this.running.set(step, step.what);
        try {
          await step.close();
        } catch (err) {
          this.log.error({ err, step: step.what }, 'shutdown step failed');
        } finally {
          this.running.delete(step);
          this.log.debug({ step: step.what, ms: Date.now() - started }, 'shutdown step done');
        }
      }
    })();
    return this.closing;
  }

  /** Runs `open` with this stack; when it throws, closes what was opened so far and rethrows. */
  async opening<T>(open: () => Promise<T>): Promise<T> {
    try {
      return await open();
    } catch (err) {
      await this.close();
      throw err;
    }
  }
}

/** QUIT needs a live connection; while Redis is away, drop the connection (and its reconnect timer). */
export function quitRedis(conn: RedisClient): Promise<unknown> {
  return conn.status === 'ready' ? conn.quit().catch(() => conn.disconnect()) : Promise.resolve(conn.disconnect());
}
