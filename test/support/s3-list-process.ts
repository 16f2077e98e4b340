// Lists keys with the archive's S3Store against s3rver in a process of its own. s3rver builds its
// ListObjectsV2 continuation tokens with DES, which Node's OpenSSL 3 has only with
// --openssl-legacy-provider: the parent starts this script with that flag, so truncated listings
// (MaxKeys smaller than the keys) can be tested. Prints `{ pages, keys, expected }` as JSON.
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { S3Store } from '../../src/sinks/archive/s3-store.js';
import { startS3, TEST_CREDENTIALS } from './s3.js';

const s3 = await startS3();
try {
  const expected: string[] = [];
  for (let i = 0; i < 11; i++) {
    const key = `transcripts/2026/10/05/call-${String(i).padStart(2, '0')}.json`;
    expected.push(key);
    await s3.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: key, Body: '{}' }));
  }
  await s3.client.send(
    new PutObjectCommand({ Bucket: s3.bucket, Key: 'transcripts/2026/10/06/other.json', Body: '{}' }),
  );
  const store = new S3Store({
    bucket: s3.bucket,
    region: 'us-east-1',
    endpoint: s3.endpoint,
    forcePathStyle: true,
    credentials: TEST_CREDENTIALS,
    listPageSize: 4,
  });
  let pages = 0;
  store.client.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === 'ListObjectsV2Command') pages++;
      return next(args);
    },
    { step: 'initialize' },
  );
  const keys: string[] = [];
  for await (const key of store.list('transcripts/2026/10/05/')) keys.push(key);
  store.client.destroy();
  process.stdout.write(JSON.stringify({ pages, keys, expected }));
} finally {
  await s3.destroy();
}
