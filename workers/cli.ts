#!/usr/bin/env node
// The `callsync` command (package bin, via bin/callsync.js). See `callsync --help`. The commands
// live in src/cli/; `start` runs the roles of this folder until a signal (workers/run.ts).
import { runCli } from '../src/cli/index.js';
import { processIo } from '../src/cli/io.js';
import { runUntilSignalled } from './run.js';

runCli(process.argv.slice(2), processIo(), { start: runUntilSignalled }).then(
  (code) => {
    if (code !== 'running') process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exitCode = 1;
  },
);
