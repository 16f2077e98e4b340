// The wiring between the roles' events and the metrics of src/metrics.ts: each role reports what
// happened through its own small events interface; these hooks turn that into metric updates.
import { metrics, watchBodyBudget } from '../src/metrics.js';
import type { IngressEvents } from '../src/ingress/app.js';
import { sinkNameFromQueue } from '../queues/registry.js';
import type { FanOutErrorKind, LogFanOutEvents } from './fanout.js';
import type { PollerEvents } from './poller.js';
import type { RunnerEvents } from './runner.js';
import { skipReason } from '../queues/timeline.js';

type Hooks = { [name: string]: ((...args: never[]) => void) | undefined };

/** Runs each hook of every set in turn (metrics plus a test's or another module's own hooks). */
export function combineEvents<T extends object>(...sets: (T | undefined)[]): T {
  const all = sets.filter((s): s is T => s !== undefined) as Hooks[];
  const combined: Hooks = {};
  for (const name of new Set(all.flatMap((s) => Object.keys(s)))) {
    combined[name] = (...args: never[]) => {
      for (const s of all) s[name]?.(...args);
    };
  }
  return combined as T;
}

const sinkOf = (queue: string) => sinkNameFromQueue(queue) ?? '';

const REJECT_REASONS: Record<number, string> = {
  400: 'invalid-payload',
  401: 'unauthorized',
  403: 'forbidden',
  404: 'not-found',
  405: 'method-not-allowed',
  // The Push API source's refusal of an event for a call whose events have expired (a replay).
  409: 'late-event',
  413: 'too-large',
  415: 'unsupported-media-type',
  500: 'internal',
  503: 'unavailable',
};

/** Ingress hooks recording the webhook counters. */
export function ingressMetrics(): IngressEvents {
  return {
    received: () => metrics.webhooksReceived.inc(),
    accepted(duplicate) {
      metrics.webhooksAccepted.inc();
      if (duplicate) metrics.webhooksDuplicate.inc();
    },
    rejected(status, reason) {
      // The ingress passes the status as reason for typed HTTP errors; name it.
      const named = reason === String(status) ? (REJECT_REASONS[status] ?? 'other') : reason;
      metrics.webhooksRejected.inc({ status: String(status), reason: named });
    },
    unreadField: (field) => metrics.webhookFieldsUnread.inc({ field }),
    bodyBudget: (read) => watchBodyBudget(read),
  };
}

const FANOUT_ERROR_KINDS: readonly FanOutErrorKind[] = ['redis', 'unexpected', 'entry', 'parked', 'unstorable'];

/** Fan-out hooks recording its counters and the stalled gauge. */
export function fanOutMetrics(): LogFanOutEvents {
  // Every kind shows from the start (at 0), so `increase()` in an alert sees the first one.
  for (const kind of FANOUT_ERROR_KINDS) metrics.fanOutErrors.inc({ kind }, 0);
  return {
    fannedOut(entries, jobs) {
      metrics.fanOutCalls.inc(entries);
      metrics.fanOutJobs.inc(jobs);
    },
    deadLettered: () => metrics.fanOutDeadLettered.inc(),
    failed: (kind) => metrics.fanOutErrors.inc({ kind }),
    stalled: (stalled) => metrics.fanOutStalled.set(stalled ? 1 : 0),
  };
}

/** Queue runner hooks recording the job counters and durations. */
export function runnerMetrics(): RunnerEvents {
  return {
    completed(queue, _job, durationMs, result) {
      const labels = { queue, sink: sinkOf(queue) };
      metrics.jobsCompleted.inc(labels);
      metrics.jobDuration.observe(labels, durationMs / 1000);
      // A sink's delivery says done or skipped (a hand-over to endpoint queues says neither).
      const status = (result as { status?: unknown } | undefined)?.status;
      if (labels.sink && (status === 'done' || status === 'skipped')) {
        const reason = status === 'skipped' ? skipReason((result as { reason?: string }).reason) : '';
        metrics.sinkJobs.inc({ sink: labels.sink, outcome: status, reason });
      }
    },
    failed(queue, _job, _err, final) {
      const labels = { queue, sink: sinkOf(queue) };
      metrics.jobsFailed.inc(labels);
      if (final && labels.sink) metrics.sinkJobs.inc({ sink: labels.sink, outcome: 'failed', reason: '' });
      if (final) metrics.jobsDeadLettered.inc(labels);
      else metrics.jobsRetried.inc(labels);
    },
    deferred(queue, _job, _delayMs, scope) {
      metrics.jobsDeferred.inc({ queue, sink: sinkOf(queue), scope });
    },
    paused(queue) {
      metrics.queuePauses.inc({ queue, sink: sinkOf(queue) });
    },
  };
}

/** Poller hooks recording its counters and gauges. */
export function pollerMetrics(): PollerEvents {
  return {
    polled(channel, info) {
      metrics.pollerLag.set({ channel }, Math.max(0, info.lagSeconds));
      metrics.pollerLastSuccess.set({ channel }, Date.now() / 1000);
      metrics.pollerPolls.inc({ channel, outcome: 'success' });
      if (info.accepted > 0) metrics.pollerEvents.inc({ channel }, info.accepted);
      metrics.pollerStopped.set({ channel }, 0);
    },
    failed(channel) {
      metrics.pollerPolls.inc({ channel, outcome: 'failure' });
    },
    rateLimited(channel) {
      metrics.pollerPolls.inc({ channel, outcome: 'retry-later' });
    },
    stopped(channel) {
      metrics.pollerPolls.inc({ channel, outcome: 'auth-failure' });
      metrics.pollerStopped.set({ channel }, 1);
    },
    deadLettered(channel) {
      metrics.pollerDeadLetters.inc({ channel });
    },
    unread(_channel, fields) {
      for (const field of fields) metrics.pollerFieldsUnread.inc({ field });
    },
    lock(channel, held) {
      metrics.pollerLockHeld.set({ channel }, held ? 1 : 0);
    },
  };
}
