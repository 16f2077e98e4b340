// Pipedrive CRM sink: one call log (POST /v1/callLogs) per call, linked to the person whose phone
// matches the other party and to that person's one open deal. Pipedrive cannot edit a call log,
// but every call log is an activity: an update of the call changes that activity's subject, note,
// person and deal (PATCH /api/v2/activities/{id}). A recording of the call is attached to the call
// log once (POST /v1/callLogs/{id}/recordings), streamed from the platform API.
//
// Endpoints, their API versions and the pages followed: docs/crm.md ("Pipedrive").
//
// Requests per call: person search (1-2, their own limiter), open deals of the person (1), call log
// create or activity update (1), recording upload (0-1). After a crash between "created" and "id
// stored", the call log is looked up once instead of creating a second one: among the newest call
// logs of the token's user, or, with `userId` set (whose call logs that list does not show), among
// that user's activities.
import { randomBytes } from 'node:crypto';
import { basename } from 'node:path';
import { z } from 'zod';
import { callHash, OUTCOMES, type CanonicalCall, type Outcome, type Recording } from '../../model/call.js';
import { maskPhone } from '../../log.js';
import { PermanentError, RetryLaterError, SinkError, TransientError, waitText } from '../../errors.js';
import { sinkErrorOf } from '../telephony-errors.js';
import type { Download } from '../../telephony/types.js';
import { recordingKey } from '../archive/keys.js';
import { recordingExtension } from '../archive/recordings.js';
import { RevisionGuard } from '../revisions.js';
import type { Sink, SinkContext, SinkDeps, SinkResult, SinkSettings, SinkType } from '../types.js';
import { envString, envUrl, type EnvShape } from '../../env-values.js';
import { archiveEnv } from '../archive/index.js';
import { regionEnv } from '../region.js';
import {
  archiveLinkSchema,
  crmToken,
  queueLimitSchema,
  RecordMemory,
  regionSchema,
  resolveRegion,
  templateSchema,
  timeoutSchema,
  utcDateTime,
  type CrmRecord,
} from './common.js';
import { partsReadBy } from '../template-vars.js';
import {
  CrmHttp,
  field,
  numberHeader,
  stringField,
  type CrmAnswer,
  type CrmHttpConfig,
  type CrmRequest,
} from './http.js';
import { numberMemoryNames } from './number-memory.js';
import { counterpartNumber, displayNumber, phoneForms, samePhone, type CountryCode } from './phone.js';
import { WindowLimiter } from './limiter.js';
import { DailyBudget } from './pipedrive-limits.js';
import { callVars, defaultBodyTemplate, defaultTitleTemplate, renderHtmlBody, renderTitle } from './vars.js';

const PIPEDRIVE_DEFAULT_URL = 'https://api.pipedrive.com';

const pipedriveOutcomes = ['connected', 'no_answer', 'left_message', 'left_voicemail', 'wrong_number', 'busy'] as const;
type PipedriveOutcome = (typeof pipedriveOutcomes)[number];

const defaultPipedriveOutcome: Record<Outcome, PipedriveOutcome> = {
  answered: 'connected',
  transferred: 'connected',
  missed: 'no_answer',
  rejected: 'no_answer',
  busy: 'busy',
  failed: 'no_answer',
  unknown: 'no_answer',
};

const pipedriveOptionsSchema = z.strictObject({
  /** API token; default PIPEDRIVE_API_TOKEN (keep it out of the config file). */
  apiToken: z.string().min(1).optional(),
  /** API base URL (a trailing `/v1` or `/api` is ignored); default PIPEDRIVE_API_URL, else https://api.pipedrive.com. */
  apiUrl: z.url().optional(),
  /** Send the token as `x-api-token` header (default) or `api_token` query parameter. */
  tokenIn: z.enum(['header', 'query']).default('header'),
  defaultRegion: regionSchema.optional(),
  /** Owner (user id) of the call logs (and of created persons); default the token's user. */
  userId: z.int().positive().optional(),
  subjectTemplate: templateSchema.default(defaultTitleTemplate),
  /** HTML note: values are escaped, line breaks become <br>. */
  noteTemplate: templateSchema.default(defaultBodyTemplate),
  /** Outcome -> Pipedrive outcome, over the defaults (answered: connected, missed: no_answer, ...). */
  outcomeMap: z.partialRecord(z.enum(OUTCOMES), z.enum(pipedriveOutcomes)).default({}),
  /** Person search term: this many trailing digits (matches `0211 6355340` and `+49 211 6355340`). */
  searchDigits: z.int().min(5).max(15).default(7),
  /** `open` (default): link the call log to the person's open deal when there is exactly one. `none`: never. */
  linkDeal: z.enum(['open', 'none']).default('open'),
  /** Create a person (named by the number) when none matches. Default false. */
  createPerson: z.boolean().default(false),
  /** Attach the call's recording to the call log (downloaded from the platform API). Default true. */
  attachRecording: z.boolean().default(true),
  /** Time limit of one recording upload. Default 300 000 ms. */
  recordingTimeoutMs: z.int().min(1000).max(3_600_000).default(300_000),
  archive: archiveLinkSchema.default({ enabled: true }),
  /** Steady queue limit in calls per window. Default 5 / 2 s (~4 requests each, under 20 / 2 s). */
  rateLimit: queueLimitSchema.default({ max: 5, durationMs: 2_000 }),
  /** Person searches per window, apart from the queue limit. Default Pipedrive's search limit, 10 / 2 s. */
  searchRateLimit: queueLimitSchema.default({ max: 10, durationMs: 2_000 }),
  timeoutMs: timeoutSchema,
});

export type PipedriveOptions = z.infer<typeof pipedriveOptionsSchema>;

/** The environment variables the Pipedrive sink type reads. */
const pipedriveEnv = {
  /** Personal API token (the sink's `apiToken` default); alone it adds the sink `pipedrive`. */
  PIPEDRIVE_API_TOKEN: envString,
  PIPEDRIVE_API_URL: envUrl,
  PHONE_DEFAULT_REGION: regionEnv.PHONE_DEFAULT_REGION,
  ARCHIVE_S3_PREFIX: archiveEnv.ARCHIVE_S3_PREFIX,
} satisfies EnvShape;

/** The pipedrive type's section of the configuration: its variables, parsed. */
type PipedriveSettings = SinkSettings<typeof pipedriveEnv>;

const NO_TOKEN = "no API token: set PIPEDRIVE_API_TOKEN or the sink's apiToken";

/** The token a sink uses (its `apiToken`, else PIPEDRIVE_API_TOKEN), trimmed, or what is wrong with it. */
function apiToken(
  options: Pick<PipedriveOptions, 'apiToken'>,
  env: PipedriveSettings,
): { token: string } | { problem: string } {
  return crmToken(options.apiToken, env.PIPEDRIVE_API_TOKEN, {
    option: 'apiToken',
    variable: 'PIPEDRIVE_API_TOKEN',
    what: 'API token',
    missing: NO_TOKEN,
  });
}

/**
 * The POST /v1/callLogs body (https://developers.pipedrive.com/docs/api/v1/CallLogs#addCallLog).
 * @internal Part of a signature only tests use (exported with it).
 */
export interface PipedriveCallLog {
  outcome: PipedriveOutcome;
  to_phone_number: string;
  from_phone_number?: string;
  start_time: string;
  end_time: string;
  duration?: string;
  subject: string;
  note: string;
  person_id?: number;
  deal_id?: number;
  user_id?: number;
}

/** Which recording goes to the call log (one per call log): the whole call first, a voicemail last. */
const RECORDING_PREFERENCE: Record<string, number> = { call_recorder: 0, in_call_feature: 1, voicemail: 2 };

const AUDIO_TYPES: Record<string, string> = {
  wav: 'audio/wav',
  mp3: 'audio/mpeg',
  ogg: 'audio/ogg',
  opus: 'audio/opus',
  webm: 'audio/webm',
  m4a: 'audio/mp4',
  aac: 'audio/aac',
  flac: 'audio/flac',
};

const DAY_MS = 24 * 3600_000;
/** A recovered call log is found among activities changed since its first try, with this margin for clock skew. */
const RECOVERY_SKEW_MS = 10 * 60_000;
/** An activity taken by a call's record; recovery never hands it to another call. Lives as long as a create marker. */
const CLAIM_TTL_MS = 30 * DAY_MS;
/** A person callsync created, remembered per number until Pipedrive's search surely finds it. */
const NEW_PERSON_TTL_MS = DAY_MS;

function pipedriveErrorDetail(body: unknown): string | undefined {
  const error = stringField(body, 'error');
  if (error === undefined) return undefined;
  const info = stringField(body, 'error_info');
  return info ? `${error} (${info})` : error;
}

function numericId(value: unknown): number | null {
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  return null;
}

/** RFC 3339 in whole seconds (the v2 API refuses fractions in `updated_since`). */
/**
 * The list a lookup answered (`data`, or `data.items` for a search; Pipedrive's empty list may be
 * `null`). A 2xx answer that is not Pipedrive's (`success: true`): a proxy's page, a cut body — is
 * transient, never read as "nothing found": after a create whose answer was lost, that would log
 * the call (or create the person) a second time.
 */
function listOf(answer: { status: number; body: unknown }, what: string, items = false): unknown[] {
  const data = field(answer.body, 'data');
  const list = items ? field(data, 'items') : data;
  if (field(answer.body, 'success') === true && (Array.isArray(list) || list === null || list === undefined))
    return Array.isArray(list) ? list : [];
  throw new TransientError(`Pipedrive ${what} answered ${answer.status} without a readable list`, {
    status: answer.status,
  });
}

function rfc3339(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 19)}Z`;
}

/** A recovered call log whose own id callsync does not know (found through its activity). */
const ACTIVITY_ONLY = 'activity:';

function callLogIdOf(record: CrmRecord): string | null {
  return record.id.startsWith(ACTIVITY_ONLY) ? null : record.id;
}

/** @internal Exported for its tests only (test/crm-pipedrive.redis.test.ts, test/revisions.redis.test.ts). */
export class PipedriveSink implements Sink {
  readonly type = 'pipedrive';
  /** Every request but searches: the token's burst window and the daily budget. */
  private readonly http: CrmHttp;
  /** Person searches: Pipedrive's search limit has its own window (and its own 429 penalty). */
  private readonly searchHttp: CrmHttp;
  private readonly budget: DailyBudget;
  private readonly searches: WindowLimiter;
  private readonly memory: RecordMemory;
  private readonly revisions: RevisionGuard;
  private readonly region: CountryCode;
  private readonly archivePrefix: string | undefined;

  constructor(
    readonly name: string,
    private readonly options: PipedriveOptions,
    private readonly deps: SinkDeps<PipedriveSettings>,
  ) {
    const env = deps.settings;
    const checked = apiToken(options, env);
    if ('problem' in checked) throw new Error(`sink "${name}" (pipedrive): ${checked.problem}`);
    const { token } = checked;
    this.region = resolveRegion(options.defaultRegion, env.PHONE_DEFAULT_REGION);
    this.archivePrefix = options.archive.prefix ?? env.ARCHIVE_S3_PREFIX;
    this.memory = new RecordMemory(deps.state);
    // A delivery makes a handful of requests, each within timeoutMs, and perhaps one upload.
    this.revisions = new RevisionGuard(deps.state, {
      what: 'Pipedrive',
      lockTtlMs: Math.max(60_000, 8 * options.timeoutMs + (options.attachRecording ? options.recordingTimeoutMs : 0)),
    });
    this.budget = new DailyBudget(deps.now);
    this.searches = new WindowLimiter(options.searchRateLimit, {
      now: () => deps.now().getTime(),
      maxWaitMs: 0,
      what: 'Pipedrive person search',
    });
    // v1 answers under /v1 and /api/v1, v2 only under /api/v2: the base is the host (and any path before /api).
    const baseUrl = (options.apiUrl ?? env.PIPEDRIVE_API_URL ?? PIPEDRIVE_DEFAULT_URL)
      .replace(/\/+$/, '')
      .replace(/\/v1$/, '')
      .replace(/\/api$/, '');
    const common: CrmHttpConfig = {
      crm: 'Pipedrive',
      sink: name,
      baseUrl,
      headers: options.tokenIn === 'header' ? { 'x-api-token': token } : {},
      query: options.tokenIn === 'query' ? { api_token: token } : undefined,
      timeoutMs: options.timeoutMs,
      now: deps.now,
      authHint: 'Check PIPEDRIVE_API_TOKEN (Personal preferences > API in Pipedrive).',
      errorDetail: pipedriveErrorDetail,
      rateLimitDelayMs: (a) => (numberHeader(a.headers, 'x-ratelimit-reset') ?? 2) * 1000,
      windowExhaustedMs: (h) => {
        const daily = this.budget.observe(h);
        if (daily !== undefined) return daily;
        if (numberHeader(h, 'x-ratelimit-remaining') === 0) return (numberHeader(h, 'x-ratelimit-reset') ?? 2) * 1000;
        return undefined;
      },
    };
    this.http = new CrmHttp(common);
    this.searchHttp = new CrmHttp(common);
  }

  /**
   * One revision of a call at a time, never an older one over a newer (src/sinks/revisions.ts):
   * an update of a call PATCHes the activity its first revision created.
   */
  deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    // Its result is the attempt's: the lock's release carries the attempt's timeline entries.
    return this.revisions.deliver(call.key, ctx, () => this.write(call, ctx), [], true);
  }

  private async write(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    const number = counterpartNumber(call, this.region);
    let person = number === null ? null : await this.findPerson(number, ctx.signal);
    let personNote: string | null =
      person !== null ? null : number === null ? 'anonymous caller, no person' : 'no matching person';
    if (person === null && number !== null && this.options.createPerson) {
      person = await this.createPerson(number, ctx);
      personNote = 'new person';
      log.info(
        { pipedrivePersonId: person, number: maskPhone(number) },
        'pipedrive: person created for an unknown number',
      );
    }
    const dealId = person !== null && this.options.linkDeal === 'open' ? await this.openDeal(person, ctx.signal) : null;
    const callLog = this.callLog(call, person, dealId);

    let record = await this.memory.get(call.key);
    if (record === null && !(await this.memory.beginCreate(call.key, this.deps.now()))) {
      record = await this.findExistingLog(call.key, callLog, ctx.signal);
      if (record !== null)
        log.warn(
          { pipedriveCallLogId: callLogIdOf(record), pipedriveActivityId: record.activityId },
          'pipedrive: found the call log an interrupted earlier try created',
        );
    }

    let reason: string | null = null;
    if (record !== null) {
      if (!record.activityId) {
        // Nothing editable behind it; never add a second call log for the same call.
        reason = 'call log exists; Pipedrive call logs cannot be edited';
      } else {
        const updated = await this.updateActivity(record, callLog, ctx.signal);
        if (updated === null) {
          log.warn(
            { pipedriveActivityId: record.activityId },
            'pipedrive: remembered activity was deleted; logging the call again',
          );
          await this.memory.forget(call.key);
          record = null;
        } else {
          record = updated;
          reason = 'updated';
          log.info(
            { pipedriveCallLogId: callLogIdOf(record), person, deal: dealId, number: maskPhone(number) },
            'pipedrive: call log updated',
          );
        }
      }
      if (record !== null) {
        await this.memory.set(call.key, record);
        await this.memory.endCreate(call.key);
      }
    }

    if (record === null) {
      record = await this.create(call.key, callLog, person, ctx.signal);
      reason = personNote === null ? 'created' : `created; ${personNote}`;
      log.info(
        { pipedriveCallLogId: record.id, person, deal: dealId, number: maskPhone(number) },
        'pipedrive: call log created',
      );
    }

    const recording = await this.attachRecording(call, record, ctx);
    return {
      status: 'done',
      reason: recording === null ? (reason ?? 'done') : `${reason}; ${recording}`,
      refs: this.refs(record, dealId),
    };
  }

  /**
   * The call log callsync created for this call (DELETE /v1/callLogs/{id}, which deletes its
   * recording too) and the activity Pipedrive made for it (DELETE /api/v2/activities/{id}: deleting
   * a call log leaves its activity). Answers the records deleted; one already gone (404/410) counts as none.
   */
  async eraseCall(callKey: string, options: { dryRun: boolean; signal: AbortSignal }): Promise<number> {
    const record = await this.memory.get(callKey);
    if (record === null) return 0;
    const callLogId = callLogIdOf(record);
    const targets = [
      ...(callLogId === null ? [] : [`/v1/callLogs/${encodeURIComponent(callLogId)}`]),
      ...(record.activityId ? [`/api/v2/activities/${encodeURIComponent(record.activityId)}`] : []),
    ];
    if (options.dryRun) return targets.length;
    let deleted = 0;
    for (const path of targets) {
      const answer = await this.request({ method: 'DELETE', path, accept: [404, 410], signal: options.signal });
      if (answer.status !== 404 && answer.status !== 410) deleted++;
    }
    await this.memory.forget(callKey);
    return deleted;
  }

  private async create(
    callKey: string,
    callLog: PipedriveCallLog,
    person: number | null,
    signal: AbortSignal,
  ): Promise<CrmRecord> {
    const answer = await this.memory.creating(callKey, () =>
      this.request({ method: 'POST', path: '/v1/callLogs', body: callLog, signal }),
    );
    const data = field(answer.body, 'data');
    const id = stringField(data, 'id');
    // Pipedrive took the request: the call log probably exists. Transient, the create marker kept,
    // so the retry looks it up (findExistingLog) instead of a dead letter whose retry logs it twice.
    if (id === undefined)
      throw new TransientError(
        `Pipedrive POST /v1/callLogs answered ${answer.status} without data.id (the call log may exist: the retry looks it up)`,
        { status: answer.status },
      );
    const activityId = numericId(field(data, 'activity_id'));
    const created: CrmRecord = {
      id,
      contactId: person === null ? null : String(person),
      activityId: activityId === null ? null : String(activityId),
    };
    await this.memory.set(callKey, created);
    if (activityId !== null) await this.deps.state.set(`claimed:${activityId}`, callHash(callKey), CLAIM_TTL_MS);
    await this.memory.endCreate(callKey);
    return created;
  }

  private refs(record: CrmRecord, dealId: number | null): Record<string, string> {
    const refs: Record<string, string> = {};
    const callLogId = callLogIdOf(record);
    if (callLogId !== null) refs.pipedriveCallLogId = callLogId;
    if (record.activityId) refs.pipedriveActivityId = record.activityId;
    if (record.contactId) refs.pipedrivePersonId = record.contactId;
    if (dealId !== null) refs.pipedriveDealId = String(dealId);
    return refs;
  }

  /** The POST /v1/callLogs body for this call. */
  callLog(call: CanonicalCall, personId: number | null, dealId: number | null = null): PipedriveCallLog {
    const vars = callVars(call, {
      defaultRegion: this.region,
      archive: {
        enabled: this.options.archive.enabled,
        prefix: this.archivePrefix,
        baseUrl: this.options.archive.baseUrl,
      },
    });
    const from = displayNumber(call.from, call.fromRaw, this.region);
    const to = displayNumber(call.to, call.toRaw, this.region);
    const startMs = new Date(call.startedAt).getTime();
    const endIso =
      call.endedAt ??
      (call.durationSec !== null
        ? new Date(startMs + Math.round(call.durationSec * 1000)).toISOString()
        : call.startedAt);
    const log: PipedriveCallLog = {
      outcome: this.options.outcomeMap[call.outcome] ?? defaultPipedriveOutcome[call.outcome],
      // Required by Pipedrive; an anonymous callee (rare) is written as such.
      to_phone_number: to ?? 'anonymous',
      start_time: utcDateTime(call.startedAt),
      end_time: utcDateTime(endIso),
      subject: renderTitle(this.options.subjectTemplate, vars),
      note: renderHtmlBody(this.options.noteTemplate, vars),
    };
    if (from !== null) log.from_phone_number = from;
    if (call.durationSec !== null) log.duration = String(Math.round(call.durationSec));
    if (personId !== null) log.person_id = personId;
    if (dealId !== null) log.deal_id = dealId;
    if (this.options.userId !== undefined) log.user_id = this.options.userId;
    return log;
  }

  /**
   * A request to Pipedrive, after the daily budget (shared by all requests) said yes. Searches go
   * through their own limiter and window; a search that must wait delays only its own job, so
   * call log writes of other jobs go on.
   */
  private async request(req: CrmRequest, kind: 'search' | 'other' = 'other'): Promise<CrmAnswer> {
    this.checkBudget();
    if (kind === 'other') return this.http.request(req);
    // A search that must wait throws RetryLaterError (job scope): only this call waits.
    await this.searches.acquire();
    try {
      return await this.searchHttp.request(req);
    } catch (err) {
      if (!(err instanceof RetryLaterError)) throw err;
      this.checkBudget();
      throw new RetryLaterError(
        `Pipedrive search limit: ${err.message.replace(/; sink queue pauses for \d+ m?s$/, '')}; only searches wait, this call for ${waitText(err.delayMs)}`,
        err.delayMs,
        {
          status: err.status,
          scope: 'job',
          cause: err,
        },
      );
    }
  }

  private checkBudget(): void {
    const daily = this.budget.pausedForMs();
    if (daily > 0) {
      throw new RetryLaterError(
        `Pipedrive's daily API token budget is used up; the sink queue waits ${waitText(daily)}, until it resets`,
        daily,
        { scope: 'queue' },
      );
    }
  }

  /**
   * The person whose phone is this number however written. Pipedrive's search matches the term
   * anywhere in the value, so the trailing digits find every spacing; candidates are then checked
   * by libphonenumber. E.164 is tried second for numbers stored with unusual grouping. Each term
   * reads at most two pages (cursor pagination).
   */
  private async findPerson(e164: string, signal: AbortSignal): Promise<number | null> {
    const forms = phoneForms(e164);
    if (forms === null) return null;
    const digits = forms.e164.replace(/\D/g, '');
    const terms = [...new Set([digits.slice(-this.options.searchDigits), forms.e164])];
    for (const term of terms) {
      let cursor: string | undefined;
      for (let page = 0; page < 2; page++) {
        const query: Record<string, string> = { term, fields: 'phone', limit: '50' };
        if (cursor !== undefined) query.cursor = cursor;
        const answer = await this.request({ method: 'GET', path: '/api/v2/persons/search', query, signal }, 'search');
        for (const entry of listOf(answer, 'GET /api/v2/persons/search', true)) {
          const item = field(entry, 'item');
          const id = numericId(field(item, 'id'));
          const phones = field(item, 'phones');
          if (id === null || !Array.isArray(phones)) continue;
          if (phones.some((p) => typeof p === 'string' && samePhone(p, e164, this.region))) return id;
        }
        const next = field(field(answer.body, 'additional_data'), 'next_cursor');
        if (typeof next !== 'string' || next === '') break;
        cursor = next;
      }
    }
    // A person callsync created moments ago that the search does not show yet. Asked last: a person
    // merged into another meanwhile is found by the search under the surviving id.
    const names = await numberMemoryNames(this.deps.privacyKey, forms.e164);
    return numericId(
      (await this.deps.state.get(`newperson:${names.current}`)) ??
        (names.earlier === null ? null : await this.deps.state.get(`newperson:${names.earlier}`)),
    );
  }

  /**
   * Creates a person for an unknown number, named by the number in international format and
   * holding it as its phone (POST /api/v2/persons). One person per number: a lock per number while
   * creating, and the new person's id remembered until Pipedrive's search finds it.
   */
  private async createPerson(e164: string, ctx: SinkContext): Promise<number> {
    const forms = phoneForms(e164)!;
    const { current: numberKey } = await numberMemoryNames(this.deps.privacyKey, forms.e164);
    const lock = `newperson-lock:${numberKey}`;
    const token = `${ctx.jobId} ${randomBytes(6).toString('hex')}`;
    if (!(await this.deps.state.setIfAbsent(lock, token, Math.max(60_000, 2 * this.options.timeoutMs)))) {
      throw new RetryLaterError('Pipedrive: another call is creating the person for this number', 1000, {
        scope: 'job',
      });
    }
    try {
      const remembered = numericId(await this.deps.state.get(`newperson:${numberKey}`));
      if (remembered !== null) return remembered;
      const body: Record<string, unknown> = {
        name: forms.international,
        phones: [{ value: forms.e164, primary: true, label: 'other' }],
      };
      if (this.options.userId !== undefined) body.owner_id = this.options.userId;
      const answer = await this.request({ method: 'POST', path: '/api/v2/persons', body, signal: ctx.signal });
      const id = numericId(field(field(answer.body, 'data'), 'id'));
      if (id === null) throw new PermanentError('Pipedrive POST /api/v2/persons answered without data.id');
      await this.deps.state.set(`newperson:${numberKey}`, String(id), NEW_PERSON_TTL_MS);
      return id;
    } finally {
      await this.deps.state.deleteIfEquals(lock, token);
    }
  }

  /** The person's open deal when there is exactly one (GET /api/v2/deals?person_id&status=open); else null. */
  private async openDeal(personId: number, signal: AbortSignal): Promise<number | null> {
    const answer = await this.request({
      method: 'GET',
      path: '/api/v2/deals',
      query: { person_id: String(personId), status: 'open', limit: '2' },
      signal,
    });
    const deals = field(answer.body, 'data');
    const next = field(field(answer.body, 'additional_data'), 'next_cursor');
    if (!Array.isArray(deals) || deals.length !== 1 || (typeof next === 'string' && next !== '')) return null;
    return numericId(field(deals[0], 'id'));
  }

  /** Updates the activity behind the call log; null when Pipedrive no longer has it. */
  private async updateActivity(
    record: CrmRecord,
    callLog: PipedriveCallLog,
    signal: AbortSignal,
  ): Promise<CrmRecord | null> {
    const body: Record<string, unknown> = { subject: callLog.subject, note: callLog.note };
    if (callLog.person_id !== undefined) body.person_id = callLog.person_id;
    if (callLog.deal_id !== undefined) body.deal_id = callLog.deal_id;
    const answer = await this.request({
      method: 'PATCH',
      path: `/api/v2/activities/${encodeURIComponent(String(record.activityId))}`,
      body,
      accept: [404, 410],
      signal,
    });
    if (answer.status === 404 || answer.status === 410) return null;
    return {
      ...record,
      contactId: callLog.person_id !== undefined ? String(callLog.person_id) : (record.contactId ?? null),
    };
  }

  /**
   * The call log an interrupted earlier try may have created. GET /v1/callLogs lists the token
   * user's call logs only, so with `userId` set it is looked for among that user's activities.
   */
  private async findExistingLog(
    callKey: string,
    callLog: PipedriveCallLog,
    signal: AbortSignal,
  ): Promise<CrmRecord | null> {
    if (this.options.userId !== undefined)
      return this.findExistingActivity(callKey, callLog, this.options.userId, signal);
    for (let page = 0, start = 0; page < 2; page++) {
      const answer = await this.request({
        method: 'GET',
        path: '/v1/callLogs',
        query: { start: String(start), limit: '50' },
        signal,
      });
      const data = listOf(answer, 'GET /v1/callLogs');
      for (const log of data) {
        if (
          stringField(log, 'start_time') === callLog.start_time &&
          stringField(log, 'to_phone_number') === callLog.to_phone_number &&
          stringField(log, 'end_time') === callLog.end_time &&
          (callLog.from_phone_number === undefined ||
            stringField(log, 'from_phone_number') === callLog.from_phone_number)
        ) {
          const id = stringField(log, 'id');
          if (id === undefined) continue;
          const activityId = numericId(field(log, 'activity_id'));
          const personId = numericId(field(log, 'person_id'));
          if (activityId !== null) await this.deps.state.set(`claimed:${activityId}`, callHash(callKey), CLAIM_TTL_MS);
          return {
            id,
            activityId: activityId === null ? null : String(activityId),
            contactId: personId === null ? null : String(personId),
          };
        }
      }
      const pagination = field(field(answer.body, 'additional_data'), 'pagination');
      if (field(pagination, 'more_items_in_collection') !== true) return null;
      start = numericId(field(pagination, 'next_start')) ?? start + data.length;
    }
    return null;
  }

  /**
   * `userId`'s call activities changed since the first try began (GET /api/v2/activities, owner and
   * person filters), with this call's subject and person, not taken by another call's record. A
   * call activity does not name its call log, so the recovered record knows the activity only.
   */
  private async findExistingActivity(
    callKey: string,
    callLog: PipedriveCallLog,
    userId: number,
    signal: AbortSignal,
  ): Promise<CrmRecord | null> {
    const since = (await this.memory.pendingSince(callKey))?.getTime() ?? this.deps.now().getTime() - CLAIM_TTL_MS;
    const candidates: { id: number; sameNote: boolean }[] = [];
    let cursor: string | undefined;
    for (let page = 0; page < 3; page++) {
      const query: Record<string, string> = {
        owner_id: String(userId),
        updated_since: rfc3339(since - RECOVERY_SKEW_MS),
        sort_by: 'add_time',
        sort_direction: 'asc',
        limit: '100',
      };
      if (callLog.person_id !== undefined) query.person_id = String(callLog.person_id);
      if (cursor !== undefined) query.cursor = cursor;
      const answer = await this.request({ method: 'GET', path: '/api/v2/activities', query, signal });
      for (const activity of listOf(answer, 'GET /api/v2/activities')) {
        const id = numericId(field(activity, 'id'));
        if (id === null || field(activity, 'type') !== 'call' || field(activity, 'subject') !== callLog.subject)
          continue;
        if ((numericId(field(activity, 'person_id')) ?? undefined) !== callLog.person_id) continue;
        const added = Date.parse(String(field(activity, 'add_time')));
        if (!Number.isNaN(added) && added < since - RECOVERY_SKEW_MS) continue;
        candidates.push({ id, sameNote: field(activity, 'note') === callLog.note });
      }
      const next = field(field(answer.body, 'additional_data'), 'next_cursor');
      if (typeof next !== 'string' || next === '') break;
      cursor = next;
    }
    // Same note first (Pipedrive may rewrite HTML, so it only ranks), oldest first.
    candidates.sort((a, b) => Number(b.sameNote) - Number(a.sameNote));
    const mine = callHash(callKey);
    for (const { id } of candidates) {
      const claimedBy = await this.deps.state.get(`claimed:${id}`);
      if (
        claimedBy === mine ||
        (claimedBy === null && (await this.deps.state.setIfAbsent(`claimed:${id}`, mine, CLAIM_TTL_MS)))
      ) {
        return {
          id: `${ACTIVITY_ONLY}${id}`,
          activityId: String(id),
          contactId: callLog.person_id === undefined ? null : String(callLog.person_id),
        };
      }
    }
    return null;
  }

  /**
   * Attaches the call's recording to its call log once: `recording:<call log id>` is `pending`
   * while an upload may be under way and `attached` after. A pending one found on a later try is
   * checked against the call log's `has_recording` before uploading again. What the recording's
   * fate adds to the result's reason is returned (null when there is nothing to say).
   */
  private async attachRecording(call: CanonicalCall, record: CrmRecord, ctx: SinkContext): Promise<string | null> {
    if (!this.options.attachRecording || call.recordings.length === 0) return null;
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    const callLogId = callLogIdOf(record);
    if (callLogId === null) {
      log.warn(
        { pipedriveActivityId: record.activityId },
        'pipedrive: recording not attached: the recovered call log is known by its activity only',
      );
      return 'recording not attached (call log id unknown after recovery)';
    }
    const stateKey = `recording:${callLogId}`;
    const state = await this.deps.state.get(stateKey);
    if (state === 'attached') return null;
    if (state === 'pending') {
      const answer = await this.request({
        method: 'GET',
        path: `/v1/callLogs/${encodeURIComponent(callLogId)}`,
        accept: [404, 410],
        signal: ctx.signal,
      });
      if (answer.status === 200 && field(field(answer.body, 'data'), 'has_recording') === true) {
        await this.deps.state.set(stateKey, 'attached');
        return 'recording attached';
      }
    }
    if (this.deps.telephony === null) {
      log.warn('pipedrive: recording not attached: no telephony API is configured (TELEPHONY_API_URL) to download it');
      return 'recording not attached (no telephony API to download it)';
    }

    const [index, recording] = [...call.recordings.entries()].sort(
      ([, a], [, b]) => (RECORDING_PREFERENCE[a.type] ?? 9) - (RECORDING_PREFERENCE[b.type] ?? 9),
    )[0]!;
    let download: Download;
    try {
      download = await this.deps.telephony.download(recording.downloadUrl, ctx.signal);
    } catch (thrown) {
      const err = sinkErrorOf(thrown);
      if (err instanceof SinkError && err.kind === 'permanent') {
        log.warn({ reason: err.message }, 'pipedrive: recording not attached: the platform refused its download');
        return 'recording not attached (download refused)';
      }
      throw err;
    }
    const file = this.recordingFile(call, recording, index, download);
    if (file === null) {
      download.body.destroy();
      log.warn({ contentType: download.contentType }, 'pipedrive: recording not attached: not an audio type');
      return `recording not attached (${download.contentType} is not audio)`;
    }

    await this.deps.state.set(stateKey, 'pending', CLAIM_TTL_MS);
    let answer: CrmAnswer;
    try {
      answer = await this.request({
        method: 'POST',
        path: `/v1/callLogs/${encodeURIComponent(callLogId)}/recordings`,
        stream: multipartFile('file', file.name, file.type, download),
        accept: [404, 409, 410],
        timeoutMs: this.options.recordingTimeoutMs,
        signal: ctx.signal,
      });
    } catch (err) {
      download.body.destroy();
      if (err instanceof PermanentError) {
        // The call log is written; a recording Pipedrive will never take must not dead-letter it.
        await this.deps.state.delete(stateKey);
        log.warn(
          { reason: err.message, bytes: download.contentLength },
          'pipedrive: recording not attached: Pipedrive refused it',
        );
        return `recording not attached (${err.message})`;
      }
      throw err;
    }
    if (answer.status === 404 || answer.status === 410) {
      await this.deps.state.delete(stateKey);
      log.warn({ pipedriveCallLogId: callLogId }, 'pipedrive: recording not attached: the call log is gone');
      return 'recording not attached (call log not found)';
    }
    // 409: the call log has a recording already (an earlier try's upload whose answer was lost).
    await this.deps.state.set(stateKey, 'attached');
    log.info(
      { pipedriveCallLogId: callLogId, type: recording.type, bytes: download.contentLength },
      'pipedrive: recording attached',
    );
    return 'recording attached';
  }

  /** The part's file name (the archive's name for the recording) and audio type; null when not audio. */
  private recordingFile(
    call: CanonicalCall,
    recording: Recording,
    index: number,
    download: Download,
  ): { name: string; type: string } | null {
    const ext = recordingExtension(download.contentType, recording.downloadUrl);
    const name = basename(recordingKey(call, recording.type, index, ext, undefined));
    const mime = download.contentType.split(';')[0]!.trim().toLowerCase();
    if (mime.startsWith('audio/')) return { name, type: mime };
    const byExt = AUDIO_TYPES[ext];
    return byExt === undefined ? null : { name, type: byExt };
  }
}

/** A multipart/form-data body of one file part, streamed (its length known when the download's is). */
function multipartFile(
  fieldName: string,
  fileName: string,
  type: string,
  download: Download,
): { body: AsyncIterable<Uint8Array>; contentType: string; contentLength?: number } {
  const boundary = `callsync-${randomBytes(16).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\nContent-Disposition: form-data; name="${fieldName}"; filename="${fileName.replace(/["\r\n]/g, '_')}"\r\nContent-Type: ${type}\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  async function* body(): AsyncIterable<Uint8Array> {
    yield head;
    for await (const chunk of download.body) yield chunk as Uint8Array;
    yield tail;
  }
  return {
    body: body(),
    contentType: `multipart/form-data; boundary=${boundary}`,
    contentLength: download.contentLength === null ? undefined : head.length + download.contentLength + tail.length,
  };
}

export const pipedriveSinkType: SinkType<PipedriveOptions, PipedriveSettings> = {
  queueWide: true,
  type: 'pipedrive',
  options: pipedriveOptionsSchema,
  create: (name, options, deps) => new PipedriveSink(name, options, deps),
  needsRaw: () => false,
  needsTranscript: () => false,
  // Only the parts of the call its templates read (user names, forwarding and channel never).
  needsParts: (o) => partsReadBy([o.subjectTemplate, o.noteTemplate]),
  limit: (options) => options.rateLimit,
  env: pipedriveEnv,
  check(options, env) {
    const checked = apiToken(options, env);
    return 'problem' in checked ? [checked.problem] : [];
  },
  fromEnv(env) {
    if (!env.PIPEDRIVE_API_TOKEN) return null;
    const sink: { type: string } & Record<string, unknown> = { type: 'pipedrive' };
    if (env.PIPEDRIVE_API_URL) sink.apiUrl = env.PIPEDRIVE_API_URL;
    return { sinks: { pipedrive: sink }, routes: [{ name: 'pipedrive (env)', when: {}, to: ['pipedrive'] }] };
  },
};
