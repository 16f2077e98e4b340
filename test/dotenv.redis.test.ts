// bin/callsync.js (what `npm start` and `npx callsync` run) reads ./.env when there is one, through
// Node's own process.loadEnvFile: a variable from the file applies, one already set in the
// environment wins over the file. Seen through `check-config`, which prints the effective setup.
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
