// bin/callsync.js (what `npm start` and `npx callsync` run) reads ./.env when there is one, with
// Node's own parser (util.parseEnv, as process.loadEnvFile): a variable from the file applies, one
// already set in the environment wins over the file; files as editors save them (a byte-order
// mark, CRLF) read the same, and a stray line is an error naming it. Seen through `check-config`, which prints the effective setup.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;
let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'callsync-dotenv-'));
  await writeFile(
    join(dir, '.env'),
    [
      '# a comment',
      'PORT=4567',
      'HOST=127.0.0.9',
      'WEBHOOK_ALLOWED_IPS=127.0.0.1,::1',
      `ARCHIVE_DIR=${join(dir, 'archive')}`,
      '',
    ].join('\n'),
  );
});

after(async () => {
  await rm(dir, { recursive: true, force: true });
});

test('./.env applies; a variable already in the environment wins over it', async () => {
  const env: NodeJS.ProcessEnv = { ...process.env, HOST: '127.0.0.1' };
  delete env.PORT;
  delete env.WEBHOOK_ALLOWED_IPS;
  const { stdout } = await run(process.execPath, [BIN, 'check-config'], { cwd: dir, env, timeout: 30_000 });
  // PORT and the allow list from the file, HOST from the environment.
  assert.match(stdout, /^ingress: +http:\/\/127\.0\.0\.1:4567\/webhooks\/ai-agent +\(from 127\.0\.0\.1, ::1;/m);
});

test('without ./.env nothing is read', async () => {
  const empty = await mkdtemp(join(tmpdir(), 'callsync-dotenv-none-'));
  try {
    const env = { ...process.env };
    delete env.PORT;
    const { stdout } = await run(process.execPath, [BIN, 'check-config'], { cwd: empty, env, timeout: 30_000 });
    assert.match(stdout, /^ingress: +http:\/\/\S+:3000\//m);
  } finally {
    await rm(empty, { recursive: true, force: true });
  }
});

/** check-config run in a folder whose .env is `bytes`; its exit code and output. */
async function checkWith(bytes: Buffer | string): Promise<{ code: number; stdout: string; stderr: string }> {
  const folder = await mkdtemp(join(tmpdir(), 'callsync-dotenv-shape-'));
  try {
    await writeFile(join(folder, '.env'), bytes);
    const env = { ...process.env };
    delete env.PORT;
    return await run(process.execPath, [BIN, 'check-config'], { cwd: folder, env, timeout: 30_000 }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (err: { code: number; stdout: string; stderr: string }) => err,
    );
  } finally {
    await rm(folder, { recursive: true, force: true });
  }
}

test('a .env saved with a byte-order mark (Windows editors): its first variable applies', async () => {
  // Before: the mark became part of the first name ("\uFEFFPORT"), and PORT was silently not set.
  const r = await checkWith('\uFEFFPORT=4568\r\nWEBHOOK_ALLOWED_IPS=127.0.0.1\r\n');
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^ingress: +http:\/\/\S+:4568\/webhooks\/ai-agent +\(from 127\.0\.0\.1;/m);
});

test('a .env line that is no NAME=value: exit 2 naming the line, not the next variable lost', async () => {
  // Before: Node's parser read the stray line and the next as one name ("not a setting\nPORT"):
  // PORT was silently not set, and callsync started on 3000.
  const r = await checkWith('# settings\nnot a setting\nPORT=4569\n');
  assert.equal(r.code, 2);
  assert.equal(r.stderr, 'callsync: .env: line 2: expected NAME=value (or # for a comment)\n');
  assert.equal(r.stdout, '');
});

test('a .env line with a name only (Compose: from the environment) is passed over; the next line applies', async () => {
  const r = await checkWith('HOME\nPORT=4570\nMULTI="one\ntwo"\nWEBHOOK_ALLOWED_IPS=127.0.0.1\n');
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^ingress: +http:\/\/\S+:4570\/webhooks\/ai-agent +\(from 127\.0\.0\.1;/m);
});

test('a .env saved as UTF-16: exit 2 saying so', async () => {
  const r = await checkWith(Buffer.from('\uFEFFPORT=4571\n', 'utf16le'));
  assert.equal(r.code, 2);
  assert.equal(r.stderr, 'callsync: .env: not UTF-8 text (saved as UTF-16?): save it as UTF-8\n');
});
