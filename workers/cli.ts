#!/usr/bin/env node
// The `callsync` command (package bin, via bin/callsync.js). See `callsync --help`. The commands
// live in src/cli/; `start` runs the roles of this folder until a signal (workers/run.ts); exit
// codes and start failures are handled by workers/entry.ts.
import { runAsProcess } from './entry.js';

runAsProcess(process.argv.slice(2));
