// HubSpot CRM sink: one Calls object per call, associated with the contact whose phone number
// matches the other party, through HubSpot's date-versioned APIs (`apiVersion`, default 2026-09;
// the numbered /crm/v3 and /crm/v4 paths go unsupported in 2027, docs/crm.md). A service key (or a
// private app's access token) with the scopes crm.objects.contacts.read (+ .write) is all it needs.
//
// Requests per call: contact search (1, own limiter), optional contact create (1), then call create
// (1) or call update (1, + 1 association when the contact changed); with `externalIdProperty` one
// upsert by that unique property (+ 1 association) instead. Once per process: the account's call
// outcomes (`hs_call_disposition`) and its time zone (when its daily limit resets).
import { z } from 'zod';
import { callHash, OUTCOMES, type CanonicalCall, type Outcome } from '../../model/call.js';
import { maskPhone } from '../../log.js';
import { scrubErrorEchoes } from '../../redact.js';
import { PermanentError, RetryLaterError, TransientError } from '../../errors.js';
import { archiveUrl } from '../archive/keys.js';
import { RevisionGuard } from '../revisions.js';
import type { Sink, SinkContext, SinkDeps, SinkResult, SinkSettings, SinkType } from '../types.js';
import { envOptionalBool, envString, envUrl, type EnvShape } from '../../env-values.js';
import { archiveEnv } from '../archive/index.js';
import { regionEnv } from '../region.js';
import {
  archiveLinkSchema,
  isKnownTimeZone,
  crmToken,
  queueLimitSchema,
  RecordMemory,
  regionSchema,
  resolveRegion,
  templateSchema,
  timeoutSchema,
  untilMidnightIn,
  type CrmRecord,
} from './common.js';
import { partsReadBy } from '../template-vars.js';
import type { AnswerHeaders } from '../../http-request.js';
import { CrmHttp, field, numberHeader, stringField, type CrmAnswer } from './http.js';
import { numberMemoryNames } from './number-memory.js';
import { WindowLimiter } from './limiter.js';
import { counterpartNumber, displayNumber, phoneForms, samePhone, type CountryCode } from './phone.js';
import { callVars, defaultBodyTemplate, defaultTitleTemplate, renderHtmlBody, renderTitle } from './vars.js';

const HUBSPOT_DEFAULT_URL = 'https://api.hubapi.com';
/** The date-versioned API release used by default: the newest (September 2026) at the time of writing. */
const HUBSPOT_API_VERSION = '2026-09';
/** HubSpot-defined association type "call to contact". */
const CALL_TO_CONTACT = 194;
/** The account's call outcomes (GET /calling/v1/dispositions): only the v1 path exists, no date-versioned one. */
const DISPOSITIONS_PATH = '/calling/v1/dispositions';

const hubspotCallStatuses = [
  'BUSY',
  'CALLING_CRM_USER',
  'CANCELED',
  'COMPLETED',
  'CONNECTING',
  'FAILED',
  'IN_PROGRESS',
  'NO_ANSWER',
  'QUEUED',
  'RINGING',
] as const;
type HubSpotCallStatus = (typeof hubspotCallStatuses)[number];

const defaultHubSpotStatus: Record<Outcome, HubSpotCallStatus> = {
  answered: 'COMPLETED',
  transferred: 'COMPLETED',
  missed: 'NO_ANSWER',
  rejected: 'CANCELED',
  busy: 'BUSY',
  failed: 'FAILED',
  unknown: 'COMPLETED',
};

/**
 * Outcome -> the label of a call outcome (`hs_call_disposition`) among HubSpot's defaults (Busy,
 * Connected, Left live message, Left voicemail, No answer, Wrong number). null: leave it empty.
 */
const defaultDispositionLabels: Record<Outcome, string | null> = {
  answered: 'Connected',
  transferred: 'Connected',
  missed: 'No answer',
  rejected: 'No answer',
  busy: 'Busy',
  failed: null,
  unknown: null,
};

/** Without the account's time zone a daily-limit 429 is retried after this (instead of a wrong midnight). */
const UNKNOWN_ZONE_DAILY_WAIT_MS = 3600_000;
/** A label missing from the cached outcomes triggers a fresh read at most this often. */
const DISPOSITIONS_REFRESH_MS = 5 * 60_000;
/** The account details are read again after this (a changed time zone setting). */
const TIME_ZONE_TTL_MS = 24 * 3600_000;
/** After a failed account-details read, the next try waits this long. */
const TIME_ZONE_RETRY_MS = 10 * 60_000;
/** A call waiting for its recording in the archive asks again after as long as it waited so far, within these bounds. */
const RECORDING_POLL_MIN_MS = 1000;
const RECORDING_POLL_MAX_MS = 30_000;

const hubspotOptionsSchema = z.strictObject({
  /** Service key or private-app access token; default HUBSPOT_ACCESS_TOKEN (keep it out of the config file). */
  accessToken: z.string().min(1).optional(),
  /** API base URL; default HUBSPOT_API_URL, else https://api.hubapi.com. */
  apiUrl: z.url().optional(),
  /** Date-versioned API release in the paths (`/crm/objects/<version>/calls`). Default 2026-09. */
  apiVersion: z
    .string()
    .regex(/^20\d\d-(0[1-9]|1[0-2])$/, { message: 'expected a HubSpot API release such as 2026-09' })
    .default(HUBSPOT_API_VERSION),
  /** Region for numbers written without a country code; default PHONE_DEFAULT_REGION, else DE. */
  defaultRegion: regionSchema.optional(),
  /** Create a contact (with just the phone number) when none matches. Off by default. */
  createContacts: z.boolean().default(false),
  /** Extra properties of contacts created that way, e.g. `{ lifecyclestage: lead }`. */
  newContactProperties: z.record(z.string(), z.string()).default({}),
  titleTemplate: templateSchema.default(defaultTitleTemplate),
  /** HTML body: values are escaped, line breaks become <br>. */
  bodyTemplate: templateSchema.default(defaultBodyTemplate),
  /** Outcome -> hs_call_status, over the defaults (answered: COMPLETED, missed: NO_ANSWER, ...). */
  statusMap: z.partialRecord(z.enum(OUTCOMES), z.enum(hubspotCallStatuses)).default({}),
  /**
   * Outcome -> the label of one of the account's call outcomes (hs_call_disposition), over the
   * defaults (answered: Connected, missed: No answer, busy: Busy, ...); null leaves it empty. A label
   * the account lacks fails the call permanently with a message naming it.
   */
  dispositionMap: z.partialRecord(z.enum(OUTCOMES), z.string().trim().min(1).nullable()).default({}),
  /**
   * The account's time zone (IANA, e.g. America/New_York), when its daily limit resets. Default:
   * read from HubSpot's account details once per process.
   */
  accountTimeZone: z
    .string()
    .refine(isKnownTimeZone, { message: 'expected an IANA time zone such as America/New_York' })
    .optional(),
  /**
   * A custom call property (single-line text, "unique value") that receives a stable id of the
   * call. When set, calls are written with batch/upsert by it: a retry after a crash updates the
   * same call without a search.
   */
  externalIdProperty: z
    .string()
    .regex(/^[a-z0-9_]+$/)
    .optional(),
  /** hubspot_owner_id of the created calls. */
  ownerId: z.string().min(1).optional(),
  archive: archiveLinkSchema.default({ enabled: true }),
  /** `hs_call_recording_url` for calls with a recording in the archive. */
  recordingUrl: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** Lifetime of a pre-signed URL, when the archive's store can sign (S3's maximum: 7 days). */
      expiresInSec: z.int().min(60).max(604_800).default(604_800),
      /** How long a call waits for the archive to store its recording before it is written without the link. */
      waitForArchiveMs: z.int().min(0).max(86_400_000).default(900_000),
    })
    .default({ enabled: true, expiresInSec: 604_800, waitForArchiveMs: 900_000 }),
  /** Steady queue limit in calls per window. Default 25 / 10 s (~4 requests each, under 100 / 10 s). */
  rateLimit: queueLimitSchema.default({ max: 25, durationMs: 10_000 }),
  /** Searches per window in this process (HubSpot: 5 per second per account). Default 4 / 1 s. */
  searchRateLimit: queueLimitSchema.default({ max: 4, durationMs: 1000 }),
  timeoutMs: timeoutSchema,
});

export type HubSpotOptions = z.infer<typeof hubspotOptionsSchema>;

/** The environment variables the HubSpot sink type reads. */
const hubspotEnv = {
  /** Private-app access token (the sink's `accessToken` default); alone it adds the sink `hubspot`. */
  HUBSPOT_ACCESS_TOKEN: envString,
  HUBSPOT_API_URL: envUrl,
  /** The shortcut sink's `createContacts`. */
  HUBSPOT_CREATE_CONTACTS: envOptionalBool,
  PHONE_DEFAULT_REGION: regionEnv.PHONE_DEFAULT_REGION,
  ARCHIVE_S3_PREFIX: archiveEnv.ARCHIVE_S3_PREFIX,
} satisfies EnvShape;

/** The hubspot type's section of the configuration: its variables, parsed. */
type HubSpotSettings = SinkSettings<typeof hubspotEnv>;

/**
 * Test seams: how the search limiter waits for its slot.
 * @internal Exported for its tests only (test/crm-hubspot.redis.test.ts).
 */
export interface HubSpotSinkHooks {
  waitUntil?: (at: number) => Promise<void>;
}

interface Contact {
  id: string;
  name: string | null;
}

interface Disposition {
  id: string;
  label: string;
}

interface DispositionTable {
  byLabel: Map<string, Disposition>;
  labels: string[];
  at: number;
}

const labelKey = (label: string) => label.trim().toLowerCase();

function hubspotErrorDetail(body: unknown): string | undefined {
  const message = stringField(body, 'message');
  if (message === undefined) return undefined;
  const category = stringField(body, 'category');
  return category ? `${message} [${category}]` : message;
}

function policyOf(answer: CrmAnswer): string | undefined {
  return stringField(answer.body, 'policyName')?.toUpperCase();
}

/** A search 429 delays only its job, unless it names a limit shared by every request. */
function searchRateLimitScope(answer: CrmAnswer): 'job' | 'queue' {
  const policy = policyOf(answer);
  return policy === 'DAILY' || policy === 'TEN_SECONDLY_ROLLING' ? 'queue' : 'job';
}

/**
 * The `results` of a search or batch answer. `what`: the request, for a 2xx answer without a results
 * list (a proxy's page, a cut body): transient, never read as "nothing found" — after a create
 * whose answer was lost, that would create the record a second time.
 */
function results(
  body: unknown,
  what: string,
  status: number,
): { id: string; properties: Record<string, unknown>; created: boolean }[] {
  const list = field(body, 'results');
  if (!Array.isArray(list)) {
    // A batch answer with only errors is HubSpot's (the caller reads them).
    if (Array.isArray(field(body, 'errors'))) return [];
    throw new TransientError(`${what} answered ${status} without a results list`, { status });
  }
  return list.flatMap((r) => {
    const id = stringField(r, 'id');
    const props = field(r, 'properties');
    if (id === undefined) return [];
    return [
      {
        id,
        properties: props !== null && typeof props === 'object' ? (props as Record<string, unknown>) : {},
        created: field(r, 'new') === true,
      },
    ];
  });
}

const NO_TOKEN =
  "no access token: set HUBSPOT_ACCESS_TOKEN (a service key or private app token) or the sink's accessToken";

/**
 * The token a sink uses (its `accessToken`, else HUBSPOT_ACCESS_TOKEN), trimmed, or what is wrong
 * with it. Checked with the configuration (`check`) and again by the sink: an access token goes into
 * a header verbatim, so whitespace or control characters inside one are a setup error, not a 401 later.
 */
function accessToken(
  options: Pick<HubSpotOptions, 'accessToken'>,
  env: HubSpotSettings,
): { token: string } | { problem: string } {
  return crmToken(options.accessToken, env.HUBSPOT_ACCESS_TOKEN, {
    option: 'accessToken',
    variable: 'HUBSPOT_ACCESS_TOKEN',
    what: 'access token',
    missing: NO_TOKEN,
  });
}

/** @internal Exported for its tests only (test/crm-hubspot-recordings.redis.test.ts, test/crm-hubspot.redis.test.ts …). */
export class HubSpotSink implements Sink {
  readonly type = 'hubspot';
  private readonly http: CrmHttp;
  private readonly memory: RecordMemory;
  private readonly revisions: RevisionGuard;
  private readonly region: CountryCode;
  private readonly archivePrefix: string | undefined;
  private readonly searchLimiter: WindowLimiter;
  private timeZone: { name: string; at: number } | null = null;
  private timeZoneRetryAt = 0;
  private timeZoneLoading: Promise<void> | null = null;
  private dispositions: DispositionTable | null = null;
  private dispositionsLoading: Promise<DispositionTable> | null = null;

  constructor(
    readonly name: string,
    private readonly options: HubSpotOptions,
    private readonly deps: SinkDeps<HubSpotSettings>,
    hooks: HubSpotSinkHooks = {},
  ) {
    const env = deps.settings;
    const checked = accessToken(options, env);
    if ('problem' in checked) throw new Error(`sink "${name}" (hubspot): ${checked.problem}`);
    this.region = resolveRegion(options.defaultRegion, env.PHONE_DEFAULT_REGION);
    this.archivePrefix = options.archive.prefix ?? env.ARCHIVE_S3_PREFIX;
    this.memory = new RecordMemory(deps.state);
    // A delivery makes a handful of requests, each within timeoutMs.
    this.revisions = new RevisionGuard(deps.state, {
      what: 'HubSpot',
      lockTtlMs: Math.max(60_000, 6 * options.timeoutMs),
    });
    if (options.accountTimeZone) this.timeZone = { name: options.accountTimeZone, at: Number.POSITIVE_INFINITY };
    this.searchLimiter = new WindowLimiter(options.searchRateLimit, {
      now: () => deps.now().getTime(),
      waitUntil: hooks.waitUntil,
      maxWaitMs: 5000,
      what: 'HubSpot search',
    });
    this.http = new CrmHttp({
      crm: 'HubSpot',
      sink: name,
      baseUrl: options.apiUrl ?? env.HUBSPOT_API_URL ?? HUBSPOT_DEFAULT_URL,
      headers: { authorization: `Bearer ${checked.token}` },
      timeoutMs: options.timeoutMs,
      now: deps.now,
      authHint:
        'Check HUBSPOT_ACCESS_TOKEN (a service key or private app token with the scopes crm.objects.contacts.read/.write).',
      errorDetail: hubspotErrorDetail,
      rateLimitDelayMs: (a) => this.rateLimitDelay(a),
      windowExhaustedMs: (h) => this.windowExhausted(h),
    });
  }

  /**
   * The call object callsync created for this call (its record memory), deleted through HubSpot's
   * DELETE /crm/objects/<v>/calls/{id} (HubSpot keeps it in its recycle bin for 90 days: see
   * docs/privacy.md). A record already deleted (404) counts as none.
   */
  async eraseCall(callKey: string, options: { dryRun: boolean; signal: AbortSignal }): Promise<number> {
    const record = await this.memory.get(callKey);
    if (record === null) return 0;
    if (options.dryRun) return 1;
    const answer = await this.http.request({
      method: 'DELETE',
      path: this.objects(`calls/${encodeURIComponent(record.id)}`),
      accept: [404],
      signal: options.signal,
    });
    await this.memory.forget(callKey);
    return answer.status === 404 ? 0 : 1;
  }

  /** `/crm/objects/<apiVersion>/<rest>`. */
  private objects(rest: string): string {
    return `/crm/objects/${this.options.apiVersion}/${rest}`;
  }

  /** Milliseconds until the account's day ends (its daily limit resets at midnight in its time zone). */
  private untilDailyReset(): number {
    return this.timeZone ? untilMidnightIn(this.timeZone.name, this.deps.now()) : UNKNOWN_ZONE_DAILY_WAIT_MS;
  }

  /** How long to pause after a 429 without Retry-After, from HubSpot's policy name and headers. */
  private rateLimitDelay(answer: CrmAnswer): number {
    const policy = policyOf(answer);
    if (policy === 'DAILY') return this.untilDailyReset();
    if (policy === 'SECONDLY') return 1000;
    return numberHeader(answer.headers, 'x-hubspot-ratelimit-interval-milliseconds') ?? 10_000;
  }

  private windowExhausted(headers: AnswerHeaders): number | undefined {
    if (numberHeader(headers, 'x-hubspot-ratelimit-daily-remaining') === 0) return this.untilDailyReset();
    if (numberHeader(headers, 'x-hubspot-ratelimit-remaining') === 0) {
      return numberHeader(headers, 'x-hubspot-ratelimit-interval-milliseconds') ?? 10_000;
    }
    if (numberHeader(headers, 'x-hubspot-ratelimit-secondly-remaining') === 0) return 1000;
    return undefined;
  }

  /**
   * One revision of a call at a time, never an older one over a newer (src/sinks/revisions.ts):
   * an update of a call updates the record its first revision created.
   */
  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    await this.loadTimeZone(ctx.signal, log);
    // Outside the call's lock: a call waiting for its recording holds nothing.
    const recordingUrl = await this.recordingUrl(call, log);
    // Its result is the attempt's: the lock's release carries the attempt's timeline entries.
    return this.revisions.deliver(call.key, ctx, () => this.write(call, ctx, recordingUrl), [], true);
  }

  private async write(call: CanonicalCall, ctx: SinkContext, recordingUrl: string | null): Promise<SinkResult> {
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    // First: an outcome the account lacks fails the call before anything (a contact) is written.
    const disposition = await this.dispositionId(call.outcome, ctx.signal, log);
    const number = counterpartNumber(call, this.region);
    let contact: Contact | null = null;
    if (number !== null) {
      contact = await this.findContact(number, ctx.signal);
      if (contact === null && this.options.createContacts) contact = await this.createContact(number, ctx.signal);
    }
    if (!contact?.name) return this.writeFor(call, ctx, contact, number, disposition, recordingUrl);
    try {
      return await this.writeFor(call, ctx, contact, number, disposition, recordingUrl);
    } catch (err) {
      // The contact's name (HubSpot's, not the call's) may be in what HubSpot answers when it
      // refuses the properties it was rendered into: never in a log, a dead letter or the timeline.
      throw scrubErrorEchoes(err, { names: [contact.name] });
    }
  }

  private async writeFor(
    call: CanonicalCall,
    ctx: SinkContext,
    contact: Contact | null,
    number: string | null,
    disposition: string | null,
    recordingUrl: string | null,
  ): Promise<SinkResult> {
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    const properties = this.callProperties(call, contact, { disposition, recordingUrl });
    const createdReason =
      contact === null
        ? number === null
          ? 'created; anonymous caller, no contact'
          : 'created; no matching contact'
        : 'created';

    if (this.options.externalIdProperty) {
      const written = await this.upsert(call, properties, contact, ctx.signal);
      log.info(
        { hubspotCallId: written.record.id, contact: contact?.id ?? null, number: maskPhone(number) },
        written.created ? 'hubspot: call created' : 'hubspot: call updated',
      );
      return { status: 'done', reason: written.created ? createdReason : 'updated', refs: this.refs(written.record) };
    }

    let record = await this.memory.get(call.key);
    if (record === null && !(await this.memory.beginCreate(call.key, this.deps.now()))) {
      // An earlier try began creating this call and never stored the id: it may exist already.
      const existing = await this.findExistingCall(call, ctx.signal);
      if (existing !== null) {
        record = { id: existing, contactId: null };
        log.warn(
          { hubspotCallId: existing },
          'hubspot: found the call an interrupted earlier try created; updating it',
        );
      }
    }

    if (record !== null) {
      const updated = await this.updateCall(record, properties, contact, call, ctx.signal);
      if (updated !== null) {
        log.info(
          { hubspotCallId: updated.id, contact: contact?.id ?? null, number: maskPhone(number) },
          'hubspot: call updated',
        );
        return { status: 'done', reason: 'updated', refs: this.refs(updated) };
      }
      log.warn({ hubspotCallId: record.id }, 'hubspot: remembered call was deleted in HubSpot; creating it again');
      await this.memory.forget(call.key);
    }

    const created = await this.memory.creating(call.key, () => this.createCall(properties, contact, ctx.signal));
    await this.memory.set(call.key, created);
    await this.memory.endCreate(call.key);
    log.info(
      { hubspotCallId: created.id, contact: contact?.id ?? null, number: maskPhone(number) },
      'hubspot: call created',
    );
    return { status: 'done', reason: createdReason, refs: this.refs(created) };
  }

  private refs(record: CrmRecord): Record<string, string> {
    const refs: Record<string, string> = { hubspotCallId: record.id };
    if (record.contactId) refs.hubspotContactId = record.contactId;
    return refs;
  }

  /** The Calls object's properties for this call. HubSpot property values are strings. */
  callProperties(
    call: CanonicalCall,
    contact: Contact | null,
    extra: { disposition?: string | null; recordingUrl?: string | null } = {},
  ): Record<string, string> {
    const vars = callVars(call, {
      defaultRegion: this.region,
      archive: {
        enabled: this.options.archive.enabled,
        prefix: this.archivePrefix,
        baseUrl: this.options.archive.baseUrl,
      },
      contactName: contact?.name ?? null,
    });
    const props: Record<string, string> = {
      hs_timestamp: new Date(call.startedAt).toISOString(),
      hs_call_title: renderTitle(this.options.titleTemplate, vars),
      hs_call_body: renderHtmlBody(this.options.bodyTemplate, vars),
      hs_call_direction: call.direction === 'in' ? 'INBOUND' : 'OUTBOUND',
      hs_call_status: this.options.statusMap[call.outcome] ?? defaultHubSpotStatus[call.outcome],
    };
    if (extra.disposition) props.hs_call_disposition = extra.disposition;
    if (call.durationSec !== null) props.hs_call_duration = String(Math.round(call.durationSec * 1000));
    const from = displayNumber(call.from, call.fromRaw, this.region);
    const to = displayNumber(call.to, call.toRaw, this.region);
    if (from !== null) props.hs_call_from_number = from;
    if (to !== null) props.hs_call_to_number = to;
    if (extra.recordingUrl) props.hs_call_recording_url = extra.recordingUrl;
    if (this.options.externalIdProperty) props[this.options.externalIdProperty] = callHash(call.key);
    if (this.options.ownerId) props.hubspot_owner_id = this.options.ownerId;
    return props;
  }

  /** The account's time zone, read once per process (and daily; concurrent jobs share one request); a failure only costs precision. */
  private async loadTimeZone(signal: AbortSignal, log: SinkContext['log']): Promise<void> {
    const now = this.deps.now().getTime();
    if ((this.timeZone && now - this.timeZone.at < TIME_ZONE_TTL_MS) || now < this.timeZoneRetryAt) return;
    this.timeZoneLoading ??= (async () => {
      try {
        const answer = await this.http.request({
          method: 'GET',
          path: `/account-info/${this.options.apiVersion}/details`,
          signal,
        });
        const name = stringField(answer.body, 'timeZone');
        if (name === undefined || !isKnownTimeZone(name))
          throw new Error(`unusable timeZone ${JSON.stringify(name ?? null)} in the account details`);
        this.timeZone = { name, at: now };
      } catch (err) {
        // Deliberately not the call's failure: without the zone a daily-limit pause is retried hourly.
        this.timeZoneRetryAt = now + TIME_ZONE_RETRY_MS;
        log.warn(
          { reason: err instanceof Error ? err.message : String(err) },
          'hubspot: account time zone unknown (set accountTimeZone to skip the lookup); a daily-limit pause is retried hourly',
        );
      } finally {
        this.timeZoneLoading = null;
      }
    })();
    await this.timeZoneLoading;
  }

  /** The account's call outcomes, read once per process; concurrent jobs share one request. */
  private async loadDispositions(signal: AbortSignal, log: SinkContext['log']): Promise<DispositionTable> {
    this.dispositionsLoading ??= (async () => {
      const answer = await this.http.request({ method: 'GET', path: DISPOSITIONS_PATH, signal });
      if (!Array.isArray(answer.body))
        throw new PermanentError(`HubSpot GET ${DISPOSITIONS_PATH} answered without a list of call outcomes`);
      const byLabel = new Map<string, Disposition>();
      for (const d of answer.body) {
        const id = stringField(d, 'id');
        const label = stringField(d, 'label');
        if (id === undefined || label === undefined || field(d, 'deleted') === true) continue;
        if (!byLabel.has(labelKey(label))) byLabel.set(labelKey(label), { id, label });
      }
      const table: DispositionTable = {
        byLabel,
        labels: [...byLabel.values()].map((d) => d.label),
        at: this.deps.now().getTime(),
      };
      const missing = OUTCOMES.map((o) => this.dispositionLabel(o)).filter(
        (l): l is string => l !== null && !byLabel.has(labelKey(l)),
      );
      if (missing.length > 0) {
        log.warn(
          { missing: [...new Set(missing)], outcomes: table.labels },
          'hubspot: the account lacks call outcomes named in dispositionMap (or its defaults); calls with them will fail',
        );
      }
      return table;
    })();
    try {
      this.dispositions = await this.dispositionsLoading;
      return this.dispositions;
    } finally {
      this.dispositionsLoading = null;
    }
  }

  private dispositionLabel(outcome: Outcome): string | null {
    const mapped = this.options.dispositionMap[outcome];
    return mapped === undefined ? defaultDispositionLabels[outcome] : mapped;
  }

  /** The hs_call_disposition id for this outcome, null when none is set; a label the account lacks is a configuration error. */
  private async dispositionId(outcome: Outcome, signal: AbortSignal, log: SinkContext['log']): Promise<string | null> {
    const label = this.dispositionLabel(outcome);
    if (label === null) return null;
    let table = this.dispositions ?? (await this.loadDispositions(signal, log));
    let found = table.byLabel.get(labelKey(label));
    if (found === undefined && this.deps.now().getTime() - table.at >= DISPOSITIONS_REFRESH_MS) {
      // The operator may have added the outcome in HubSpot since the last read.
      table = await this.loadDispositions(signal, log);
      found = table.byLabel.get(labelKey(label));
    }
    if (found === undefined) {
      const source = this.options.dispositionMap[outcome] === undefined ? 'default' : 'dispositionMap';
      throw new PermanentError(
        `configuration of sink "${this.name}": the HubSpot account has no call outcome "${label}" (${source} for outcome ${outcome}); ` +
          `it has: ${table.labels.map((l) => `"${l}"`).join(', ') || 'none'}. Set dispositionMap.${outcome} to one of those (or null to leave ` +
          'the outcome empty), or add the outcome in HubSpot (call outcome settings), then retry the dead letters.',
      );
    }
    return found.id;
  }

  /**
   * hs_call_recording_url: a link to the call's first archived recording, pre-signed when the
   * archive's store can sign, else under archive.baseUrl. While the archive has not stored it yet
   * (its own queue), the job waits up to `waitForArchiveMs` after the call was received.
   */
  private async recordingUrl(call: CanonicalCall, log: SinkContext['log']): Promise<string | null> {
    const o = this.options.recordingUrl;
    const archive = this.deps.archive;
    if (!o.enabled || !this.options.archive.enabled || call.recordings.length === 0 || archive === undefined)
      return null;
    const presign = archive.presignGet;
    const baseUrl = this.options.archive.baseUrl;
    if (presign === undefined && baseUrl === undefined) return null;
    const [key] = await archive.recordingKeys(call);
    if (key === undefined) {
      const waited = this.deps.now().getTime() - Date.parse(call.receivedAt);
      if (waited < o.waitForArchiveMs) {
        // Soon at first (the archive usually needs seconds), then less often.
        const delay = Math.min(
          Math.max(waited, RECORDING_POLL_MIN_MS),
          RECORDING_POLL_MAX_MS,
          o.waitForArchiveMs - waited,
        );
        throw new RetryLaterError(
          "HubSpot: waiting for the archive to store the call's recording before linking it",
          delay,
          { scope: 'job' },
        );
      }
      log.warn(
        { waitedMs: waited },
        'hubspot: the recording is not in the archive; writing the call without hs_call_recording_url',
      );
      return null;
    }
    const url = presign ? await presign(key, o.expiresInSec) : archiveUrl(baseUrl!, key);
    if (!url.startsWith('https://')) {
      log.warn(
        { key },
        'hubspot: HubSpot accepts https recording URLs only; hs_call_recording_url left empty (check archive.baseUrl)',
      );
      return null;
    }
    return url;
  }

  /** A search request, through the search limiter; its 429 delays this job (and later searches), not the queue. */
  private async search(path: string, body: unknown, signal: AbortSignal): Promise<CrmAnswer> {
    await this.searchLimiter.acquire();
    try {
      return await this.http.request({ method: 'POST', path, body, signal, rateLimitScope: searchRateLimitScope });
    } catch (err) {
      if (err instanceof RetryLaterError && err.scope === 'job') this.searchLimiter.pauseFor(err.delayMs);
      throw err;
    }
  }

  /** Contacts whose phone or mobile phone is this number, however it was written; the oldest wins. */
  private async findContact(e164: string, signal: AbortSignal): Promise<Contact | null> {
    const forms = phoneForms(e164);
    if (forms === null) return null;
    const eq = (propertyName: string, value: string) => ({ filters: [{ propertyName, operator: 'EQ', value }] });
    const answer = await this.search(
      this.objects('contacts/search'),
      {
        filterGroups: [
          eq('phone', forms.e164),
          eq('mobilephone', forms.e164),
          // HubSpot's digits-only copies of the numbers, without country code: find `0211 6355340`.
          eq('hs_searchable_calculated_phone_number', forms.nationalNumber),
          eq('hs_searchable_calculated_mobile_number', forms.nationalNumber),
        ],
        properties: ['firstname', 'lastname', 'phone', 'mobilephone'],
        sorts: [{ propertyName: 'createdate', direction: 'ASCENDING' }],
        limit: 10,
      },
      signal,
    );
    for (const r of results(answer.body, `HubSpot POST ${this.objects('contacts/search')}`, answer.status)) {
      const p = r.properties;
      const phone = typeof p.phone === 'string' ? p.phone : null;
      const mobile = typeof p.mobilephone === 'string' ? p.mobilephone : null;
      if (samePhone(phone, e164, this.region) || samePhone(mobile, e164, this.region)) {
        const name = [p.firstname, p.lastname].filter((v): v is string => typeof v === 'string' && v !== '').join(' ');
        return { id: r.id, name: name || null };
      }
    }
    // A contact this sink created moments ago may not be searchable yet.
    const names = await numberMemoryNames(this.deps.privacyKey, e164);
    const recent =
      (await this.deps.state.get(`contact:${names.current}`)) ??
      (names.earlier === null ? null : await this.deps.state.get(`contact:${names.earlier}`));
    return recent === null ? null : { id: recent, name: null };
  }

  private async createContact(e164: string, signal: AbortSignal): Promise<Contact> {
    const path = this.objects('contacts');
    const answer = await this.http.request({
      method: 'POST',
      path,
      body: { properties: { ...this.options.newContactProperties, phone: e164 } },
      signal,
    });
    const id = stringField(answer.body, 'id');
    if (id === undefined) throw createdWithoutId(path, answer.status);
    // Until HubSpot's search index has it (seconds), later calls from this number find it here.
    const { current } = await numberMemoryNames(this.deps.privacyKey, e164);
    await this.deps.state.set(`contact:${current}`, id, 24 * 3600 * 1000);
    return { id, name: null };
  }

  private async createCall(
    properties: Record<string, string>,
    contact: Contact | null,
    signal: AbortSignal,
  ): Promise<CrmRecord> {
    const body: Record<string, unknown> = { properties };
    if (contact !== null) {
      body.associations = [
        {
          to: { id: contact.id },
          types: [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: CALL_TO_CONTACT }],
        },
      ];
    }
    const path = this.objects('calls');
    const answer = await this.http.request({ method: 'POST', path, body, signal });
    const id = stringField(answer.body, 'id');
    // Transient, and inside `creating`: the marker stays, so the retry looks the call up (findExistingCall).
    if (id === undefined) throw createdWithoutId(path, answer.status);
    return { id, contactId: contact?.id ?? null };
  }

  private async associate(callId: string, contactId: string, signal: AbortSignal): Promise<void> {
    await this.http.request({
      method: 'PUT',
      path: this.objects(`calls/${encodeURIComponent(callId)}/associations/contacts/${encodeURIComponent(contactId)}`),
      body: [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: CALL_TO_CONTACT }],
      signal,
    });
  }

  /** PATCHes the remembered call (and associates a newly matched contact); null when HubSpot no longer has it. */
  private async updateCall(
    record: CrmRecord,
    properties: Record<string, string>,
    contact: Contact | null,
    call: CanonicalCall,
    signal: AbortSignal,
  ): Promise<CrmRecord | null> {
    const path = this.objects(`calls/${encodeURIComponent(record.id)}`);
    const answer = await this.http.request({ method: 'PATCH', path, body: { properties }, accept: [404], signal });
    if (answer.status === 404) return null;
    let contactId = record.contactId ?? null;
    if (contact !== null && contact.id !== contactId) {
      await this.associate(record.id, contact.id, signal);
      contactId = contact.id;
    }
    const next = { id: record.id, contactId };
    await this.memory.set(call.key, next);
    await this.memory.endCreate(call.key);
    return next;
  }

  /**
   * Creates or updates the call by `externalIdProperty` (batch/upsert: one request, whatever an
   * earlier try did), then associates the contact unless it is the one already associated.
   */
  private async upsert(
    call: CanonicalCall,
    properties: Record<string, string>,
    contact: Contact | null,
    signal: AbortSignal,
  ): Promise<{ record: CrmRecord; created: boolean }> {
    const idProperty = this.options.externalIdProperty!;
    const { [idProperty]: id, ...rest } = properties;
    const path = this.objects('calls/batch/upsert');
    // 207: HubSpot's multi-status answer, some inputs failed (ours is the only one).
    const answer = await this.http.request({
      method: 'POST',
      path,
      body: { inputs: [{ idProperty, id, properties: rest }] },
      accept: [207],
      signal,
    });
    const [result] = results(answer.body, `HubSpot POST ${path}`, answer.status);
    if (result === undefined) {
      const errors = field(answer.body, 'errors');
      const detail = Array.isArray(errors) ? stringField(errors[0], 'message') : undefined;
      throw new PermanentError(
        `HubSpot POST ${path} answered ${answer.status} without a result${detail ? `: ${detail}` : ''}`,
      );
    }
    const remembered = await this.memory.get(call.key);
    let contactId = remembered?.id === result.id ? (remembered.contactId ?? null) : null;
    if (contact !== null && contact.id !== contactId) {
      await this.associate(result.id, contact.id, signal);
      contactId = contact.id;
    }
    const record = { id: result.id, contactId };
    await this.memory.set(call.key, record);
    return { record, created: result.created };
  }

  /** Looks for a call an interrupted earlier try created, by the exact start time, direction and numbers. */
  private async findExistingCall(call: CanonicalCall, signal: AbortSignal): Promise<string | null> {
    const filters: { propertyName: string; operator: string; value: string }[] = [];
    filters.push({ propertyName: 'hs_timestamp', operator: 'EQ', value: String(new Date(call.startedAt).getTime()) });
    filters.push({
      propertyName: 'hs_call_direction',
      operator: 'EQ',
      value: call.direction === 'in' ? 'INBOUND' : 'OUTBOUND',
    });
    const from = displayNumber(call.from, call.fromRaw, this.region);
    const to = displayNumber(call.to, call.toRaw, this.region);
    if (from !== null) filters.push({ propertyName: 'hs_call_from_number', operator: 'EQ', value: from });
    if (to !== null) filters.push({ propertyName: 'hs_call_to_number', operator: 'EQ', value: to });
    const answer = await this.search(
      this.objects('calls/search'),
      { filterGroups: [{ filters }], properties: ['hs_call_title'], limit: 1 },
      signal,
    );
    return results(answer.body, `HubSpot POST ${this.objects('calls/search')}`, answer.status)[0]?.id ?? null;
  }
}

/**
 * A create answered 2xx without a readable id (a body that is not JSON, an unexpected shape): HubSpot
 * took the request, so the record probably exists. Not permanent — that would drop the create
 * marker, and a retry of the dead letter would create a second record; the retry looks it up.
 */
function createdWithoutId(path: string, status: number): TransientError {
  return new TransientError(
    `HubSpot POST ${path} answered ${status} without an id (the record may exist: the retry looks it up)`,
    { status },
  );
}

export const hubspotSinkType: SinkType<HubSpotOptions, HubSpotSettings> = {
  queueWide: true,
  type: 'hubspot',
  options: hubspotOptionsSchema,
  create: (name, options, deps) => new HubSpotSink(name, options, deps),
  needsRaw: () => false,
  needsTranscript: () => false,
  // Only the parts of the call its templates read (user names, forwarding and channel never).
  needsParts: (o) => partsReadBy([o.titleTemplate, o.bodyTemplate]),
  limit: (options) => options.rateLimit,
  env: hubspotEnv,
  check(options, env) {
    const checked = accessToken(options, env);
    return 'problem' in checked ? [checked.problem] : [];
  },
  fromEnv(env) {
    if (!env.HUBSPOT_ACCESS_TOKEN) return null;
    // The token stays in the environment (read at create), never in the sink config object.
    const sink: { type: string } & Record<string, unknown> = { type: 'hubspot' };
    if (env.HUBSPOT_API_URL) sink.apiUrl = env.HUBSPOT_API_URL;
    if (env.HUBSPOT_CREATE_CONTACTS !== undefined) sink.createContacts = env.HUBSPOT_CREATE_CONTACTS;
    return { sinks: { hubspot: sink }, routes: [{ name: 'hubspot (env)', when: {}, to: ['hubspot'] }] };
  },
};
