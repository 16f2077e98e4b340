// The process around the command line: runs one `callsync` command and turns its result into the
// exit code. A start that fails exits with one line on stderr and no stack trace — 2 for a
// configuration problem (the CLI's own answer), 1 for anything else (a taken port, ...) — after
// closing what it had opened, so an orchestrator restarts it instead of waiting on a hung process.
import { oneLine, runCli } from '../src/cli/index.js';
import { processIo } from '../src/cli/io.js';
import { runUntilSignalled } from './run.js';

/** How long a finished command may take to end by itself before it is ended (something kept it alive). */
const EXIT_GRACE_MS = 5000;

function finish(code: number): void {
  process.exitCode = code;
  // Everything was closed, so the process normally ends now. Should anything still hold it open,
  // end it anyway: a failed start must never hang.
  setTimeout(() => {
    process.stderr.write(`callsync: open handles kept the process alive after it finished; exiting with ${code}\n`);
    process.exit(code);
  }, EXIT_GRACE_MS).unref();
}

/** Runs `argv` as the `callsync` command of this process. */
export function runAsProcess(argv: string[]): void {
  const io = processIo();
  runCli(argv, io, { start: runUntilSignalled }).then(
    (code) => {
      if (code !== 'running') finish(code);
    },
    (err: unknown) => {
      io.err(`callsync ${argv[0] ?? ''}: ${oneLine(err)}`);
      finish(1);
    },
  );
}
