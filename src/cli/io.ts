// What a CLI command may touch: the environment, two output streams, and the usage error type.
export interface CliIo {
  env: NodeJS.ProcessEnv;
  out(line: string): void;
  err(line: string): void;
  /** Where progress goes (a bar on a terminal); default: plain lines through `out`. */
  progress?: { isTTY?: boolean; write(text: string): void };
}

/** Wrong arguments: the message and where the command's help is go to stderr, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

const guarded = new WeakSet<NodeJS.WriteStream>();
const closedStreams = new WeakSet<NodeJS.WriteStream>();

/**
 * Writes to `stream` that end quietly once its reader is gone (`callsync dlq list | head -1`: EPIPE;
 * the terminal closed under `npm start`: EIO). What follows is dropped and the command finishes its
 * work with its own exit code, as `head` expects of a writer; before, the unhandled 'error' event
 * killed the process with a stack trace and exit 1 — after a hang-up, in the middle of the
 * shutdown it started, leaving the private Redis running. The same listener keeps pino's lines
 * (`start` logs to stdout) from crashing the process.
 */
function quietOnClosedPipe(stream: NodeJS.WriteStream): (text: string) => void {
  if (!guarded.has(stream)) {
    guarded.add(stream);
    stream.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code === 'EPIPE' || err.code === 'EIO' || err.code === 'ERR_STREAM_DESTROYED') {
        closedStreams.add(stream);
        return;
      }
      throw err;
    });
  }
  return (text) => {
    if (!closedStreams.has(stream) && !stream.destroyed) stream.write(text);
  };
}

export const processIo = (): CliIo => {
  const stdout = quietOnClosedPipe(process.stdout);
  const stderr = quietOnClosedPipe(process.stderr);
  return {
    env: process.env,
    out: (line) => stdout(`${line}\n`),
    err: (line) => stderr(`${line}\n`),
    progress: { isTTY: process.stdout.isTTY === true, write: stdout },
  };
};

// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * Text that came from a call or a remote (a call id, a failure's reason) fit for a terminal: control
 * characters (C0, DEL, C1) and bidi embeddings, overrides and isolates written as `\x1b`, `\u202e`.
 * A call id is anything its sender wrote: raw, `ESC ] 52 …` set the operator's clipboard in many
 * terminals, `ESC [ 2 J` cleared the screen, a CR or a cursor move overwrote the lines above.
 */
export function printable(text: string): string {
  return text.replace(UNPRINTABLE, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16)}`;
  });
}

/** Left-aligned columns for terminal tables; every cell made `printable`. */
export function table(rows: string[][]): string[] {
  rows = rows.map((row) => row.map(printable));
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd(),
  );
}
