#!/usr/bin/env node
// The `callsync` command (package bin, via bin/callsync.js). See `callsync --help`.
import { runCli } from './cli/index.js';
import { processIo } from './cli/io.js';

runCli(process.argv.slice(2), processIo()).then(
  (code) => {
    if (code !== 'running') process.exitCode = code;
  },
  (err: unknown) => {
    console.error(err instanceof Error ? (err.stack ?? err.message) : String(err));
    process.exitCode = 1;
  },
);
