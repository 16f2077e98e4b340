// Accepting a call means: it is stored in Redis (the inbound queue) before anyone is told "yes".
// The ingress and the poller both accept through here, so deduplication is the same for both.
import { randomBytes } from 'node:crypto';
import type { Queue } from 'bullmq';
import { callHash, type CanonicalCall } from '../model/call.js';
import { JobName, type CallReceivedJob } from '../../queues/registry.js';

export interface AcceptResult {
  /** The inbound job id; a duplicate gets the id of the delivery it duplicates. */
  id: string;
  duplicate: boolean;
  /** True when the event was acknowledged into the local spool (Redis away); see spool.ts. */
  spooled?: boolean;
}

export interface AcceptOptions {
  /** Job id to use instead of a fresh one (the spool drainer reuses the id it acknowledged with). */
  jobId?: string;
}

export interface CallAcceptor {
  accept(call: CanonicalCall, options?: AcceptOptions): Promise<AcceptResult>;
}

/** Redis did not take the event in time: nothing was acknowledged, the sender should retry. */
export class QueueUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`queue unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'QueueUnavailableError';
  }
}

export interface QueueAcceptorOptions {
  /** Same call key within this window -> duplicate. */
  dedupeWindowMs: number;
  /** Give up waiting for Redis after this long (the ingress then answers 503). */
  timeoutMs: number;
}

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/**
 * Fresh job ids are `<call hash>-<process tag><sequence>`: 48 random bits drawn once per process
 * (a restart draws new ones), then a counter, so ids stay unique across processes and restarts
 * without reading the CSPRNG on every request.
 */
const PROCESS_TAG = randomBytes(6).toString('hex');
let sequence = 0;

export class QueueAcceptor implements CallAcceptor {
  constructor(
    private readonly queue: Queue<CallReceivedJob>,
    private readonly options: QueueAcceptorOptions,
  ) {}

  async accept(call: CanonicalCall, options?: AcceptOptions): Promise<AcceptResult> {
    const dedupeId = callHash(call.key);
    // A fresh job id per delivery: BullMQ's deduplication answers with the first delivery's id,
    // which tells a duplicate apart atomically, inside the same Redis script that stores the job.
    const jobId = options?.jobId ?? `${dedupeId}-${PROCESS_TAG}${(++sequence).toString(36)}`;
    let job;
    try {
      job = await withTimeout(
        this.queue.add(
          JobName.callReceived,
          { kind: JobName.callReceived, call },
          { jobId, deduplication: { id: dedupeId, ttl: this.options.dedupeWindowMs } },
        ),
        this.options.timeoutMs,
        'enqueue',
      );
    } catch (err) {
      throw new QueueUnavailableError(err);
    }
    const id = job.id ?? jobId;
    return { id, duplicate: id !== jobId };
  }
}
