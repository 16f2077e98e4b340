// `callsync start` as a real process (bin/callsync.js), its JSON log lines collected: for tests
// that need a process of its own (signals, NODE_EXTRA_CA_CERTS read at start, exit codes).
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

const BIN = new URL('../../bin/callsync.js', import.meta.url).pathname;

export interface CallsyncProcess {
  proc: ChildProcess;
  /** Its log lines (stdout), parsed. */
  lines: Record<string, unknown>[];
  /** stderr, and stdout lines that are not JSON. */
  stderr: string[];
  exit: Promise<number | null>;
  /** The ingress' URL, once it listens. */
  url: Promise<string>;
}

/** Starts `callsync start` with `env` over this process' environment. */
export function startCallsyncProcess(env: NodeJS.ProcessEnv): CallsyncProcess {
  const proc = spawn(process.execPath, [BIN, 'start'], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: Record<string, unknown>[] = [];
  const stderr: string[] = [];
  let resolveUrl!: (u: string) => void;
  const url = new Promise<string>((resolve) => (resolveUrl = resolve));
  createInterface({ input: proc.stdout! }).on('line', (line) => {
    try {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      lines.push(parsed);
      if (parsed.msg === 'ingress listening') resolveUrl(String(parsed.url));
    } catch {
      stderr.push(line);
    }
  });
  createInterface({ input: proc.stderr! }).on('line', (line) => stderr.push(line));
  const exit = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  return { proc, lines, stderr, exit, url };
}

/** `promise`, or an error naming `what` (and the process' stderr) after `ms`. */
export async function bounded<T>(promise: Promise<T>, ms: number, what: string, child?: CallsyncProcess): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${what}; stderr: ${child?.stderr.join('\n').slice(-2000) ?? ''}`)),
      ms,
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}
