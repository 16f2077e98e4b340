// Bull Board on Hono: every queue, its counts, failed jobs with their error, retry and remove.
// Mounted under /admin/queues behind operatorAuth (see ./app.ts). A disabled queue (a webhook
// endpoint that answered 410 Gone or a redirect, queues/disabled.ts) or a queue paused because its
// remote rejected the credentials shows why as its description,
// and its resume button re-enables it. Its Retry of a failed job starts a new round of attempts, as
// `callsync dlq retry` does (queues/dead-letters.ts).
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { HonoAdapter } from '@bull-board/hono';
import { serveStatic } from '@hono/node-server/serve-static';
import type { FinishedStatus, Job, Queue, RetryOptions } from 'bullmq';
import type { Hono } from 'hono';
import { retryDeadLetter } from '../../queues/dead-letters.js';
import { enableQueue, pauseState } from '../../queues/disabled.js';
import type { CallTimeline } from '../../queues/timeline.js';

/** Bull Board's adapter of a BullMQ queue, plus the disabled state. */
class CallsyncQueueAdapter extends BullMQAdapter {
  private note = '';

  constructor(
    private readonly target: Queue,
    private readonly timeline: CallTimeline | undefined,
  ) {
    super(target, { displayName: target.name });
  }

  /**
   * Bull Board retries the jobs it got here with `job.retry(state)`, which keeps a dead letter's
   * attempt counts (one more attempt, then the dead letters again at once): a failed job's retry is
   * a new round instead. Its Retry button reads one job, its "Retry all" pages of them.
   */
  override async getJob(id: string): Promise<Job | undefined> {
    const job = await super.getJob(id);
    return job && this.newRoundOnRetry(job);
  }

  override async getJobs(...args: Parameters<BullMQAdapter['getJobs']>): Promise<Job[]> {
    return (await super.getJobs(...args)).map((job) => this.newRoundOnRetry(job));
  }

  private newRoundOnRetry(job: Job): Job {
    const timeline = this.timeline;
    job.retry = (state: FinishedStatus = 'failed', opts?: RetryOptions) => {
      // BullMQ's own retry again (retryDeadLetter calls it), once this one has run.
      delete (job as Partial<Job>).retry;
      return state === 'failed' ? retryDeadLetter(this.target, job, timeline, 'the dashboard') : job.retry(state, opts);
    };
    return job;
  }

  // Bull Board reads isPaused() before getDescription() for every queue it lists: the marker comes along.
  override async isPaused(): Promise<boolean> {
    const [paused, state] = await Promise.all([super.isPaused(), pauseState(this.target).catch(() => null)]);
    this.note = '';
    if (paused && state?.state === 'disabled')
      this.note = `Disabled${state.at ? ` since ${state.at}` : ''}: ${state.reason} Resume the queue to re-enable the endpoint.`;
    else if (paused && state?.reason)
      this.note = `Paused${state.at ? ` since ${state.at}` : ''}: ${state.reason} Resume the queue once the cause is fixed.`;
    return paused;
  }

  override getDescription(): string {
    return this.note || super.getDescription();
  }

  /** Resuming re-enables: the disabled marker goes with the pause. */
  override async resume(): Promise<void> {
    await enableQueue(this.target);
  }
}

export interface DashboardOptions {
  queues: Queue[];
  /** Where it is mounted, e.g. /admin/queues (app.ts' DASHBOARD_PATH). */
  basePath: string;
  /** Shown in the header. Default `callsync`. */
  title?: string;
  /** The calls' timelines: a retried sink job's call says a new round of attempts began. */
  timeline?: CallTimeline;
}

export function createDashboard(options: DashboardOptions): Hono {
  const basePath = options.basePath;
  const serverAdapter = new HonoAdapter(serveStatic).setBasePath(basePath);
  createBullBoard({
    queues: options.queues.map((q) => new CallsyncQueueAdapter(q, options.timeline)),
    // @bull-board/hono pins its own copy of @bull-board/api; the two copies' types differ only nominally.
    serverAdapter: serverAdapter as unknown as Parameters<typeof createBullBoard>[0]['serverAdapter'],
    options: { uiConfig: { boardTitle: options.title ?? 'callsync' } },
  });
  return serverAdapter.registerPlugin() as unknown as Hono;
}
