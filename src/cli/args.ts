// A command's options and arguments, read by Node's parseArgs; what it refuses is said in
// callsync's words, on one line: Node's own ("argument is ambiguous. Did you forget … '--since=-XYZ'",
// "To specify a positional argument starting with a '-' …") suggested the wrong fix.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { UsageError } from './io.js';

/** What a value is, for the options whose value is easy to get wrong. */
const VALUE_HINTS: Record<string, string> = {
  since: 'a duration like 2h or a time',
  until: 'a time, or a duration ago like 1h',
};

/** How many single-character edits turn `a` into `b` (Levenshtein). */
function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++)
      next[j] = Math.min(row[j]! + 1, next[j - 1]! + 1, row[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length]!;
}

/** The one of `known` that `given` is a typo of (at most 2 edits, fewer than half its length), or null. */
export function closest(given: string, known: readonly string[]): string | null {
  let best: string | null = null;
  let distance = 3;
  for (const candidate of known) {
    const d = editDistance(given, candidate);
    if (d < distance && d * 2 < candidate.length) [best, distance] = [candidate, d];
  }
  return best;
}

/** Node's parse error as callsync says it: the option, and what to do. */
function usageOf(err: Error & { code?: string }, names: string[]): string {
  const option = /'(?:-\w, )?(--?[\w-]+)/.exec(err.message)?.[1] ?? '';
  if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') {
    const guess = closest(option.replace(/^-+/, ''), names);
    return `unknown option ${option}${guess ? ` (did you mean --${guess}?)` : ''}`;
  }
  if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    if (/does not take an argument/.test(err.message)) return `${option} takes no value`;
    const hint = VALUE_HINTS[option.replace(/^-+/, '')];
    return `${option} needs a value${hint ? `: ${hint}` : ''}`;
  }
  return err.message.split('\n')[0]!;
}

/** `args` read with `options` and -h/--help, positionals allowed; a UsageError on anything else. */
export function parseCommandLine(
  args: string[],
  options: ParseArgsConfig['options'] = {},
): { values: Record<string, string | boolean | undefined>; positionals: string[] } {
  const spec = { ...options, help: { type: 'boolean' as const, short: 'h' } };
  try {
    const { values, positionals } = parseArgs({ args, options: spec, allowPositionals: true, strict: true });
    return { values: values as Record<string, string | boolean | undefined>, positionals };
  } catch (err) {
    throw new UsageError(usageOf(err as Error, Object.keys(spec)));
  }
}
