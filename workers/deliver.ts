// Sink delivery: hands the call of a sink job to its adapter. Errors travel up with their class
// untouched (the runner sorts them: permanent, retry-later, auth, transient); only their text loses
// what it echoes of the call (names, numbers, summary and transcript sentences) before the runner
// logs it and BullMQ keeps it as the dead letter's reason.
import type { Job } from 'bullmq';
import type { Logger } from 'pino';
import { UnprocessableJobError } from '../src/errors.js';
import { scrubErrorEchoes, type EchoValues } from '../src/redact.js';
import type { CanonicalCall } from '../src/model/call.js';
import { numberSpellings } from '../src/model/phone.js';
import type { AttemptOutcome, Sink, SinkResult } from '../src/sinks/types.js';
import type { SinkDeliverJob } from '../queues/registry.js';

/** The personal texts of a call that a remote's error text may echo. */
function echoValuesOf(call: Omit<CanonicalCall, 'revision'>): EchoValues {
  const texts: string[] = [];
  if (call.summary) texts.push(call.summary.content, ...call.summary.keyPoints, ...call.summary.topics);
  if (call.transcript) texts.push(call.transcript.content, ...call.transcript.chunks.map((c) => c.content));
  for (const scenario of call.scenarios ?? []) {
    for (const set of scenario.smartAnswers) for (const item of set.setItems) texts.push(item.answer);
  }
  const names = (call.users ?? []).flatMap((u) => [u.fullName, u.firstName, u.lastName]);
  // A speaker callsync could not place keeps the sender's label: a person's or a team's name.
  if (call.transcript) names.push(...call.transcript.chunks.map((c) => c.speakerLabel ?? null));
  const numbers = [call.from, call.to, call.fromRaw, call.toRaw, call.forwarding?.target ?? null];
  const present = (values: (string | null | undefined)[]) =>
    values.filter((v): v is string => typeof v === 'string' && v.trim() !== '');
  // Each number in the spellings a remote may write it in (`0176…` for `+49176…`).
  return { texts: present(texts), names: present(names), numbers: present(numbers).flatMap(numberSpellings) };
}

/**
 * Removes the call's own texts from an error's message (and its stack, which BullMQ keeps too).
 * @internal Exported for its tests only (test/redaction.redis.test.ts).
 */
export function scrubCallEchoes(err: unknown, call: Omit<CanonicalCall, 'revision'>): unknown {
  return err instanceof Error ? scrubErrorEchoes(err, echoValuesOf(call)) : err;
}

/**
 * `endpoint`: the endpoint whose queue this processor serves (a sink with endpoints); the queue
 * decides, not the job. `outcome`: how the sink may write the attempt's timeline entries
 * (workers/attempts.ts), handed on in its context.
 */
export function createDeliverProcessor(sink: Sink, log: Logger, endpoint?: string) {
  return async function deliver(
    job: Job<SinkDeliverJob>,
    signal: AbortSignal,
    outcome?: AttemptOutcome,
  ): Promise<SinkResult> {
    const data = job.data?.call;
    if (!data || typeof data.key !== 'string')
      throw new UnprocessableJobError('sink job carries no canonical call record');
    // The revision is delivery metadata, not content: sinks get it beside the call, never inside what they write.
    const { revision, ...call } = data;
    let jobLog: Logger | undefined;
    try {
      return await sink.deliver(call, {
        jobId: job.id ?? '',
        attempt: job.attemptsMade + 1,
        ...(endpoint === undefined ? {} : { endpoint }),
        ...(revision ? { revision } : {}),
        ...(outcome ? { outcome } : {}),
        // Built when the sink first logs: most deliveries log nothing at info.
        get log() {
          return (jobLog ??= log.child({
            sink: sink.name,
            ...(endpoint === undefined ? {} : { endpoint }),
            jobId: job.id,
          }));
        },
        signal,
      });
    } catch (err) {
      throw scrubCallEchoes(err, call);
    }
  };
}
