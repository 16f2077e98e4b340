// Object stores for the archive: the interface and a local folder. The S3 store is in ./s3-store.ts,
// loaded only when a bucket is configured (the AWS SDK is ~20 MB of memory a process without it saves).
import { createWriteStream } from 'node:fs';
import { mkdir, readFile, readdir, rename, rm, stat, unlink, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve, sep } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Readable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import { PermanentError } from '../../errors.js';

export interface PutOptions {
  contentType: string;
}

export interface ObjectStore {
  /** Human-readable location, e.g. `s3://bucket` or `file:///data/archive` (for logs and results). */
  readonly location: string;
  put(key: string, body: string | Buffer, options: PutOptions): Promise<void>;
  /** Streams a body of unknown or large size without holding it in memory. */
  putStream(key: string, body: Readable, options: PutOptions & { contentLength?: number | null }): Promise<void>;
  /** Keys of the stored objects starting with `prefix` (at most `max`, sorted). */
  keysStartingWith(prefix: string, max?: number): Promise<string[]>;
  /**
   * A pre-signed GET URL of `key`, valid `expiresInSec`. Absent where the store cannot sign: the
   * local folder, and the S3 store until @aws-sdk/s3-request-presigner is a dependency.
   */
  presignGet?(key: string, expiresInSec: number): Promise<string>;
  /** Keys under `prefix` (a folder-like prefix ending in `/`), every depth, in key order. */
  list(prefix: string): AsyncIterable<string>;
  /** An object's body as UTF-8 text (archived records are small JSON). */
  get(key: string): Promise<string>;
  /** Deletes the object (`callsync forget`, the retention sweep); true when it existed (S3: always true, its DELETE does not tell). */
  delete(key: string): Promise<boolean>;
}

/**
 * The archive holds everything of a call, recordings included: the folders the store creates and
 * its files are for callsync's own user only, whatever the umask lets through (a umask of 022 made
 * them readable by every local user). A folder that exists already keeps its mode.
 */
const ARCHIVE_DIR_MODE = 0o700;
const ARCHIVE_FILE_MODE = 0o600;

/** Writes `<root>/<key>` atomically (temp file + rename), so a reader never sees half an object. */
export class LocalFolderStore implements ObjectStore {
  readonly location: string;
  private readonly root: string;

  constructor(root: string) {
    this.root = resolve(root);
    this.location = `file://${this.root}`;
  }

  private pathOf(key: string): string {
    const path = resolve(join(this.root, key));
    if (!path.startsWith(this.root + sep)) throw new PermanentError(`object key escapes the archive folder: ${key}`);
    return path;
  }

  async put(key: string, body: string | Buffer): Promise<void> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true, mode: ARCHIVE_DIR_MODE });
    const tmp = `${path}.${randomUUID()}.tmp`;
    try {
      await writeFile(tmp, body, { mode: ARCHIVE_FILE_MODE });
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
  }

  /** Objects in the folder of `prefix` whose names start with its last part (one directory read; temp files left out). */
  async keysStartingWith(prefix: string, max = 1000): Promise<string[]> {
    const path = this.pathOf(prefix.endsWith('/') ? `${prefix}x` : prefix);
    const dir = dirname(path);
    const start = prefix.endsWith('/') ? '' : basename(path);
    let names: string[];
    try {
      names = await readdir(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    const keyDir = prefix.slice(0, prefix.lastIndexOf('/') + 1);
    return names
      .filter((n) => n.startsWith(start) && !n.endsWith('.tmp'))
      .sort()
      .slice(0, max)
      .map((n) => keyDir + n);
  }

  async *list(prefix: string): AsyncIterable<string> {
    const dir = prefix === '' ? this.root : this.pathOf(prefix.replace(/\/+$/, ''));
    let entries: string[];
    try {
      entries = (await readdir(dir, { recursive: true, withFileTypes: true }))
        .filter((e) => e.isFile())
        .map((e) => join(e.parentPath, e.name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    const keys = entries
      // Half-written objects (temp files of put) are not objects yet.
      .filter((path) => !path.endsWith('.tmp'))
      .map((path) =>
        path
          .slice(this.root.length + 1)
          .split(sep)
          .join('/'),
      )
      .sort();
    yield* keys;
  }

  async get(key: string): Promise<string> {
    return readFile(this.pathOf(key), 'utf8');
  }

  async delete(key: string): Promise<boolean> {
    try {
      await unlink(this.pathOf(key));
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
  }

  /**
   * Half-written objects (`<key>.<uuid>.tmp`, left by a crash during a write) under `prefix`, as
   * paths relative to the folder: list() leaves them out, erasure and retention do not.
   */
  async temporaryFiles(prefix: string): Promise<string[]> {
    const dir = prefix === '' ? this.root : this.pathOf(prefix.replace(/\/+$/, ''));
    try {
      return (await readdir(dir, { recursive: true, withFileTypes: true }))
        .filter((e) => e.isFile() && e.name.endsWith('.tmp'))
        .map((e) =>
          join(e.parentPath, e.name)
            .slice(this.root.length + 1)
            .split(sep)
            .join('/'),
        )
        .sort();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
  }

  /** When the file of `key` was last written (ms since the epoch), or null when it does not exist. */
  async modifiedAt(key: string): Promise<number | null> {
    try {
      return (await stat(this.pathOf(key))).mtimeMs;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async putStream(key: string, body: Readable): Promise<void> {
    const path = this.pathOf(key);
    await mkdir(dirname(path), { recursive: true, mode: ARCHIVE_DIR_MODE });
    const tmp = `${path}.${randomUUID()}.tmp`;
    try {
      await pipeline(body, createWriteStream(tmp, { mode: ARCHIVE_FILE_MODE }));
      await rename(tmp, path);
    } catch (err) {
      await rm(tmp, { force: true });
      throw err;
    }
  }
}
