#!/usr/bin/env node
// Launcher of the `callsync` command (and of `npm start`): reads ./.env when present (variables
// already set win; a stray line is an error naming it, exit 2), then runs the built CLI (dist/,
// made by `npm run build`) when it is up to date, otherwise the TypeScript source through tsx (a
// devDependency) — so `npm start` and `npx callsync` work right after `npm ci` or an edit, without
// a build step. dist/ counts as up to date when no
// source file (src/, queues/, workers/) is newer than it; an image without the sources uses dist/.
// Set CALLSYNC_FROM_SOURCE=1 to prefer the source even when dist/ is up to date.
/* global URL, process, console */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
// Not a named import: Node before 20.12 has no parseEnv, and the import itself would fail.
import * as util from 'node:util';

/**
 * The line numbers of `text` (a .env file) that are no `NAME=value`, a comment or blank, outside a
 * quoted value spanning lines; `bare`: those that are only a name (Compose's "take it from the
 * environment", which the environment already does here).
 */
function strayLines(text) {
  const bad = [];
  const bare = [];
  let open = null;
  text.split(/\r?\n/).forEach((line, i) => {
    if (open) {
      if (line.includes(open)) open = null;
      return;
    }
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) return;
    const assignment = /^(?:export\s+)?([^=]*)=\s*(.*)$/.exec(trimmed);
    if (!assignment) {
      (/^(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*$/.test(trimmed) ? bare : bad).push(i + 1);
      return;
    }
    const [, name, value] = assignment;
    if (!/^[^\s#]+$/.test(name.trim())) bad.push(i + 1);
    const quote = value[0];
    if ((quote === '"' || quote === "'" || quote === '`') && !value.slice(1).includes(quote)) open = quote;
  });
  return { bad, bare };
}

/**
 * Reads ./.env like Node's process.loadEnvFile (its parser, Node 20.12+), a variable already in the
 * environment winning over the file — but a byte-order mark (a Windows editor's UTF-8) is not part
 * of the first name, and a line that is no `NAME=value` is an error naming it (exit 2) rather than
 * taking the next line's variable with it (Node's parser read `oops` + `PORT=4000` as one name).
 */
function loadDotEnv(file) {
  const fail = (message) => {
    console.error(`callsync: ${file}: ${message}`);
    process.exit(2);
  };
  let text;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    fail(`cannot read it: ${err instanceof Error ? err.message : String(err)}`);
  }
  if (text.includes('\u0000')) fail('not UTF-8 text (saved as UTF-16?): save it as UTF-8');
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  if (typeof util.parseEnv !== 'function') {
    console.error(`callsync: ${file} not read: Node 20.12 or newer reads it (this is ${process.version})`);
    return;
  }
  const { bad, bare } = strayLines(text);
  if (bad.length > 0)
    fail(`line${bad.length > 1 ? 's' : ''} ${bad.join(', ')}: expected NAME=value (or # for a comment)`);
  const lines = text.split(/\r?\n/);
  for (const n of bare) lines[n - 1] = '';
  for (const [name, value] of Object.entries(util.parseEnv(lines.join('\n'))))
    if (process.env[name] === undefined) process.env[name] = value;
}

if (existsSync('.env')) loadDotEnv('.env');

const root = new URL('../', import.meta.url);
const rootPath = fileURLToPath(root);
const built = new URL('dist/workers/cli.js', root);
const source = new URL('workers/cli.ts', root);

/** The newest modification time of the .ts files under `dir` (0 when there are none). */
function newestSource(dir) {
  let newest = 0;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const entry of entries) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(path));
    else if (entry.name.endsWith('.ts')) newest = Math.max(newest, statSync(path).mtimeMs);
  }
  return newest;
}

function distUpToDate() {
  const builtPath = fileURLToPath(built);
  if (!existsSync(builtPath)) return false;
  const builtAt = statSync(builtPath).mtimeMs;
  return ['src', 'queues', 'workers'].every((dir) => newestSource(join(rootPath, dir)) <= builtAt);
}

const fromSource = process.env.CALLSYNC_FROM_SOURCE === '1' || !distUpToDate();

if (fromSource) {
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch {
    if (existsSync(fileURLToPath(built))) {
      // No tsx (production dependencies only): the build there is what runs.
      await import(built.href);
    } else {
      console.error(
        'callsync: dist/ is missing and tsx is not installed; run `npm run build` (or `npm ci` for the dev tools) first',
      );
      process.exit(1);
    }
  }
  if (register) {
    register();
    await import(source.href);
  }
} else {
  await import(built.href);
}
