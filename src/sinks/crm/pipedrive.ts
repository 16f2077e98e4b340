// Pipedrive CRM sink: one call log (POST /v1/callLogs) per call, linked to the person whose phone
// matches the other party. Pipedrive cannot edit a call log, but every call log is an activity:
// a redelivery updates that activity's subject, note and person (PUT /v1/activities/{id}).
//
// Requests per call: person search (1-2), call log create (1) or activity update (1). After a
// crash between "created" and "id stored", the newest call logs (<= 2 pages) are scanned once
// for the same start time and numbers instead of creating a second one.
import { z } from 'zod';
import { OUTCOMES, type CanonicalCall, type Outcome } from '../../model/call.js';
import { maskPhone } from '../../log.js';
import { PermanentError } from '../../errors.js';
import { RevisionGuard } from '../revisions.js';
import { envOf, type Sink, type SinkContext, type SinkDeps, type SinkResult, type SinkType } from '../types.js';
import { envString, envUrl, type EnvShape } from '../../env-values.js';
import { archiveEnv } from '../archive/index.js';
import { regionEnv } from '../region.js';
import {
  archiveLinkSchema,
  queueLimitSchema,
  RecordMemory,
  regionSchema,
  resolveRegion,
  templateSchema,
  timeoutSchema,
  untilUtcMidnight,
  utcDateTime,
  type CrmRecord,
} from './common.js';
import { CrmHttp, field, numberHeader, stringField } from './http.js';
import { counterpartNumber, displayNumber, phoneForms, samePhone, type CountryCode } from './phone.js';
import { callVars, defaultBodyTemplate, defaultTitleTemplate, renderHtmlBody, renderTitle } from './vars.js';

export const PIPEDRIVE_DEFAULT_URL = 'https://api.pipedrive.com';

export const pipedriveOutcomes = ['connected', 'no_answer', 'left_message', 'left_voicemail', 'wrong_number', 'busy'] as const;
export type PipedriveOutcome = (typeof pipedriveOutcomes)[number];

export const defaultPipedriveOutcome: Record<Outcome, PipedriveOutcome> = {
  answered: 'connected',
  transferred: 'connected',
  missed: 'no_answer',
  rejected: 'no_answer',
  busy: 'busy',
  failed: 'no_answer',
  unknown: 'no_answer',
};

export const pipedriveOptionsSchema = z.strictObject({
  /** API token; default PIPEDRIVE_API_TOKEN (keep it out of the config file). */
  apiToken: z.string().min(1).optional(),
  /** API base URL without `/v1`; default PIPEDRIVE_API_URL, else https://api.pipedrive.com. */
  apiUrl: z.url().optional(),
  /** Send the token as `x-api-token` header (default) or `api_token` query parameter. */
  tokenIn: z.enum(['header', 'query']).default('header'),
  defaultRegion: regionSchema.optional(),
  /** Owner (user id) of the call logs; default the token's user. */
  userId: z.int().positive().optional(),
  subjectTemplate: templateSchema.default(defaultTitleTemplate),
  /** HTML note: values are escaped, line breaks become <br>. */
  noteTemplate: templateSchema.default(defaultBodyTemplate),
  /** Outcome -> Pipedrive outcome, over the defaults (answered: connected, missed: no_answer, ...). */
  outcomeMap: z.partialRecord(z.enum(OUTCOMES), z.enum(pipedriveOutcomes)).default({}),
  /** Person search term: this many trailing digits (matches `0211 6355340` and `+49 211 6355340`). */
  searchDigits: z.int().min(5).max(15).default(7),
  archive: archiveLinkSchema.default({ enabled: true }),
  /** Steady queue limit in calls per window. Default 5 / 2 s (~3 requests each, under 20 / 2 s). */
  rateLimit: queueLimitSchema.default({ max: 5, durationMs: 2_000 }),
  timeoutMs: timeoutSchema,
});

export type PipedriveOptions = z.infer<typeof pipedriveOptionsSchema>;

/** The environment variables the Pipedrive sink type reads. */
export const pipedriveEnv = {
  /** Personal API token (the sink's `apiToken` default); alone it adds the sink `pipedrive`. */
  PIPEDRIVE_API_TOKEN: envString,
  PIPEDRIVE_API_URL: envUrl,
  PHONE_DEFAULT_REGION: regionEnv.PHONE_DEFAULT_REGION,
  ARCHIVE_S3_PREFIX: archiveEnv.ARCHIVE_S3_PREFIX,
} satisfies EnvShape;

const NO_TOKEN = 'no API token: set PIPEDRIVE_API_TOKEN or the sink\'s apiToken';

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
  user_id?: number;
}

function pipedriveErrorDetail(body: unknown): string | undefined {
  const error = stringField(body, 'error');
  if (error === undefined) return undefined;
  const info = stringField(body, 'error_info');
  return info ? `${error} (${info})` : error;
}

function pipedriveWindowExhausted(headers: Headers, now: () => Date): number | undefined {
  if (numberHeader(headers, 'x-daily-requests-left') === 0) return untilUtcMidnight(now());
  if (numberHeader(headers, 'x-ratelimit-remaining') === 0) return (numberHeader(headers, 'x-ratelimit-reset') ?? 2) * 1000;
  return undefined;
}

function numericId(value: unknown): number | null {
  if (typeof value === 'number' && Number.isInteger(value)) return value;
  if (typeof value === 'string' && /^\d+$/.test(value)) return Number(value);
  return null;
}

export class PipedriveSink implements Sink {
  readonly type = 'pipedrive';
  private readonly http: CrmHttp;
  private readonly memory: RecordMemory;
  private readonly revisions: RevisionGuard;
  private readonly region: CountryCode;
  private readonly archivePrefix: string | undefined;

  constructor(
    readonly name: string,
    private readonly options: PipedriveOptions,
    private readonly deps: SinkDeps,
  ) {
    const env = envOf(pipedriveEnv, deps.env);
    const token = options.apiToken ?? env.PIPEDRIVE_API_TOKEN;
    if (!token) throw new Error(`sink "${name}" (pipedrive): ${NO_TOKEN}`);
    this.region = resolveRegion(options.defaultRegion, deps.env);
    this.archivePrefix = options.archive.prefix ?? env.ARCHIVE_S3_PREFIX;
    this.memory = new RecordMemory(deps.state);
    // A delivery makes a handful of requests, each within timeoutMs.
    this.revisions = new RevisionGuard(deps.state, { what: 'Pipedrive', lockTtlMs: Math.max(60_000, 6 * options.timeoutMs) });
    const baseUrl = (options.apiUrl ?? env.PIPEDRIVE_API_URL ?? PIPEDRIVE_DEFAULT_URL).replace(/\/+$/, '').replace(/\/v1$/, '');
    this.http = new CrmHttp({
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
      windowExhaustedMs: (h) => pipedriveWindowExhausted(h, deps.now),
    });
  }

  /**
   * One revision of a call at a time, never an older one over a newer (src/sinks/revisions.ts):
   * an update of a call PATCHes the record its first revision created.
   */
  deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    return this.revisions.deliver(call.key, ctx, () => this.write(call, ctx));
  }

  private async write(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const log = ctx.log.child({ sink: this.name, callId: call.callId });
    const number = counterpartNumber(call, this.region);
    const person = number === null ? null : await this.findPerson(number, ctx.signal);
    const callLog = this.callLog(call, person);

    let record = await this.memory.get(call.key);
    if (record === null && !(await this.memory.beginCreate(call.key, this.deps.now()))) {
      record = await this.findExistingLog(callLog, ctx.signal);
      if (record !== null) log.warn({ pipedriveCallLogId: record.id }, 'pipedrive: found the call log an interrupted earlier try created');
    }

    if (record !== null) {
      if (!record.activityId) {
        // Nothing editable behind it; never add a second call log for the same call.
        await this.memory.set(call.key, record);
        await this.memory.endCreate(call.key);
        return { status: 'done', reason: 'call log exists; Pipedrive call logs cannot be edited', refs: this.refs(record) };
      }
      const updated = await this.updateActivity(record, callLog, ctx.signal);
      if (updated !== null) {
        await this.memory.set(call.key, updated);
        await this.memory.endCreate(call.key);
        log.info({ pipedriveCallLogId: updated.id, person: updated.contactId ?? null, number: maskPhone(number) }, 'pipedrive: call log updated');
        return { status: 'done', reason: 'updated', refs: this.refs(updated) };
      }
      log.warn({ pipedriveCallLogId: record.id }, 'pipedrive: remembered activity was deleted; logging the call again');
      await this.memory.forget(call.key);
    }

    const answer = await this.memory.creating(call.key, () =>
      this.http.request({ method: 'POST', path: '/v1/callLogs', body: callLog, signal: ctx.signal }),
    );
    const data = field(answer.body, 'data');
    const id = stringField(data, 'id');
    if (id === undefined) throw new PermanentError('Pipedrive POST /v1/callLogs answered without data.id');
    const activityId = numericId(field(data, 'activity_id'));
    const created: CrmRecord = { id, contactId: person === null ? null : String(person), activityId: activityId === null ? null : String(activityId) };
    await this.memory.set(call.key, created);
    await this.memory.endCreate(call.key);
    log.info({ pipedriveCallLogId: id, person, number: maskPhone(number) }, 'pipedrive: call log created');
    return {
      status: 'done',
      reason: person === null ? (number === null ? 'created; anonymous caller, no person' : 'created; no matching person') : 'created',
      refs: this.refs(created),
    };
  }

  private refs(record: CrmRecord): Record<string, string> {
    const refs: Record<string, string> = { pipedriveCallLogId: record.id };
    if (record.activityId) refs.pipedriveActivityId = record.activityId;
    if (record.contactId) refs.pipedrivePersonId = record.contactId;
    return refs;
  }

  /** The POST /v1/callLogs body for this call. */
  callLog(call: CanonicalCall, personId: number | null): PipedriveCallLog {
    const vars = callVars(call, {
      defaultRegion: this.region,
      archive: { enabled: this.options.archive.enabled, prefix: this.archivePrefix, baseUrl: this.options.archive.baseUrl },
    });
    const from = displayNumber(call.from, call.fromRaw, this.region);
    const to = displayNumber(call.to, call.toRaw, this.region);
    const startMs = new Date(call.startedAt).getTime();
    const endIso =
      call.endedAt ?? (call.durationSec !== null ? new Date(startMs + Math.round(call.durationSec * 1000)).toISOString() : call.startedAt);
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
    if (this.options.userId !== undefined) log.user_id = this.options.userId;
    return log;
  }

  /**
   * Persons whose phone is this number however written. Pipedrive's search matches the term
   * anywhere in the value, so the trailing digits find every spacing; candidates are then checked
   * by libphonenumber. E.164 is tried second for numbers stored with unusual grouping.
   */
  private async findPerson(e164: string, signal: AbortSignal): Promise<number | null> {
    const forms = phoneForms(e164);
    if (forms === null) return null;
    const digits = forms.e164.replace(/\D/g, '');
    const terms = [...new Set([digits.slice(-this.options.searchDigits), forms.e164])];
    for (const term of terms) {
      const answer = await this.http.request({
        method: 'GET',
        path: '/v1/persons/search',
        query: { term, fields: 'phone', limit: '20' },
        signal,
      });
      const items = field(field(answer.body, 'data'), 'items');
      if (!Array.isArray(items)) continue;
      for (const entry of items) {
        const item = field(entry, 'item');
        const id = numericId(field(item, 'id'));
        const phones = field(item, 'phones');
        if (id === null || !Array.isArray(phones)) continue;
        if (phones.some((p) => typeof p === 'string' && samePhone(p, e164, this.region))) return id;
      }
    }
    return null;
  }

  /** Updates the activity behind the call log; null when Pipedrive no longer has it. */
  private async updateActivity(record: CrmRecord, callLog: PipedriveCallLog, signal: AbortSignal): Promise<CrmRecord | null> {
    const body: Record<string, unknown> = { subject: callLog.subject, note: callLog.note };
    if (callLog.person_id !== undefined) body.person_id = callLog.person_id;
    const answer = await this.http.request({
      method: 'PUT',
      path: `/v1/activities/${encodeURIComponent(String(record.activityId))}`,
      body,
      accept: [404, 410],
      signal,
    });
    if (answer.status === 404 || answer.status === 410) return null;
    return { ...record, contactId: callLog.person_id !== undefined ? String(callLog.person_id) : (record.contactId ?? null) };
  }

  /** The newest call logs (two pages at most), looking for this call's start and end time and numbers. */
  private async findExistingLog(callLog: PipedriveCallLog, signal: AbortSignal): Promise<CrmRecord | null> {
    for (let page = 0, start = 0; page < 2; page++) {
      const answer = await this.http.request({ method: 'GET', path: '/v1/callLogs', query: { start: String(start), limit: '50' }, signal });
      const data = field(answer.body, 'data');
      if (!Array.isArray(data)) return null;
      for (const log of data) {
        if (
          stringField(log, 'start_time') === callLog.start_time &&
          stringField(log, 'to_phone_number') === callLog.to_phone_number &&
          stringField(log, 'end_time') === callLog.end_time &&
          (callLog.from_phone_number === undefined || stringField(log, 'from_phone_number') === callLog.from_phone_number)
        ) {
          const id = stringField(log, 'id');
          if (id === undefined) continue;
          const activityId = numericId(field(log, 'activity_id'));
          const personId = numericId(field(log, 'person_id'));
          return { id, activityId: activityId === null ? null : String(activityId), contactId: personId === null ? null : String(personId) };
        }
      }
      const pagination = field(field(answer.body, 'additional_data'), 'pagination');
      if (field(pagination, 'more_items_in_collection') !== true) return null;
      start = numericId(field(pagination, 'next_start')) ?? start + data.length;
    }
    return null;
  }
}

export const pipedriveSinkType: SinkType<PipedriveOptions> = {
  type: 'pipedrive',
  options: pipedriveOptionsSchema,
  create: (name, options, deps) => new PipedriveSink(name, options, deps),
  needsRaw: () => false,
  limit: (options) => options.rateLimit,
  env: pipedriveEnv,
  check: (options, env) => (options.apiToken ?? envOf(pipedriveEnv, env).PIPEDRIVE_API_TOKEN ? [] : [NO_TOKEN]),
  fromEnv(parsed) {
    const env = envOf(pipedriveEnv, parsed);
    if (!env.PIPEDRIVE_API_TOKEN) return null;
    const sink: { type: string } & Record<string, unknown> = { type: 'pipedrive' };
    if (env.PIPEDRIVE_API_URL) sink.apiUrl = env.PIPEDRIVE_API_URL;
    return { sinks: { pipedrive: sink }, routes: [{ name: 'pipedrive (env)', when: {}, to: ['pipedrive'] }] };
  },
};
