// `send-sample --outcome missed|busy|transferred|failed|unknown`: a webhook call is always answered
// (an AI agent took it), so a sample of another outcome is sent the way such calls arrive — as the
// Push API's events of one call (newCall, then hangup with the cause that gives the outcome,
// src/model/push.ts) to `/webhooks/push`. Those requests carry no X-Sipgate-Signature (only the
// platform can sign them), so the ingress takes them only with PUSH_API_VERIFY=false.
import type { Config } from '../config/index.js';
import type { Outcome } from '../model/call.js';
import { assemblePushCall, parsePushEvent, type PushCallState } from '../model/push.js';
import { sinksFor } from '../routing/router.js';
import { PUSH_PATH } from '../sources/push.js';
import { sinkJobId, sinkQueueName } from '../../queues/registry.js';
import type { CliIo } from './io.js';
import { directionOf, followHint, type SampleOptions } from './sample.js';

/** The hangup cause the platform sends for a call of each outcome (the reverse of src/model/push.ts causeOutcome). */
const CAUSES: Partial<Record<Outcome, string>> = {
  missed: 'noAnswer',
  busy: 'busy',
  transferred: 'forwarded',
  failed: 'notFound',
  unknown: 'unknown',
};

const hints: Record<number, string> = {
  401: 'the ingress checks the Push API signature, which only the platform can make: try outcomes other than answered on an instance started with PUSH_API_VERIFY=false',
  403: 'this address is not on the allow list: for a local try start callsync with WEBHOOK_ALLOWED_IPS=127.0.0.1,::1',
  404: "no Push API route at this address: is the URL the ingress's?",
  503: 'callsync could not store the event (is Redis up?) or is shutting down; try again',
};

export async function sendPushSample(
  config: Config,
  webhookUrl: string,
  callId: string,
  sample: SampleOptions & { outcome: Outcome },
  io: CliIo,
): Promise<number> {
  const target = new URL(PUSH_PATH, webhookUrl).toString();
  const cause = CAUSES[sample.outcome] ?? 'unknown';
  const direction = directionOf(sample.direction);
  const common = { callId, direction, from: sample.from ?? '+4930901820', to: sample.to ?? '+4940809010' };
  const events = [
    new URLSearchParams({ event: 'newCall', ...common, 'user[]': 'Sample Agent', 'userId[]': 'w0' }),
    new URLSearchParams({ event: 'hangup', ...common, cause }),
  ];
  for (const body of events) {
    let res: Response;
    try {
      res = await fetch(target, {
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        body: body.toString(),
        signal: AbortSignal.timeout(10_000),
      });
    } catch (err) {
      const c = (err as Error & { cause?: { code?: string; message?: string } }).cause;
      io.err(`could not reach ${target}: ${c?.code ?? c?.message ?? (err as Error).message}`);
      io.err('is callsync running? start it with `callsync start` (or `npm start`), or pass --url');
      return 1;
    }
    const text = await res.text();
    if (res.status !== 200) {
      io.err(`${target} answered ${res.status} to the ${body.get('event')} event: ${text.slice(0, 500)}`);
      const hint = hints[res.status];
      if (hint) io.err(`hint: ${hint}`);
      return 1;
    }
  }
  io.out(
    `accepted: call ${callId} as Push API events (newCall, hangup cause ${cause}): outcome ${sample.outcome}, direction ${direction}`,
  );
  // The call as the ingress assembles it (the times aside, which no route reads), for its queues.
  const now = Date.now();
  const state: PushCallState = {
    newCall: { at: now, event: parsePushEvent(events[0]!.toString()) },
    hangup: { at: now, event: parsePushEvent(events[1]!.toString()) },
  };
  const call = assemblePushCall(callId, state, new Date(now))!;
  const queues = sinksFor(config.routes, call).flatMap(
    (name) => config.sinks[name]?.endpoints?.map((e) => sinkQueueName(name, e)) ?? [sinkQueueName(name)],
  );
  if (queues.length === 0) io.out('no sink takes this call in this configuration (see its routes)');
  else io.out(`job ${sinkJobId(call)} in ${queues.join(', ')}${followHint(config, callId)}`);
  return 0;
}
