// The documentation of the command line cannot drift from the code: every `callsync <command>
// --option` README and docs/*.md write (in code, where a reader copies it from) names a command
// callsync has and options that command's parser takes; `callsync --help` lists exactly the
// commands, each command's help names only options it takes; README's command table has a row for
// each command; and wrong usage is exit 2, as README says. Nothing here connects to Redis: an
// option is checked by what the parser says of an unknown one placed after it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { help, runCli } from '../src/cli/index.js';

const ROOT = new URL('../', import.meta.url).pathname;
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
// docs/performance.md is a log of past rounds: the commands it quotes are history.
const DOCS = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md') && f !== 'performance.md')
    .map((f) => `docs/${f}`),
];
const commands = Object.keys(help).filter((c) => c !== 'main');
/** Words after "callsync " in code that are no command: a log message, error texts. */
const NOT_COMMANDS = new Set(['started', 'is', 'needs', 'reads', 'with']);
const PROBE = '--zz-no-such-option';

/** What `callsync <args>` writes and its exit code, with an empty environment (the defaults). */
async function cli(args: string[]): Promise<{ code: number | 'running'; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(args, { env: {}, out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out: out.join('\n'), err: err.join('\n') };
}

/**
 * Whether `command`'s parser takes `--option`: given a value (a boolean option leaves it as a
 * positional), the unknown option after it is the first thing the parser refuses.
 */
async function takes(command: string, option: string): Promise<boolean> {
  const { code, err } = await cli([command, option, 'x', PROBE]);
  assert.equal(code, 2, `callsync ${command} ${option} x ${PROBE}: exit 2 (${err})`);
  return err.includes(`unknown option ${PROBE}`);
}

/** The lines of code in a Markdown file: fenced blocks' lines and inline code spans. */
function codeOf(text: string): string[] {
  const fence = /```[^\n]*\n([\s\S]*?)```/g;
  const blocks = [...text.matchAll(fence)].flatMap((m) => m[1]!.split('\n'));
  const spans = [...text.replace(fence, '').matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!);
  return [...blocks, ...spans];
}

/**
 * Each `callsync <word> …` in the docs' code — not `callsync <word>:`, the start of what a command
 * writes — with the options after it (to a comment or a table cell's end).
 */
function documentedCommandLines(): { file: string; written: string; command: string; options: string[] }[] {
  const out = [];
  for (const file of DOCS)
    for (const code of codeOf(read(file)))
      for (const m of code.matchAll(/\bcallsync ([a-z][a-z-]*)(?![a-z-]|:)([^#|]*)/g)) {
        const options = [...m[2]!.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)].map((o) => o[0]);
        out.push({ file, written: m[0].trim(), command: m[1]!, options });
      }
  return out;
}

test('every `callsync <command> --option` the docs write is a command that takes those options', async () => {
  const lines = documentedCommandLines();
  assert.ok(lines.length > 100, `the command lines were found (${lines.length})`);
  const wrong: string[] = [];
  for (const { file, written, command, options } of lines) {
    if (NOT_COMMANDS.has(command)) continue;
    if (!commands.includes(command)) {
      wrong.push(`${file}: "${written}": no command ${command}`);
      continue;
    }
    for (const option of options)
      if (!(await takes(command, option))) wrong.push(`${file}: "${written}": ${command} takes no ${option}`);
  }
  assert.deepEqual(wrong, []);
});

test("callsync --help lists exactly the commands, and each command's help names only options it takes", async () => {
  const listed = [...help.main.matchAll(/^ {2}([a-z][a-z-]+)\b/gm)].map((m) => m[1]!);
  assert.deepEqual([...new Set(listed)].sort(), [...commands].sort());
  const wrong: string[] = [];
  for (const command of commands) {
    const synopsis = help.main.split('\n').find((l) => l.startsWith(`  ${command} `)) ?? '';
    const options = new Set(
      [...`${synopsis}\n${help[command as keyof typeof help]}`.matchAll(/(?<![\w-])--[a-z][a-z-]*/g)].map((m) => m[0]),
    );
    options.delete('--help');
    for (const option of options) if (!(await takes(command, option))) wrong.push(`${command} ${option}`);
    const { code, out } = await cli([command, '--help']);
    assert.equal(code, 0, `callsync ${command} --help`);
    assert.equal(out, help[command as keyof typeof help], `callsync ${command} --help prints its help`);
  }
  assert.deepEqual(wrong, []);
});

test("README's command table has a row for every command", () => {
  const readme = read('README.md');
  const section = readme.slice(readme.indexOf('\n### The `callsync` command\n'));
  const table = /\n(\| Command \|[^\n]*\n(?:\|[^\n]*\n)+)/.exec(section)?.[1] ?? '';
  assert.ok(table.length > 0, 'README has the command table');
  const rows = new Set([...table.matchAll(/^\| `callsync ([a-z-]+)/gm)].map((m) => m[1]!));
  assert.deepEqual(
    commands.filter((c) => !rows.has(c)),
    [],
  );
});

test("wrong usage is one line in callsync's words and where the help is, exit 2, as README says", async () => {
  const readme = read('README.md');
  assert.ok(readme.includes('`callsync calls: unknown option --sinse (did you mean --since?)`'));
  const typo = await cli(['calls', '--sinse', '2h']);
  assert.equal(typo.code, 2);
  assert.equal(typo.err, 'callsync calls: unknown option --sinse (did you mean --since?)\nsee callsync calls --help');
  const unknown = await cli(['bogus']);
  assert.equal(unknown.code, 2);
  assert.equal(unknown.err, 'callsync: unknown command "bogus"\nsee callsync --help');
  const version = await cli(['--version']);
  assert.deepEqual([version.code, version.out], [0, JSON.parse(read('package.json')).version]);
  assert.equal((await cli(['-v'])).out, version.out);
});
