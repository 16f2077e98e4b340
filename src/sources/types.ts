// The seam every source of calls goes through: how one HTTP request becomes canonical calls (and
// what the sender is answered). The ingress app mounts each source's paths behind the allow list,
// accepts the calls it returns through the normal acceptor and sends its reply. A `SourceType` adds
// its environment variables, its settings, and its background tasks: adding a source touches its
// file, one line in src/sources/registry.ts, its tests and its docs.
import type { CanonicalCall } from '../model/call.js';
import type { z } from 'zod';
import type { EnvShape } from '../env-values.js';
import type { Logger } from '../log.js';
import type { RedisClient } from '../../queues/connection.js';
import type { RedisKeys } from '../../queues/keys.js';

/** A request as a source sees it. */
export interface SourceRequest {
  /** Path parameters of the matched route (`:agentId`). */
  params: Record<string, string>;
  headers: Headers;
  /** Absolute URL of the request as received (without a Host header: the local address and port it came in on). */
  url: string;
  receivedAt: Date;
  /** Parsed JSON body and its text (sources with `body: 'json'`: the app's JSON guards ran). */
  json?: { value: unknown; text: string };
  /** The body's bytes as received (sources with `body: 'raw'`, at most `maxBodyBytes`). */
  raw?: Buffer;
}

/** One call to accept; `rawJson` is the body text `call.raw` was parsed from, stored verbatim. */
interface SourceCall {
  call: CanonicalCall;
  rawJson?: string;
}

/** What the acceptor said about one call. */
export interface SourceAccepted {
  id: string;
  duplicate: boolean;
  update?: true;
  spooled?: boolean;
}

export interface SourceReply {
  status: 200 | 202;
  contentType: 'application/json' | 'application/xml';
  body: string;
}

interface SourceResult {
  calls: SourceCall[];
  /**
   * Optional fields whose values the source could not read (read as absent, kept in the original):
   * the ingress counts them (`callsync_webhook_fields_unread_total{field}`) and logs each field
   * once per process. `field` is a closed set of pointers (array indexes as `*`).
   */
  unread?: { field: string; pointer: string; detail: string }[];
  /** The answer to the sender, once the calls are accepted (in order). */
  reply(accepted: SourceAccepted[]): SourceReply;
}

export interface Source {
  /** Also the `CanonicalCall.source` of what it yields, where it yields calls itself. */
  name: string;
  /** POST paths (Hono patterns). Other methods get 405. */
  paths: string[];
  /**
   * `json`: the ingress' JSON guards run first (shared secret, charset, size, shape limits);
   * `raw`: the source reads the bytes itself (e.g. to check a signature over them).
   */
  body: 'json' | 'raw';
  /** Largest body of a `raw` source. */
  maxBodyBytes?: number;
  receive(request: SourceRequest): Promise<SourceResult>;
}

/** Input a source will never accept: answered with this status and the spec's error body. */
export class SourceRefusal extends Error {
  constructor(
    readonly status: 400 | 401 | 403 | 409 | 413 | 415,
    readonly detail: string,
    readonly pointer = '/',
    readonly problems?: { detail: string; pointer: string }[],
    /** The refused call's id as sent, when it could be read: the refusal is kept under it (`callsync call`). */
    readonly callId?: string | null,
  ) {
    super(detail);
    this.name = 'SourceRefusal';
  }
}

/** A store the source needs did not answer: nothing was acknowledged, the sender should retry (503). */
export class SourceUnavailable extends Error {
  constructor(cause: unknown) {
    super(`source state unavailable: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'SourceUnavailable';
  }
}

/** The parsed environment, by variable name: a source type reads the variables its `env` declares. */
export type SourceEnv = Readonly<Record<string, unknown>>;

/** A source's variables as parsed by the one schema (its `env` is part of it, so each has its value or default). */
export type ParsedEnv<S extends EnvShape> = { readonly [K in keyof S]: z.output<S[K]> };

/** A source type's typed view of the parsed environment: the variables its shape declares. */
export function sourceEnvOf<S extends EnvShape>(_shape: S, env: SourceEnv): ParsedEnv<S> {
  return env as ParsedEnv<S>;
}

/** Where a source type's configuration check reports: problems fail the start, warnings are logged. */
interface SourceCheckReport {
  problems: string[];
  warnings: string[];
}

/** What a source's routes and tasks may use; everything external comes through here. */
export interface SourceDeps {
  /** Connection for sources that keep state (the Push API's call assembly). */
  redis: RedisClient;
  /** The key layout of this configuration: a source keeps its state under `keys.area(<its name>)`. */
  keys: RedisKeys;
  now?: () => Date;
}

/** What a source's background tasks may use besides SourceDeps (run by the worker role). */
export interface SourceTaskDeps extends SourceDeps {
  /** Accepts a call into the inbound log like the ingress does (deduplicated, in the timeline). */
  accept(call: CanonicalCall): Promise<unknown>;
  log: Logger;
}

/** A task a source runs in the background of the worker role (a sweeper); stopped at shutdown. */
export interface BackgroundTask {
  /** What it is, in the shutdown log (`stop <what>`). */
  readonly what: string;
  close(): Promise<void>;
}

/**
 * A kind of source: its environment variables, its settings (checked with the rest of the
 * configuration), the routes it mounts on the ingress and its background tasks. Adding a source is
 * its file and one line in src/sources/registry.ts.
 */
export interface SourceType<O = unknown> {
  /** Also its `Source.name` and the Redis area its state is kept in (`keys.area(name)`). */
  readonly name: string;
  /**
   * The environment variables it reads, each with the schema of its value; src/config/env.ts
   * composes them into the one environment schema, so a bad value is reported with every other.
   */
  readonly env?: EnvShape;
  /** Its settings from the parsed environment; what does not fit together goes into `report`. */
  options(env: SourceEnv, report: SourceCheckReport): O;
  /** The HTTP side: the paths it mounts on the ingress and how a request becomes calls. */
  routes(options: O, deps: SourceDeps): Source;
  /** Tasks the worker role runs for it (e.g. closing calls whose last event never came). */
  background?(options: O, deps: SourceTaskDeps): BackgroundTask[];
  /**
   * What `callsync migrate-keys` leaves behind of its state (it is not copied): a line naming
   * what is left under `areaPrefix`, or null when nothing is.
   */
  leftBehind?(redis: RedisClient, areaPrefix: string): Promise<string | null>;
  /** What its keys (`<prefix>:<name>:…`) are, in migrate-keys' summary of what it did not copy ("Push assembly"). */
  readonly stateLabel?: string;
}

/** A source type with its options' type checked where it is written, listed beside the others. */
export function defineSourceType<O>(type: SourceType<O>): SourceType {
  return type as unknown as SourceType;
}

/**
 * A task that runs `tick` every `everyMs` (never two at once; unref'd timer); `close` stops it and
 * waits for a tick under way.
 */
export function every(what: string, everyMs: number, tick: () => Promise<void>): BackgroundTask {
  let running: Promise<void> | null = null;
  let stopped = false;
  const timer = setInterval(() => {
    if (running || stopped) return;
    running = tick().finally(() => {
      running = null;
    });
  }, everyMs);
  timer.unref();
  return {
    what,
    async close() {
      stopped = true;
      clearInterval(timer);
      await running;
    },
  };
}
