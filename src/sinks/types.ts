// The contract between the queue runner and every sink adapter (archive, CRM, notifications).
import type { Logger } from 'pino';
import type { z } from 'zod';
import type { CallPart, CallRevision, CanonicalCall } from '../model/call.js';
import type { KeyValueStore, ListAppend } from '../state/kv.js';
import type { TelephonyClient } from '../telephony/types.js';
import type { Route } from '../routing/types.js';
import type { RetryPolicy } from '../../queues/registry.js';
import type { EnvOf, EnvShape } from '../env-values.js';
import type { HmacKeySource } from '../../queues/privacy-key.js';

/**
 * A sink type's section of the configuration: the values of the variables its `env` declares, parsed
 * once by the one environment schema and picked for it by src/config (`Config.sinkSettings`). Its
 * hooks and its sinks get this, never the environment: a variable it did not declare is not there.
 */
export type SinkSettings<E extends EnvShape = EnvShape> = EnvOf<E>;

export interface SinkContext {
  /** BullMQ job id; stable for the same call and sink. */
  jobId: string;
  /** 1 on the first try. */
  attempt: number;
  log: Logger;
  /** Aborted when the worker shuts down; pass it to the HTTP request (src/http-request.ts) where one can be abandoned. */
  signal: AbortSignal;
  /**
   * The endpoint this job delivers to, for a sink with endpoints (one queue each, see
   * `SinkType.endpoints`). Absent: every endpoint of the sink, one after the other.
   */
  endpoint?: string;
  /**
   * Which revision of the call this job delivers (the call itself comes without it). Absent for
   * jobs queued before revisions existed: those count as the oldest revision (src/sinks/revisions.ts).
   */
  revision?: CallRevision;
  /**
   * The attempt's timeline entries (workers/attempts.ts), for a sink whose last step is the release
   * of its call's lock (src/sinks/revisions.ts): written by the release's script, one command less.
   * Absent: the attempt writes them itself.
   */
  outcome?: AttemptOutcome;
}

/** How a sink's last Redis script carries its attempt's timeline entries (see SinkContext.outcome). */
export interface AttemptOutcome {
  /** The entries of the attempt ending with `result` (its start and its outcome), as a list append. */
  entries(result: SinkResult): ListAppend;
  /** They were appended, for `result` (the attempt writes them no more when it ends with this very result). */
  written(result: SinkResult): void;
}

export interface SinkResult {
  /** `skipped` is a deliberate no-op (e.g. an anonymous caller gets no SMS); `reason` says why. */
  status: 'done' | 'skipped';
  reason?: string;
  /** Identifiers of what was written (object keys, CRM record ids, message ids): shown on the job. */
  refs?: Record<string, string>;
}

export interface Sink {
  readonly name: string;
  readonly type: string;
  /** Delivers one call. Throw the errors of ./errors.ts; never swallow a failure. */
  deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult>;
  /**
   * `callsync forget --crm`: deletes the records this sink created in its remote for the call
   * (through the remote's documented delete operations) and answers how many it deleted; with
   * `dryRun`, how many it would delete. Absent: the sink keeps nothing in a remote it could delete.
   */
  eraseCall?(callKey: string, options: { dryRun: boolean; signal: AbortSignal }): Promise<number>;
  close?(): Promise<void>;
  /**
   * The capability of a sink that archives calls: read access to its objects (recording keys and
   * links), which the worker role hands to the other sinks (SinkDeps.archive; the first such sink).
   * Absent: the sink archives nothing others may link to.
   */
  archiveAccess?(): ArchiveAccess;
}

/** What every sink factory may use. Everything external comes through here, so tests hand in real local servers. */
export interface SinkDeps<S = SinkSettings> {
  log: Logger;
  /** Small durable key/value memory per sink (CRM record ids, notification markers). */
  state: KeyValueStore;
  /** The platform's REST API client, when configured (TELEPHONY_API_URL). */
  telephony: TelephonyClient | null;
  /** Current time; tests pass a controllable clock. */
  now: () => Date;
  /**
   * Its type's section of the configuration (`Config.sinkSettings[type]`): the parsed values of the
   * variables the type declares (secrets are read from here, never copied into options).
   */
  settings: S;
  /**
   * The key of the keyed hashes that name phone numbers (queues/privacy-key.ts: PRIVACY_HMAC_SECRET,
   * else the key kept in Redis). The worker always gives it; without it (tools, tests without Redis)
   * the notification sinks fall back to PRIVACY_HMAC_SECRET, else name numbers in clear.
   */
  privacyKey?: HmacKeySource;
  /** Numbers that must never be texted (the Redis set the CLI manages), when available. */
  optOut?: { has(number: string): Promise<boolean> };
  /** Read access to the archive sink's objects, when one is configured (CRM links to recordings). */
  archive?: ArchiveAccess;
}

/** What other sinks may read of the archive (src/sinks/archive/access.ts); the archive owns its layout and store. */
export interface ArchiveAccess {
  /**
   * Keys of the call's recordings as the archive stored them, in the call's order, up to the first
   * one not stored (yet): empty until the archive sink has stored the first.
   */
  recordingKeys(call: CanonicalCall): Promise<string[]>;
  /** A pre-signed GET URL of `key`, valid `expiresInSec`; absent when the store cannot sign URLs. */
  presignGet?(key: string, expiresInSec: number): Promise<string>;
}

/** What `SinkType.check` may know besides options and environment. */
interface SinkCheckContext {
  /** Whether the platform's REST API is configured (TELEPHONY_API_URL with credentials). */
  telephony: boolean;
}

/** Limits applied to a sink's whole queue (BullMQ worker limiter). */
export interface QueueLimit {
  max: number;
  durationMs: number;
}

/** A sink type whose `create` is synchronous (nothing heavy to load). */
export type SyncSinkType<O = unknown, S = SinkSettings> = Omit<SinkType<O, S>, 'create'> & {
  create(name: string, options: O, deps: SinkDeps<S>): Sink;
};

/** A kind of sink: how its options are validated, how it is built, and its environment shortcut. */
export interface SinkType<O = unknown, S = SinkSettings> {
  readonly type: string;
  /** zod schema of the sink's options in the config file (`sinks.<name>`, minus `type`). */
  readonly options: z.ZodType<O>;
  /**
   * The environment variables this sink type reads (its credentials, its shortcut), each with the
   * schema of its value. src/config/env.ts composes every type's into the one environment schema,
   * so a bad value is reported with every other configuration problem; src/config picks their parsed
   * values into the type's settings (`S`, `SinkSettings<typeof env>`), which its hooks and sinks get.
   */
  readonly env?: EnvShape;
  /**
   * What keeps a sink with these options from starting, checked with the configuration so that
   * `check-config` and `start` report it in the same pass: credentials neither in the options nor
   * in its settings, the platform API not configured. Each problem names what to set.
   */
  check?(options: O, settings: S, context: SinkCheckContext): string[];
  /**
   * Builds the sink. May be async: heavy client libraries (AWS SDK, nodemailer) are imported here,
   * so a process loads only those of the sinks it runs (the ingress none).
   */
  create(name: string, options: O, deps: SinkDeps<S>): Sink | Promise<Sink>;
  /**
   * Whether the sink reads `call.raw` (the original payload). When false, the fan-out leaves it out
   * of this sink's jobs (less to store and parse per job). Absent: true.
   */
  needsRaw?(options: O): boolean;
  /**
   * Whether the sink reads the transcript's text. When false, the fan-out leaves the text out of
   * this sink's jobs (`Transcript.omitted`: whether there is one is still known). Absent: true.
   */
  needsTranscript?(options: O): boolean;
  /**
   * The parts of the call (users, summary, smart answers, headline, forwarding, channel: `CallPart`)
   * the sink reads, e.g. those its templates use. When given, the fan-out leaves the others out of
   * this sink's jobs (`withParts`). Absent: all.
   */
  needsParts?(options: O): ReadonlySet<CallPart>;
  /** Steady rate limit for the sink's queue (each endpoint's queue), if the remote has one. */
  limit?(options: O): QueueLimit | undefined;
  /**
   * True when the sink's remote may ask the whole queue to wait (it throws RetryLaterError with
   * scope `queue`): its queue is then held back in every process (workers/runner.ts). Absent: such a
   * wait would delay only the job that got it.
   */
  queueWide?: true;
  /**
   * The names of the sink's endpoints when each gets a queue of its own (`sink-<name>.<endpoint>`):
   * one job, one retry schedule, one dead letter and one pause per endpoint. Absent: one queue.
   */
  endpoints?(options: O): string[];
  /** The sink's own retry policy when its options give one; absent or undefined: the global one (JOB_ATTEMPTS …). */
  retry?(options: O, global: RetryPolicy): RetryPolicy | undefined;
  /**
   * Sinks and routes implied by environment variables alone (e.g. ARCHIVE_S3_BUCKET), used when
   * the config file does not define a sink of the same name. `configFile` tells whether one was given.
   */
  fromEnv?(
    settings: S,
    context: { configFile: boolean },
  ): { sinks: Record<string, { type: string } & Record<string, unknown>>; routes: Route[] } | null;
}

/**
 * A sink type as the registry holds it: its options typed for its own file, `unknown` for the
 * registry. Sound because every method is called only with options its own `options` schema parsed
 * (src/config/index.ts); the one place that forgets O, instead of a cast at each registry line.
 */
export function defineSinkType<O, S>(type: SinkType<O, S>): SinkType {
  return type as unknown as SinkType;
}
