// The container files stay valid though no engine runs here: docker-compose.yml parses and has
// the services, Redis settings and scaling shape docs/operations.md promises; the Dockerfile is
// multi-stage, Node 22+, non-root, with a healthcheck; and the healthcheck script really works.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';

const root = new URL('../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');
const run = promisify(execFile);

describe('docker-compose.yml', () => {
  const compose = parse(read('docker-compose.yml'), { merge: true }) as { services: Record<string, any>; volumes: Record<string, unknown> };
  const s = compose.services;

  test('has Redis with AOF and noeviction, MinIO with its bucket, Mailpit, and one service per role', () => {
    assert.deepEqual(Object.keys(s).sort(), ['ingress', 'mailpit', 'minio', 'minio-init', 'poller', 'redis', 'worker']);
    const redis = s.redis.command.join(' ');
    assert.match(redis, /--appendonly yes/);
    assert.match(redis, /--maxmemory-policy noeviction/);
    assert.ok(s.redis.volumes.some((v: string) => v.endsWith(':/data')), 'AOF on a volume');
    const bucket = s.ingress.environment.ARCHIVE_S3_BUCKET;
    assert.match(s['minio-init'].command.join(' '), new RegExp(`mc mb --ignore-existing local/${bucket}`));
    assert.equal(s.ingress.environment.S3_ENDPOINT, 'http://minio:9000');
    assert.match(s.worker.environment.SMTP_URL, /^smtp:\/\/mailpit:1025$/);
    for (const [role, svc] of [['ingress', s.ingress], ['worker', s.worker], ['poller', s.poller]] as const) {
      assert.equal(svc.environment.CALLSYNC_ROLE, role);
      assert.equal(svc.environment.REDIS_URL, 'redis://redis:6379');
      assert.equal(svc.environment.QUEUE_PREFIX, '{callsync}', 'a hash-tag prefix');
      assert.equal(svc.build, '.');
      assert.equal(svc.depends_on.redis.condition, 'service_healthy');
    }
  });

  test('workers scale: no fixed container name, no host port', () => {
    assert.equal(s.worker.container_name, undefined);
    assert.equal(s.worker.ports, undefined);
    assert.equal(s.poller.ports, undefined);
    assert.equal(s.worker.environment.OPS_PORT, '9464');
  });

  test('every variable a service sets is one callsync or a sink knows', async () => {
    const { envSchema } = await import('../src/config/env.js');
    const known = new Set(Object.keys(envSchema.shape));
    const sinkVars = /^(AWS_|S3_|ARCHIVE_|SMTP_|NOTIFY_|TELEPHONY_|POLL_|HUBSPOT_|PIPEDRIVE_|CRM_)/;
    for (const role of ['ingress', 'worker', 'poller']) {
      for (const name of Object.keys(s[role].environment)) assert.ok(known.has(name) || sinkVars.test(name), `${role}: unknown variable ${name}`);
    }
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const ignore = read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'));

  test('is multi-stage on Node 22+, runs as a non-root user, with a healthcheck and SIGTERM', () => {
    const stages = [...dockerfile.matchAll(/^FROM\s+(\S+)(?:\s+AS\s+(\S+))?/gim)];
    assert.ok(stages.length >= 2, 'multi-stage');
    const image = /^ARG NODE_IMAGE=node:(\d+)/m.exec(dockerfile);
    assert.ok(image && Number(image[1]) >= 22, 'Node 22 or newer');
    const lines = dockerfile.split('\n');
    const lastFrom = lines.findLastIndex((l) => /^FROM /.test(l));
    const user = lines.findIndex((l, i) => i > lastFrom && /^USER\s+(\S+)/.test(l));
    assert.ok(user > lastFrom, 'USER in the final stage');
    assert.doesNotMatch(lines[user]!, /^USER\s+(root|0)\b/);
    assert.match(dockerfile, /^HEALTHCHECK .*CMD \["node", "bin\/healthcheck.js"\]/m);
    assert.match(dockerfile, /^STOPSIGNAL SIGTERM/m);
    // node with its flags (the same as `npm start`'s), then the launcher.
    assert.match(dockerfile, /^ENTRYPOINT \["node", ("--[a-z-]+=\d+", )*"bin\/callsync.js"\]/m);
    const startScript = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> }).scripts.start!;
    const imageFlags = /^ENTRYPOINT \["node", (.*)"bin\/callsync.js"\]/m.exec(dockerfile)![1]!.match(/--[a-z-]+=\d+/g) ?? [];
    assert.deepEqual(imageFlags, startScript.match(/--[a-z-]+=\d+/g) ?? [], 'the image runs Node with the flags npm start uses');
  });

  test('copies only paths that exist and that .dockerignore keeps', () => {
    const sources = [...dockerfile.matchAll(/^COPY\s+(?!--from)(?:--\S+\s+)*(.+)\s+\S+$/gm)].flatMap((m) => m[1]!.trim().split(/\s+/));
    assert.ok(sources.length >= 5);
    for (const src of sources) {
      assert.ok(existsSync(new URL(src, root)), `${src} exists`);
      assert.ok(!ignore.includes(src), `${src} is not in .dockerignore`);
    }
    for (const secret of ['.env', '.git', 'node_modules']) assert.ok(ignore.includes(secret), `.dockerignore keeps out ${secret}`);
  });
});

describe('bin/healthcheck.js', () => {
  let cs: OpsCallsync;
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-health-'));
    cs = await startOpsCallsync({ ARCHIVE_DIR: dir, CALLSYNC_ROLE: 'worker', OPS_PORT: '0' });
  });
  after(async () => {
    await cs.stop();
    await rm(dir, { recursive: true, force: true });
  });

  test('exits 0 when /healthz answers and 1 when nothing listens', async () => {
    const port = new URL(cs.operations.url!).port;
    const script = new URL('bin/healthcheck.js', root).pathname;
    const ok = await run(process.execPath, [script], { env: { ...process.env, CALLSYNC_ROLE: 'worker', OPS_PORT: port } });
    assert.equal(ok.stderr, '');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const closed = String((server.address() as AddressInfo).port);
    await new Promise((resolve) => server.close(resolve));
    await assert.rejects(run(process.execPath, [script], { env: { ...process.env, CALLSYNC_ROLE: 'ingress', PORT: closed, OPS_PORT: '' } }), (err: { code: number }) => err.code === 1);
  });
});
