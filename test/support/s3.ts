// A real S3-compatible server on loopback (s3rver), with a bucket, for archive tests.
import { mkdtemp, rm, utimes } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';

export interface TestS3 {
  endpoint: string;
  port: number;
  bucket: string;
  client: S3Client;
  /** Env vars that point callsync's archive at this server. */
  env: Record<string, string>;
  list(prefix?: string): Promise<string[]>;
  get(key: string): Promise<{ body: string; contentType: string | undefined }>;
  /** Sets an object's LastModified (s3rver reads it from its file's mtime): an object written `at`. */
  setLastModified(key: string, at: Date): Promise<void>;
  /** Stops the server (keeps its files); `start()` brings it back on the same port. */
  stop(): Promise<void>;
  start(): Promise<void>;
  destroy(): Promise<void>;
}

export const TEST_CREDENTIALS = { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' };

export async function startS3(bucket = 'callsync-test'): Promise<TestS3> {
  const directory = await mkdtemp(join(tmpdir(), 's3rver-'));
  let server: S3rver | null = null;
  let port = 0;
  const start = async () => {
    server = new S3rver({
      port,
      address: '127.0.0.1',
      directory,
      silent: true,
      configureBuckets: [{ name: bucket, configs: [] }],
    });
    const address = (await server.run()) as AddressInfo;
    port = address.port;
  };
  await start();
  const endpoint = `http://127.0.0.1:${port}`;
  const client = new S3Client({ region: 'us-east-1', endpoint, forcePathStyle: true, credentials: TEST_CREDENTIALS });
  await client.send(new CreateBucketCommand({ Bucket: bucket })).catch(() => undefined);
  /**
   * An outage: the port refuses new connections and the connections kept alive end now. (A server's
   * close alone waits for them, and workers that keep using them kept "S3" up for minutes: a chaos
   * run's 30 s outage lasted 205 s, long enough to use up the archive's retries.)
   */
  const stop = async () => {
    const running = server;
    if (!running) return;
    server = null;
    const closed = running.close();
    running.httpServer?.closeAllConnections();
    await closed;
  };
  return {
    endpoint,
    port,
    bucket,
    client,
    env: {
      ARCHIVE_S3_BUCKET: bucket,
      S3_ENDPOINT: endpoint,
      S3_FORCE_PATH_STYLE: 'true',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: TEST_CREDENTIALS.accessKeyId,
      AWS_SECRET_ACCESS_KEY: TEST_CREDENTIALS.secretAccessKey,
    },
    async list(prefix) {
      const keys: string[] = [];
      let token: string | undefined;
      do {
        const page = await client.send(
          new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }),
        );
        for (const o of page.Contents ?? []) if (o.Key) keys.push(o.Key);
        token = page.IsTruncated ? page.NextContinuationToken : undefined;
      } while (token);
      return keys.sort();
    },
    async get(key) {
      const out = await client.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      return { body: (await out.Body?.transformToString('utf8')) ?? '', contentType: out.ContentType };
    },
    async setLastModified(key, at) {
      await utimes(join(directory, bucket, `${key}._S3rver_object`), at, at);
    },
    stop,
    start,
    async destroy() {
      await stop();
      client.destroy();
      await rm(directory, { recursive: true, force: true });
    },
  };
}

/**
 * The config-file entry of an archive sink named `archive` writing to the test S3 server, indented
 * under `sinks:`; its values come from the environment `startS3` hands out (`\${ARCHIVE_S3_BUCKET}`, …).
 */
export const S3_ARCHIVE_SINK_YAML = `  archive:
    type: archive
    bucket: \${ARCHIVE_S3_BUCKET}
    endpoint: \${S3_ENDPOINT}
    forcePathStyle: true
    accessKeyId: \${AWS_ACCESS_KEY_ID}
    secretAccessKey: \${AWS_SECRET_ACCESS_KEY}
`;

/** Of archive object names, the call records (`<name>.json`), not the vCon written beside each (`.vcon.json`). */
export function archivedRecords(names: Iterable<string>): string[] {
  return [...names].filter((n) => n.endsWith('.json') && !n.endsWith('.vcon.json'));
}
