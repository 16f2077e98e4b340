// Fan-out: one inbound call -> one job per matching sink, with deterministic job ids so that
// running the fan-out again (a retry, a stalled job) never duplicates sink work.
import type { Job, Queue } from 'bullmq';
import { callHash } from '../src/model/call.js';
import { sinksFor } from '../src/routing/router.js';
import type { ParsedRoute } from '../src/routing/types.js';
import { PermanentError } from '../src/sinks/errors.js';
import { JobName, type CallReceivedJob, type SinkDeliverJob } from '../queues/registry.js';

export interface FanOutDeps {
  routes: readonly ParsedRoute[];
  /** The queue of each configured sink, by sink name. */
  sinkQueues: ReadonlyMap<string, Queue<SinkDeliverJob>>;
}

export function createFanOutProcessor(deps: FanOutDeps) {
  return async function fanOut(job: Job<CallReceivedJob>): Promise<{ sinks: string[] }> {
    const call = job.data?.call;
    if (!call || typeof call.key !== 'string' || typeof call.callId !== 'string') {
      throw new PermanentError('inbound job carries no canonical call record');
    }
    const names = sinksFor(deps.routes, call);
    const jobId = callHash(call.key);
    await Promise.all(
      names.map((sink) => {
        const queue = deps.sinkQueues.get(sink);
        if (!queue) throw new PermanentError(`route names sink "${sink}", which has no queue`);
        return queue.add(JobName.sinkDeliver, { kind: JobName.sinkDeliver, sink, call }, { jobId });
      }),
    );
    return { sinks: names };
  };
}
