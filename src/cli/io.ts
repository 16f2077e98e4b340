// What a CLI command may touch: the environment, two output streams, and the usage error type.
export interface CliIo {
  env: NodeJS.ProcessEnv;
  out(line: string): void;
  err(line: string): void;
  /** Where progress goes (a bar on a terminal); default: plain lines through `out`. */
  progress?: { isTTY?: boolean; write(text: string): void };
}

/** Wrong arguments: the message and the command's help go to stderr, exit code 2. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}

export const processIo = (): CliIo => ({
  env: process.env,
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  progress: { isTTY: process.stdout.isTTY === true, write: (text) => process.stdout.write(text) },
});

/** Left-aligned columns for terminal tables. */
export function table(rows: string[][]): string[] {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) => row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i] ?? 0))).join('  ').trimEnd());
}
