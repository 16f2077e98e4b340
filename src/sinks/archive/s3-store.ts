// The archive's S3 store (or any S3-compatible server). Imported only when a bucket is configured
// (see createObjectStore in ./index.ts), so processes that archive nowhere never load the AWS SDK.
import type { Readable } from 'node:stream';
import {
  DeleteObjectCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  type ServerSideEncryption,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { AuthError, errorFromHttp, errorFromNetwork, type SinkError } from '../../errors.js';
import type { ObjectStore, PutOptions } from './store.js';

export interface S3StoreOptions {
  bucket: string;
  region: string;
  endpoint?: string;
  forcePathStyle?: boolean;
  sse?: ServerSideEncryption;
  kmsKeyId?: string;
  /** Request timeout in ms. Default 30 s. */
  timeoutMs?: number;
  /** Keys per ListObjectsV2 page (S3's default and maximum: 1000). */
  listPageSize?: number;
  /** Credentials; default: the AWS SDK's chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, roles...). */
  credentials?: { accessKeyId: string; secretAccessKey: string };
}

/** Sorts an S3 SDK failure into the sink error kinds (errorFromHttp redacts the server's text). */
function errorFromS3(what: string, err: unknown): SinkError {
  if (err instanceof S3ServiceException) {
    const status = err.$metadata.httpStatusCode ?? 500;
    return errorFromHttp({ status, what, detail: `${err.name}: ${err.message}` });
  }
  // No credentials at all: every job would fail the same way until an operator fixes the setup.
  if (err instanceof Error && err.name === 'CredentialsProviderError')
    return new AuthError(`${what}: ${err.message}`, { cause: err });
  return errorFromNetwork(what, err);
}

export class S3Store implements ObjectStore {
  readonly location: string;
  readonly client: S3Client;

  constructor(private readonly options: S3StoreOptions) {
    this.location = `s3://${options.bucket}`;
    this.client = new S3Client({
      region: options.region,
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      credentials: options.credentials,
      // The queue owns retries (with backoff across minutes); the SDK only smooths over a blip.
      maxAttempts: 2,
      // Checksums only where S3 requires them: some S3-compatible servers reject the SDK's default
      // trailing-checksum (aws-chunked) uploads.
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      requestHandler: { requestTimeout: options.timeoutMs ?? 30_000, connectionTimeout: 5_000 },
    });
  }

  private encryption() {
    return {
      ServerSideEncryption: this.options.sse,
      SSEKMSKeyId: this.options.sse?.startsWith('aws:kms') ? this.options.kmsKeyId : undefined,
    };
  }

  async put(key: string, body: string | Buffer, options: PutOptions): Promise<void> {
    try {
      await this.client.send(
        new PutObjectCommand({
          Bucket: this.options.bucket,
          Key: key,
          Body: body,
          ContentType: options.contentType,
          ...this.encryption(),
        }),
      );
    } catch (err) {
      throw errorFromS3(`S3 PutObject ${key}`, err);
    }
  }

  async keysStartingWith(prefix: string, max = 1000): Promise<string[]> {
    try {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.options.bucket, Prefix: prefix, MaxKeys: max }),
      );
      return (page.Contents ?? []).flatMap((o) => (o.Key === undefined ? [] : [o.Key])).sort();
    } catch (err) {
      throw errorFromS3(`S3 ListObjectsV2 ${prefix}`, err);
    }
  }

  async putStream(key: string, body: Readable, options: PutOptions & { contentLength?: number | null }): Promise<void> {
    try {
      // Multipart in 5 MiB parts (S3's minimum), one in flight while the next fills: 15-28 MB held
      // per upload whatever the size (50 and 150 MB measured alike by test/recordings.redis.test.ts).
      // Memory over speed: several sink jobs may upload at once.
      const upload = new Upload({
        client: this.client,
        params: {
          Bucket: this.options.bucket,
          Key: key,
          Body: body,
          ContentType: options.contentType,
          ...this.encryption(),
        },
        partSize: 5 * 1024 * 1024,
        queueSize: 1,
        leavePartsOnError: false,
      });
      await upload.done();
    } catch (err) {
      throw errorFromS3(`S3 upload ${key}`, err);
    }
  }

  /** ListObjectsV2, page after page (continuation tokens), in key order. */
  async *list(prefix: string): AsyncIterable<string> {
    let token: string | undefined;
    do {
      let page;
      try {
        page = await this.client.send(
          new ListObjectsV2Command({
            Bucket: this.options.bucket,
            Prefix: prefix,
            ContinuationToken: token,
            MaxKeys: this.options.listPageSize,
          }),
        );
      } catch (err) {
        throw errorFromS3(`S3 ListObjectsV2 ${prefix}`, err);
      }
      for (const object of page.Contents ?? []) if (object.Key !== undefined) yield object.Key;
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token !== undefined);
  }

  async get(key: string): Promise<string> {
    try {
      const res = await this.client.send(new GetObjectCommand({ Bucket: this.options.bucket, Key: key }));
      if (res.Body === undefined) return '';
      return await res.Body.transformToString('utf8');
    } catch (err) {
      throw errorFromS3(`S3 GetObject ${key}`, err);
    }
  }

  /** DeleteObject (needs `s3:DeleteObject`); S3 answers success for a key that is not there, so this is always true. */
  async delete(key: string): Promise<boolean> {
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.options.bucket, Key: key }));
      return true;
    } catch (err) {
      throw errorFromS3(`S3 DeleteObject ${key}`, err);
    }
  }
}
