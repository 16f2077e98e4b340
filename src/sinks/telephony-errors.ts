// The telephony client's failures (src/telephony/errors.ts, TelephonyApiError) as the SinkErrors the
// queue runner acts on, for the sinks that use the client: the SMS sink, the archive's and Pipedrive's
// recording downloads. The client is not a sink; this is where its errors become a sink's.
import { AuthError, PermanentError, RetryLaterError, TransientError } from '../errors.js';
import { TelephonyApiError } from '../telephony/errors.js';

/** A TelephonyApiError as the SinkError of its kind (the original as its cause); anything else unchanged. */
export function sinkErrorOf(err: unknown): unknown {
  if (!(err instanceof TelephonyApiError)) return err;
  const options = { status: err.status, cause: err };
  switch (err.kind) {
    case 'permanent':
      return new PermanentError(err.message, options);
    case 'auth':
      return new AuthError(err.message, options);
    case 'retry-later':
      // One account shares one rate limit: a 429 concerns every job of the queue.
      return new RetryLaterError(err.message, err.retryAfterMs, { ...options, scope: 'queue' });
    case 'transient':
      return new TransientError(err.message, options);
  }
}

/** The TelephonyApiError a sink error was made of (sinkErrorOf), or the error itself. */
export function telephonyCause(err: unknown): unknown {
  return err instanceof Error && err.cause instanceof TelephonyApiError ? err.cause : err;
}
