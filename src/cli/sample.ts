// A call-data webhook as the platform sends it (spec format v2, synthetic data), for `send-sample`,
// the checks of its --url, --from, --to, --direction and --outcome, and where to follow the sample.
import type { Config } from '../config/index.js';
import { OUTCOMES, type Outcome } from '../model/call.js';
import { isAnonymous, toE164 } from '../model/phone.js';
import { oneOf } from '../env-values.js';
import { UsageError } from './io.js';

/** The parts of the sample a user chooses, e.g. to try an SMS rule with a mobile caller and a missed call. */
export interface SampleOptions {
  /** As the ingress reads it: E.164 with or without spaces, `0049…`, `49…`, `tel:…`, or an anonymous marker. */
  from?: string;
  to?: string;
  /** As the webhook sends it: in, out (or inbound, outbound, incoming, outgoing). */
  direction?: string;
  /** answered (the default): a webhook; any other: the Push API's events of such a call (./sample-push.ts). */
  outcome?: Outcome;
}

/** Direction words the ingress reads (src/model/webhook.ts), and what each stands for. */
const DIRECTION_WORDS: Record<string, 'in' | 'out'> = {
  in: 'in',
  inbound: 'in',
  incoming: 'in',
  out: 'out',
  outbound: 'out',
  outgoing: 'out',
};

function numberOption(name: string, value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (toE164(value) !== null || (value.trim() !== '' && isAnonymous(value))) return value;
  throw new UsageError(
    `--${name} "${value}" is not a number the ingress reads: give it with its country code (+4915112345678, +49 151 1234 5678, 004915112345678 or 4915112345678), or "anonymous"; a national number (0151 …) is kept as text only, so no rule on the number reaches it`,
  );
}

/** The outcomes a sample can have: all but rejected, which only channel events (the poller) report. */
const SAMPLE_OUTCOMES = OUTCOMES.filter((o) => o !== 'rejected');

/** The checked --url: an http(s) URL (a usage error otherwise, not "could not reach"). */
export function urlOption(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (URL.canParse(value) && /^https?:$/.test(new URL(value).protocol)) return value;
  throw new UsageError(
    `--url "${value}" is not a valid URL: give the ingress's webhook URL with http:// or https://, e.g. http://127.0.0.1:3000/webhooks/ai-agent/sample-agent`,
  );
}

/** The checked --from, --to, --direction and --outcome; a clear usage error for each bad one. */
export function sampleOptions(values: {
  from?: string;
  to?: string;
  direction?: string;
  outcome?: string;
}): SampleOptions {
  const options: SampleOptions = {};
  const from = numberOption('from', values.from);
  const to = numberOption('to', values.to);
  if (from !== undefined) options.from = from;
  if (to !== undefined) options.to = to;
  if (values.direction !== undefined) {
    if (!(values.direction.trim().toLowerCase() in DIRECTION_WORDS))
      throw new UsageError(`--direction "${values.direction}": use ${oneOf(['in', 'out'])} (or inbound, outbound)`);
    options.direction = values.direction;
  }
  if (values.outcome !== undefined) {
    const outcome = values.outcome.trim().toLowerCase();
    if (!(OUTCOMES as readonly string[]).includes(outcome))
      throw new UsageError(`--outcome "${values.outcome}": use ${oneOf([...SAMPLE_OUTCOMES])}`);
    if (outcome === 'rejected')
      throw new UsageError(
        '--outcome rejected: only channel events (the poller) report a rejected call; neither the webhook nor the Push API sends one',
      );
    options.outcome = outcome as Outcome;
  }
  return options;
}

/**
 * Where to follow a sample's jobs: `callsync call <callId>` (its timeline, unless CALL_TIMELINE=off)
 * and the dashboard, only when it is on (ADMIN_PASSWORD or ADMIN_TOKEN; otherwise /admin/queues is a 404).
 */
export function followHint(config: Config, callId: string): string {
  const ways: string[] = [];
  if (config.timeline.enabled) ways.push(`with \`callsync call ${callId}\``);
  if (config.ops.admin.password || config.ops.admin.token) ways.push('on /admin/queues');
  return ways.length === 0 ? '' : `: follow it ${ways.join(' or ')}`;
}

/** `in` or `out` of a direction word the ingress reads. */
export const directionOf = (word: string | undefined): 'in' | 'out' =>
  DIRECTION_WORDS[(word ?? 'in').trim().toLowerCase()] ?? 'in';

export function samplePayload(now = new Date(), options: SampleOptions = {}): Record<string, unknown> {
  const end = now.getTime();
  const start = end - 95_000;
  return {
    version: 'v2',
    call: {
      id: `sample-${now.toISOString().replace(/[-:.]/g, '').replace('T', '-').slice(0, 15)}-${Math.random().toString(16).slice(2, 6)}`,
      from: options.from ?? '+4930901820',
      to: options.to ?? '+4940809010',
      startTime: start,
      endTime: end,
      duration: 95,
      direction: options.direction ?? 'in',
      users: [{ userId: 'w0', fullName: 'Sample Agent' }],
    },
    assist: {
      summary: {
        content: 'Sample call sent by `callsync send-sample`: the caller asked for the opening hours.',
        keyPoints: ['Opening hours given: Mon-Fri 9:00-17:00'],
        topics: ['opening hours'],
      },
      transcription: {
        content: 'Caller: Hello, when are you open?\nCallee: Monday to Friday, nine to five.',
        chunks: [
          { speaker: 'caller', startTime: start + 2000, endTime: start + 4000, content: 'Hello, when are you open?' },
          {
            speaker: 'callee',
            startTime: start + 5000,
            endTime: start + 8000,
            content: 'Monday to Friday, nine to five.',
          },
        ],
      },
    },
  };
}
