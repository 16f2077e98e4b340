// Redis over TLS, for real: managed Redis (ElastiCache with in-transit encryption, Memorystore,
// Azure, …) speaks TLS only, often with a certificate of the provider's own CA. Here a test CA
// (openssl) signs a certificate for 127.0.0.1; the servers listen with TLS only (`--port 0
// --tls-port`), so a plain connection cannot work. callsync runs as a real process: the CA comes
// from Node's NODE_EXTRA_CA_CERTS, read at process start (docs/operations.md "Which Redis").
//  - a single Redis at `rediss://`: a webhook acknowledged and archived, the CLI reads the queues;
//  - a certificate callsync does not trust: 503, never a 202, and the log names the reason;
//  - Sentinel over TLS only (`REDIS_SENTINELS` + `REDIS_TLS=true`: the sentinel, the master and
//    its replica speak TLS only) and a Redis Cluster over TLS only (`REDIS_CLUSTER_NODES` +
//    `REDIS_TLS=true`, the nodes' bus and replication over TLS too): webhooks acknowledged with
//    ACK_REPLICAS=1 and archived.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Cluster, Redis } from 'ioredis';
import { createRedis, singleRedis } from '../queues/connection.js';
import { webhookPayload } from './support/calls.js';
import { postJson } from './support/callsync.js';
import { bounded, startCallsyncProcess, type CallsyncProcess } from './support/callsync-process.js';
import {
  makeTlsFiles,
  startRedisCluster,
  startRedisSentinel,
  startTlsRedis,
  type TestCluster,
  type TlsFiles,
} from './support/redis-cluster.js';
import { uniquePrefix, waitFor } from './support/redis.js';
import { archivedRecords } from './support/s3.js';

const run = promisify(execFile);
const BIN = new URL('../bin/callsync.js', import.meta.url).pathname;

describe('Redis over TLS (rediss://, REDIS_TLS) against TLS-only servers', () => {
  let dir: string;
  let tls: TlsFiles;
  let server: Awaited<ReturnType<typeof startTlsRedis>>;
  let cluster: TestCluster | null = null;
  const children: CallsyncProcess[] = [];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'callsync-tls-test-'));
    tls = await makeTlsFiles(dir);
    server = await startTlsRedis(tls);
  });

  after(async () => {
    for (const child of children) if (child.proc.exitCode === null) child.proc.kill('SIGKILL');
    await server?.destroy();
    await cluster?.destroy();
    await rm(dir, { recursive: true, force: true });
  });

  /** `callsync start` (every role) with `env`, archiving to a folder of its own; resolves once it has started (its signal handlers too). */
  async function start(
    name: string,
    env: NodeJS.ProcessEnv,
  ): Promise<{ child: CallsyncProcess; url: string; archive: string; env: NodeJS.ProcessEnv }> {
    const archive = join(dir, `archive-${name}`);
    const full: NodeJS.ProcessEnv = {
      CALLSYNC_FROM_SOURCE: '1',
      QUEUE_PREFIX: uniquePrefix(`tls-${name}`),
      PORT: '0',
      HOST: '127.0.0.1',
      ARCHIVE_DIR: archive,
      WEBHOOK_ALLOWED_IPS: '127.0.0.1,::1',
      SPOOL_ENABLED: 'false',
      LOG_LEVEL: 'info',
      ...env,
    };
    const child = startCallsyncProcess(full);
    children.push(child);
    const exited = child.exit.then((code) => Promise.reject(new Error(`exited ${code}: ${child.stderr.join('\n')}`)));
    const started = waitFor(() => child.lines.some((l) => l.msg === 'callsync started'), {
      timeoutMs: 60_000,
      what: `${name} started`,
    });
    await bounded(Promise.race([started, exited]), 60_000, `${name} to start`, child);
    return { child, url: await child.url, archive, env: full };
  }

  async function archived(folder: string): Promise<string[]> {
    return archivedRecords(((await readdir(folder, { recursive: true }).catch(() => [])) as string[]).map(String));
  }

  async function stop(child: CallsyncProcess): Promise<void> {
    child.proc.kill('SIGTERM');
    assert.equal(await bounded(child.exit, 60_000, 'a clean exit', child), 0, child.stderr.join('\n'));
  }

  /** Starts callsync with `env`, posts the webhooks `ids` (each 202), waits until all are archived, stops it cleanly. */
  async function deliver(name: string, env: NodeJS.ProcessEnv, ids: string[]): Promise<void> {
    const { child, url, archive } = await start(name, env);
    try {
      for (const id of ids) {
        const r = await postJson(`${url}/webhooks/ai-agent/agent-1`, webhookPayload(id));
        assert.equal(r.status, 202, JSON.stringify(r.body));
      }
      await waitFor(async () => (await archived(archive)).length === ids.length, {
        timeoutMs: 30_000,
        what: `${ids.length} call(s) archived`,
      });
    } finally {
      await stop(child);
    }
  }

  test('rediss:// with the CA in NODE_EXTRA_CA_CERTS: a webhook is acknowledged and archived; the CLI reads the queues over TLS', async () => {
    const { child, url, archive, env } = await start('single', { REDIS_URL: server.url, NODE_EXTRA_CA_CERTS: tls.ca });
    try {
      const r = await postJson(`${url}/webhooks/ai-agent/agent-1`, webhookPayload('tls-single-1'));
      assert.equal(r.status, 202, JSON.stringify(r.body));
      await waitFor(async () => (await archived(archive)).length === 1, {
        timeoutMs: 30_000,
        what: 'the call archived',
      });

      // The CLI connects the same way (its own process, the same environment).
      const cli = await run(process.execPath, [BIN, 'dlq', 'list'], {
        env: { ...process.env, ...env },
        timeout: 60_000,
      });
      assert.match(cli.stdout, /^no dead letters in /m, cli.stdout);
      const check = await run(process.execPath, [BIN, 'check-config'], {
        env: { ...process.env, ...env },
        timeout: 60_000,
      });
      assert.match(check.stdout, /^redis:\s+rediss:\/\/127\.0\.0\.1:\d+/m, 'check-config names the TLS URL');
    } finally {
      await stop(child);
    }
  });

  test('a server certificate callsync does not trust: 503, never a 202, and the log says why', async () => {
    const { child, url } = await start('untrusted', { REDIS_URL: server.url, NODE_EXTRA_CA_CERTS: '' });
    try {
      const r = await postJson(`${url}/webhooks/ai-agent/agent-1`, webhookPayload('tls-untrusted-1'));
      assert.equal(r.status, 503, JSON.stringify(r.body));
      const said = await waitFor(() => child.lines.find((l) => /certificate/i.test(JSON.stringify(l.err ?? ''))), {
        timeoutMs: 10_000,
        what: 'a log line naming the certificate problem',
      });
      assert.equal(said.level, 40, 'a warning');
    } finally {
      await stop(child);
    }
  });

  // ioredis listens for a socket's errors with `once`: over TLS a refused certificate can be
  // followed by the server's alert, a second 'error' event that nobody handled — the process died
  // (CI, the test above). callsync's connections keep a listener on every socket (queues/connection.ts).
  test('a socket that fails twice does not end the process (single Redis and cluster nodes, over TLS)', async () => {
    const ca = await readFile(tls.ca);
    const secondErrorIsHandled = (stream: { emit(event: string, err: Error): boolean }) =>
      assert.doesNotThrow(() => {
        stream.emit('error', new Error('first failure of the socket (test)'));
        stream.emit('error', new Error('second failure of the same socket (test)'));
      });
    const single = createRedis(singleRedis(server.url), 'worker', { tls: { ca } }) as Redis;
    single.on('error', () => undefined);
    try {
      assert.equal(await single.ping(), 'PONG');
      secondErrorIsHandled(single.stream);
    } finally {
      single.disconnect();
    }
    cluster ??= await startRedisCluster({ tls });
    const nodes = cluster.seeds.split(',').map((s) => ({ host: '127.0.0.1', port: Number(s.split(':')[1]) }));
    const clustered = createRedis(
      { url: 'redis://127.0.0.1:1', clusterNodes: nodes, sentinels: [], tls: true, prefix: 'x' },
      'worker',
      { tls: { ca } },
    ) as Cluster;
    clustered.on('error', () => undefined);
    try {
      assert.equal(await clustered.ping(), 'PONG');
      const node = clustered.nodes('master')[0]!;
      await node.ping();
      secondErrorIsHandled(node.stream);
    } finally {
      clustered.disconnect();
    }
  });

  test('Sentinel over TLS only (REDIS_SENTINELS, REDIS_TLS=true; the sentinel and both data nodes TLS only): a webhook is acknowledged and archived', async () => {
    const sentinel = await startRedisSentinel({ tls });
    try {
      const env = {
        REDIS_URL: 'redis://127.0.0.1:1',
        REDIS_SENTINELS: sentinel.sentinels,
        REDIS_SENTINEL_NAME: sentinel.name,
        REDIS_TLS: 'true',
        NODE_EXTRA_CA_CERTS: tls.ca,
        ACK_REPLICAS: '1',
      };
      await deliver('sentinel', env, ['tls-sentinel-1']);
    } finally {
      await sentinel.destroy();
    }
  });

  test('a Redis Cluster over TLS only (REDIS_CLUSTER_NODES, REDIS_TLS=true), ACK_REPLICAS=1: a webhook is acknowledged and archived', async () => {
    cluster ??= await startRedisCluster({ tls });
    const env = {
      REDIS_URL: 'redis://127.0.0.1:1',
      REDIS_CLUSTER_NODES: cluster.seeds,
      REDIS_TLS: 'true',
      NODE_EXTRA_CA_CERTS: tls.ca,
      ACK_REPLICAS: '1',
    };
    await deliver('cluster', env, ['tls-cluster-1', 'tls-cluster-2', 'tls-cluster-3']);
  });

  // Managed clusters (ElastiCache with in-transit encryption) announce their nodes by name, and
  // their certificates name hosts, never addresses. ioredis resolves a cluster node's name to an
  // address before it connects, and then checks the certificate against the address (its README:
  // "dnsLookup … useful when AWS ElastiCache used with TLS enabled"): callsync keeps the names.
  test('a TLS cluster whose nodes are known by name and whose certificate names no address (as ElastiCache): a webhook is archived', async () => {
    const named = join(dir, 'name-only');
    await mkdir(named, { recursive: true });
    const nameOnly = await makeTlsFiles(named, { nameOnly: true });
    const byName = await startRedisCluster({ tls: nameOnly, hostname: 'localhost' });
    try {
      const seeds = byName.nodes.map((n) => `localhost:${n.port}`).join(',');
      await deliver(
        'cluster-by-name',
        {
          REDIS_URL: 'redis://127.0.0.1:1',
          REDIS_CLUSTER_NODES: seeds,
          REDIS_TLS: 'true',
          NODE_EXTRA_CA_CERTS: nameOnly.ca,
        },
        ['tls-by-name-1'],
      );
    } finally {
      await byName.destroy();
    }
  });
});
