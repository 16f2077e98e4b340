#!/usr/bin/env node
// Launcher of the `callsync` command (and of `npm start`): reads ./.env when present (variables
// already set win), then runs the built CLI (dist/, made by `npm run build`) when it is up to date,
// otherwise the TypeScript source through tsx (a devDependency) — so `npm start` and `npx callsync`
// work right after `npm ci` or an edit, without a build step. dist/ counts as up to date when no
// source file (src/, queues/, workers/) is newer than it; an image without the sources uses dist/.
// Set CALLSYNC_FROM_SOURCE=1 to prefer the source even when dist/ is up to date.
/* global URL, process, console */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Node's own .env reader (Node 20.12+): a variable already in the environment is not replaced.
if (existsSync('.env') && typeof process.loadEnvFile === 'function') {
  try {
    process.loadEnvFile('.env');
  } catch (err) {
    console.error(`callsync: cannot read .env: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(2);
  }
}

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
