// The queue runner's options the poller tests run the poll dead letters' worker with.
import { defaultRetryPolicy } from '../../queues/index.js';

export const pollerRunner = {
  retry: defaultRetryPolicy,
  concurrency: 1,
  stalledIntervalMs: 1000,
  lockDurationMs: 2000,
  maxStalledCount: 1,
};
