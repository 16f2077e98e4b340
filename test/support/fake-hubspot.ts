// A fake HubSpot on loopback that answers as HubSpot documents it today (checked 2026-11):
//
//   Date-versioned paths (`/<api>/<YYYY-MM>/...`, releases 2026-03 and 2026-09), the numbered ones
//   going unsupported (v4 on 2027-03-30, v1-v3 in 2027-09):
//     https://developers.hubspot.com/docs/api-reference/latest/overview
//     https://developers.hubspot.com/docs/api-reference/legacy/migration-guide
//     https://developers.hubspot.com/changelog/legacy-apis-and-legacy-apps-whats-going-unsupported-and-when
//   POST  /crm/objects/{v}/contacts/search  { filterGroups:[{filters:[{propertyName,operator,value}]}], properties, sorts, limit }
//                                           -> { total, results:[{ id, properties, createdAt, updatedAt, archived }] }
//   POST  /crm/objects/{v}/contacts         { properties } -> 201
//   POST  /crm/objects/{v}/calls            { properties, associations:[{ to:{id}, types:[{associationCategory, associationTypeId}] }] } -> 201
//   PATCH /crm/objects/{v}/calls/{id}       { properties } -> 200, 404 when unknown
//   DELETE /crm/objects/{v}/calls/{id}     -> 204 (HubSpot moves it to the recycle bin), 404 when unknown
//     https://developers.hubspot.com/docs/api-reference/latest/crm/activities/calls/guide ("Delete calls")
//   POST  /crm/objects/{v}/calls/search     same shape as the contact search
//   POST  /crm/objects/{v}/calls/batch/upsert  { inputs:[{ idProperty, id, properties }] } -> 200
//         { status, results:[{ id, properties, createdAt, updatedAt, archived, new }], startedAt, completedAt };
//         idProperty must be a property with unique values (SimplePublicObjectBatchInputUpsert in
//         HubSpot/hubspot-sdk-typescript src/resources/crm/crm.ts)
//   PUT   /crm/objects/{v}/calls/{id}/associations/contacts/{contactId}   [{associationCategory, associationTypeId}]
//         -> { createdResourceId, entity:{ fromObjectId, fromObjectTypeId, labels, toObjectId, toObjectTypeId }, location }
//     https://developers.hubspot.com/docs/api-reference/latest/crm/activities/calls/guide
//     https://developers.hubspot.com/docs/api-reference/2026-03/crm/associations/associate-records/update-association-labeled
//   GET   /account-info/{v}/details  -> { portalId, accountType, timeZone, companyCurrency, additionalCurrencies,
//                                        utcOffset, utcOffsetMilliseconds, uiDomain, dataHostingLocation }
//     https://developers.hubspot.com/docs/api-reference/latest/account/account-information/get-account-details
//   GET   /calling/v1/dispositions   -> [{ id, label, deleted }] (legacy reference only; no date-versioned
//         counterpart is documented, so it is served; `deleted` as live accounts answer it). HubSpot's six
//         default outcomes and their GUIDs are those of the calls guide.
//     https://developers.hubspot.com/docs/api-reference/legacy/crm/activities/engagements/get-calling-v1-dispositions
//
// Properties of calls: `hs_call_disposition` takes a GUID of the account's outcomes; `hs_call_recording_url`
// "Only HTTPS, secure URLs will be accepted"; unknown properties -> PROPERTY_DOESNT_EXIST; wrong types
// (a duration that is no integer, a timestamp that is no date, an option not allowed) -> 400 VALIDATION_ERROR.
// Errors: { status:'error', message, correlationId, category }. Auth: `Authorization: Bearer <token>`
// (service keys and private-app tokens alike:
//   https://developers.hubspot.com/docs/apps/developer-platform/build-apps/authentication/account-service-keys).
// Limits (https://developers.hubspot.com/docs/developer-tooling/platform/usage-guidelines and the search
// guide https://developers.hubspot.com/docs/api-reference/latest/crm/search-the-crm): search is limited to
// five requests per second per account and its answers carry no rate-limit headers; a 429 body has
// `errorType: RATE_LIMIT` and `policyName`. Other answers carry the X-HubSpot-RateLimit-* headers.
// Like HubSpot, `hs_searchable_calculated_phone_number` is the number's digits without country code.
//
// Not documented, assumed here (also in docs/crm.md): what a numbered /crm/v3 or /crm/v4 path answers
// once unsupported (the fake refuses them with 404, like a path it does not route, so nothing may still
// depend on them); the exact text of validation messages; the search 429's policyName (SECONDLY here);
// that an unknown outcome GUID is refused as INVALID_OPTION; that an unrecognized field of a request
// body is refused (HubSpot's JSON reader rejects them, "Unrecognized field").
import { randomUUID } from 'node:crypto';
import { parsePhoneNumberFromString } from 'libphonenumber-js';
import { FakeCrmServer, type RecordedRequest, type Reply } from './fake-crm-server.js';

export interface HubSpotObject {
  id: string;
  properties: Record<string, string>;
  createdAt: string;
  updatedAt: string;
  associations: { toId: string; typeId: number }[];
}

export interface HubSpotDisposition {
  id: string;
  label: string;
  deleted: boolean;
}

type PropertyType =
  | { type: 'string' }
  | { type: 'number' }
  | { type: 'datetime' }
  | { type: 'enumeration'; options: string[] }
  | { type: 'disposition' }
  | { type: 'https-url' };

interface PropertyDef {
  def: PropertyType;
  unique?: boolean;
  readOnly?: boolean;
}

/** HubSpot's default call outcomes (the calls guide lists these labels and GUIDs). */
export const DEFAULT_DISPOSITIONS: readonly HubSpotDisposition[] = [
  { id: '9d9162e7-6cf3-4944-bf63-4dff82258764', label: 'Busy', deleted: false },
  { id: 'f240bbac-87c9-4f6e-bf70-924b57d47db7', label: 'Connected', deleted: false },
  { id: 'a4c4c377-d246-4b32-a13b-75a56a4cd0ff', label: 'Left live message', deleted: false },
  { id: 'b2cf5968-551e-4856-9783-52b3da59a7d0', label: 'Left voicemail', deleted: false },
  { id: '73a0d17f-1163-4015-bdd5-ec830791da20', label: 'No answer', deleted: false },
  { id: '17b47fee-58de-441e-a44c-c6300d46f273', label: 'Wrong number', deleted: false },
];

const CALL_STATUSES = [
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
];
const LIFECYCLE_STAGES = [
  'subscriber',
  'lead',
  'marketingqualifiedlead',
  'salesqualifiedlead',
  'opportunity',
  'customer',
  'evangelist',
  'other',
];
const API_VERSIONS = ['2026-03', '2026-09'];
const SEARCH_OPERATORS = [
  'EQ',
  'NEQ',
  'LT',
  'LTE',
  'GT',
  'GTE',
  'BETWEEN',
  'IN',
  'NOT_IN',
  'HAS_PROPERTY',
  'NOT_HAS_PROPERTY',
  'CONTAINS_TOKEN',
  'NOT_CONTAINS_TOKEN',
];

const CALL_PROPERTIES: Record<string, PropertyDef> = {
  hs_timestamp: { def: { type: 'datetime' } },
  hs_call_title: { def: { type: 'string' } },
  hs_call_body: { def: { type: 'string' } },
  hs_call_direction: { def: { type: 'enumeration', options: ['INBOUND', 'OUTBOUND'] } },
  hs_call_status: { def: { type: 'enumeration', options: CALL_STATUSES } },
  hs_call_duration: { def: { type: 'number' } },
  hs_call_from_number: { def: { type: 'string' } },
  hs_call_to_number: { def: { type: 'string' } },
  hs_call_disposition: { def: { type: 'disposition' } },
  hs_call_recording_url: { def: { type: 'https-url' } },
  hubspot_owner_id: { def: { type: 'number' } },
  hs_object_id: { def: { type: 'number' }, readOnly: true },
  hs_createdate: { def: { type: 'datetime' }, readOnly: true },
  hs_lastmodifieddate: { def: { type: 'datetime' }, readOnly: true },
};

const CONTACT_PROPERTIES: Record<string, PropertyDef> = {
  firstname: { def: { type: 'string' } },
  lastname: { def: { type: 'string' } },
  email: { def: { type: 'string' } },
  company: { def: { type: 'string' } },
  phone: { def: { type: 'string' } },
  mobilephone: { def: { type: 'string' } },
  lifecyclestage: { def: { type: 'enumeration', options: LIFECYCLE_STAGES } },
  createdate: { def: { type: 'datetime' }, readOnly: true },
  hs_object_id: { def: { type: 'number' }, readOnly: true },
  hs_searchable_calculated_phone_number: { def: { type: 'string' }, readOnly: true },
  hs_searchable_calculated_mobile_number: { def: { type: 'string' }, readOnly: true },
};

function error(status: number, category: string, message: string): Reply {
  return { status, body: { status: 'error', message, correlationId: randomUUID(), category } };
}

function invalidProperties(errors: { name: string; error: string; message: string }[]): Reply {
  const detail = errors.map((e) => ({
    isValid: false,
    message: e.message,
    error: e.error,
    name: e.name,
    localizedErrorMessage: e.message,
  }));
  return error(400, 'VALIDATION_ERROR', `Property values were not valid: ${JSON.stringify(detail)}`);
}

/** HubSpot's JSON reader refuses fields it does not know. */
function unrecognizedField(body: unknown, allowed: string[]): Reply | null {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    return error(400, 'VALIDATION_ERROR', 'Invalid input JSON on line 1, column 1: expected an object');
  const extra = Object.keys(body).find((k) => !allowed.includes(k));
  return extra === undefined
    ? null
    : error(
        400,
        'VALIDATION_ERROR',
        `Invalid input JSON on line 1, column 2: Unrecognized field "${extra}" (not marked as ignorable)`,
      );
}

function searchableDigits(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const parsed = parsePhoneNumberFromString(value, 'DE');
  return parsed ? parsed.nationalNumber : value.replace(/\D/g, '');
}

/** The offset of `timeZone` at `at` as `±HH:MM` and in ms. */
function zoneOffset(timeZone: string, at: number): { text: string; ms: number } {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone,
    hourCycle: 'h23',
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    second: 'numeric',
  }).formatToParts(new Date(at));
  const n = (t: string) => Number(parts.find((p) => p.type === t)?.value);
  const ms = Date.UTC(n('year'), n('month') - 1, n('day'), n('hour'), n('minute'), n('second')) - (at - (at % 1000));
  const abs = Math.abs(ms) / 60_000;
  const text = `${ms < 0 ? '-' : '+'}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`;
  return { text, ms };
}

export class FakeHubSpot extends FakeCrmServer {
  token = 'pat-test-token';
  readonly contacts = new Map<string, HubSpotObject>();
  readonly calls = new Map<string, HubSpotObject>();
  /** The account's call outcomes (GET /calling/v1/dispositions). */
  dispositions: HubSpotDisposition[] = DEFAULT_DISPOSITIONS.map((d) => ({ ...d }));
  /** The account's time zone setting (account details). */
  timeZone = 'Europe/Berlin';
  /** Custom call properties the account has, e.g. `callsync_call_id` (single-line text, unique values). */
  readonly customCallProperties = new Map<string, PropertyDef>([
    ['callsync_call_id', { def: { type: 'string' }, unique: true }],
  ]);
  /** The fake's clock for the search limit (tests hand in theirs). */
  now: () => number = () => Date.now();
  /** Search requests per second per account, and when the accepted ones came. */
  searchLimit = 5;
  /** When (fake clock) each search that was answered normally came. */
  readonly searchLog: number[] = [];
  private readonly searchTimes: number[] = [];
  private nextId = 1000;
  private clock = Date.parse('2026-04-08T12:00:00Z');

  addContact(properties: Record<string, string>): string {
    const id = String(this.nextId++);
    const at = new Date(this.clock++).toISOString();
    this.contacts.set(id, {
      id,
      properties: { ...properties, createdate: at },
      createdAt: at,
      updatedAt: at,
      associations: [],
    });
    return id;
  }

  /** Forgets the stored records and restores the account's defaults. */
  reset(): void {
    this.requests.length = 0;
    this.contacts.clear();
    this.calls.clear();
    this.dispositions = DEFAULT_DISPOSITIONS.map((d) => ({ ...d }));
    this.timeZone = 'Europe/Berlin';
    this.token = 'pat-test-token';
    this.now = () => Date.now();
    this.searchTimes.length = 0;
    this.searchLog.length = 0;
  }

  protected override commonHeaders(req: RecordedRequest): Record<string, string> {
    // "Responses from the search API endpoints will not include any of the rate limit headers."
    if (req.path.endsWith('/search')) return {};
    return {
      'x-hubspot-ratelimit-max': '100',
      'x-hubspot-ratelimit-remaining': '99',
      'x-hubspot-ratelimit-interval-milliseconds': '10000',
    };
  }

  protected handle(req: RecordedRequest): Reply {
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      return error(
        401,
        'INVALID_AUTHENTICATION',
        'Authentication credentials not found. This API supports OAuth 2.0 authentication and you can find more details at https://developers.hubspot.com/docs/methods/auth/oauth-overview',
      );
    }
    const p = req.path;
    let m: RegExpExecArray | null;
    if (req.method === 'GET' && p === '/calling/v1/dispositions')
      return { status: 200, body: this.dispositions.map((d) => ({ ...d })) };
    if (req.method === 'GET' && (m = /^\/account-info\/([^/]+)\/details$/.exec(p)) && API_VERSIONS.includes(m[1]!))
      return this.details();
    if (!(m = /^\/crm\/objects\/([^/]+)\/(.+)$/.exec(p)) || !API_VERSIONS.includes(m[1]!)) {
      return error(404, 'OBJECT_NOT_FOUND', `Unable to route ${req.method} ${p}`);
    }
    const rest = m[2]!;
    if (req.method === 'POST' && rest === 'contacts/search')
      return this.rateLimitedSearch(() => this.search(this.contacts, req.body, true));
    if (req.method === 'POST' && rest === 'calls/search')
      return this.rateLimitedSearch(() => this.search(this.calls, req.body, false));
    if (req.method === 'POST' && rest === 'contacts') return this.createContact(req.body);
    if (req.method === 'POST' && rest === 'calls') return this.createCall(req.body);
    if (req.method === 'POST' && rest === 'calls/batch/upsert') return this.upsertCalls(req.body);
    if (req.method === 'PATCH' && (m = /^calls\/([^/]+)$/.exec(rest))) return this.patchCall(m[1]!, req.body);
    if (req.method === 'DELETE' && (m = /^calls\/([^/]+)$/.exec(rest)))
      return this.deleteCall(decodeURIComponent(m[1]!));
    if (req.method === 'PUT' && (m = /^calls\/([^/]+)\/associations\/contacts\/([^/]+)$/.exec(rest)))
      return this.associate(m[1]!, m[2]!, req.body);
    return error(404, 'OBJECT_NOT_FOUND', `Unable to route ${req.method} ${p}`);
  }

  private deleteCall(id: string): Reply {
    if (!this.calls.delete(id))
      return error(404, 'OBJECT_NOT_FOUND', `Object not found. objectId are usually numeric.`);
    return { status: 204, body: undefined };
  }

  private details(): Reply {
    const offset = zoneOffset(this.timeZone, this.now());
    return {
      status: 200,
      body: {
        portalId: 4_711_000,
        accountType: 'STANDARD',
        timeZone: this.timeZone,
        companyCurrency: 'EUR',
        additionalCurrencies: [],
        utcOffset: offset.text,
        utcOffsetMilliseconds: offset.ms,
        uiDomain: 'app.hubspot.com',
        dataHostingLocation: 'eu1',
      },
    };
  }

  private rateLimitedSearch(run: () => Reply): Reply {
    const now = this.now();
    while (this.searchTimes.length > 0 && this.searchTimes[0]! <= now - 1000) this.searchTimes.shift();
    if (this.searchTimes.length >= this.searchLimit) {
      return {
        status: 429,
        body: {
          status: 'error',
          message: 'You have reached your secondly limit.',
          errorType: 'RATE_LIMIT',
          correlationId: randomUUID(),
          policyName: 'SECONDLY',
        },
      };
    }
    this.searchTimes.push(now);
    this.searchLog.push(now);
    return run();
  }

  private callProperty(name: string): PropertyDef | undefined {
    return CALL_PROPERTIES[name] ?? this.customCallProperties.get(name);
  }

  /** HubSpot's checks of property values: existence, writability and type. */
  private validate(
    props: unknown,
    defs: (name: string) => PropertyDef | undefined,
    requireTimestamp: boolean,
  ): Reply | null {
    if (props === null || typeof props !== 'object' || Array.isArray(props))
      return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: properties must be an object');
    const errors: { name: string; error: string; message: string }[] = [];
    for (const [name, value] of Object.entries(props as Record<string, unknown>)) {
      const prop = defs(name);
      if (prop === undefined) {
        errors.push({ name, error: 'PROPERTY_DOESNT_EXIST', message: `Property "${name}" does not exist` });
        continue;
      }
      if (typeof value !== 'string' && typeof value !== 'number') {
        return error(
          400,
          'VALIDATION_ERROR',
          `Invalid input JSON on line 1: Cannot deserialize value of type \`java.lang.String\` for property "${name}"`,
        );
      }
      if (prop.readOnly) {
        errors.push({
          name,
          error: 'READ_ONLY_VALUE',
          message: `${name} is a read only property; its value cannot be set.`,
        });
        continue;
      }
      const v = String(value);
      const def = prop.def;
      if (def.type === 'number' && !/^-?\d+$/.test(v))
        errors.push({ name, error: 'INVALID_LONG', message: `${JSON.stringify(v)} is not a valid long` });
      if (def.type === 'datetime' && !/^\d+$/.test(v) && Number.isNaN(Date.parse(v)))
        errors.push({ name, error: 'INVALID_DATE', message: `${JSON.stringify(v)} is not a valid date` });
      if (def.type === 'enumeration' && !def.options.includes(v))
        errors.push({
          name,
          error: 'INVALID_OPTION',
          message: `${v} was not one of the allowed options: [${def.options.join(', ')}]`,
        });
      if (def.type === 'disposition' && v !== '' && !this.dispositions.some((d) => d.id === v && !d.deleted)) {
        errors.push({ name, error: 'INVALID_OPTION', message: `${v} was not one of the allowed options` });
      }
      if (def.type === 'https-url' && v !== '' && !/^https:\/\/[^\s/]+/.test(v))
        errors.push({ name, error: 'INVALID_URL', message: `${v} is not a secure (https) URL` });
    }
    if (requireTimestamp && (props as Record<string, unknown>).hs_timestamp === undefined) {
      errors.push({ name: 'hs_timestamp', error: 'REQUIRED_FIELD', message: 'hs_timestamp is required' });
    }
    return errors.length > 0 ? invalidProperties(errors) : null;
  }

  private view(o: HubSpotObject, properties?: string[]) {
    const props: Record<string, string> = {
      hs_object_id: o.id,
      hs_createdate: o.createdAt,
      hs_lastmodifieddate: o.updatedAt,
    };
    for (const [k, v] of Object.entries(o.properties))
      if (!properties || properties.includes(k) || k === 'createdate') props[k] = v;
    return { id: o.id, properties: props, createdAt: o.createdAt, updatedAt: o.updatedAt, archived: false };
  }

  private search(store: Map<string, HubSpotObject>, body: unknown, contacts: boolean): Reply {
    const refused = unrecognizedField(body, ['filterGroups', 'properties', 'sorts', 'limit', 'after', 'query']);
    if (refused) return refused;
    const b = body as {
      filterGroups?: { filters?: { propertyName: string; operator: string; value: string }[] }[];
      properties?: string[];
      limit?: number;
    };
    const groups = b.filterGroups ?? [];
    if (groups.length > 5) return error(400, 'VALIDATION_ERROR', 'Too many filter groups (max 5)');
    if (
      groups.some((g) => (g.filters ?? []).length > 6) ||
      groups.reduce((n, g) => n + (g.filters ?? []).length, 0) > 18
    ) {
      return error(400, 'VALIDATION_ERROR', 'Too many filters (at most 6 per group, 18 in all)');
    }
    if ((b.limit ?? 10) > 200) return error(400, 'VALIDATION_ERROR', 'limit may not exceed 200');
    const known = (name: string) => (contacts ? CONTACT_PROPERTIES[name] : this.callProperty(name)) !== undefined;
    for (const f of groups.flatMap((g) => g.filters ?? [])) {
      if (!known(f.propertyName))
        return error(
          400,
          'VALIDATION_ERROR',
          `There was a problem with the request: unknown property ${f.propertyName}`,
        );
      if (!SEARCH_OPERATORS.includes(f.operator))
        return error(400, 'VALIDATION_ERROR', `Invalid operator ${f.operator}`);
    }
    const value = (o: HubSpotObject, name: string): string | undefined => {
      if (contacts && name === 'hs_searchable_calculated_phone_number') return searchableDigits(o.properties.phone);
      if (contacts && name === 'hs_searchable_calculated_mobile_number')
        return searchableDigits(o.properties.mobilephone);
      return o.properties[name];
    };
    const matches = [...store.values()].filter((o) =>
      groups.some((g) =>
        (g.filters ?? []).every((f) => {
          if (f.operator !== 'EQ') throw new Error(`fake supports EQ only, got ${f.operator}`);
          const v = value(o, f.propertyName);
          if (f.propertyName === 'hs_timestamp') return v !== undefined && Date.parse(v) === Number(f.value);
          return v !== undefined && v.toLowerCase() === f.value.toLowerCase();
        }),
      ),
    );
    matches.sort((a, c) => a.createdAt.localeCompare(c.createdAt));
    const results = matches.slice(0, b.limit ?? 10).map((o) => this.view(o, b.properties));
    return { status: 200, body: { total: matches.length, results } };
  }

  private createContact(body: unknown): Reply {
    const refused = unrecognizedField(body, ['properties', 'associations']);
    if (refused) return refused;
    const props = (body as { properties?: Record<string, string> }).properties;
    if (!props) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON on line 1: missing properties');
    const invalid = this.validate(props, (n) => CONTACT_PROPERTIES[n], false);
    if (invalid) return invalid;
    const id = this.addContact(Object.fromEntries(Object.entries(props).map(([k, v]) => [k, String(v)])));
    return { status: 201, body: this.view(this.contacts.get(id)!) };
  }

  private storeCall(
    properties: Record<string, unknown>,
    associations: { toId: string; typeId: number }[],
  ): HubSpotObject {
    const id = String(this.nextId++);
    const at = new Date(this.clock++).toISOString();
    const call: HubSpotObject = {
      id,
      properties: Object.fromEntries(Object.entries(properties).map(([k, v]) => [k, String(v)])),
      createdAt: at,
      updatedAt: at,
      associations,
    };
    this.calls.set(id, call);
    return call;
  }

  private createCall(body: unknown): Reply {
    const refused = unrecognizedField(body, ['properties', 'associations', 'objectWriteTraceId']);
    if (refused) return refused;
    const b = body as {
      properties?: Record<string, unknown>;
      associations?: { to?: { id?: string }; types?: { associationCategory: string; associationTypeId: number }[] }[];
    };
    if (!b.properties) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: missing properties');
    const invalid = this.validate(b.properties, (n) => this.callProperty(n), true);
    if (invalid) return invalid;
    const associations: { toId: string; typeId: number }[] = [];
    for (const a of b.associations ?? []) {
      const toId = a.to?.id;
      const type = a.types?.[0];
      if (!toId || !this.contacts.has(toId))
        return error(400, 'VALIDATION_ERROR', `One or more associations are invalid: contact ${toId} not found`);
      if (!type || type.associationCategory !== 'HUBSPOT_DEFINED' || type.associationTypeId !== 194) {
        return error(400, 'VALIDATION_ERROR', 'One or more associations are invalid: unexpected association type');
      }
      associations.push({ toId, typeId: 194 });
    }
    return { status: 201, body: this.view(this.storeCall(b.properties, associations)) };
  }

  private patchCall(id: string, body: unknown): Reply {
    const refused = unrecognizedField(body, ['properties', 'objectWriteTraceId']);
    if (refused) return refused;
    const call = this.calls.get(id);
    if (!call) return error(404, 'OBJECT_NOT_FOUND', 'resource not found');
    const props = (body as { properties?: Record<string, unknown> }).properties;
    if (!props) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: missing properties');
    const invalid = this.validate(props, (n) => this.callProperty(n), false);
    if (invalid) return invalid;
    for (const [k, v] of Object.entries(props)) call.properties[k] = String(v);
    call.updatedAt = new Date(this.clock++).toISOString();
    return { status: 200, body: this.view(call) };
  }

  private upsertCalls(body: unknown): Reply {
    const refused = unrecognizedField(body, ['inputs']);
    if (refused) return refused;
    const inputs = (body as { inputs?: unknown }).inputs;
    if (!Array.isArray(inputs) || inputs.length === 0 || inputs.length > 100)
      return error(400, 'VALIDATION_ERROR', 'inputs must hold 1 to 100 objects');
    const startedAt = new Date(this.clock).toISOString();
    const out: unknown[] = [];
    for (const input of inputs as unknown[]) {
      const bad = unrecognizedField(input, ['idProperty', 'id', 'properties', 'objectWriteTraceId']);
      if (bad) return bad;
      const { idProperty, id, properties } = input as {
        idProperty?: string;
        id?: string;
        properties?: Record<string, unknown>;
      };
      if (typeof id !== 'string' || id === '' || !properties)
        return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: each input needs id and properties');
      if (idProperty === undefined || !this.callProperty(idProperty)?.unique) {
        return error(
          400,
          'VALIDATION_ERROR',
          `Property "${idProperty ?? 'hs_object_id'}" is not a unique identifier property of calls; upsert needs a property with unique values`,
        );
      }
      const invalid = this.validate(properties, (n) => this.callProperty(n), false);
      if (invalid) return invalid;
      const existing = [...this.calls.values()].find((c) => c.properties[idProperty] === id);
      if (existing) {
        for (const [k, v] of Object.entries(properties)) existing.properties[k] = String(v);
        existing.updatedAt = new Date(this.clock++).toISOString();
        out.push({ ...this.view(existing), new: false });
      } else {
        if (properties.hs_timestamp === undefined)
          return invalidProperties([
            { name: 'hs_timestamp', error: 'REQUIRED_FIELD', message: 'hs_timestamp is required' },
          ]);
        out.push({ ...this.view(this.storeCall({ ...properties, [idProperty]: id }, [])), new: true });
      }
    }
    return {
      status: 200,
      body: { status: 'COMPLETE', results: out, startedAt, completedAt: new Date(this.clock).toISOString() },
    };
  }

  private associate(callId: string, contactId: string, body: unknown): Reply {
    const call = this.calls.get(callId);
    if (!call || !this.contacts.has(contactId)) return error(404, 'OBJECT_NOT_FOUND', 'resource not found');
    const types = body as { associationCategory: string; associationTypeId: number }[];
    if (
      !Array.isArray(types) ||
      types[0]?.associationCategory !== 'HUBSPOT_DEFINED' ||
      types[0]?.associationTypeId !== 194
    ) {
      return error(400, 'VALIDATION_ERROR', 'invalid association type');
    }
    if (!call.associations.some((a) => a.toId === contactId)) call.associations.push({ toId: contactId, typeId: 194 });
    return {
      status: 200,
      body: {
        createdResourceId: callId,
        entity: {
          fromObjectTypeId: '0-48',
          fromObjectId: callId,
          toObjectTypeId: '0-1',
          toObjectId: contactId,
          labels: [],
        },
        location: '',
      },
    };
  }
}
