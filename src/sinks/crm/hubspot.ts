// HubSpot CRM sink: one Calls object (CRM v3) per call, associated with the contact whose phone
// number matches the other party. A private-app access token with the scopes
// crm.objects.contacts.read (+ .write when contacts may be created) is all it needs.
//
// Requests per call: contact search (1), optional contact create (1), then call create (1) or
// call update (1, + 1 association when the contact changed). After a crash between "created" and
// "id stored", one extra calls search finds the record instead of creating a second one.
import { z } from 'zod';
import { callHash, OUTCOMES, type CanonicalCall, type Outcome } from '../../model/call.js';
import { maskPhone } from '../../log.js';
import { PermanentError } from '../../errors.js';
import { RevisionGuard } from '../revisions.js';
import { envOf, type Sink, type SinkContext, type SinkDeps, type SinkResult, type SinkType } from '../types.js';
import { envOptionalBool, envString, envUrl, type EnvShape } from '../../env-values.js';
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
  type CrmRecord,
} from './common.js';
import { CrmHttp, field, numberHeader, stringField, type CrmAnswer } from './http.js';
import { counterpartNumber, displayNumber, phoneForms, samePhone, type CountryCode } from './phone.js';
import { callVars, defaultBodyTemplate, defaultTitleTemplate, renderHtmlBody, renderTitle } from './vars.js';

export const HUBSPOT_DEFAULT_URL = 'https://api.hubapi.com';
/** HubSpot-defined association type "call to contact". */
export const CALL_TO_CONTACT = 194;

export const hubspotCallStatuses = [
  'BUSY', 'CALLING_CRM_USER', 'CANCELED', 'COMPLETED', 'CONNECTING', 'FAILED', 'IN_PROGRESS', 'NO_ANSWER', 'QUEUED', 'RINGING',
] as const;
export type HubSpotCallStatus = (typeof hubspotCallStatuses)[number];

export const defaultHubSpotStatus: Record<Outcome, HubSpotCallStatus> = {
  answered: 'COMPLETED',
  transferred: 'COMPLETED',
  missed: 'NO_ANSWER',
  rejected: 'CANCELED',
  busy: 'BUSY',
  failed: 'FAILED',
  unknown: 'COMPLETED',
};

export const hubspotOptionsSchema = z.strictObject({
  /** Private-app access token; default HUBSPOT_ACCESS_TOKEN (keep it out of the config file). */
  accessToken: z.string().min(1).optional(),
  /** API base URL; default HUBSPOT_API_URL, else https://api.hubapi.com. */
  apiUrl: z.url().optional(),
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
   * A custom call property (single-line text, ideally "unique value") that receives a stable id
   * of the call. When set, crash recovery searches by it; otherwise by timestamp + numbers.
   */
  externalIdProperty: z.string().regex(/^[a-z0-9_]+$/).optional(),
  /** hubspot_owner_id of the created calls. */
  ownerId: z.string().min(1).optional(),
  archive: archiveLinkSchema.default({ enabled: true }),
  /** Steady queue limit in calls per window. Default 25 / 10 s (~4 requests each, under 100 / 10 s). */
  rateLimit: queueLimitSchema.default({ max: 25, durationMs: 10_000 }),
  timeoutMs: timeoutSchema,
});

export type HubSpotOptions = z.infer<typeof hubspotOptionsSchema>;

/** The environment variables the HubSpot sink type reads. */
export const hubspotEnv = {
  /** Private-app access token (the sink's `accessToken` default); alone it adds the sink `hubspot`. */
  HUBSPOT_ACCESS_TOKEN: envString,
  HUBSPOT_API_URL: envUrl,
  /** The shortcut sink's `createContacts`. */
  HUBSPOT_CREATE_CONTACTS: envOptionalBool,
  PHONE_DEFAULT_REGION: regionEnv.PHONE_DEFAULT_REGION,
  ARCHIVE_S3_PREFIX: archiveEnv.ARCHIVE_S3_PREFIX,
} satisfies EnvShape;

interface Contact {
  id: string;
  name: string | null;
}

function hubspotErrorDetail(body: unknown): string | undefined {
  const message = stringField(body, 'message');
  if (message === undefined) return undefined;
  const category = stringField(body, 'category');
  return category ? `${message} [${category}]` : message;
}

/** How long to pause after a 429 without Retry-After, from HubSpot's policy name and headers. */
function hubspotRateLimitDelay(answer: CrmAnswer, now: () => Date): number {
  const policy = stringField(answer.body, 'policyName')?.toUpperCase();
  if (policy === 'DAILY') return untilUtcMidnight(now());
  if (policy === 'SECONDLY') return 1000;
  return numberHeader(answer.headers, 'x-hubspot-ratelimit-interval-milliseconds') ?? 10_000;
}

function hubspotWindowExhausted(headers: Headers, now: () => Date): number | undefined {
  if (numberHeader(headers, 'x-hubspot-ratelimit-daily-remaining') === 0) return untilUtcMidnight(now());
  if (numberHeader(headers, 'x-hubspot-ratelimit-remaining') === 0) {
    return numberHeader(headers, 'x-hubspot-ratelimit-interval-milliseconds') ?? 10_000;
  }
  if (numberHeader(headers, 'x-hubspot-ratelimit-secondly-remaining') === 0) return 1000;
  return undefined;
}

function results(body: unknown): { id: string; properties: Record<string, unknown> }[] {
  const list = field(body, 'results');
  if (!Array.isArray(list)) return [];
  return list.flatMap((r) => {
    const id = stringField(r, 'id');
    const props = field(r, 'properties');
    return id === undefined ? [] : [{ id, properties: props !== null && typeof props === 'object' ? (props as Record<string, unknown>) : {} }];
  });
}

const NO_TOKEN = 'no access token: set HUBSPOT_ACCESS_TOKEN (a private app\'s token) or the sink\'s accessToken';

export class HubSpotSink implements Sink {
  readonly type = 'hubspot';
  private readonly http: CrmHttp;
  private readonly memory: RecordMemory;
  private readonly revisions: RevisionGuard;
  private readonly region: CountryCode;
  private readonly archivePrefix: string | undefined;

  constructor(
    readonly name: string,
    private readonly options: HubSpotOptions,
    private readonly deps: SinkDeps,
  ) {
    const env = envOf(hubspotEnv, deps.env);
    const token = options.accessToken ?? env.HUBSPOT_ACCESS_TOKEN;
    if (!token) throw new Error(`sink "${name}" (hubspot): ${NO_TOKEN}`);
    this.region = resolveRegion(options.defaultRegion, deps.env);
    this.archivePrefix = options.archive.prefix ?? env.ARCHIVE_S3_PREFIX;
    this.memory = new RecordMemory(deps.state);
    // A delivery makes a handful of requests, each within timeoutMs.
    this.revisions = new RevisionGuard(deps.state, { what: 'HubSpot', lockTtlMs: Math.max(60_000, 6 * options.timeoutMs) });
    this.http = new CrmHttp({
      crm: 'HubSpot',
      sink: name,
      baseUrl: options.apiUrl ?? env.HUBSPOT_API_URL ?? HUBSPOT_DEFAULT_URL,
      headers: { authorization: `Bearer ${token}` },
      timeoutMs: options.timeoutMs,
      now: deps.now,
      authHint: 'Check HUBSPOT_ACCESS_TOKEN (private app token, scopes crm.objects.contacts.read/.write).',
      errorDetail: hubspotErrorDetail,
      rateLimitDelayMs: (a) => hubspotRateLimitDelay(a, deps.now),
      windowExhaustedMs: (h) => hubspotWindowExhausted(h, deps.now),
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
    let contact: Contact | null = null;
    if (number !== null) {
      contact = await this.findContact(number, ctx.signal);
      if (contact === null && this.options.createContacts) contact = await this.createContact(number, ctx.signal);
    }
    const properties = this.callProperties(call, contact);

    let record = await this.memory.get(call.key);
    if (record === null && !(await this.memory.beginCreate(call.key, this.deps.now()))) {
      // An earlier try began creating this call and never stored the id: it may exist already.
      const existing = await this.findExistingCall(call, ctx.signal);
      if (existing !== null) {
        record = { id: existing, contactId: null };
        log.warn({ hubspotCallId: existing }, 'hubspot: found the call an interrupted earlier try created; updating it');
      }
    }

    if (record !== null) {
      const updated = await this.updateCall(record, properties, contact, call, ctx.signal);
      if (updated !== null) {
        log.info({ hubspotCallId: updated.id, contact: contact?.id ?? null, number: maskPhone(number) }, 'hubspot: call updated');
        return { status: 'done', reason: 'updated', refs: this.refs(updated) };
      }
      log.warn({ hubspotCallId: record.id }, 'hubspot: remembered call was deleted in HubSpot; creating it again');
      await this.memory.forget(call.key);
    }

    const created = await this.memory.creating(call.key, () => this.createCall(properties, contact, ctx.signal));
    await this.memory.set(call.key, created);
    await this.memory.endCreate(call.key);
    log.info({ hubspotCallId: created.id, contact: contact?.id ?? null, number: maskPhone(number) }, 'hubspot: call created');
    return { status: 'done', reason: contact === null ? (number === null ? 'created; anonymous caller, no contact' : 'created; no matching contact') : 'created', refs: this.refs(created) };
  }

  private refs(record: CrmRecord): Record<string, string> {
    const refs: Record<string, string> = { hubspotCallId: record.id };
    if (record.contactId) refs.hubspotContactId = record.contactId;
    return refs;
  }

  /** The Calls object's properties for this call. HubSpot property values are strings. */
  callProperties(call: CanonicalCall, contact: Contact | null): Record<string, string> {
    const vars = callVars(call, {
      defaultRegion: this.region,
      archive: { enabled: this.options.archive.enabled, prefix: this.archivePrefix, baseUrl: this.options.archive.baseUrl },
      contactName: contact?.name ?? null,
    });
    const props: Record<string, string> = {
      hs_timestamp: new Date(call.startedAt).toISOString(),
      hs_call_title: renderTitle(this.options.titleTemplate, vars),
      hs_call_body: renderHtmlBody(this.options.bodyTemplate, vars),
      hs_call_direction: call.direction === 'in' ? 'INBOUND' : 'OUTBOUND',
      hs_call_status: this.options.statusMap[call.outcome] ?? defaultHubSpotStatus[call.outcome],
    };
    if (call.durationSec !== null) props.hs_call_duration = String(Math.round(call.durationSec * 1000));
    const from = displayNumber(call.from, call.fromRaw, this.region);
    const to = displayNumber(call.to, call.toRaw, this.region);
    if (from !== null) props.hs_call_from_number = from;
    if (to !== null) props.hs_call_to_number = to;
    if (this.options.externalIdProperty) props[this.options.externalIdProperty] = callHash(call.key);
    if (this.options.ownerId) props.hubspot_owner_id = this.options.ownerId;
    return props;
  }

  /** Contacts whose phone or mobile phone is this number, however it was written; the oldest wins. */
  private async findContact(e164: string, signal: AbortSignal): Promise<Contact | null> {
    const forms = phoneForms(e164);
    if (forms === null) return null;
    const eq = (propertyName: string, value: string) => ({ filters: [{ propertyName, operator: 'EQ', value }] });
    const answer = await this.http.request({
      method: 'POST',
      path: '/crm/v3/objects/contacts/search',
      body: {
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
    });
    for (const r of results(answer.body)) {
      const p = r.properties;
      const phone = typeof p.phone === 'string' ? p.phone : null;
      const mobile = typeof p.mobilephone === 'string' ? p.mobilephone : null;
      if (samePhone(phone, e164, this.region) || samePhone(mobile, e164, this.region)) {
        const name = [p.firstname, p.lastname].filter((v): v is string => typeof v === 'string' && v !== '').join(' ');
        return { id: r.id, name: name || null };
      }
    }
    // A contact this sink created moments ago may not be searchable yet.
    const recent = await this.deps.state.get(`contact:${callHash(e164)}`);
    return recent === null ? null : { id: recent, name: null };
  }

  private async createContact(e164: string, signal: AbortSignal): Promise<Contact> {
    const answer = await this.http.request({
      method: 'POST',
      path: '/crm/v3/objects/contacts',
      body: { properties: { ...this.options.newContactProperties, phone: e164 } },
      signal,
    });
    const id = stringField(answer.body, 'id');
    if (id === undefined) throw new PermanentError('HubSpot POST /crm/v3/objects/contacts answered without an id');
    // Until HubSpot's search index has it (seconds), later calls from this number find it here.
    await this.deps.state.set(`contact:${callHash(e164)}`, id, 24 * 3600 * 1000);
    return { id, name: null };
  }

  private async createCall(properties: Record<string, string>, contact: Contact | null, signal: AbortSignal): Promise<CrmRecord> {
    const body: Record<string, unknown> = { properties };
    if (contact !== null) {
      body.associations = [{ to: { id: contact.id }, types: [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: CALL_TO_CONTACT }] }];
    }
    const answer = await this.http.request({ method: 'POST', path: '/crm/v3/objects/calls', body, signal });
    const id = stringField(answer.body, 'id');
    if (id === undefined) throw new PermanentError('HubSpot POST /crm/v3/objects/calls answered without an id');
    return { id, contactId: contact?.id ?? null };
  }

  /** PATCHes the remembered call (and associates a newly matched contact); null when HubSpot no longer has it. */
  private async updateCall(
    record: CrmRecord,
    properties: Record<string, string>,
    contact: Contact | null,
    call: CanonicalCall,
    signal: AbortSignal,
  ): Promise<CrmRecord | null> {
    const path = `/crm/v3/objects/calls/${encodeURIComponent(record.id)}`;
    const answer = await this.http.request({ method: 'PATCH', path, body: { properties }, accept: [404], signal });
    if (answer.status === 404) return null;
    let contactId = record.contactId ?? null;
    if (contact !== null && contact.id !== contactId) {
      await this.http.request({
        method: 'PUT',
        path: `/crm/v4/objects/calls/${encodeURIComponent(record.id)}/associations/contacts/${encodeURIComponent(contact.id)}`,
        body: [{ associationCategory: 'HUBSPOT_DEFINED', associationTypeId: CALL_TO_CONTACT }],
        signal,
      });
      contactId = contact.id;
    }
    const next = { id: record.id, contactId };
    await this.memory.set(call.key, next);
    await this.memory.endCreate(call.key);
    return next;
  }

  /**
   * Looks for a call an interrupted earlier try created: by `externalIdProperty` when configured,
   * else by the exact start time, direction and numbers (two calls never share all of those).
   */
  private async findExistingCall(call: CanonicalCall, signal: AbortSignal): Promise<string | null> {
    const filters: { propertyName: string; operator: string; value: string }[] = [];
    if (this.options.externalIdProperty) {
      filters.push({ propertyName: this.options.externalIdProperty, operator: 'EQ', value: callHash(call.key) });
    } else {
      filters.push({ propertyName: 'hs_timestamp', operator: 'EQ', value: String(new Date(call.startedAt).getTime()) });
      filters.push({ propertyName: 'hs_call_direction', operator: 'EQ', value: call.direction === 'in' ? 'INBOUND' : 'OUTBOUND' });
      const from = displayNumber(call.from, call.fromRaw, this.region);
      const to = displayNumber(call.to, call.toRaw, this.region);
      if (from !== null) filters.push({ propertyName: 'hs_call_from_number', operator: 'EQ', value: from });
      if (to !== null) filters.push({ propertyName: 'hs_call_to_number', operator: 'EQ', value: to });
    }
    const answer = await this.http.request({
      method: 'POST',
      path: '/crm/v3/objects/calls/search',
      body: { filterGroups: [{ filters }], properties: ['hs_call_title'], limit: 1 },
      signal,
    });
    return results(answer.body)[0]?.id ?? null;
  }
}

export const hubspotSinkType: SinkType<HubSpotOptions> = {
  type: 'hubspot',
  options: hubspotOptionsSchema,
  create: (name, options, deps) => new HubSpotSink(name, options, deps),
  needsRaw: () => false,
  limit: (options) => options.rateLimit,
  env: hubspotEnv,
  check: (options, env) => (options.accessToken ?? envOf(hubspotEnv, env).HUBSPOT_ACCESS_TOKEN ? [] : [NO_TOKEN]),
  fromEnv(parsed) {
    const env = envOf(hubspotEnv, parsed);
    if (!env.HUBSPOT_ACCESS_TOKEN) return null;
    // The token stays in the environment (read at create), never in the sink config object.
    const sink: { type: string } & Record<string, unknown> = { type: 'hubspot' };
    if (env.HUBSPOT_API_URL) sink.apiUrl = env.HUBSPOT_API_URL;
    if (env.HUBSPOT_CREATE_CONTACTS !== undefined) sink.createContacts = env.HUBSPOT_CREATE_CONTACTS;
    return { sinks: { hubspot: sink }, routes: [{ name: 'hubspot (env)', when: {}, to: ['hubspot'] }] };
  },
};
