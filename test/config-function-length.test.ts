// No function in src/config longer than 80 lines (issue 21): each section of the configuration is
// built by a function of its own. Counted on the syntax tree (TypeScript compiler API): function
// declarations, methods, function expressions and arrow functions, from their first line to their last.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const MAX_LINES = 80;

/** Every function in `text` with its length in lines, largest first. */
export function functionLengths(file: string, text: string): { name: string; lines: number }[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: { name: string; lines: number }[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const named = (node as ts.FunctionDeclaration).name;
      const name =
        named && ts.isIdentifier(named)
          ? named.text
          : ts.isVariableDeclaration(node.parent) && ts.isIdentifier(node.parent.name)
            ? node.parent.name.text
            : '(anonymous)';
      out.push({ name: `${file}:${first + 1} ${name}`, lines: last - first + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out.sort((a, b) => b.lines - a.lines);
}

test(`no function in src/config is longer than ${MAX_LINES} lines`, () => {
  const dir = join(ROOT, 'src/config');
  const all = readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .flatMap((f) => functionLengths(`src/config/${f}`, readFileSync(join(dir, f), 'utf8')));
  assert.ok(all.length > 10, 'the functions of src/config are found');
  const long = all.filter((f) => f.lines > MAX_LINES);
  assert.deepEqual(
    long,
    [],
    `functions over ${MAX_LINES} lines: ${long.map((f) => `${f.name} (${f.lines})`).join(', ')}`,
  );
});

test('the count sees a long function', () => {
  const body = Array.from({ length: MAX_LINES }, (_, i) => `  const v${i} = ${i};`).join('\n');
  const [top] = functionLengths('x.ts', `export const f = () => {\n${body}\n};\n`);
  assert.equal(top?.name, 'x.ts:1 f');
  assert.equal(top?.lines, MAX_LINES + 2);
});
