// The archive's S3 store (or any S3-compatible server). Imported only when a bucket is configured
// (see createObjectStore in ./index.ts), so processes that archive nowhere never load the AWS SDK.
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
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
import { AuthError, EndpointDisabledError, errorFromHttp, errorFromNetwork, type SinkError } from '../../errors.js';
import type { ObjectStore, PutOptions } from './store.js';
import { traceClient } from '../../telemetry.js';

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
  /**
   * Small objects (`put`) go through the lean PutObject path (default true): the SDK's own endpoint
   * rules (resolved once) and signer, one node:http(s) request on a keep-alive agent. Any failure
   * there is tried once more through the SDK, which classifies the error. false: the SDK for every PUT.
   */
  leanPut?: boolean;
}

/** The parts of the S3 client's resolved configuration the lean PutObject path uses (the SDK's own). */
interface ResolvedS3Config {
  region: () => Promise<string>;
  useFipsEndpoint: () => Promise<boolean>;
  useDualstackEndpoint: () => Promise<boolean>;
  forcePathStyle?: boolean;
  systemClockOffset?: number;
  endpointProvider(
    params: Record<string, unknown>,
    context: Record<string, unknown>,
  ): { url: URL; properties?: { authSchemes?: { name: string; signingName?: string; signingRegion?: string }[] } };
  signer(authScheme: unknown): Promise<{
    sign(
      request: Record<string, unknown>,
      options: { signingDate: Date; signingRegion?: string; signingService?: string },
    ): Promise<{ headers: Record<string, string> }>;
  }>;
}

/** Where and how a PutObject of this bucket goes: resolved once per store by the SDK's endpoint rules and signer. */
interface LeanTarget {
  url: URL;
  signingRegion?: string;
  signingService?: string;
  signer: Awaited<ReturnType<ResolvedS3Config['signer']>>;
  config: ResolvedS3Config;
  send: typeof httpRequest;
  agent: HttpAgent;
}

/** A key as the SDK puts it in the path (`{Key+}`: every segment URI-encoded, `/` kept, `!'()*` encoded too). */
function encodeKey(key: string): string {
  return key
    .split('/')
    .map((part) =>
      encodeURIComponent(part).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`),
    )
    .join('/');
}

/** Sorts an S3 SDK failure into the sink error kinds (errorFromHttp redacts the server's text). */
/** S3's answers to a request sent to a region its bucket is not in. */
const WRONG_REGION = new Set([
  'PermanentRedirect',
  'AuthorizationHeaderMalformed',
  'IllegalLocationConstraintException',
]);

/** A short text field S3's error document carried (the SDK puts its elements on the exception). */
function field(err: object, name: string): string | undefined {
  const v = (err as Record<string, unknown>)[name];
  return typeof v === 'string' && /^[\w.:-]{1,200}$/.test(v) ? v : undefined;
}

function errorFromS3(what: string, err: unknown, bucket?: string, region?: string): SinkError {
  if (err instanceof S3ServiceException) {
    const status = err.$metadata.httpStatusCode ?? 500;
    // Every call would fail alike until an operator creates the bucket or fixes its name: the queue
    // is disabled with the reason (its jobs wait), not one dead letter per call.
    if (err.name === 'NoSuchBucket' && bucket !== undefined)
      return new EndpointDisabledError(
        `${what} answered ${status}: NoSuchBucket: bucket "${bucket}" does not exist. Create it or fix the archive's bucket (ARCHIVE_S3_BUCKET), then re-enable the queue (callsync resume)`,
        { status },
      );
    // A bucket in another region than the one configured: the same for every call.
    if (WRONG_REGION.has(err.name) && bucket !== undefined) {
      const where = [field(err, 'Region'), field(err, 'Endpoint')].filter((v) => v !== undefined).join(', at ');
      return new EndpointDisabledError(
        `${what} answered ${status}: ${err.name}: bucket "${bucket}" is not in region ${region ?? 'the default'}${where ? `; it is in ${where}` : ''}. Set the archive's region (AWS_REGION) to the bucket's, then re-enable the queue (callsync resume)`,
        { status },
      );
    }
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
  /** The lean PutObject path's target, resolved on first use; null once it cannot be used (then the SDK does every PUT). */
  private lean: Promise<LeanTarget | null> | null;

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
    this.lean = options.leanPut === false ? Promise.resolve(null) : null;
  }

  /** The lean path's target: the bucket's endpoint by the SDK's rules, the SDK's SigV4 signer; null where they say otherwise. */
  private async leanTarget(): Promise<LeanTarget | null> {
    const config = this.client.config as unknown as ResolvedS3Config;
    const endpoint = config.endpointProvider(
      {
        Bucket: this.options.bucket,
        Region: await config.region(),
        UseFIPS: await config.useFipsEndpoint(),
        UseDualStack: await config.useDualstackEndpoint(),
        ForcePathStyle: config.forcePathStyle ?? false,
        Endpoint: this.options.endpoint,
        Accelerate: false,
        UseGlobalEndpoint: false,
        UseArnRegion: false,
        DisableMultiRegionAccessPoints: false,
      },
      {},
    );
    const scheme = endpoint.properties?.authSchemes?.[0];
    // SigV4A, S3 Express sessions, access points with query strings: the SDK's business.
    if (scheme?.name !== 'sigv4' || endpoint.url.search !== '' || endpoint.url.username !== '') return null;
    const https = endpoint.url.protocol === 'https:';
    if (!https && endpoint.url.protocol !== 'http:') return null;
    return {
      url: endpoint.url,
      signingRegion: scheme.signingRegion,
      signingService: scheme.signingName,
      signer: await config.signer(scheme),
      config,
      send: https ? (httpsRequest as typeof httpRequest) : httpRequest,
      // Keep-alive, as the SDK's handler (50 sockets at most, its default); TLS verified by default.
      agent: https
        ? new HttpsAgent({ keepAlive: true, maxSockets: 50 })
        : new HttpAgent({ keepAlive: true, maxSockets: 50 }),
    };
  }

  /** PutObject without the SDK's middleware stack; false when it did not succeed (the caller asks the SDK). */
  private async leanPut(key: string, body: string | Buffer, options: PutOptions): Promise<boolean> {
    this.lean ??= this.leanTarget().catch(() => null);
    const target = await this.lean;
    if (target === null) return false;
    const { url } = target;
    const basePath = url.pathname.replace(/\/+$/, '');
    const payload = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
    const headers: Record<string, string> = {
      host: url.host,
      'content-type': options.contentType,
      'content-length': String(payload.length),
    };
    if (this.options.sse) headers['x-amz-server-side-encryption'] = this.options.sse;
    if (this.options.sse?.startsWith('aws:kms') && this.options.kmsKeyId)
      headers['x-amz-server-side-encryption-aws-kms-key-id'] = this.options.kmsKeyId;
    let signed;
    try {
      signed = await target.signer.sign(
        {
          method: 'PUT',
          protocol: url.protocol,
          hostname: url.hostname,
          port: url.port === '' ? undefined : Number(url.port),
          path: `${basePath}/${encodeKey(key)}`,
          query: {},
          headers,
          body: payload,
        },
        {
          signingDate: new Date(Date.now() + (target.config.systemClockOffset ?? 0)),
          signingRegion: target.signingRegion,
          signingService: target.signingService,
        },
      );
    } catch {
      // Credentials missing or not resolvable: the SDK says so in its own words.
      return false;
    }
    const timeoutMs = this.options.timeoutMs ?? 30_000;
    return new Promise<boolean>((resolve, reject) => {
      const req = target.send(
        {
          protocol: url.protocol,
          hostname: url.hostname,
          port: url.port === '' ? undefined : url.port,
          method: 'PUT',
          path: `${basePath}/${encodeKey(key)}`,
          headers: signed.headers,
          agent: target.agent,
          timeout: timeoutMs,
        },
        (res: IncomingMessage) => {
          res.resume();
          res.once('end', () => resolve(res.statusCode === 200));
          res.once('error', () => resolve(false));
        },
      );
      // A timeout is the job's failure at once (as the SDK's would be), not another full wait through the SDK.
      req.once('timeout', () => {
        const err = new Error(`timed out after ${timeoutMs} ms`);
        err.name = 'TimeoutError';
        req.destroy(err);
        reject(errorFromNetwork(`S3 PutObject ${key}`, err));
      });
      // A reset keep-alive socket, a refused connection: the SDK tries again (its own retry included).
      req.once('error', () => resolve(false));
      req.end(payload);
    });
  }

  private encryption() {
    return {
      ServerSideEncryption: this.options.sse,
      SSEKMSKeyId: this.options.sse?.startsWith('aws:kms') ? this.options.kmsKeyId : undefined,
    };
  }

  /** A PutObject's span (a child of the sink attempt when traces are on): the bucket and the S3 host, no key. */
  private traced<T>(method: string, work: () => Promise<T>): Promise<T> {
    return traceClient(
      `S3.${method}`,
      {
        'rpc.system': 'aws-api',
        'rpc.service': 'S3',
        'rpc.method': method,
        'aws.s3.bucket': this.options.bucket,
        ...(this.options.endpoint ? { 'server.address': new URL(this.options.endpoint).host } : {}),
      },
      work,
    );
  }

  put(key: string, body: string | Buffer, options: PutOptions): Promise<void> {
    return this.traced('PutObject', () => this.putObject(key, body, options));
  }

  private async putObject(key: string, body: string | Buffer, options: PutOptions): Promise<void> {
    if (await this.leanPut(key, body, options)) return;
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
      throw errorFromS3(`S3 PutObject ${key}`, err, this.options.bucket, this.options.region);
    }
  }

  async keysStartingWith(prefix: string, max = 1000): Promise<string[]> {
    try {
      const page = await this.client.send(
        new ListObjectsV2Command({ Bucket: this.options.bucket, Prefix: prefix, MaxKeys: max }),
      );
      return (page.Contents ?? []).flatMap((o) => (o.Key === undefined ? [] : [o.Key])).sort();
    } catch (err) {
      throw errorFromS3(`S3 ListObjectsV2 ${prefix}`, err, this.options.bucket, this.options.region);
    }
  }

  putStream(key: string, body: Readable, options: PutOptions & { contentLength?: number | null }): Promise<void> {
    return this.traced('Upload', () => this.upload(key, body, options));
  }

  private async upload(key: string, body: Readable, options: PutOptions): Promise<void> {
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
      throw errorFromS3(`S3 upload ${key}`, err, this.options.bucket, this.options.region);
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
        throw errorFromS3(`S3 ListObjectsV2 ${prefix}`, err, this.options.bucket, this.options.region);
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
