// `npm run dev`: `callsync start` from the source (the roles named by CALLSYNC_ROLE, default all),
// with the same exit codes as the command: 2 on a configuration problem, 1 when the start fails.
import { runAsProcess } from './entry.js';

runAsProcess(['start']);
