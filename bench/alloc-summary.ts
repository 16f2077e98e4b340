// Where a process allocated (a profile written by bench/alloc-probe.ts), per call: in all, by package
// or folder, by function (self), and by function with what it calls (inclusive).
//
//   npx tsx bench/alloc-summary.ts <file.heapprofile> <calls in the run> [rows]
import { readFileSync } from 'node:fs';

interface ProfileNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: ProfileNode[];
}

const [file, callsArg, rowsArg] = process.argv.slice(2);
if (!file) throw new Error('usage: alloc-summary <file.heapprofile> <calls> [rows]');
const calls = Number(callsArg ?? 1);
const rows = Number(rowsArg ?? 25);
const head = (JSON.parse(readFileSync(file, 'utf8')) as { head: ProfileNode }).head;

/** The package (node_modules), Node module or project folder a frame is in. */
function area(url: string): string {
  if (!url) return '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url.startsWith('node:internal') ? 'node:internal' : url;
  const own = /bench-build\/(.+)$/.exec(url);
  return own ? own[1]!.split('/').slice(0, 2).join('/') : url.slice(-40);
}

const self = new Map<string, number>();
const byArea = new Map<string, number>();
const inclusive = new Map<string, number>();
let total = 0;
const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);

function walk(node: ProfileNode, stack: Set<string>): number {
  const f = node.callFrame;
  const name = `${f.functionName || '(anonymous)'} ${area(f.url)}:${f.lineNumber + 1}`;
  total += node.selfSize;
  add(self, name, node.selfSize);
  add(byArea, area(f.url), node.selfSize);
  const outer = !stack.has(name);
  if (outer) stack.add(name);
  let sum = node.selfSize;
  for (const child of node.children) sum += walk(child, stack);
  if (outer) {
    stack.delete(name);
    add(inclusive, name, sum);
  }
  return sum;
}
walk(head, new Set());

const kb = (bytes: number) => `${(bytes / calls / 1024).toFixed(1).padStart(7)} KB`;
const show = (title: string, m: Map<string, number>) => {
  console.log(`\n${title}`);
  for (const [k, v] of [...m].sort((a, b) => b[1] - a[1]).slice(0, rows))
    console.log(`${kb(v)} ${((100 * v) / total).toFixed(1).padStart(5)} %  ${k}`);
};
console.log(`${kb(total)} allocated per call (${calls} calls)`);
show('by package or folder', byArea);
show('by function (self)', self);
show('by function, with what it calls', inclusive);
