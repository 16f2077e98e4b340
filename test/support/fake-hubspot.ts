// A fake HubSpot CRM v3 API on loopback, following the documented request and response shapes:
//   POST  /crm/v3/objects/contacts/search   { filterGroups:[{filters:[{propertyName,operator,value}]}], properties, sorts, limit }
//                                            -> { total, results:[{ id, properties, createdAt, updatedAt, archived }] }
//   POST  /crm/v3/objects/contacts          { properties } -> 201 { id, properties, ... }
//   POST  /crm/v3/objects/calls             { properties, associations:[{ to:{id}, types:[{associationCategory, associationTypeId}] }] } -> 201
//   PATCH /crm/v3/objects/calls/{id}        { properties } -> 200, 404 when unknown
//   POST  /crm/v3/objects/calls/search      same shape as the contact search
//   PUT   /crm/v4/objects/calls/{id}/associations/contacts/{contactId}   [{associationCategory, associationTypeId}]
// Errors: { status:'error', message, correlationId, category }. Auth: `Authorization: Bearer <token>`.
// Like HubSpot, `hs_searchable_calculated_phone_number` is the number's digits without country code.
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

const CALL_STATUSES = ['BUSY', 'CALLING_CRM_USER', 'CANCELED', 'COMPLETED', 'CONNECTING', 'FAILED', 'IN_PROGRESS', 'NO_ANSWER', 'QUEUED', 'RINGING'];

function error(status: number, category: string, message: string): Reply {
  return { status, body: { status: 'error', message, correlationId: randomUUID(), category } };
}

function searchableDigits(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const parsed = parsePhoneNumberFromString(value, 'DE');
  return parsed ? parsed.nationalNumber : value.replace(/\D/g, '');
}

export class FakeHubSpot extends FakeCrmServer {
  token = 'pat-test-token';
  readonly contacts = new Map<string, HubSpotObject>();
  readonly calls = new Map<string, HubSpotObject>();
  private nextId = 1000;
  private clock = Date.parse('2026-04-08T12:00:00Z');

  addContact(properties: Record<string, string>): string {
    const id = String(this.nextId++);
    const at = new Date(this.clock++).toISOString();
    this.contacts.set(id, { id, properties: { ...properties, createdate: at }, createdAt: at, updatedAt: at, associations: [] });
    return id;
  }

  protected override commonHeaders(): Record<string, string> {
    return { 'x-hubspot-ratelimit-max': '100', 'x-hubspot-ratelimit-remaining': '99', 'x-hubspot-ratelimit-interval-milliseconds': '10000' };
  }

  protected handle(req: RecordedRequest): Reply {
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      return error(401, 'INVALID_AUTHENTICATION', 'Authentication credentials not found. This API supports OAuth 2.0 authentication.');
    }
    const p = req.path;
    let m: RegExpExecArray | null;
    if (req.method === 'POST' && p === '/crm/v3/objects/contacts/search') return this.search(this.contacts, req.body, true);
    if (req.method === 'POST' && p === '/crm/v3/objects/calls/search') return this.search(this.calls, req.body, false);
    if (req.method === 'POST' && p === '/crm/v3/objects/contacts') return this.createContact(req.body);
    if (req.method === 'POST' && p === '/crm/v3/objects/calls') return this.createCall(req.body);
    if (req.method === 'PATCH' && (m = /^\/crm\/v3\/objects\/calls\/([^/]+)$/.exec(p))) return this.patchCall(m[1] as string, req.body);
    if (req.method === 'PUT' && (m = /^\/crm\/v4\/objects\/calls\/([^/]+)\/associations\/contacts\/([^/]+)$/.exec(p))) {
      return this.associate(m[1] as string, m[2] as string, req.body);
    }
    return error(404, 'OBJECT_NOT_FOUND', `no route ${req.method} ${p}`);
  }

  private view(o: HubSpotObject, properties?: string[]) {
    const props: Record<string, string> = { hs_object_id: o.id, hs_createdate: o.createdAt, hs_lastmodifieddate: o.updatedAt };
    for (const [k, v] of Object.entries(o.properties)) if (!properties || properties.includes(k) || k === 'createdate') props[k] = v;
    return { id: o.id, properties: props, createdAt: o.createdAt, updatedAt: o.updatedAt, archived: false };
  }

  private search(store: Map<string, HubSpotObject>, body: unknown, contacts: boolean): Reply {
    const b = body as { filterGroups?: { filters?: { propertyName: string; operator: string; value: string }[] }[]; properties?: string[]; limit?: number };
    const groups = b.filterGroups ?? [];
    if (groups.length > 5) return error(400, 'VALIDATION_ERROR', 'Too many filter groups (max 5)');
    const value = (o: HubSpotObject, name: string): string | undefined => {
      if (contacts && name === 'hs_searchable_calculated_phone_number') return searchableDigits(o.properties.phone);
      if (contacts && name === 'hs_searchable_calculated_mobile_number') return searchableDigits(o.properties.mobilephone);
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
    const props = (body as { properties?: Record<string, string> }).properties;
    if (!props) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON on line 1: missing properties');
    const id = this.addContact(props);
    return { status: 201, body: this.view(this.contacts.get(id)!) };
  }

  private validateCall(props: Record<string, string>, creating: boolean): Reply | null {
    if (creating && !props.hs_timestamp) return error(400, 'VALIDATION_ERROR', 'Property values were not valid: [{"isValid":false,"message":"hs_timestamp is required","error":"REQUIRED_FIELD","name":"hs_timestamp"}]');
    if (props.hs_call_direction !== undefined && !['INBOUND', 'OUTBOUND'].includes(props.hs_call_direction)) {
      return error(400, 'VALIDATION_ERROR', `Property values were not valid: [{"isValid":false,"message":"${props.hs_call_direction} was not one of the allowed options","error":"INVALID_OPTION","name":"hs_call_direction"}]`);
    }
    if (props.hs_call_status !== undefined && !CALL_STATUSES.includes(props.hs_call_status)) {
      return error(400, 'VALIDATION_ERROR', `Property values were not valid: [{"isValid":false,"message":"${props.hs_call_status} was not one of the allowed options","error":"INVALID_OPTION","name":"hs_call_status"}]`);
    }
    for (const [k, v] of Object.entries(props)) {
      if (typeof v !== 'string') return error(400, 'VALIDATION_ERROR', `Property values were not valid: ${k} must be a string`);
      if (!k.startsWith('hs_') && k !== 'hubspot_owner_id' && !k.startsWith('callsync_')) {
        return error(400, 'VALIDATION_ERROR', `Property values were not valid: [{"isValid":false,"message":"Property \\"${k}\\" does not exist","error":"PROPERTY_DOESNT_EXIST","name":"${k}"}]`);
      }
    }
    return null;
  }

  private createCall(body: unknown): Reply {
    const b = body as { properties?: Record<string, string>; associations?: { to?: { id?: string }; types?: { associationCategory: string; associationTypeId: number }[] }[] };
    if (!b.properties) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: missing properties');
    const invalid = this.validateCall(b.properties, true);
    if (invalid) return invalid;
    const associations: { toId: string; typeId: number }[] = [];
    for (const a of b.associations ?? []) {
      const toId = a.to?.id;
      const type = a.types?.[0];
      if (!toId || !this.contacts.has(toId)) return error(400, 'VALIDATION_ERROR', `One or more associations are invalid: contact ${toId} not found`);
      if (!type || type.associationCategory !== 'HUBSPOT_DEFINED' || type.associationTypeId !== 194) {
        return error(400, 'VALIDATION_ERROR', 'One or more associations are invalid: unexpected association type');
      }
      associations.push({ toId, typeId: 194 });
    }
    const id = String(this.nextId++);
    const at = new Date(this.clock++).toISOString();
    this.calls.set(id, { id, properties: { ...b.properties }, createdAt: at, updatedAt: at, associations });
    return { status: 201, body: this.view(this.calls.get(id)!) };
  }

  private patchCall(id: string, body: unknown): Reply {
    const call = this.calls.get(id);
    if (!call) return error(404, 'OBJECT_NOT_FOUND', 'resource not found');
    const props = (body as { properties?: Record<string, string> }).properties;
    if (!props) return error(400, 'VALIDATION_ERROR', 'Invalid input JSON: missing properties');
    const invalid = this.validateCall(props, false);
    if (invalid) return invalid;
    Object.assign(call.properties, props);
    call.updatedAt = new Date(this.clock++).toISOString();
    return { status: 200, body: this.view(call) };
  }

  private associate(callId: string, contactId: string, body: unknown): Reply {
    const call = this.calls.get(callId);
    if (!call || !this.contacts.has(contactId)) return error(404, 'OBJECT_NOT_FOUND', 'resource not found');
    const types = body as { associationCategory: string; associationTypeId: number }[];
    if (!Array.isArray(types) || types[0]?.associationTypeId !== 194) return error(400, 'VALIDATION_ERROR', 'invalid association type');
    if (!call.associations.some((a) => a.toId === contactId)) call.associations.push({ toId: contactId, typeId: 194 });
    return { status: 200, body: { fromObjectTypeId: '0-48', fromObjectId: Number(callId), toObjectTypeId: '0-1', toObjectId: Number(contactId), labels: [] } };
  }
}
