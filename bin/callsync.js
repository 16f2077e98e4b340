#!/usr/bin/env node
// Launcher of the `callsync` command: runs the built CLI (dist/, made by `npm run build`) when it
// exists, otherwise the TypeScript source through tsx (a devDependency), so `npx callsync` works
// right after `npm ci`. Set CALLSYNC_FROM_SOURCE=1 to prefer the source even when dist/ exists.
/* global URL, process, console */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = new URL('../', import.meta.url);
const built = new URL('dist/workers/cli.js', root);
const source = new URL('workers/cli.ts', root);
const fromSource = process.env.CALLSYNC_FROM_SOURCE === '1' || !existsSync(fileURLToPath(built));

if (fromSource) {
  let register;
  try {
    ({ register } = await import('tsx/esm/api'));
  } catch {
    console.error('callsync: dist/ is missing and tsx is not installed; run `npm run build` (or `npm ci` for the dev tools) first');
    process.exit(1);
  }
  register();
  await import(source.href);
} else {
  await import(built.href);
}
