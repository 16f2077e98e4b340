// The archive's S3 store writes small objects on its lean PutObject path (src/sinks/archive/s3-store.ts):
// the SDK's endpoint rules and SigV4 signer, one plain request on a keep-alive agent. Checked against
// s3rver (which verifies signatures) and a recording fake S3: keys with awkward characters land as
// themselves, path-style and virtual-host addressing and the region are honoured, the request is signed
// over its body, and an error answer is classified exactly as the SDK's path classifies it.
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Readable } from 'node:stream';
import { classify, type SinkError } from '../src/errors.js';
import { S3Store } from '../src/sinks/archive/s3-store.js';
import { startS3, TEST_CREDENTIALS, type TestS3 } from './support/s3.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/**
 * A fake S3 on loopback: records every request, answers `status` (with an S3 error document when not
 * 200: `AccessDenied`, or the `error` given, as XML elements).
 */
async function fakeS3(
  status: () => number,
  error: Record<string, string> = { Code: 'AccessDenied', Message: 'Access Denied' },
) {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
      const code = status();
      if (code === 200) {
        res.writeHead(200, { etag: '"x"' }).end();
        return;
      }
      res.writeHead(code, { 'content-type': 'application/xml' }).end(
        `<?xml version="1.0" encoding="UTF-8"?><Error>${Object.entries(error)
          .map(([k, v]) => `<${k}>${v}</${k}>`)
          .join('')}<RequestId>1</RequestId></Error>`,
      );
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    port,
    seen,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** The errors of a small object's PUT and a streamed upload, both of which must fail. */
async function writeErrors(store: S3Store): Promise<unknown[]> {
  const errors: unknown[] = [];
  for (const write of [
    () => store.put('k.json', '{}', { contentType: 'application/json' }),
    () => store.putStream('r.wav', Readable.from([Buffer.alloc(1000)]), { contentType: 'audio/wav' }),
  ])
    errors.push(
      await write().then(
        () => assert.fail('the write must fail'),
        (e: unknown) => e,
      ),
    );
  return errors;
}

describe('S3Store.put: the lean PutObject path', () => {
  let s3: TestS3;
  before(async () => {
    s3 = await startS3('lean-put');
  });
  after(async () => {
    await s3.destroy();
  });

  test('objects with awkward keys are stored as themselves, signature accepted by s3rver', async () => {
    const store = new S3Store({
      bucket: s3.bucket,
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: TEST_CREDENTIALS,
    });
    const keys = ['a/b c/1.json', "x/it's (1)*!.txt", 'ü/ä+ö=%/€.json', 'deep/~tilde;semi@at,comma'];
    for (const [i, key] of keys.entries()) {
      await store.put(key, i % 2 === 0 ? `{"n":${i},"t":"ä"}` : Buffer.from(`text ${i} €`), {
        contentType: i % 2 === 0 ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8',
      });
    }
    for (const [i, key] of keys.entries()) {
      const got = await s3.get(key);
      assert.equal(got.body, i % 2 === 0 ? `{"n":${i},"t":"ä"}` : `text ${i} €`);
      assert.equal(got.contentType, i % 2 === 0 ? 'application/json; charset=utf-8' : 'text/plain; charset=utf-8');
    }
    assert.deepEqual(await store.keysStartingWith('a/'), ['a/b c/1.json']);
    store.client.destroy();
  });

  test('a PUT is one signed request (path style, region, body hash), not the SDK middleware stack', async () => {
    const fake = await fakeS3(() => 200);
    try {
      const store = new S3Store({
        bucket: 'bkt',
        region: 'eu-central-1',
        endpoint: `http://127.0.0.1:${fake.port}`,
        forcePathStyle: true,
        credentials: TEST_CREDENTIALS,
      });
      await store.put('p/q r.json', '{"a":1}', { contentType: 'application/json' });
      await store.put('p/2.txt', 'two', { contentType: 'text/plain' });
      assert.equal(fake.seen.length, 2);
      const [first, second] = fake.seen as [Seen, Seen];
      assert.equal(first.method, 'PUT');
      assert.equal(first.url, '/bkt/p/q%20r.json');
      assert.equal(first.body.toString(), '{"a":1}');
      assert.equal(first.headers['content-type'], 'application/json');
      assert.equal(first.headers['x-amz-content-sha256'], createHash('sha256').update('{"a":1}').digest('hex'));
      assert.match(
        String(first.headers.authorization),
        /^AWS4-HMAC-SHA256 Credential=S3RVER\/\d{8}\/eu-central-1\/s3\/aws4_request, SignedHeaders=[^,]*host[^,]*x-amz-content-sha256/,
      );
      // The lean path: no SDK invocation headers, and the second PUT on the kept-alive connection.
      assert.equal(first.headers['amz-sdk-invocation-id'], undefined);
      assert.equal(second.url, '/bkt/p/2.txt');
      assert.equal(second.headers.connection, 'keep-alive');
      store.client.destroy();

      // Virtual-host addressing when path style is off: the bucket in the host name.
      fake.seen.length = 0;
      const virtual = new S3Store({
        bucket: 'bkt',
        region: 'eu-central-1',
        endpoint: `http://localhost:${fake.port}`,
        credentials: TEST_CREDENTIALS,
      });
      // bkt.localhost does not resolve everywhere: the request may fail; what it was sent to is what counts.
      await virtual.put('v.json', '{}', { contentType: 'application/json' }).catch(() => undefined);
      for (const s of fake.seen) {
        assert.equal(s.url, '/v.json');
        assert.equal(s.headers.host, `bkt.localhost:${fake.port}`);
      }
      virtual.client.destroy();
    } finally {
      await fake.close();
    }
  });

  test('a bucket that does not exist disables the archive queue (every call would fail alike), naming the bucket; not a dead letter per call', async () => {
    const store = new S3Store({
      bucket: 'no-such-bucket',
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: TEST_CREDENTIALS,
    });
    try {
      for (const err of await writeErrors(store)) {
        assert.equal(classify(err), 'disable', String(err));
        assert.equal((err as SinkError).status, 404);
        assert.match((err as Error).message, /bucket "no-such-bucket" does not exist/);
      }
    } finally {
      store.client.destroy();
    }
  });

  for (const [status, error, names] of [
    [
      301,
      {
        Code: 'PermanentRedirect',
        Message: 'The bucket you are attempting to access must be addressed using the specified endpoint.',
        Endpoint: 'bkt.s3.eu-central-1.amazonaws.com',
        Bucket: 'bkt',
      },
      /bkt\.s3\.eu-central-1\.amazonaws\.com/,
    ],
    [
      400,
      {
        Code: 'AuthorizationHeaderMalformed',
        Message: "The authorization header is malformed; the region 'us-east-1' is wrong; expecting 'eu-central-1'",
        Region: 'eu-central-1',
      },
      /eu-central-1/,
    ],
  ] as const)
    test(`a bucket in another region (${error.Code}) disables the archive queue naming where it is; not a dead letter per call`, async () => {
      const fake = await fakeS3(() => status, error);
      const store = new S3Store({
        bucket: 'bkt',
        region: 'us-east-1',
        endpoint: `http://127.0.0.1:${fake.port}`,
        forcePathStyle: true,
        credentials: TEST_CREDENTIALS,
      });
      try {
        for (const err of await writeErrors(store)) {
          assert.equal(classify(err), 'disable', String(err));
          assert.match((err as Error).message, /bucket "bkt" is not in region us-east-1/);
          assert.match((err as Error).message, names);
          assert.match((err as Error).message, /AWS_REGION/);
        }
      } finally {
        store.client.destroy();
        await fake.close();
      }
    });

  test('an error answer is classified as on the SDK path (the SDK asked again, once)', async () => {
    const fake = await fakeS3(() => 403);
    try {
      const options = {
        bucket: 'bkt',
        region: 'us-east-1',
        endpoint: `http://127.0.0.1:${fake.port}`,
        forcePathStyle: true,
        credentials: TEST_CREDENTIALS,
      };
      const lean = new S3Store(options);
      const sdk = new S3Store({ ...options, leanPut: false });
      const leanErr = await lean.put('k.json', '{}', { contentType: 'application/json' }).then(
        () => assert.fail('a 403 must fail'),
        (e: unknown) => e,
      );
      const leanRequests = fake.seen.length;
      const sdkErr = await sdk.put('k.json', '{}', { contentType: 'application/json' }).then(
        () => assert.fail('a 403 must fail'),
        (e: unknown) => e,
      );
      assert.equal((leanErr as Error).constructor.name, 'AuthError');
      assert.equal((leanErr as Error).constructor, (sdkErr as Error).constructor);
      assert.equal((leanErr as Error).message, (sdkErr as Error).message);
      // Lean attempt + the SDK's own (403 is not retried by the SDK).
      assert.equal(leanRequests, 2);
      assert.equal(fake.seen.length - leanRequests, 1);
      lean.client.destroy();
      sdk.client.destroy();
    } finally {
      await fake.close();
    }
  });
});
