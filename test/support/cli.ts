// `callsync <argv>` run in this process (runCli) against the tests' Redis, its output captured.
import { runCli } from '../../src/cli/index.js';
import type { CliIo } from '../../src/cli/io.js';
import { REDIS_URL } from './redis.js';

export async function cli(argv: string[], env: NodeJS.ProcessEnv = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const io: CliIo = { env: { REDIS_URL, ...env }, out: (l) => out.push(l), err: (l) => err.push(l) };
  const code = await runCli(argv, io);
  return { code, out: out.join('\n'), err: err.join('\n') };
}
