// The container files stay valid though no engine runs here: docker-compose.yml parses and has
// the services, Redis settings and scaling shape docs/operations.md promises, hands .env to the
// containers, mounts ./config, pins its images and its own `send-sample` hint works; .env.example
// names every variable callsync reads (and no other) with its default; the Dockerfile is
// multi-stage, Node 22+, non-root, with a healthcheck; and the healthcheck script really works.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { runCli } from '../src/cli/index.js';
import { startOpsCallsync, type OpsCallsync } from './support/ops.js';
import { REDIS_URL } from './support/redis.js';

const root = new URL('../', import.meta.url);
const read = (path: string) => readFileSync(new URL(path, root), 'utf8');
const run = promisify(execFile);

/**
 * Compose's interpolation (https://docs.docker.com/reference/compose-file/interpolation/): `$$`,
 * `${VAR}`, `${VAR-default}` (unset only), `${VAR:-default}` (unset or empty), defaults nested.
 */
function interpolate(value: string, vars: Record<string, string | undefined>): string {
  let out = '';
  for (let i = 0; i < value.length;) {
    if (value.startsWith('$$', i)) {
      out += '$';
      i += 2;
    } else if (value.startsWith('${', i)) {
      let depth = 0;
      let j = i;
      for (; j < value.length; j++) {
        if (value.startsWith('${', j)) {
          depth++;
          j++;
        } else if (value[j] === '}' && --depth === 0) break;
      }
      const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?-)([^]*))?$/.exec(value.slice(i + 2, j));
      assert.ok(m, `unsupported interpolation ${value.slice(i, j + 1)}`);
      const current = vars[m[1]!];
      const useDefault = m[2] === ':-' ? !current : m[2] === '-' ? current === undefined : false;
      out += useDefault ? interpolate(m[3] ?? '', vars) : (current ?? '');
      i = j + 1;
    } else out += value[i++];
  }
  return out;
}

/** Every variable callsync reads: its env schema (which holds the telephony client's and each sink type's), and what code reads by name. */
async function variablesCallsyncReads(): Promise<Set<string>> {
  const { envSchema } = await import('../src/config/env.js');
  const names = new Set<string>(Object.keys(envSchema.shape));
  const files = (dir: string): string[] =>
    readdirSync(new URL(dir, root)).flatMap((name) => {
      const path = `${dir}/${name}`;
      if (statSync(new URL(path, root)).isDirectory()) return files(path);
      return /\.(ts|js)$/.test(name) ? [path] : [];
    });
  for (const file of ['src', 'workers', 'queues', 'bin'].flatMap(files)) {
    for (const m of read(file).matchAll(/\benv\??\.([A-Z][A-Z0-9_]+)\b|\benv\[['"]([A-Z][A-Z0-9_]+)['"]\]/g))
      names.add((m[1] ?? m[2])!);
  }
  // The operating system's own (the private Redis looks for redis-server on PATH): not callsync settings.
  names.delete('PATH');
  return names;
}

/** The `NAME=value` lines of .env.example, commented (`# NAME=`) or not. */
function envExample(): { commented: Map<string, string>; active: string[] } {
  const commented = new Map<string, string>();
  const active: string[] = [];
  for (const line of read('.env.example').split('\n')) {
    const c = /^#\s?([A-Z][A-Z0-9_]*)=(.*)$/.exec(line);
    if (c) {
      assert.ok(!commented.has(c[1]!), `${c[1]} listed twice`);
      commented.set(c[1]!, c[2]!);
    }
    const a = /^([A-Z][A-Z0-9_]*)=/.exec(line);
    if (a) active.push(a[1]!);
  }
  return { commented, active };
}

describe('docker-compose.yml', () => {
  const compose = parse(read('docker-compose.yml'), { merge: true }) as {
    services: Record<string, any>;
    volumes: Record<string, unknown>;
  };
  const s = compose.services;

  test('has Redis with AOF and noeviction and one service per role; the S3 server with its bucket and Mailpit only in their profiles', () => {
    assert.deepEqual(Object.keys(s).sort(), ['ingress', 'mailpit', 'poller', 'redis', 's3', 's3-init', 'worker']);
    const redis = s.redis.command.join(' ');
    assert.match(redis, /--appendonly yes/);
    assert.match(redis, /--maxmemory-policy noeviction/);
    assert.ok(
      s.redis.volumes.some((v: string) => v.endsWith(':/data')),
      'AOF on a volume',
    );
    assert.deepEqual(s.s3.profiles, ['s3']);
    assert.deepEqual(s['s3-init'].profiles, ['s3']);
    assert.deepEqual(s.mailpit.profiles, ['mail']);
    // The S3 server's root credentials are the archive's keys; the init job creates the bucket ARCHIVE_S3_BUCKET names.
    const vars = {
      AWS_ACCESS_KEY_ID: 'AKIA-from-env',
      AWS_SECRET_ACCESS_KEY: 'secret-from-env',
      ARCHIVE_S3_BUCKET: 'calls-from-env',
    };
    assert.equal(interpolate(s.s3.environment.RUSTFS_ACCESS_KEY, vars), 'AKIA-from-env');
    assert.equal(interpolate(s.s3.environment.RUSTFS_SECRET_KEY, vars), 'secret-from-env');
    assert.equal(interpolate(s['s3-init'].environment.AWS_ACCESS_KEY_ID, vars), 'AKIA-from-env');
    assert.equal(interpolate(s['s3-init'].environment.ARCHIVE_S3_BUCKET, vars), 'calls-from-env');
    assert.match(s['s3-init'].command.join(' '), /create-bucket --bucket "\$\$ARCHIVE_S3_BUCKET"/);
    assert.ok(s.s3.volumes.includes('s3-data:/data'));
    for (const [role, svc] of [
      ['ingress', s.ingress],
      ['worker', s.worker],
      ['poller', s.poller],
    ] as const) {
      assert.equal(svc.environment.CALLSYNC_ROLE, role);
      assert.equal(interpolate(svc.environment.REDIS_URL, {}), 'redis://redis:6379');
      assert.equal(svc.environment.QUEUE_PREFIX, '{callsync}', 'a hash-tag prefix');
      assert.equal(svc.build, '.');
      assert.equal(svc.depends_on.redis.condition, 'service_healthy');
      // Nothing the callsync services need is in a profile that may be off.
      assert.deepEqual(Object.keys(svc.depends_on), ['redis'], role);
    }
  });

  test('adds no sink the user did not ask for: no sink variable set, so with an empty .env the sinks are the ones a config file names', async () => {
    const { loadConfig } = await import('../src/config/index.js');
    const { sinkEnv } = await import('../src/sinks/registry.js');
    const sinkVariables = new Set(Object.keys(sinkEnv));
    for (const role of ['ingress', 'worker', 'poller']) {
      // ARCHIVE_DIR and DATA_DIR are set: the folders of the volumes, which add no sink by themselves
      // (the config file's sinks below are the only ones).
      const set = Object.keys(s[role].environment).filter(
        (name) => sinkVariables.has(name) && name !== 'ARCHIVE_DIR' && name !== 'DATA_DIR',
      );
      assert.deepEqual(set, [], `${role} sets sink variables`);
    }
    // The worker's environment as Compose hands it over with an empty .env, beside a config file
    // with one CRM hook: only that sink (before, the defaults added an S3 archive and an e-mail sink).
    const dir = await mkdtemp(join(tmpdir(), 'callsync-compose-sinks-'));
    try {
      const file = join(dir, 'callsync.yml');
      await writeFile(
        file,
        'sinks:\n  crm-hook: { type: webhook, urls: ["https://crm.example.com/h"], secrets: ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"] }\nroutes:\n  - to: crm-hook\n',
      );
      const env = Object.fromEntries(
        Object.entries(s.worker.environment as Record<string, string>).map(([k, v]) => [k, interpolate(String(v), {})]),
      );
      const config = loadConfig({ ...env, CALLSYNC_CONFIG: file });
      assert.deepEqual(Object.keys(config.sinks), ['crm-hook']);
      // Without a config file: the local archive, which the image writes to /app/data/archive — a named volume.
      const plain = loadConfig({ ...env, ARCHIVE_DIR: '/app/data/archive' });
      assert.deepEqual(
        Object.values(plain.sinks).map((x) => [x.name, x.type, x.origin]),
        [['archive', 'archive', 'env']],
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    assert.match(read('Dockerfile'), /ARCHIVE_DIR=\/app\/data\/archive/);
    for (const role of ['ingress', 'worker', 'poller'])
      assert.ok(s[role].volumes.includes('archive:/app/data/archive'), `${role}: the archive on the named volume`);
    assert.ok('archive' in compose.volumes, 'a named volume');
    assert.doesNotMatch(read('Dockerfile'), /^VOLUME/m, 'no anonymous volume per container');
  });

  test('publishes nothing on all interfaces by default: the ingress (webhook, /metrics) and the UIs on 127.0.0.1, ops ports not at all', () => {
    for (const [name, svc] of Object.entries(s)) {
      for (const port of (svc.ports ?? []) as string[]) {
        const published = interpolate(port, {});
        assert.match(published, /^127\.0\.0\.1:\d+:\d+$/, `${name}: ${published}`);
      }
    }
    assert.equal(
      interpolate(s.ingress.ports[0], { INGRESS_BIND_ADDRESS: '0.0.0.0' }),
      '0.0.0.0:3000:3000',
      'the webhook can be opened on purpose',
    );
    assert.equal(s.worker.ports, undefined);
    assert.equal(s.poller.ports, undefined);
  });

  test('the containers listen on all their interfaces whatever .env says (HOST set by the file, not from .env)', () => {
    // Before: HOST=127.0.0.1 in a .env written for `npm start` on the host reached the containers
    // (env_file), and the published webhook answered nothing — while the healthcheck said healthy.
    for (const role of ['ingress', 'worker', 'poller'])
      assert.equal(interpolate(String(s[role].environment.HOST), { HOST: '127.0.0.1' }), '0.0.0.0', role);
  });

  test('the archive and the spool go to the volumes whatever .env says (their folders set by the file)', () => {
    // Before: ARCHIVE_DIR or SPOOL_DIR with a host path in .env reached the containers (env_file),
    // and the archive and spool went to a folder of the container's own layer, lost with it.
    const mounts = (role: string) => (s[role].volumes as string[]).map((v) => v.split(':')[1]);
    for (const role of ['ingress', 'worker', 'poller']) {
      const env = s[role].environment as Record<string, string>;
      assert.equal(env.ARCHIVE_DIR, '/app/data/archive', role);
      assert.equal(env.DATA_DIR, '/app/data', role);
      assert.equal(env.SPOOL_DIR, '/app/data/spool', role);
      assert.ok(mounts(role).includes(env.ARCHIVE_DIR), `${role}: ARCHIVE_DIR is a mounted volume`);
    }
    assert.ok(
      mounts('ingress').some((m) => s.ingress.environment.SPOOL_DIR.startsWith(`${m}/`)),
      'the ingress spool is on a volume',
    );
  });

  test('workers scale: no fixed container name, no host port', () => {
    assert.equal(s.worker.container_name, undefined);
    assert.equal(s.worker.ports, undefined);
    assert.equal(s.poller.ports, undefined);
    assert.equal(s.worker.environment.OPS_PORT, '9464');
  });

  test('every variable a service sets is one callsync reads', async () => {
    const known = await variablesCallsyncReads();
    for (const role of ['ingress', 'worker', 'poller']) {
      for (const name of Object.keys(s[role].environment))
        assert.ok(known.has(name), `${role}: unknown variable ${name}`);
    }
  });

  test('every line of .env reaches the callsync containers (optional file), and ./config is mounted read-only', () => {
    for (const role of ['ingress', 'worker', 'poller']) {
      // The long syntax with `required: false` needs Compose 2.24.0+; a missing .env is then no error.
      assert.deepEqual(s[role].env_file, [{ path: '.env', required: false }], role);
      assert.ok(s[role].volumes.includes('./config:/app/config:ro'), `${role} mounts ./config`);
    }
    assert.ok(s.ingress.volumes.includes('ingress-spool:/app/data'), 'the ingress keeps its spool volume');
    assert.ok(
      existsSync(new URL('config/', root)),
      'the folder exists in the checkout (Docker would create it owned by root)',
    );
    // No service sets a variable to an empty default that would hide the value .env gives it.
    for (const role of ['ingress', 'worker', 'poller']) {
      for (const [name, value] of Object.entries(s[role].environment as Record<string, string>)) {
        assert.doesNotMatch(
          String(value),
          /^\$\{[A-Z_]+:?-?\}$/,
          `${role}.${name} passes through nothing but would override .env`,
        );
        if (String(value).includes('${'))
          assert.equal(
            interpolate(String(value), { [name]: 'from-env' }),
            'from-env',
            `${role}.${name}: .env wins over the compose default`,
          );
      }
    }
  });

  test("images are pinned: versions, never latest; callsync's own image carries package.json's version", () => {
    const version = (JSON.parse(read('package.json')) as { version: string }).version;
    for (const [name, svc] of Object.entries(s)) {
      const image = String(svc.image ?? '');
      const tag = /^[^:]+:(.+)$/.exec(image)?.[1];
      assert.ok(tag, `${name}: image ${image} has a tag`);
      assert.notEqual(tag, 'latest', `${name}: pinned, not latest`);
      assert.match(tag, /\d+\.\d+/, `${name}: ${tag} names a version`);
      // MinIO's images are no longer published (source-only since October 2025): never pinned again.
      assert.doesNotMatch(image, /^(minio\/|quay\.io\/minio\/)/, `${name}: ${image}`);
    }
    for (const role of ['ingress', 'worker', 'poller']) assert.equal(s[role].image, `callsync:${version}`);
    assert.match(
      read('Dockerfile'),
      /^ARG NODE_IMAGE=node:\d+\.\d+\.\d+-/m,
      'the Node base image is pinned to a release',
    );
  });

  test('its `send-sample` hint runs a file the image has, and the ingress accepts the sample from inside its container', async () => {
    const hint = /docker compose exec (\S+) node (\S+) send-sample/.exec(read('docker-compose.yml'));
    assert.ok(hint, 'the hint is in the file');
    const [, service, script] = hint;
    assert.equal(service, 'ingress');
    // The image: WORKDIR /app, the launcher in bin/, the built CLI it loads in dist/.
    const dockerfile = read('Dockerfile');
    const runtime = dockerfile.slice(dockerfile.lastIndexOf('\nFROM '));
    assert.match(runtime, /^WORKDIR \/app$/m);
    assert.match(runtime, /^COPY (--\S+ )*bin \.\/bin$/m);
    assert.match(runtime, /^COPY --from=build (--\S+ )*\/app\/dist \.\/dist$/m);
    assert.equal(script, 'bin/callsync.js');
    assert.match(read(script!), /new URL\('dist\/workers\/cli\.js', root\)/, 'the launcher loads dist/workers/cli.js');
    const tsconfig = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } };
    assert.deepEqual(
      [tsconfig.compilerOptions.outDir, tsconfig.compilerOptions.rootDir],
      ['dist', '.'],
      'workers/cli.ts builds to dist/workers/cli.js',
    );
    assert.ok((JSON.parse(read('tsconfig.build.json')) as { include: string[] }).include.includes('workers'));
    assert.match(dockerfile, /^RUN npm run build$/m);

    // Inside the container the CLI posts to 127.0.0.1:$PORT (HOST is 0.0.0.0 there) with the ingress' environment.
    const ingressEnv = Object.fromEntries(
      Object.entries(s.ingress.environment as Record<string, string>).map(([k, v]) => [k, interpolate(String(v), {})]),
    );
    const dir = await mkdtemp(join(tmpdir(), 'callsync-compose-'));
    const cs = await startOpsCallsync({
      CALLSYNC_ROLE: 'ingress',
      ARCHIVE_DIR: dir,
      WEBHOOK_ALLOWED_IPS: ingressEnv.WEBHOOK_ALLOWED_IPS!,
    });
    try {
      const out: string[] = [];
      const err: string[] = [];
      const code = await runCli(['send-sample'], {
        env: { ...ingressEnv, HOST: '0.0.0.0', PORT: new URL(cs.url).port, REDIS_URL, QUEUE_PREFIX: cs.prefix },
        out: (l) => out.push(l),
        err: (l) => err.push(l),
      });
      assert.equal(code, 0, err.join('\n'));
      assert.match(out.join('\n'), /^accepted: call sample-/m);
    } finally {
      await cs.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('.env.example', () => {
  test("names every variable callsync reads, and no other (but Compose's own), each commented out", async () => {
    const reads = await variablesCallsyncReads();
    const { commented, active } = envExample();
    assert.deepEqual(active, [], 'nothing set: copying the file changes no default');
    const missing = [...reads].filter((name) => !commented.has(name)).sort();
    assert.deepEqual(missing, [], 'add these to .env.example');
    const composeVars = new Set(
      [...read('docker-compose.yml').matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]!),
    );
    const unknown = [...commented.keys()].filter((name) => !reads.has(name) && !composeVars.has(name));
    assert.deepEqual(unknown, [], 'variables nobody reads');
    assert.ok(
      commented.has('INGRESS_BIND_ADDRESS') && composeVars.has('INGRESS_BIND_ADDRESS'),
      "Compose's own variable is listed too",
    );
  });

  test('shows the default of each variable of the env schema', async () => {
    const { envSchema } = await import('../src/config/env.js');
    const defaults = envSchema.parse({}) as Record<string, unknown>;
    const { commented } = envExample();
    for (const name of Object.keys(envSchema.shape)) {
      const value = defaults[name];
      assert.ok(commented.has(name), `${name} is listed`);
      // Unset in the schema: the sink or client decides the default, and the file may show that one.
      if (value === undefined) continue;
      const shown = Array.isArray(value) ? value.join(',') : String(value);
      assert.equal(commented.get(name), shown, `${name}: the default is ${JSON.stringify(shown)}`);
    }
  });
});

describe('README "Docker Compose"', () => {
  test('describes the file: its services, .env.example, ./config, the Compose version and the send-sample hint', () => {
    // The section: from its heading to the next heading outside a code block.
    const lines = read('README.md').split('\n');
    const start = lines.findIndex((l) => /^#{2,3} Docker Compose$/.test(l));
    assert.ok(start >= 0, 'the section exists');
    let inFence = false;
    let end = start + 1;
    for (; end < lines.length; end++) {
      if (lines[end]!.startsWith('```')) inFence = !inFence;
      else if (!inFence && /^#{1,3} /.test(lines[end]!)) break;
    }
    const section = lines.slice(start, end).join('\n');
    const compose = parse(read('docker-compose.yml'), { merge: true }) as {
      services: Record<string, { image: string }>;
    };
    for (const [name, svc] of Object.entries(compose.services)) {
      assert.ok(section.includes(`\`${name}\``), `names the service ${name}`);
      if (!svc.image.startsWith('callsync:')) assert.ok(section.includes(svc.image), `names the image ${svc.image}`);
    }
    const hint = /docker compose exec \S+ node \S+ send-sample/.exec(read('docker-compose.yml'))![0];
    assert.ok(section.includes(hint), `shows ${hint}`);
    for (const piece of ['.env.example', 'env_file', './config', '/app/config', 'CALLSYNC_CONFIG', '2.24'])
      assert.ok(section.includes(piece), `mentions ${piece}`);
  });
});

describe('Dockerfile', () => {
  const dockerfile = read('Dockerfile');
  const ignore = read('.dockerignore')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));

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
    const startScript = (
      JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
        scripts: Record<string, string>;
      }
    ).scripts.start!;
    const imageFlags =
      /^ENTRYPOINT \["node", (.*)"bin\/callsync.js"\]/m.exec(dockerfile)![1]!.match(/--[a-z-]+=\d+/g) ?? [];
    assert.deepEqual(
      imageFlags,
      startScript.match(/--[a-z-]+=\d+/g) ?? [],
      'the image runs Node with the flags npm start uses',
    );
  });

  test('copies only paths that exist and that .dockerignore keeps', () => {
    const sources = [...dockerfile.matchAll(/^COPY\s+(?!--from)(?:--\S+\s+)*(.+)\s+\S+$/gm)].flatMap((m) =>
      m[1]!.trim().split(/\s+/),
    );
    assert.ok(sources.length >= 5);
    for (const src of sources) {
      assert.ok(existsSync(new URL(src, root)), `${src} exists`);
      assert.ok(!ignore.includes(src), `${src} is not in .dockerignore`);
    }
    for (const secret of ['.env', '.git', 'node_modules'])
      assert.ok(ignore.includes(secret), `.dockerignore keeps out ${secret}`);
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
    const ok = await run(process.execPath, [script], {
      env: { ...process.env, CALLSYNC_ROLE: 'worker', OPS_PORT: port },
    });
    assert.equal(ok.stderr, '');
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const closed = String((server.address() as AddressInfo).port);
    await new Promise((resolve) => server.close(resolve));
    await assert.rejects(
      run(process.execPath, [script], {
        env: { ...process.env, CALLSYNC_ROLE: 'ingress', PORT: closed, OPS_PORT: '' },
      }),
      (err: { code: number }) => err.code === 1,
    );
  });

  test('asks the address the server listens on: HOST (OPS_HOST for the ops server) when it is one address', async () => {
    // Before: always 127.0.0.1, so a container listening on its own address only was "unhealthy".
    const script = new URL('bin/healthcheck.js', root).pathname;
    const healthz = createHttpServer((req, res) => res.writeHead(req.url === '/healthz' ? 200 : 404).end());
    await new Promise<void>((resolve) => healthz.listen(0, '127.0.0.2', resolve));
    const port = String((healthz.address() as AddressInfo).port);
    try {
      const ingress = await run(process.execPath, [script], {
        env: { ...process.env, CALLSYNC_ROLE: 'ingress', HOST: '127.0.0.2', PORT: port, OPS_PORT: '', OPS_HOST: '' },
      });
      assert.equal(ingress.stderr, '');
      const worker = await run(process.execPath, [script], {
        env: { ...process.env, CALLSYNC_ROLE: 'worker', HOST: '0.0.0.0', OPS_HOST: '127.0.0.2', OPS_PORT: port },
      });
      assert.equal(worker.stderr, '');
      // HOST on every interface: asked on loopback, where nothing listens on that port here.
      await assert.rejects(
        run(process.execPath, [script], {
          env: { ...process.env, CALLSYNC_ROLE: 'ingress', HOST: '0.0.0.0', PORT: port, OPS_PORT: '' },
        }),
        (err: { code: number }) => err.code === 1,
      );
    } finally {
      await new Promise((resolve) => healthz.close(resolve));
    }
  });
});
