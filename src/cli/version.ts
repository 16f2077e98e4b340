// callsync's version, for `callsync --version`: from the nearest package.json above this file — two
// folders up in a checkout (src/cli/), three in the image (dist/src/cli/, package.json in /app).
import { existsSync, readFileSync } from 'node:fs';

export function packageVersion(): string {
  for (let dir = new URL('./', import.meta.url); ;) {
    const file = new URL('package.json', dir);
    if (existsSync(file)) return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version;
    const parent = new URL('../', dir);
    if (parent.href === dir.href) throw new Error(`no package.json above ${import.meta.url}`);
    dir = parent;
  }
}
