// Private Redis topologies on loopback for tests, each in a temporary folder and torn down by pid
// (the shared Redis on 6379 is never touched):
// - a Redis Cluster of 3 masters with a replica each (`redis-server --cluster-enabled yes`,
//   `redis-cli --cluster create --cluster-replicas 1`);
// - a master with one replica and one sentinel (`redis-server --sentinel`);
// - a single redis-server with a password (`--requirepass`);
// - TLS: a test CA and a server certificate for 127.0.0.1 (openssl), a TLS-only redis-server, and
//   the cluster above over TLS only (`--tls-port`, `--tls-cluster`, `--tls-replication`).
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { freePort } from './redis-server.js';

const run = promisify(execFile);

export interface ServerProcess {
  port: number;
  readonly pid: number;
  readonly running: boolean;
  /** SIGKILL: a crashed or lost node. */
  kill(): Promise<void>;
  /** SIGSTOP: the process hangs (a replica that stops confirming), connections stay open. */
  pause(): void;
  /** SIGCONT after `pause`. */
  resume(): void;
  /** Starts the process again after `kill` (same arguments, same folder: a cluster node rejoins). */
  restart(): void;
  /** Its state for a failure's message: running or how it exited, and the tail of its log file. */
  describe(): Promise<string>;
}

/**
 * Starts redis-server with `args`. Its log goes to `logFile` (the `--logfile` among `args` unless
 * given), read back by `describe()` when a wait times out: CI once printed only "timed out waiting
 * for replica … in sync", with nothing to tell a node that never came back from a slow sentinel.
 */
function spawnServer(args: string[], port: number, logFile?: string): ServerProcess & { exited: Promise<void> } {
  const log = logFile ?? args[args.indexOf('--logfile') + 1];
  let proc: ChildProcess;
  let running = false;
  let exited: Promise<void> = Promise.resolve();
  let lastExit = '';
  const launch = () => {
    const child = spawn('redis-server', args, { stdio: ['ignore', 'ignore', 'ignore'] });
    proc = child;
    running = true;
    // A test file that ends without its after() hooks (process.exit) still takes its servers along.
    const orphaned = () => child.kill('SIGKILL');
    process.once('exit', orphaned);
    exited = new Promise<void>((resolve) =>
      child.once('exit', (code, signal) => {
        process.removeListener('exit', orphaned);
        lastExit = `pid ${child.pid} exited (${signal ?? `code ${code}`})`;
        if (proc === child) running = false;
        resolve();
      }),
    );
  };
  launch();
  return {
    port,
    get exited() {
      return exited;
    },
    get pid() {
      return proc.pid ?? NaN;
    },
    get running() {
      return running;
    },
    async kill() {
      if (!running) return;
      proc.kill('SIGCONT');
      proc.kill('SIGKILL');
      await exited;
    },
    restart() {
      if (!running) launch();
    },
    pause() {
      if (running) proc.kill('SIGSTOP');
    },
    resume() {
      if (running) proc.kill('SIGCONT');
    },
    async describe() {
      const state = running ? `pid ${proc.pid} running` : lastExit || 'not running';
      const tail = log
        ? await readFile(log, 'utf8').then(
            (text) => text.trimEnd().split('\n').slice(-12).join('\n'),
            (err: NodeJS.ErrnoException) => `(no log: ${err.code ?? String(err)})`,
          )
        : '(no log file)';
      return `redis-server :${port}, ${state}; its log's last lines:\n${tail}`;
    },
  };
}

/**
 * Polls `check` until it holds. On time-out the error names the last attempt's outcome (its error,
 * or that it did not hold yet — never an error of an earlier attempt) and what `explain` finds.
 */
async function waitFor(
  check: () => Promise<boolean>,
  what: string,
  timeoutMs = 20_000,
  explain?: () => Promise<string>,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    let last: unknown;
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) {
      const outcome = last ? String(last) : 'not yet';
      const detail = explain ? await explain().catch((err: unknown) => `(explaining failed: ${String(err)})`) : '';
      throw new Error(
        `timed out waiting for ${what} (after ${timeoutMs} ms): ${outcome}${detail ? `\n${detail}` : ''}`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A test CA and a certificate for 127.0.0.1 / localhost signed by it (PEM files in a folder). */
export interface TlsFiles {
  /** The CA certificate: what a client must trust (NODE_EXTRA_CA_CERTS, `--cacert`). */
  ca: string;
  cert: string;
  key: string;
}

/**
 * Makes a CA and a server certificate with openssl in `dir` (valid two days), for `localhost` and
 * 127.0.0.1 — or, with `nameOnly`, for the name `localhost` alone (as managed Redis certificates
 * name hosts, never addresses).
 */
export async function makeTlsFiles(dir: string, options: { nameOnly?: boolean } = {}): Promise<TlsFiles> {
  const f = (name: string) => join(dir, name);
  const openssl = (args: string[]) => run('openssl', args, { timeout: 30_000 });
  await openssl([
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('ca.key'),
    '-out',
    f('ca.crt'),
    '-days',
    '2',
    '-subj',
    '/CN=callsync test CA',
  ]);
  await openssl([
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    f('server.key'),
    '-out',
    f('server.csr'),
    '-subj',
    '/CN=127.0.0.1',
  ]);
  await writeFile(
    f('server.ext'),
    options.nameOnly ? 'subjectAltName=DNS:localhost\n' : 'subjectAltName=IP:127.0.0.1,DNS:localhost\n',
  );
  await openssl([
    'x509',
    '-req',
    '-in',
    f('server.csr'),
    '-CA',
    f('ca.crt'),
    '-CAkey',
    f('ca.key'),
    '-CAcreateserial',
    '-out',
    f('server.crt'),
    '-days',
    '2',
    '-extfile',
    f('server.ext'),
  ]);
  return { ca: f('ca.crt'), cert: f('server.crt'), key: f('server.key') };
}

/** redis-server arguments for TLS only on `port` (the plain port off); clients need no certificate. */
const tlsArgs = (port: number, tls: TlsFiles) => [
  '--port',
  '0',
  '--tls-port',
  String(port),
  '--tls-cert-file',
  tls.cert,
  '--tls-key-file',
  tls.key,
  '--tls-ca-cert-file',
  tls.ca,
  '--tls-auth-clients',
  'no',
];

/** Runs one command on one node (a short-lived connection; over TLS trusting `tls.ca` when given). */
export async function nodeCommand(port: number, args: string[], password?: string, tls?: TlsFiles): Promise<unknown> {
  return nodeCommandAt(port, args, password, tls);
}

async function nodeCommandAt(port: number, args: string[], password?: string, tls?: TlsFiles): Promise<unknown> {
  const redis = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1000,
    ...(password ? { password } : {}),
    // By name: every test certificate names localhost (some name nothing else).
    ...(tls ? { tls: { ca: await readFile(tls.ca), servername: 'localhost' } } : {}),
  });
  redis.on('error', () => undefined);
  try {
    await redis.connect();
    return await redis.call(args[0]!, ...args.slice(1));
  } finally {
    redis.disconnect();
  }
}

/** Kills `procs` (by pid) and removes their folder: a set-up's teardown, on success and on failure. */
async function stopAll(procs: readonly ServerProcess[], dir: string): Promise<void> {
  for (const p of procs) await p.kill();
  await rm(dir, { recursive: true, force: true });
}

const baseArgs = (port: number, dir: string) => [
  '--port',
  String(port),
  '--bind',
  '127.0.0.1',
  '--dir',
  dir,
  '--save',
  '',
  '--appendonly',
  'no',
  '--logfile',
  join(dir, 'redis.log'),
  '--loglevel',
  'notice',
  '--maxmemory-policy',
  'noeviction',
];

export interface TestCluster {
  nodes: ServerProcess[];
  /** `host:port,…` of every node, as REDIS_CLUSTER_NODES. */
  seeds: string;
  /** Ports of the nodes that are masters now (CLUSTER NODES, asked of a live node). */
  masters(): Promise<number[]>;
  /** The node (master, then its replica) holding `key`'s slot now. */
  nodesOfKey(key: string): Promise<{ master: ServerProcess; replica: ServerProcess }>;
  /** Waits until every live node says cluster_state:ok and every live replica is in sync. */
  waitHealthy(): Promise<void>;
  destroy(): Promise<void>;
}

/**
 * A Redis Cluster of 3 masters with one replica each on free loopback ports; with `options.tls`
 * every node speaks TLS only, to clients, to each other (cluster bus) and to its replica; with
 * `options.hostname` the nodes announce themselves by that name (`cluster-announce-hostname`,
 * endpoint type hostname: what clients get in CLUSTER SLOTS and MOVED, as on ElastiCache) and
 * listen on IPv4 and IPv6 loopback (the name may resolve to either).
 */
export async function startRedisCluster(options: { tls?: TlsFiles; hostname?: string } = {}): Promise<TestCluster> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-cluster-'));
  const nodes: (ServerProcess & { exited: Promise<void> })[] = [];
  const tls = options.tls;
  const command = (port: number, args: string[]) => nodeCommand(port, args, undefined, tls);
  try {
    for (let i = 0; i < 6; i++) {
      const port = await freePort();
      const nodeDir = join(dir, String(port));
      await run('mkdir', ['-p', nodeDir]);
      const transport = tls ? [...tlsArgs(port, tls), '--tls-cluster', 'yes', '--tls-replication', 'yes'] : [];
      const named = options.hostname
        ? [
            '--bind',
            '127.0.0.1',
            '::1',
            '--cluster-announce-hostname',
            options.hostname,
            '--cluster-preferred-endpoint-type',
            'hostname',
          ]
        : [];
      nodes.push(
        spawnServer(
          [
            ...baseArgs(port, nodeDir),
            ...transport,
            ...named,
            '--cluster-enabled',
            'yes',
            '--cluster-config-file',
            join(nodeDir, 'nodes.conf'),
            '--cluster-node-timeout',
            '2000',
          ],
          port,
        ),
      );
    }
    for (const node of nodes)
      await waitFor(
        async () => (await command(node.port, ['PING'])) === 'PONG',
        `node ${node.port}`,
        20_000,
        () => node.describe(),
      );
    const cliTls = tls ? ['--tls', '--cacert', tls.ca, '--sni', 'localhost'] : [];
    await run(
      'redis-cli',
      [
        ...cliTls,
        '--cluster',
        'create',
        ...nodes.map((n) => `127.0.0.1:${n.port}`),
        '--cluster-replicas',
        '1',
        '--cluster-yes',
      ],
      { timeout: 60_000 },
    );
  } catch (err) {
    await stopAll(nodes, dir);
    throw err;
  }

  const live = () => nodes.filter((n) => n.running);
  const cluster: TestCluster = {
    nodes,
    seeds: nodes.map((n) => `127.0.0.1:${n.port}`).join(','),
    async masters() {
      const text = String(await command(live()[0]!.port, ['CLUSTER', 'NODES']));
      return text
        .split('\n')
        .filter((l) => {
          const flags = l.split(' ')[2]?.split(',') ?? [];
          return flags.includes('master') && !flags.some((f) => f.startsWith('fail'));
        })
        .map((l) => Number(/:(\d+)@/.exec(l)?.[1]));
    },
    async nodesOfKey(key: string) {
      // A master that a loaded machine let time out was failed over: its replica, promoted, has no
      // replica of its own until the old master rejoins as one (seconds). Asked again meanwhile.
      const deadline = Date.now() + 30_000;
      for (;;) {
        const port = live()[0]!.port;
        const slot = Number(await command(port, ['CLUSTER', 'KEYSLOT', key]));
        const lines = String(await command(port, ['CLUSTER', 'NODES']))
          .split('\n')
          .filter(Boolean)
          .map((l) => l.split(' '));
        const portOf = (fields: string[]) => Number(/:(\d+)@/.exec(fields[1]!)?.[1]);
        const master = lines.find(
          (f) =>
            f[2]!.split(',').includes('master') &&
            f.slice(8).some((r) => {
              const [from, to] = r.split('-').map(Number);
              return slot >= from! && slot <= (to ?? from)!;
            }),
        );
        const replica = master && lines.find((f) => f[3] === master[0] && !f[2]!.includes('fail'));
        if (master && replica) {
          const byPort = (p: number) => nodes.find((n) => n.port === p)!;
          return { master: byPort(portOf(master)), replica: byPort(portOf(replica)) };
        }
        if (Date.now() > deadline)
          throw new Error(master ? `the master of slot ${slot} has no replica` : `no master holds slot ${slot}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    async waitHealthy() {
      // 60 s each: with a node timeout of 2 s, nodes of a machine loaded by a CI run beside them mark
      // each other failing and clear it again for tens of seconds (a set-up once took over 30 s).
      for (const node of live()) {
        await waitFor(
          async () => /cluster_state:ok/.test(String(await command(node.port, ['CLUSTER', 'INFO']))),
          `cluster_state ok at ${node.port}`,
          60_000,
          () => node.describe(),
        );
        // A replica counts for WAIT only once its first sync is done.
        await waitFor(
          async () => {
            const info = String(await command(node.port, ['INFO', 'replication']));
            return /role:master/.test(info) || /master_link_status:up/.test(info);
          },
          `replica ${node.port} in sync`,
          60_000,
          () => node.describe(),
        );
      }
    },
    destroy: () => stopAll(nodes, dir),
  };
  try {
    await cluster.waitHealthy();
  } catch (err) {
    // Not left running when it never got healthy (as the Sentinel set-up does below).
    await cluster.destroy();
    throw err;
  }
  return cluster;
}

export interface TestSentinel {
  master: ServerProcess;
  replica: ServerProcess;
  sentinel: ServerProcess;
  /** The master's name at the sentinel. */
  name: string;
  /** `127.0.0.1:port` of the sentinel, as REDIS_SENTINELS. */
  sentinels: string;
  /** The port the sentinel names as master now. */
  masterPort(): Promise<number>;
  /** The data nodes by their role now: the master the sentinel names, and the other one. */
  roles(): Promise<{ master: ServerProcess; replica: ServerProcess }>;
  /**
   * Waits until the sentinel names a running master and the other data node is running, its
   * replica, in sync (after a failover: the old master restarted and reconfigured by the sentinel).
   */
  waitHealthy(): Promise<void>;
  /** What the sentinel and both data nodes say now (its view, their replication, logs): for failures. */
  describe(): Promise<string>;
  destroy(): Promise<void>;
}

/**
 * A master, its replica and a sentinel watching them (quorum 1, fast failover), optionally with a
 * password, and optionally TLS only everywhere (clients, replication, the sentinel's own port and
 * its links to the data nodes).
 */
export async function startRedisSentinel(options: { password?: string; tls?: TlsFiles } = {}): Promise<TestSentinel> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-sentinel-'));
  const name = 'callsync-test';
  const { tls, password } = options;
  const auth = password ? ['--requirepass', password, '--masterauth', password] : [];
  const transport = (port: number) => (tls ? [...tlsArgs(port, tls), '--tls-replication', 'yes'] : []);
  const nodeCommand = (port: number, args: string[], pw?: string) => nodeCommandAt(port, args, pw, tls);
  const procs: ServerProcess[] = [];
  try {
    const masterPort = await freePort();
    await run('mkdir', ['-p', join(dir, 'm'), join(dir, 'r')]);
    const master = spawnServer(
      [...baseArgs(masterPort, join(dir, 'm')), ...transport(masterPort), ...auth],
      masterPort,
    );
    procs.push(master);
    await waitFor(async () => (await nodeCommand(masterPort, ['PING'], password)) === 'PONG', 'sentinel master');
    const replicaPort = await freePort();
    const replica = spawnServer(
      [
        ...baseArgs(replicaPort, join(dir, 'r')),
        ...transport(replicaPort),
        ...auth,
        '--replicaof',
        '127.0.0.1',
        String(masterPort),
      ],
      replicaPort,
    );
    procs.push(replica);
    await waitFor(
      async () =>
        /master_link_status:up/.test(String(await nodeCommand(replicaPort, ['INFO', 'replication'], password))),
      'replica in sync',
    );
    const sentinelPort = await freePort();
    const conf = join(dir, 'sentinel.conf');
    await writeFile(
      conf,
      [
        ...(tls
          ? [
              'port 0',
              `tls-port ${sentinelPort}`,
              `tls-cert-file ${tls.cert}`,
              `tls-key-file ${tls.key}`,
              `tls-ca-cert-file ${tls.ca}`,
              'tls-auth-clients no',
              'tls-replication yes',
            ]
          : [`port ${sentinelPort}`]),
        'bind 127.0.0.1',
        `dir ${dir}`,
        `logfile ${join(dir, 'sentinel.log')}`,
        'loglevel notice',
        `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1`,
        // 3 s, not 1: under the suite's load a master answering late was taken for down and a
        // second failover began while the first one's old master was still syncing (CI, once).
        `sentinel down-after-milliseconds ${name} 3000`,
        `sentinel failover-timeout ${name} 5000`,
        ...(options.password ? [`sentinel auth-pass ${name} ${options.password}`] : []),
        '',
      ].join('\n'),
    );
    const sentinel = spawnServer([conf, '--sentinel'], sentinelPort, join(dir, 'sentinel.log'));
    procs.push(sentinel);
    await waitFor(
      async () => Array.isArray(await nodeCommand(sentinelPort, ['SENTINEL', 'get-master-addr-by-name', name])),
      'sentinel knows the master',
    );
    const masterNow = async () =>
      Number(((await nodeCommand(sentinelPort, ['SENTINEL', 'get-master-addr-by-name', name])) as string[])[1]);
    const roles = async () => {
      const port = await masterNow();
      return port === master.port ? { master, replica } : { master: replica, replica: master };
    };
    /** What the sentinel and both data nodes say: for a time-out's message. */
    const describe = async () => {
      const { master: now, replica: other } = await roles().catch(() => ({ master, replica }));
      const ask = (port: number, args: string[], pw?: string) =>
        nodeCommand(port, args, pw).then(
          (reply) => (typeof reply === 'string' ? reply : JSON.stringify(reply)),
          (err: unknown) => `(${String(err)})`,
        );
      const replicationOf = async (node: ServerProcess) =>
        (await ask(node.port, ['INFO', 'replication'], options.password))
          .split('\r\n')
          .filter((l) => /^(\(|role|master_port|master_link_status|master_sync_in_progress|connected_slaves)/.test(l))
          .join(' ');
      return [
        `the sentinel's replicas of ${name}: ${await ask(sentinelPort, ['SENTINEL', 'REPLICAS', name])}`,
        `the sentinel's INFO: ${(await ask(sentinelPort, ['INFO', 'sentinel'])).replace(/\r\n/g, ' ').slice(0, 400)}`,
        `master ${now.port}: ${await replicationOf(now)}`,
        `replica ${other.port}: ${await replicationOf(other)}`,
        await sentinel.describe(),
        await now.describe(),
        await other.describe(),
      ].join('\n');
    };
    return {
      master,
      replica,
      sentinel,
      name,
      sentinels: `127.0.0.1:${sentinelPort}`,
      masterPort: masterNow,
      roles,
      describe,
      async waitHealthy() {
        // The roles are read on every check, not once: on a loaded machine the sentinel has failed
        // over a second time while this waited (the restarted node promoted back), and a wait for
        // the first view's replica never ended (CI, once).
        await waitFor(
          async () => {
            const { master: now } = await roles();
            return now.running && (await nodeCommand(now.port, ['PING'], options.password)) === 'PONG';
          },
          'the master the sentinel names up',
          30_000,
          describe,
        );
        // The sentinel turns a restarted old master into the new master's replica (it starts as a
        // master): after it has seen it up as a master for 8 s (Redis' sentinel.c), or 30 s more
        // when it is in TILT (its timer stalled ≥ 2 s: a loaded machine). Then a full sync.
        await waitFor(
          async () => {
            const { master: now, replica: other } = await roles();
            if (!now.running || !other.running) return false;
            const info = String(await nodeCommand(other.port, ['INFO', 'replication'], options.password));
            return (
              /role:slave/.test(info) &&
              new RegExp(`master_port:${now.port}\\b`).test(info) &&
              /master_link_status:up/.test(info)
            );
          },
          "the other node in sync as the named master's replica",
          120_000,
          describe,
        );
      },
      destroy: () => stopAll(procs, dir),
    };
  } catch (err) {
    await stopAll(procs, dir);
    throw err;
  }
}

/** One redis-server that wants a password. */
export async function startPasswordRedis(password: string): Promise<ServerProcess & { destroy(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-auth-'));
  const port = await freePort();
  const server = spawnServer([...baseArgs(port, dir), '--requirepass', password], port);
  await waitFor(async () => (await nodeCommand(port, ['PING'], password)) === 'PONG', 'password redis');
  return Object.assign(server, { destroy: () => stopAll([server], dir) });
}

/** A master and one replica in sync (`--replicaof`), no Sentinel. */
export async function startReplicatedRedis(): Promise<{
  master: ServerProcess;
  replica: ServerProcess;
  url: string;
  destroy(): Promise<void>;
}> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-replicated-'));
  await run('mkdir', ['-p', join(dir, 'm'), join(dir, 'r')]);
  const procs: ServerProcess[] = [];
  try {
    const masterPort = await freePort();
    const master = spawnServer(baseArgs(masterPort, join(dir, 'm')), masterPort);
    procs.push(master);
    await waitFor(async () => (await nodeCommand(masterPort, ['PING'])) === 'PONG', 'master');
    const replicaPort = await freePort();
    const replica = spawnServer(
      [...baseArgs(replicaPort, join(dir, 'r')), '--replicaof', '127.0.0.1', String(masterPort)],
      replicaPort,
    );
    procs.push(replica);
    await waitFor(
      async () => /master_link_status:up/.test(String(await nodeCommand(replicaPort, ['INFO', 'replication']))),
      'replica in sync',
    );
    return {
      master,
      replica,
      url: `redis://127.0.0.1:${masterPort}`,
      destroy: () => stopAll(procs, dir),
    };
  } catch (err) {
    await stopAll(procs, dir);
    throw err;
  }
}

/** One redis-server speaking TLS only (its certificate signed by `tls.ca`): `rediss://127.0.0.1:<port>`. */
export async function startTlsRedis(tls: TlsFiles): Promise<ServerProcess & { url: string; destroy(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'callsync-tls-'));
  const port = await freePort();
  const server = spawnServer([...baseArgs(port, dir), ...tlsArgs(port, tls)], port);
  try {
    await waitFor(async () => (await nodeCommand(port, ['PING'], undefined, tls)) === 'PONG', 'TLS redis');
  } catch (err) {
    await stopAll([server], dir);
    throw err;
  }
  return Object.assign(server, { url: `rediss://127.0.0.1:${port}`, destroy: () => stopAll([server], dir) });
}
