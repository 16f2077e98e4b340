// Progress of a long CLI command: a bar redrawn in place on a terminal, plain lines otherwise
// (a log file or a pipe gets one line per step instead of carriage returns).

export interface ProgressOut {
  /** True when the stream is a terminal. */
  isTTY?: boolean;
  write(text: string): void;
}

export class Progress {
  private lastLine = 0;

  constructor(
    private readonly out: ProgressOut,
    private readonly label: string,
  ) {}

  /** Shows `done` of `total` (total null: unknown); `note` is appended (counts, never call data). */
  update(done: number, total: number | null, note = ''): void {
    if (this.out.isTTY) {
      const width = 30;
      const share = total && total > 0 ? Math.min(1, done / total) : 0;
      const filled = Math.round(share * width);
      const bar = total === null ? '' : `[${'#'.repeat(filled)}${'-'.repeat(width - filled)}] `;
      this.out.write(
        `\r${this.label} ${bar}${done}${total === null ? '' : `/${total}`}${note ? ` ${note}` : ''}\x1b[K`,
      );
      return;
    }
    // Plain: at most one line per page of work (callers update once per page).
    const now = done;
    if (now === this.lastLine && now !== 0) return;
    this.lastLine = now;
    this.out.write(`${this.label}: ${done}${total === null ? '' : `/${total}`}${note ? ` ${note}` : ''}\n`);
  }

  /** Ends the bar's line on a terminal. */
  finish(): void {
    if (this.out.isTTY) this.out.write('\n');
  }
}

/** The command's progress stream: the io's, else plain lines through `out`. */
export function progressOf(io: { out(line: string): void; progress?: ProgressOut }): ProgressOut {
  return io.progress ?? { isTTY: false, write: (text) => io.out(text.replace(/\n$/, '')) };
}
