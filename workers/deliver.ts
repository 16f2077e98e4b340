// Sink delivery: hands the call of a sink job to its adapter. Errors travel up untouched: the
// runner sorts them (permanent, retry-later, auth, transient).
import type { Job } from 'bullmq';
import type { Logger } from 'pino';
import { PermanentError } from '../src/errors.js';
import type { Sink, SinkResult } from '../src/sinks/types.js';
import type { SinkDeliverJob } from '../queues/registry.js';

/** `endpoint`: the endpoint whose queue this processor serves (a sink with endpoints); the queue decides, not the job. */
export function createDeliverProcessor(sink: Sink, log: Logger, endpoint?: string) {
  return async function deliver(job: Job<SinkDeliverJob>, signal: AbortSignal): Promise<SinkResult> {
    const data = job.data?.call;
    if (!data || typeof data.key !== 'string') throw new PermanentError('sink job carries no canonical call record');
    // The revision is delivery metadata, not content: sinks get it beside the call, never inside what they write.
    const { revision, ...call } = data;
    let jobLog: Logger | undefined;
    return sink.deliver(call, {
      jobId: job.id ?? '',
      attempt: job.attemptsMade + 1,
      ...(endpoint === undefined ? {} : { endpoint }),
      ...(revision ? { revision } : {}),
      // Built when the sink first logs: most deliveries log nothing at info.
      get log() {
        return (jobLog ??= log.child({ sink: sink.name, ...(endpoint === undefined ? {} : { endpoint }), jobId: job.id }));
      },
      signal,
    });
  };
}
