// Sink delivery: hands the call of a sink job to its adapter. Errors travel up untouched: the
// runner sorts them (permanent, retry-later, auth, transient).
import type { Job } from 'bullmq';
import type { Logger } from 'pino';
import { PermanentError } from '../src/errors.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import type { SinkDeliverJob } from '../queues/registry.js';

export function createDeliverProcessor(sink: Sink, log: Logger) {
  return async function deliver(job: Job<SinkDeliverJob>, signal: AbortSignal): Promise<SinkResult> {
    const call = job.data?.call;
    if (!call || typeof call.key !== 'string') throw new PermanentError('sink job carries no canonical call record');
    let jobLog: Logger | undefined;
    return sink.deliver(call, {
      jobId: job.id ?? '',
      attempt: job.attemptsMade + 1,
      // Built when the sink first logs: most deliveries log nothing at info.
      get log() {
        return (jobLog ??= log.child({ sink: sink.name, jobId: job.id }));
      },
      signal,
    });
  };
}
