// "Never twice": one marker per rule (sink), call and recipient, set before a message is handed
// over and kept for months. Policy (docs/notifications.md):
//  - marker `sent`                -> any later delivery of the same call is skipped ("already sent");
//  - failure with a definite outcome (the remote answered with an error, or the request provably
//    never left) -> marker removed, error rethrown: the queue retries or dead-letters as usual;
//  - failure with an unknown outcome (timeout or reset after the request was written, or a worker
//    that died mid-send) -> marker `unknown`, NOT resent: this attempt goes to the dead letters
//    with the reason; later deliveries of the same call are skipped. An operator who has checked
//    that nothing arrived clears the marker (NotificationLedger.forget) and replays the job.
import { createHmac } from 'node:crypto';
import { callHash } from '../../model/call.js';
import type { KeyValueStore, TimedWrite } from '../../state/kv.js';
import type { AttemptOutcome, SinkResult } from '../types.js';
import { PermanentError, RetryLaterError } from '../../errors.js';
import { envString, type EnvShape } from '../../env-values.js';
import { configuredKey, type HmacKeySource } from '../../../queues/privacy-key.js';

/** The variable of the keyed hash (docs/privacy.md); read by the notification sinks and `callsync forget`. */
export const privacyEnv = {
  /**
   * Key of the HMAC that names a phone number wherever it is kept without being readable: a
   * recipient in the notification ledger and the SMS cooldown, an erased number in the opt-out list
   * (`recipientHash`), the timeline's number index. Unset: a key generated once and kept in Redis
   * (queues/privacy-key.ts). Keep it stable and the same in every process: a new key forgets which
   * calls were texted and which calls a number had.
   */
  PRIVACY_HMAC_SECRET: envString,
} satisfies EnvShape;

/**
 * The privacy key a notification sink names numbers with: the worker's (`SinkDeps.privacyKey`), else
 * PRIVACY_HMAC_SECRET from its settings (tools and tests without Redis), else none (numbers in clear).
 */
export function privacyKeyOf(deps: {
  settings: { readonly PRIVACY_HMAC_SECRET?: string | undefined };
  privacyKey?: HmacKeySource;
}): HmacKeySource | undefined {
  if (deps.privacyKey) return deps.privacyKey;
  const secret = deps.settings.PRIVACY_HMAC_SECRET;
  return secret === undefined ? undefined : configuredKey(secret);
}

type LedgerState = 'sending' | 'sent' | 'unknown';

export interface LedgerEntry {
  state: LedgerState;
  /** ISO time the state was written. */
  at: string;
  /** Message id / scheduled time of a sent message. */
  ref?: string;
  /** Why the outcome is unknown. */
  reason?: string;
  /** The job whose attempt left the outcome unknown (absent in markers of earlier versions). */
  job?: string;
}

/** How long markers are kept: longer than any redelivery (webhook retries, poller replays, dead-letter replays). */
const LEDGER_TTL_MS = 90 * 24 * 3600_000;
/** A `sending` marker younger than this belongs to an attempt that may still be running. */
const IN_FLIGHT_GRACE_MS = 2 * 60_000;

/**
 * A recipient (an E.164 number) as kept where it must be remembered without being readable: the
 * notification ledger and the opt-out list after `callsync forget`. `h1.` and 32 characters of the
 * base64url HMAC-SHA-256 keyed with the privacy key (PRIVACY_HMAC_SECRET, else the one kept in
 * Redis): without the key it cannot be tested against a list of numbers (unlike a plain hash).
 */
export function recipientHash(secret: string | Buffer, recipient: string): string {
  return `h1.${createHmac('sha256', secret).update(recipient).digest('base64url').slice(0, 32)}`;
}

/** The ledger key of a call's marker for `recipient` (in clear, or a `recipientHash`): `sent:<call hash>:<recipient>`. */
function ledgerKey(callKey: string, recipient: string): string {
  return `sent:${callHash(callKey)}:${recipient}`;
}

function parseEntry(raw: string): LedgerEntry {
  try {
    return JSON.parse(raw) as LedgerEntry;
  } catch {
    return { state: 'unknown', at: new Date(0).toISOString(), reason: 'unreadable marker' };
  }
}

export class NotificationLedger {
  private readonly secret: HmacKeySource | undefined;

  constructor(
    /** The sink's own state store (already scoped per sink, i.e. per rule). */
    private readonly store: KeyValueStore,
    private readonly ttlMs: number = LEDGER_TTL_MS,
    /**
     * The privacy key (queues/privacy-key.ts; the sinks get it from the worker, or PRIVACY_HMAC_SECRET):
     * markers name the recipient by its `recipientHash`, never in clear (a marker written in clear
     * by an earlier version is still honoured). Absent (tools and tests without Redis only): in clear.
     */
    secret?: string | HmacKeySource,
  ) {
    this.secret = typeof secret === 'string' ? (secret === '' ? undefined : configuredKey(secret)) : secret;
  }

  private async key(callKey: string, recipient: string): Promise<string> {
    return ledgerKey(callKey, this.secret ? recipientHash(await this.secret.get(), recipient) : recipient);
  }

  /** The marker in clear an earlier version wrote (none without a key: `key` is that one). */
  private legacyKey(callKey: string, recipient: string): string | null {
    return this.secret ? ledgerKey(callKey, recipient) : null;
  }

  async read(callKey: string, recipient: string): Promise<LedgerEntry | null> {
    const raw = await this.store.get(await this.key(callKey, recipient));
    if (raw !== null) return parseEntry(raw);
    const legacy = this.legacyKey(callKey, recipient);
    const old = legacy === null ? null : await this.store.get(legacy);
    return old === null ? null : parseEntry(old);
  }

  /** Takes the marker for a send; returns null when taken, or the entry that was already there. */
  async claim(callKey: string, recipient: string, now: Date): Promise<LedgerEntry | null> {
    const legacy = this.legacyKey(callKey, recipient);
    const old = legacy === null ? null : await this.store.get(legacy);
    if (old !== null) return parseEntry(old);
    const entry: LedgerEntry = { state: 'sending', at: now.toISOString() };
    if (await this.store.setIfAbsent(await this.key(callKey, recipient), JSON.stringify(entry), this.ttlMs))
      return null;
    return (
      (await this.read(callKey, recipient)) ?? { state: 'unknown', at: now.toISOString(), reason: 'marker vanished' }
    );
  }

  /**
   * One round trip: reads the marker (and one an earlier version wrote in clear), tests `o.set`
   * (the opt-out list) for the recipient and, when `o.take` and neither holds, takes the marker for
   * a send (`sending`) — the claim made before the send, as `claim` does.
   */
  async claimChecked(
    callKey: string,
    recipient: string,
    now: Date,
    o: { set?: { key: string; members: string[] }; take: boolean },
  ): Promise<{ existing: LedgerEntry | null; inSet: boolean; taken: boolean }> {
    const key = await this.key(callKey, recipient);
    const legacy = this.legacyKey(callKey, recipient);
    const entry: LedgerEntry = { state: 'sending', at: now.toISOString() };
    const got = await this.store.claim(key, JSON.stringify(entry), this.ttlMs, {
      reads: legacy === null ? [key] : [key, legacy],
      ...(o.set ? { set: o.set } : {}),
      take: o.take,
    });
    const raw = got.values.find((v) => v !== null) ?? null;
    return { existing: raw === null ? null : parseEntry(raw), inSet: got.inSet, taken: got.taken };
  }

  async write(callKey: string, recipient: string, entry: LedgerEntry): Promise<void> {
    const w = await this.markerWrite(callKey, recipient, entry);
    await this.store.set(w.key, w.value, w.ttlMs);
  }

  /** The write of `entry` as the marker (for `writeSent`). */
  async markerWrite(callKey: string, recipient: string, entry: LedgerEntry): Promise<TimedWrite> {
    return { key: await this.key(callKey, recipient), value: JSON.stringify(entry), ttlMs: this.ttlMs };
  }

  /**
   * A `sent` marker a send left unwritten (`deferSentMarker`), written with the entries of the
   * attempt that ends with `result` (SinkContext.outcome) in one script where the store can (one
   * command less per message); the attempt hears of it then. A failed write fails the attempt: its
   * retry finds the marker `sending` and does not send again.
   */
  async writeSent(marker: TimedWrite, result: SinkResult, outcome: AttemptOutcome | undefined): Promise<void> {
    if (outcome && this.store.setAppending) {
      if (await this.store.setAppending([marker], outcome.entries(result))) outcome.written(result);
      return;
    }
    await this.store.set(marker.key, marker.value, marker.ttlMs);
  }

  /** Removes the marker: after a definite failure, or by an operator to allow a resend. */
  async forget(callKey: string, recipient: string): Promise<void> {
    await this.store.delete(await this.key(callKey, recipient));
    const legacy = this.legacyKey(callKey, recipient);
    if (legacy !== null) await this.store.delete(legacy);
  }
}

export interface SendOnceOptions {
  ledger: NotificationLedger;
  callKey: string;
  /** Recipient part of the marker (an E.164 number; `mail` for an e-mail rule). */
  recipient: string;
  /** Shown in reasons, e.g. `SMS to +49151****678`. */
  what: string;
  now: () => Date;
  /** True when the error leaves it open whether the remote acted on the request. */
  outcomeUnknown: (err: unknown) => boolean;
  /** Performs the send; returns a reference (message id, scheduled time). */
  send: () => Promise<string | undefined>;
  /** Called after a definite failure, before the error is rethrown (e.g. to free a cooldown). */
  onDefiniteFailure?: () => Promise<void>;
  /** The job sending (SinkContext.jobId): written into an `unknown` marker. */
  jobId?: string;
  /**
   * A successful send does not write its `sent` marker but answers it (`SendOnceResult.marker`), for
   * the caller to write with its attempt's timeline entries (`NotificationLedger.writeSent`).
   */
  deferSentMarker?: boolean;
}

/** This attempt may or may not have reached the remote; it is not resent (dead letters, with the reason). */
class OutcomeUnknownPermanentError extends PermanentError {}

function unknownEntry(o: SendOnceOptions, reason: string): LedgerEntry {
  return { state: 'unknown', at: o.now().toISOString(), reason, ...(o.jobId === undefined ? {} : { job: o.jobId }) };
}

/**
 * True when the marker says this very job left the outcome unknown: an attempt that had lost its
 * lock (a stalled worker) wrote `unknown` and threw, but the queue refused that attempt's failure, and
 * the attempt that took the job over finds the marker. The job goes to the dead letters as the first
 * attempt would have; a later delivery of the call (another job) is skipped.
 */
export function unknownOfThisJob(existing: LedgerEntry, jobId: string | undefined): boolean {
  return existing.state === 'unknown' && jobId !== undefined && existing.job === jobId;
}

/** The dead letter of a job whose earlier attempt left the outcome unknown (see unknownOfThisJob). */
export function outcomeUnknownOfThisJob(what: string, existing: LedgerEntry): PermanentError {
  return new OutcomeUnknownPermanentError(
    `${what}: outcome unknown (${existing.reason ?? 'no reason'}; an earlier attempt of this job, cut short); not resent automatically (see docs/notifications.md)`,
  );
}

export type SendOnceResult =
  | {
      sent: true;
      ref: string | undefined;
      /** With `deferSentMarker`: the `sent` marker, not written yet. */
      marker?: TimedWrite;
    }
  | { sent: false; reason: string };

/**
 * Sends at most once per marker. Returns `sent: false` with a reason when an earlier delivery
 * already sent (or may have sent) the message; throws the send's error after a definite failure,
 * and a PermanentError (dead letters) when this attempt's outcome is unknown.
 */
export async function sendOnce(o: SendOnceOptions): Promise<SendOnceResult> {
  const existing = await o.ledger.claim(o.callKey, o.recipient, o.now());
  if (existing !== null) return settleExisting(o, existing);
  return sendClaimed(o);
}

/**
 * What a send finds when the marker was there already (`existing`, the claim not taken): a result
 * without sending, RetryLaterError while another attempt may be in flight, or the PermanentError of
 * an attempt that never finished (the marker becomes `unknown`).
 */
export async function settleExisting(o: SendOnceOptions, existing: LedgerEntry): Promise<SendOnceResult> {
  if (existing.state === 'sent')
    return { sent: false, reason: `already sent${existing.ref ? ` (${existing.ref})` : ''}` };
  if (unknownOfThisJob(existing, o.jobId)) throw outcomeUnknownOfThisJob(o.what, existing);
  if (existing.state === 'unknown')
    return {
      sent: false,
      reason: `an earlier attempt's outcome is unknown (${existing.reason ?? 'no reason'}); not resent`,
    };
  const age = o.now().getTime() - Date.parse(existing.at);
  if (age < IN_FLIGHT_GRACE_MS) {
    throw new RetryLaterError(`${o.what}: another attempt is in flight`, IN_FLIGHT_GRACE_MS - age + 1000, {
      scope: 'job',
    });
  }
  // A `sending` marker nobody finished: the worker died between claiming and recording the answer.
  const reason = `attempt started at ${existing.at} never finished (worker stopped?)`;
  await o.ledger.write(o.callKey, o.recipient, unknownEntry(o, reason));
  throw new OutcomeUnknownPermanentError(
    `${o.what}: outcome unknown, ${reason}; not resent automatically (see docs/notifications.md)`,
  );
}

/** Sends under a marker this attempt has taken (`sending`), and records the outcome as sendOnce does. */
export async function sendClaimed(o: SendOnceOptions): Promise<SendOnceResult> {
  let ref: string | undefined;
  try {
    ref = await o.send();
  } catch (err) {
    if (o.outcomeUnknown(err)) {
      const reason = err instanceof Error ? err.message : String(err);
      await o.ledger.write(o.callKey, o.recipient, unknownEntry(o, reason));
      throw new OutcomeUnknownPermanentError(
        `${o.what}: outcome unknown (${reason}); not resent automatically (see docs/notifications.md)`,
        { cause: err },
      );
    }
    await o.ledger.forget(o.callKey, o.recipient);
    await o.onDefiniteFailure?.();
    throw err;
  }
  const sent: LedgerEntry = { state: 'sent', at: o.now().toISOString(), ...(ref === undefined ? {} : { ref }) };
  if (o.deferSentMarker) return { sent: true, ref, marker: await o.ledger.markerWrite(o.callKey, o.recipient, sent) };
  await o.ledger.write(o.callKey, o.recipient, sent);
  return { sent: true, ref };
}
