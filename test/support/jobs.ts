// Reading a BullMQ job in a test once it has finished.
import type { Job, JobState, Queue } from 'bullmq';

/**
 * The job `id` of `queue` once it is in `state` (for `waitFor`), or null before. The state is read
 * first and the job after it: a copy of the job read while it was still active has no
 * `returnvalue` / `failedReason` although a live `getState()` on it already answers 'completed' or
 * 'failed' — a race that failed CI once under load.
 */
export async function jobIn<T = unknown>(queue: Queue<T>, id: string, state: JobState): Promise<Job<T> | null> {
  if ((await queue.getJobState(id)) !== state) return null;
  return ((await queue.getJob(id)) as Job<T> | undefined) ?? null;
}
