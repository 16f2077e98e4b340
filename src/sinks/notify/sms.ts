// The `sms` notification sink: one rule = one sink. Sends a templated text through the platform's
// API (SendWebSmsRequest, spec 2.4) to the call's other party or to fixed numbers, honouring quiet
// hours, a per-number cooldown, the opt-out list and the "never twice" ledger.
import { z } from 'zod';
import type { CanonicalCall } from '../../model/call.js';
import { maskPhone } from '../../log.js';
import { OutcomeUnknownError, TelephonyApiError } from '../../telephony/errors.js';
import { sinkErrorOf, telephonyCause } from '../telephony-errors.js';
import type { SendWebSmsRequest, TelephonyClient } from '../../telephony/types.js';
import { classify, PermanentError, requestCertainlyNotSent, RetryLaterError, SinkError } from '../../errors.js';
import type { Sink, SinkContext, SinkDeps, SinkResult, SinkSettings, SyncSinkType } from '../types.js';
import { envString, type EnvShape } from '../../env-values.js';
import { partsReadBy, templateVars } from '../template-vars.js';
import {
  NotificationLedger,
  privacyEnv,
  privacyKeyOf,
  recipientHash,
  sendClaimed,
  sendOnce,
  settleExisting,
  outcomeUnknownOfThisJob,
  unknownOfThisJob,
  type LedgerEntry,
  type SendOnceOptions,
} from './ledger.js';
import type { HmacKeySource } from '../../../queues/privacy-key.js';
import type { TimedWrite } from '../../state/kv.js';
import { renderText } from './message.js';
import { smsLength, truncateSms } from './sms-length.js';
import type { OptOutLookup } from './opt-out.js';
import { commonOptions, durationSchema, templateSchema } from './options.js';
import { checkSmsRecipient, parseE164 } from './phone.js';
import { quietHoursEnd, type QuietHours } from './time.js';

const e164Schema = z.string().transform((v, ctx) => {
  const e164 = parseE164(v);
  if (e164 === undefined) {
    ctx.addIssue({ code: 'custom', message: `expected an E.164 phone number such as +4915112345678, got "${v}"` });
    return z.NEVER;
  }
  return e164;
});

const smsOptionsSchema = z.strictObject({
  /** SMS extension id (e.g. `s0`). Default: TELEPHONY_SMS_ID. */
  smsId: z.string().min(1).optional(),
  /** `caller` (the call's other party: the caller of an incoming call, the callee of an outgoing one) or fixed E.164 numbers. Default `caller`. */
  to: z.union([z.literal('caller'), z.array(e164Schema).min(1)]).default('caller'),
  /** `{{field}}` template of the text (docs/notifications.md lists the fields). */
  message: templateSchema,
  /**
   * Most segments (billed parts) a text may take; a longer one is cut at a word with an ellipsis in
   * its own encoding (`...` keeps a GSM-7 text GSM-7). GSM-7: 160 characters in one, 153 per segment
   * beyond; any other character makes the text UCS-2: 70 in one, 67 per segment. Default 3.
   */
  maxSegments: z.int().min(1).max(10).default(3),
  /** Longest text in characters, besides `maxSegments`. Default: no limit but the segments. */
  maxLength: z.number().int().min(20).max(1600).optional(),
  /** At most one SMS per number and rule within this time (e.g. `12h`). Default: no cooldown. */
  cooldown: durationSchema.optional(),
  /** Numbers never texted by this rule (in addition to the shared opt-out list). */
  optOut: z.array(e164Schema).default([]),
  /**
   * How an SMS due in quiet hours waits: `sendAt` hands it to the platform now, scheduled for the end
   * of the quiet hours; `delay` keeps the job in the queue until then. Default `sendAt`.
   */
  quietHoursMode: z.enum(['sendAt', 'delay']).default('sendAt'),
  ...commonOptions,
});

export type SmsOptions = z.infer<typeof smsOptionsSchema>;

/** The environment variables the SMS sink type reads (the platform API itself: TELEPHONY_*, src/telephony/client.ts). */
const smsEnv = {
  /** SMS extension id (e.g. `s0`): the sinks' `smsId` default. */
  TELEPHONY_SMS_ID: envString,
  PRIVACY_HMAC_SECRET: privacyEnv.PRIVACY_HMAC_SECRET,
} satisfies EnvShape;

/** The sms type's section of the configuration: its variables, parsed. */
type SmsSettings = SinkSettings<typeof smsEnv>;

const NO_TELEPHONY =
  'needs the platform API to send: set TELEPHONY_API_URL and TELEPHONY_TOKEN_ID + TELEPHONY_TOKEN (or TELEPHONY_ACCESS_TOKEN)';
const NO_SMS_ID = "needs an SMS extension id: set TELEPHONY_SMS_ID or the sink's smsId";

/** Sink dependencies plus the shared opt-out list (Redis set), when the process provides it. */
interface NotifySinkDeps extends SinkDeps<SmsSettings> {
  optOut?: OptOutLookup;
}

/**
 * Whether a failed send may have reached the platform. The API client raises OutcomeUnknownError
 * when the request left but no answer came back; an HTTP answer or a request that provably never
 * left is definite; anything else unexplained is treated as unknown (the safe side).
 */
function smsOutcomeUnknown(thrown: unknown): boolean {
  const err = telephonyCause(thrown);
  if (err instanceof OutcomeUnknownError) return true;
  if (err instanceof TelephonyApiError && (err.status !== undefined || err.kind !== 'transient')) return false;
  if (err instanceof SinkError && (err.status !== undefined || err.kind !== 'transient')) return false;
  return !requestCertainlyNotSent(err);
}

/** `12 h`, `30 min`. */
function formatMs(ms: number): string {
  return ms >= 3_600_000 ? `${+(ms / 3_600_000).toFixed(1)} h` : `${+(ms / 60_000).toFixed(1)} min`;
}

function parseCooldown(raw: string | null): { callKey: string; until: number } | null {
  if (raw === null) return null;
  try {
    const v = JSON.parse(raw) as { callKey?: unknown; until?: unknown };
    return typeof v.callKey === 'string' && typeof v.until === 'number' ? { callKey: v.callKey, until: v.until } : null;
  } catch {
    return null;
  }
}

interface Candidate {
  number: string;
  label: string;
  /** The marker found (`sending`: an attempt in flight or cut off), when not taken now. */
  earlier: LedgerEntry | null;
  /** This attempt took the marker (`sending`) in its first round trip. */
  taken: boolean;
}

class SmsSink implements Sink {
  readonly type = 'sms';
  private readonly ledger: NotificationLedger;
  /** The privacy key: the cooldown key names the number by its keyed hash. */
  private readonly secret: HmacKeySource | undefined;
  private readonly optOut: Set<string>;

  constructor(
    readonly name: string,
    private readonly o: SmsOptions,
    private readonly smsId: string,
    private readonly telephony: TelephonyClient,
    private readonly deps: NotifySinkDeps,
  ) {
    this.secret = privacyKeyOf(deps);
    this.ledger = new NotificationLedger(deps.state, undefined, this.secret);
    this.optOut = new Set(o.optOut);
  }

  private quietHours(): QuietHours | undefined {
    const q = this.o.quietHours;
    return q ? { start: q.start, end: q.end, timeZone: q.timeZone ?? this.o.timeZone } : undefined;
  }

  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const now = this.deps.now();
    if (this.o.maxAge !== undefined && now.getTime() - Date.parse(call.startedAt) > this.o.maxAge) {
      return { status: 'skipped', reason: 'call older than maxAge' };
    }
    const message = truncateSms(renderText(this.o.message, templateVars(call, { timeZone: this.o.timeZone })), this.o);
    if (message === '') return { status: 'skipped', reason: 'message empty for this call' };

    const quiet = this.quietHours();
    const quietEnd = quiet ? quietHoursEnd(now, quiet) : null;
    // Delayed by quiet hours: only read, take no marker (the job waits in the queue).
    const waits = quietEnd !== null && this.o.quietHoursMode === 'delay';

    // One round trip per recipient before any send: the ledger's marker read (an earlier send, or
    // one that may have happened), the opt-out list tested, and the marker taken (`sending`) when
    // neither holds — the claim that makes "never twice" is made here, before the send.
    const skipped: string[] = [];
    const candidates: Candidate[] = [];
    // A marker taken that this attempt did not send under is given back (nothing was sent), also
    // when a later recipient's round trip fails.
    const unsent = new Set<Candidate>();
    const giveBack = async () => {
      for (const c of unsent) await this.ledger.forget(call.key, c.number);
      unsent.clear();
    };
    try {
      await this.claimEach(call, now, waits, skipped, candidates, unsent, ctx.jobId);
    } catch (err) {
      await giveBack().catch(() => undefined);
      throw err;
    }
    if (candidates.length === 0) return this.finish(ctx, [], skipped);

    if (waits) {
      throw new RetryLaterError(`quiet hours until ${quietEnd.toISOString()}`, quietEnd.getTime() - now.getTime(), {
        scope: 'job',
      });
    }
    // Quiet hours end within a day, well inside the platform's 30-day limit for sendAt.
    const sendAt = quietEnd ? Math.ceil(quietEnd.getTime() / 1000) : undefined;

    const sent: [string, string][] = [];
    /** Recipients whose SMS failed for good in this attempt (the others are still sent). */
    const refused: { label: string; err: unknown }[] = [];
    // The last recipient's `sent` marker is written with the attempt's timeline entries, in one
    // script (where the store can reach the timeline: one command less per SMS), once the result is
    // known — nothing awaited between the send and that write but the result's making.
    const last = ctx.outcome ? candidates[candidates.length - 1] : undefined;
    let marker: TimedWrite | undefined;
    try {
      for (const c of candidates) {
        if (!(await this.takeCooldown(c.number, call.key, sendAt === undefined ? 0 : sendAt * 1000 - now.getTime()))) {
          skipped.push(`${c.label}: cooldown (${formatMs(this.o.cooldown ?? 0)})`);
          continue;
        }
        const request: SendWebSmsRequest = {
          smsId: this.smsId,
          recipient: c.number,
          message,
          ...(sendAt === undefined ? {} : { sendAt }),
        };
        const once: SendOnceOptions = {
          ledger: this.ledger,
          callKey: call.key,
          recipient: c.number,
          what: `SMS to ${c.label}`,
          now: this.deps.now,
          outcomeUnknown: smsOutcomeUnknown,
          jobId: ctx.jobId,
          send: async () => {
            try {
              await this.telephony.sendSms(request, ctx.signal);
            } catch (err) {
              throw sinkErrorOf(err);
            }
            return sendAt === undefined ? 'sent' : `scheduled for ${new Date(sendAt * 1000).toISOString()}`;
          },
          // The retry of a definite failure must not find its own cooldown; an unknown outcome keeps it.
          onDefiniteFailure: () => this.releaseCooldown(c.number, call.key),
          ...(c === last ? { deferSentMarker: true } : {}),
        };
        unsent.delete(c);
        let result;
        try {
          result = c.taken
            ? await sendClaimed(once)
            : c.earlier
              ? await settleExisting(once, c.earlier)
              : await sendOnce(once);
        } catch (err) {
          // A refusal of this one message (a 4xx, an outcome unknown: dead letters) does not keep the
          // next recipients from theirs; anything else (auth, a rate limit, a 5xx) stops the round.
          if (classify(err) !== 'permanent') throw err;
          refused.push({ label: c.label, err });
          continue;
        }
        if (result.sent) {
          marker = result.marker;
          const { encoding, segments } = smsLength(message);
          ctx.log.info({ sink: this.name, to: c.label, sendAt, encoding, segments }, 'sms handed to the platform');
          sent.push([c.label, result.ref ?? 'sent']);
        } else {
          skipped.push(`${c.label}: ${result.reason}`);
        }
      }
      const result = this.finish(ctx, sent, skipped);
      if (refused.length > 0) {
        // The sent ones are marked sent (the dead letter's retry sends only to the refused ones).
        if (marker) await this.ledger.writeSent(marker, result, undefined);
        throw refusedError(refused, sent.length + refused.length + skipped.length, sent.length);
      }
      if (marker) await this.ledger.writeSent(marker, result, ctx.outcome);
      return result;
    } finally {
      await giveBack();
    }
  }

  /** Per recipient one round trip (see deliver): the skipped ones with their reason, the others as candidates. */
  private async claimEach(
    call: CanonicalCall,
    now: Date,
    waits: boolean,
    skipped: string[],
    candidates: Candidate[],
    unsent: Set<Candidate>,
    jobId: string,
  ): Promise<void> {
    for (const target of this.targets(call)) {
      const check = checkSmsRecipient(target.number, target.raw);
      if (!check.ok) {
        skipped.push(check.reason);
        continue;
      }
      const label = maskPhone(check.number) ?? '';
      const listed = this.optOut.has(check.number);
      const probe = listed ? undefined : await this.deps.optOut?.probe?.(check.number);
      const got = await this.ledger.claimChecked(call.key, check.number, now, {
        ...(probe ? { set: probe } : {}),
        take: !waits && !listed,
      });
      const earlier = got.existing;
      if (earlier && unknownOfThisJob(earlier, jobId)) throw outcomeUnknownOfThisJob(`SMS to ${label}`, earlier);
      if (earlier?.state === 'sent') skipped.push(`${label}: already sent`);
      else if (earlier?.state === 'unknown')
        skipped.push(`${label}: an earlier attempt's outcome is unknown; not resent`);
      else if (listed || got.inSet || (!probe && (await this.optedOut(check.number))))
        skipped.push(`${label}: opted out`);
      else {
        const c: Candidate = { number: check.number, label, earlier, taken: got.taken };
        candidates.push(c);
        if (c.taken) unsent.add(c);
      }
    }
  }

  private targets(call: CanonicalCall): { number: string | null; raw: string | null }[] {
    if (this.o.to !== 'caller') return this.o.to.map((n) => ({ number: n, raw: n }));
    return call.direction === 'in'
      ? [{ number: call.from, raw: call.fromRaw }]
      : [{ number: call.to, raw: call.toRaw }];
  }

  private async optedOut(number: string): Promise<boolean> {
    return this.optOut.has(number) || ((await this.deps.optOut?.has(number)) ?? false);
  }

  /**
   * Reserves the number for this call until the cooldown has passed (by the sink's clock; the
   * key's TTL only cleans up). True when this call may text the number.
   */
  private async takeCooldown(number: string, callKey: string, extraMs: number): Promise<boolean> {
    if (this.o.cooldown === undefined) return true;
    const key = await this.cooldownKey(number);
    const now = this.deps.now().getTime();
    const ttl = this.o.cooldown + Math.max(0, extraMs);
    const mine = JSON.stringify({ callKey, until: now + ttl });
    if (await this.deps.state.setIfAbsent(key, mine, ttl)) return true;
    const held = parseCooldown(await this.deps.state.get(key));
    if (held !== null && held.callKey !== callKey && held.until > now) return false;
    await this.deps.state.set(key, mine, ttl);
    return true;
  }

  /** `cooldown:<recipientHash>` (no number in clear); `cooldown:<number>` only without a privacy key (tests). */
  private async cooldownKey(number: string): Promise<string> {
    return `cooldown:${this.secret ? recipientHash(await this.secret.get(), number) : number}`;
  }

  private async releaseCooldown(number: string, callKey: string): Promise<void> {
    if (this.o.cooldown === undefined) return;
    const key = await this.cooldownKey(number);
    if (parseCooldown(await this.deps.state.get(key))?.callKey === callKey) await this.deps.state.delete(key);
  }

  private finish(ctx: SinkContext, sent: [string, string][], skipped: string[]): SinkResult {
    if (skipped.length > 0) ctx.log.info({ sink: this.name, skipped }, 'sms skipped');
    if (sent.length === 0) return { status: 'skipped', reason: skipped.join('; ') || 'no recipient' };
    return {
      status: 'done',
      refs: Object.fromEntries(sent),
      ...(skipped.length > 0 ? { reason: `also skipped: ${skipped.join('; ')}` } : {}),
    };
  }
}

/**
 * The dead letter of an attempt in which some recipients' SMS failed for good: the first refusal
 * itself when it was the only recipient, else one PermanentError naming each refused recipient
 * (masked) with its reason, and how many were sent.
 */
function refusedError(refused: { label: string; err: unknown }[], recipients: number, sent: number): unknown {
  const first = refused[0]!.err;
  if (recipients === 1) return first;
  const reasons = refused.map((r) => `SMS to ${r.label}: ${r.err instanceof Error ? r.err.message : String(r.err)}`);
  return new PermanentError(`${reasons.join('; ')} (sent to ${sent} of ${recipients} recipients)`, {
    status: first instanceof SinkError ? first.status : undefined,
    cause: first,
  });
}

export const smsSinkType: SyncSinkType<SmsOptions, SmsSettings> = {
  queueWide: true,
  type: 'sms',
  options: smsOptionsSchema as z.ZodType<SmsOptions>,
  needsRaw: () => false,
  needsTranscript: () => false,
  needsParts: (options) => partsReadBy([options.message]),
  env: smsEnv,
  check(options, env, { telephony }) {
    const problems: string[] = [];
    if (!telephony) problems.push(NO_TELEPHONY);
    if (!(options.smsId ?? env.TELEPHONY_SMS_ID)) problems.push(NO_SMS_ID);
    return problems;
  },
  create(name, options, deps) {
    if (deps.telephony === null) throw new Error(`sink "${name}" (sms) ${NO_TELEPHONY}`);
    const smsId = options.smsId ?? deps.settings.TELEPHONY_SMS_ID;
    if (!smsId) throw new Error(`sink "${name}" (sms) ${NO_SMS_ID}`);
    return new SmsSink(name, options, smsId, deps.telephony, deps);
  },
};
