// A Redis connection for one CLI command: fails fast with a readable message when Redis is away.
// Made by the same factory as callsync's own (one Redis, a cluster or Sentinel; password, TLS).
import {
  createRedis,
  describeRedis,
  lastRedisError,
  redisFailure,
  type RedisClient,
  type RedisSettings,
} from '../../queues/connection.js';
import type { Config } from '../config/index.js';
import type { CliIo } from './io.js';
import {
  findRedisServer,
  NoRedisError,
  PrivateRedisFolderError,
  redisEvictionProblem,
  redisVersionProblem,
  resolveRedis,
  serverBinProblem,
  type RedisOrigin,
  type ResolveOptions,
} from '../../queues/private-redis.js';

export class CliFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'CliFailure';
  }
}

/**
 * A connection to callsync's Redis: the configured one, else the one answering at
 * REDIS_LOCAL_PROBE, else the private Redis a running `callsync start` shares (a command never
 * starts one; it counts as a user of it until the connection ends, so it is not stopped under it).
 * A private Redis loading its data is waited for (up to 10 min), saying so on `io.err` every 5 s.
 * With `io`, a DATA_DIR it cannot write (read-only) does not stop a command: it uses the running
 * private Redis without counting as its user, and says so once on `io.err`.
 */
export async function connectRedis(
  config: Config,
  io?: Pick<CliIo, 'err'>,
  options: ConnectOptions = {},
): Promise<RedisClient> {
  const resolved = await resolveRedis(config.redis, lookOnly(io));
  try {
    const redis = await connectRedisTo(resolved.settings, undefined, undefined, options);
    redis.once('end', () => void resolved.release());
    return redis;
  } catch (err) {
    await resolved.release();
    throw err;
  }
}

const quiet = { info: () => undefined, warn: () => undefined };

/** The note that a command is no user of the private Redis is said once per process (check-config looks twice). */
let notUserSaid = false;

/**
 * How a command looks for its Redis: never starting one, and of what that says only how far a load
 * of the private Redis it waits for is, on stderr (before, a command waited out a load of minutes
 * in silence). The rest of the log (a start's lines) is not a command's to print.
 */
function lookOnly(io: Pick<CliIo, 'err'> | undefined): ResolveOptions {
  return {
    log: quiet,
    start: false,
    ...(io && {
      onLoading: (progress: string) =>
        io.err(`callsync: the private Redis is loading its data: ${progress}; waiting for it`),
      // A read-only DATA_DIR: a command still reads (and writes Redis), only not as a user of the server.
      onNotUser: (note: string) => {
        if (!notUserSaid) io.err(`callsync: note: ${note}`);
        notUserSaid = true;
      },
    }),
  };
}

interface ConnectOptions {
  /** A command Redis does not answer within this long fails (a frozen Redis, a network black hole). Default: none. */
  commandTimeoutMs?: number;
}

/** How long a command waits for Redis to answer a connection. */
const CONNECT_TIMEOUT_MS = 3000;

/**
 * A connection to the Redis of `settings` (another deployment's, for migrate-keys); `what` names it
 * in the error, `passwordFrom` where its password comes from.
 */
export async function connectRedisTo(
  settings: RedisSettings,
  what = 'Redis',
  passwordFrom = 'REDIS_URL or REDIS_PASSWORD',
  options: ConnectOptions = {},
): Promise<RedisClient> {
  const redis = createRedis(settings, 'producer', {
    ...(options.commandTimeoutMs !== undefined && { commandTimeout: options.commandTimeoutMs }),
    lazyConnect: true,
    enableOfflineQueue: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    retryStrategy: (times) => (times > 3 ? null : 200 * times),
    // Sentinels unreachable: give up as for a Redis (the default retried for ever, the command hung).
    sentinelRetryStrategy: (times) => (times > 3 ? null : 200 * times),
  });
  // connect() fails with only "Connection is closed."; the cause is in the 'error' events before it.
  const cause = lastRedisError(redis);
  try {
    await redis.connect();
  } catch (err) {
    redis.disconnect();
    throw new RedisConnectFailure(
      what,
      describeRedis(settings),
      redisFailure(cause() ?? (err as Error), passwordFrom, CONNECT_TIMEOUT_MS),
    );
  }
  return redis;
}

/** Connecting to a Redis failed: a credentials refusal is no network problem, and says so. */
class RedisConnectFailure extends CliFailure {
  constructor(
    what: string,
    where: string,
    readonly why: { reason: string; answered: boolean },
  ) {
    super(why.answered ? `${what} at ${where} ${why.reason}` : `cannot reach ${what} at ${where}: ${why.reason}`);
    this.name = 'RedisConnectFailure';
  }
}

/** What check-config found: which Redis (configured, local, private) and whether it answered. */
export interface RedisReach {
  origin: RedisOrigin | null;
  /** Where, never a password. */
  where: string;
  /** The URL of the Redis in use (a password masked) when one was found, else null. */
  url: string | null;
  /** Why callsync could not use it, or null. */
  problem: string | null;
  /** What may go wrong with it (it evicts keys), for check-config's warnings. */
  warnings?: string[];
}

/**
 * Connects to the Redis callsync would use (never starting one) and says which it is. A private
 * Redis that is not running is no problem when redis-server is there to start it (and new enough).
 */
export async function reachRedis(config: Config, io?: Pick<CliIo, 'err'>): Promise<RedisReach> {
  let resolved;
  try {
    resolved = await resolveRedis(config.redis, lookOnly(io));
  } catch (err) {
    // A DATA_DIR it cannot use is a problem of the configuration, listed with the others (exit 2).
    if (err instanceof PrivateRedisFolderError)
      return { origin: 'private', where: 'private', url: null, problem: err.message };
    if (!(err instanceof NoRedisError)) throw err;
    const local = config.redis.local;
    const bin = local ? await findRedisServer(local.serverBin) : null;
    // One that `callsync start` would refuse to start is no answer either.
    const tooOld = bin === null ? null : await serverBinProblem(bin);
    if (tooOld) return { origin: null, where: 'none', url: null, problem: `no usable redis-server: ${tooOld}` };
    if (local && bin !== null) {
      return {
        origin: 'private',
        where: `private, not running (\`callsync start\` starts it in ${local.dir})`,
        url: null,
        problem: null,
      };
    }
    return { origin: null, where: 'none', url: null, problem: err.message };
  }
  const url = describeRedis(resolved.settings);
  const where = resolved.origin === 'configured' ? `configured, ${url}` : resolved.where;
  try {
    const redis = await connectRedisTo(resolved.settings);
    let tooOld: string | null;
    let evicts: string | null;
    try {
      await redis.ping();
      tooOld = await redisVersionProblem(redis, url);
      evicts = await redisEvictionProblem(redis, url);
    } finally {
      redis.disconnect();
    }
    return {
      origin: resolved.origin,
      where: `${where}: answers`,
      url,
      problem: tooOld,
      ...(evicts ? { warnings: [evicts] } : {}),
    };
  } catch (err) {
    return { origin: resolved.origin, where, url, problem: reachProblem(where, err as Error) };
  } finally {
    await resolved.release();
  }
}

/** check-config's problem line for a Redis it could not use. */
function reachProblem(where: string, err: Error): string {
  if (!(err instanceof RedisConnectFailure)) return `Redis unreachable (${where}): ${err.message}`;
  const { reason, answered } = err.why;
  return answered ? `Redis (${where}) ${reason}` : `Redis unreachable (${where}): ${reason}`;
}
