// A fake Pipedrive API on loopback that answers as Pipedrive documents it today. Pages followed
// (and what each endpoint here takes from them):
//
//   Official SDK pipedrive/client-nodejs v32.2.1 (2026-04-20): src/versions/v2/api/{persons,deals,
//   activities}-api.ts and src/versions/v1/api/call-logs-api.ts with their models; CHANGELOG 32.0.0
//   "Removed deprecated v1 endpoints that have v2 equivalents".
//   https://developers.pipedrive.com/changelog/post/deprecation-of-selected-api-v1-endpoints
//   https://developers.pipedrive.com/changelog/post/deprecated-apiv1-endpoints-become-out-of-support (2026-08-01)
//   https://pipedrive.readme.io/docs/pipedrive-api-v2-migration-guide
//   https://pipedrive.readme.io/docs/core-api-concepts-rate-limiting
//   https://devcommunity.pipedrive.com/t/rate-limiting-issues/7462 (a search 429 as Pipedrive sends it)
//
//   GET   /api/v2/persons/search?term&fields&exact_match&organization_id&include_fields&limit&cursor
//         -> { success, data:{ items:[{ result_score, item:{ id, type:'person', name, phones:[string], emails,
//            visible_to, owner:{id}, organization, custom_fields, notes } }] }, additional_data:{ next_cursor } }
//         term >= 2 characters (1 with exact_match); limit <= 500; cursor opaque.
//   POST  /api/v2/persons   { name, owner_id?, org_id?, emails?, phones?:[{ value, primary, label }], visible_to?, label_ids?, marketing_status?, custom_fields? }
//   GET   /api/v2/deals?person_id&status=open|won|lost|deleted&limit&cursor&…  -> { success, data:[deal], additional_data:{ next_cursor } }
//   GET   /api/v2/activities?owner_id&person_id&deal_id&done&updated_since&updated_until&sort_by&sort_direction&limit&cursor&…
//         person_id filters by the primary participant; there is no `type` filter.
//   PATCH /api/v2/activities/{id}   AddActivityRequest fields (subject, type, owner_id, deal_id, lead_id, person_id,
//         org_id, project_id, due_date, due_time, duration, busy, done, location, participants, attendees,
//         public_description, priority, note) -> { success, data: activity }
//   POST  /v1/callLogs   { outcome, to_phone_number, start_time, end_time, user_id?, activity_id?, subject?, duration?,
//         from_phone_number?, person_id?, org_id?, deal_id? | lead_id?, note? } -> { success, data:{ …, id, has_recording, company_id } }
//         Every call log is a `call` activity owned by user_id (default the token's user).
//   GET   /v1/callLogs?start&limit (limit <= 50): the call logs of the TOKEN's user only.
//   GET   /v1/callLogs/{id}
//   DELETE /v1/callLogs/{id}   -> { success: true } (its recording too; "the related activity will not be removed"), 404 when unknown
//   DELETE /api/v2/activities/{id}   -> { success: true, data: { id } }, 404 when unknown
//     https://developers.pipedrive.com/docs/api/v1/CallLogs#deleteCallLog, …/v2/Activities#deleteActivity
//   POST  /v1/callLogs/{id}/recordings   multipart/form-data, one part `file` ("audio file supported by the
//         HTML5 specification") -> { success:true }; documented error answers 404, 409, 500.
//
// v2 is strict ("significantly stricter input validation"; numbers not coerced from strings, booleans
// only true/false): unknown query parameters and body fields and wrong types are refused with 400.
//
// The retired v1 endpoints (GET /v1/persons/search, PUT /v1/activities/{id} and the rest of the
// deprecation list) answer 410 Gone with the v1 error body. NOT DOCUMENTED: Pipedrive's out-of-support
// notice says only that they "may be changed or removed without further notice"; 410 with the error
// shape of the v1 spec (CallLogGoneResponse: success, error, error_info, data, additional_data) is
// this fake's reading of "removed".
//
// Rate limits (opt-in, on the fake's own clock `now`): a daily token budget per company; burst windows
// per token of 2 s, the search API its own (10 / 2 s); after a burst 429 a 10 s penalty
// (x-ratelimit-reset: 10, Retry-After: 10, as Pipedrive staff describe). Headers on every answer:
// x-ratelimit-limit / -remaining / -reset (documented), x-daily-requests-left (documented: POST/PUT left
// today, UTC), x-daily-ratelimit-token-limit / -remaining (sent by the live API, NOT on the documented
// list). ASSUMED, not documented: the token cost of each endpoint (the fake charges search 20, lists 10,
// writes 5, single reads 1), the 429 body of a spent daily budget (the documented burst body), that a
// spent budget still says `x-ratelimit-reset: 2` / `Retry-After: 2`, the meaning of 409 on a recording
// (a recording is attached already), that a non-audio part is refused with 400, and the text of v2's
// validation errors (`code: ERR_SCHEMA_VALIDATION_FAILED`, seen in third-party reports).
import { createHash, randomBytes } from 'node:crypto';
import { FakeCrmServer, type RecordedRequest, type Reply } from './fake-crm-server.js';

export interface FakePerson {
  id: number;
  name: string;
  owner_id: number;
  phones: { label: string; value: string; primary: boolean }[];
  emails: { label: string; value: string; primary: boolean }[];
  add_time: string;
  update_time: string;
}

export interface FakeDeal {
  id: number;
  title: string;
  person_id: number | null;
  owner_id: number;
  status: 'open' | 'won' | 'lost' | 'deleted';
}

export interface FakeCallLog {
  id: string;
  activity_id: number;
  user_id: number;
  has_recording: boolean;
  [field: string]: unknown;
}

export interface FakeActivity {
  id: number;
  type: string;
  subject: string;
  note: string;
  owner_id: number;
  person_id: number | null;
  deal_id: number | null;
  done: boolean;
  add_time: string;
  update_time: string;
  [field: string]: unknown;
}

export interface FakeRecording {
  fileName: string;
  contentType: string;
  bytes: number;
  sha256: string;
}

const OUTCOMES = ['connected', 'no_answer', 'left_message', 'left_voicemail', 'wrong_number', 'busy'];
const DATETIME = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;
/** RFC 3339 in whole seconds; the v2 API refuses fractional seconds in `updated_since`. */
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(Z|[+-]\d{2}:\d{2})$/;
const ERROR_INFO = 'Please check developers.pipedrive.com for more information about Pipedrive API.';
const SEARCH_FIELDS = ['custom_fields', 'email', 'notes', 'phone', 'name'];

/** The v1 endpoints retired in favour of v2 (deprecation list), with the v2 replacement named in the error. */
const RETIRED: { method: string; path: RegExp; use: string }[] = [
  { method: 'GET', path: /^\/v1\/persons\/search$/, use: 'GET /api/v2/persons/search' },
  { method: 'GET', path: /^\/v1\/persons$/, use: 'GET /api/v2/persons' },
  { method: 'POST', path: /^\/v1\/persons$/, use: 'POST /api/v2/persons' },
  { method: 'GET', path: /^\/v1\/persons\/\d+$/, use: 'GET /api/v2/persons/{id}' },
  { method: 'PUT', path: /^\/v1\/persons\/\d+$/, use: 'PATCH /api/v2/persons/{id}' },
  { method: 'GET', path: /^\/v1\/persons\/\d+\/deals$/, use: 'GET /api/v2/deals?person_id={id}' },
  { method: 'GET', path: /^\/v1\/persons\/\d+\/activities$/, use: 'GET /api/v2/activities?person_id={id}' },
  { method: 'GET', path: /^\/v1\/activities(\/collection)?$/, use: 'GET /api/v2/activities' },
  { method: 'POST', path: /^\/v1\/activities$/, use: 'POST /api/v2/activities' },
  { method: 'GET', path: /^\/v1\/activities\/\d+$/, use: 'GET /api/v2/activities/{id}' },
  { method: 'PUT', path: /^\/v1\/activities\/\d+$/, use: 'PATCH /api/v2/activities/{id}' },
  { method: 'DELETE', path: /^\/v1\/activities(\/\d+)?$/, use: 'DELETE /api/v2/activities/{id}' },
  { method: 'GET', path: /^\/v1\/deals(\/collection|\/search)?$/, use: 'GET /api/v2/deals' },
  { method: 'GET', path: /^\/v1\/itemSearch(\/field)?$/, use: 'GET /api/v2/itemSearch' },
];

function v1Error(status: number, error: string): Reply {
  return { status, body: { success: false, error, error_info: ERROR_INFO, data: null, additional_data: null } };
}

function v2Error(status: number, error: string): Reply {
  return {
    status,
    body: {
      success: false,
      error,
      code: status === 400 ? 'ERR_SCHEMA_VALIDATION_FAILED' : undefined,
      error_info: ERROR_INFO,
      data: null,
      additional_data: null,
    },
  };
}

class Invalid extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

/** v2 query parameters: only the listed ones, each of its type; `api_token` is the credential. */
function checkQuery(
  q: Record<string, string>,
  allowed: Record<string, 'int' | 'bool' | 'string' | 'time' | string[]>,
): void {
  for (const [k, v] of Object.entries(q)) {
    if (k === 'api_token') continue;
    const kind = allowed[k];
    if (kind === undefined) throw new Invalid(`Validation failed: unknown query parameter '${k}'`);
    if (kind === 'int' && !/^[1-9]\d*$/.test(v)) throw new Invalid(`Validation failed: '${k}' must be an integer`);
    if (kind === 'bool' && v !== 'true' && v !== 'false')
      throw new Invalid(`Validation failed: '${k}' must be true or false`);
    if (kind === 'time' && !RFC3339.test(v)) throw new Invalid(`Validation failed: '${k}' is not a valid datetime`);
    if (Array.isArray(kind) && !v.split(',').every((x) => kind.includes(x)))
      throw new Invalid(`Validation failed: '${k}' must be one of ${kind.join(', ')}`);
  }
}

type FieldKind = 'string' | 'int' | 'int?' | 'bool' | 'array' | 'object';

function checkBody(body: unknown, fields: Record<string, FieldKind>): Record<string, unknown> {
  if (body === null || typeof body !== 'object' || Array.isArray(body))
    throw new Invalid('Validation failed: the body must be a JSON object');
  const b = body as Record<string, unknown>;
  for (const [k, v] of Object.entries(b)) {
    const kind = fields[k];
    if (kind === undefined) throw new Invalid(`Validation failed: unknown field '${k}'`);
    const ok =
      kind === 'string'
        ? typeof v === 'string'
        : kind === 'int'
          ? Number.isInteger(v)
          : kind === 'int?'
            ? v === null || Number.isInteger(v)
            : kind === 'bool'
              ? typeof v === 'boolean'
              : kind === 'array'
                ? Array.isArray(v)
                : v !== null && typeof v === 'object';
    if (!ok) throw new Invalid(`Validation failed: '${k}' must be ${kind.replace('?', ' or null')}`);
  }
  return b;
}

const ACTIVITY_FIELDS: Record<string, FieldKind> = {
  subject: 'string',
  type: 'string',
  owner_id: 'int',
  deal_id: 'int?',
  lead_id: 'string',
  person_id: 'int?',
  org_id: 'int?',
  project_id: 'int?',
  due_date: 'string',
  due_time: 'string',
  duration: 'string',
  busy: 'bool',
  done: 'bool',
  location: 'object',
  participants: 'array',
  attendees: 'array',
  public_description: 'string',
  priority: 'int',
  note: 'string',
};

const CALL_LOG_FIELDS: Record<string, FieldKind> = {
  outcome: 'string',
  to_phone_number: 'string',
  from_phone_number: 'string',
  start_time: 'string',
  end_time: 'string',
  duration: 'string',
  subject: 'string',
  note: 'string',
  person_id: 'int',
  user_id: 'int',
  org_id: 'int',
  deal_id: 'int',
  lead_id: 'string',
  activity_id: 'int',
};

const PERSON_FIELDS: Record<string, FieldKind> = {
  name: 'string',
  owner_id: 'int',
  org_id: 'int?',
  add_time: 'string',
  update_time: 'string',
  emails: 'array',
  phones: 'array',
  visible_to: 'int',
  label_ids: 'array',
  marketing_status: 'string',
  custom_fields: 'object',
};

/** A multipart/form-data body's parts (name, filename, type, bytes). */
function multipartParts(
  contentType: string,
  raw: Buffer,
): { name: string; filename: string | null; type: string | null; data: Buffer }[] {
  const m = /boundary=(?:"([^"]+)"|([^;]+))/i.exec(contentType);
  if (!m) throw new Invalid('multipart body without a boundary');
  const delimiter = Buffer.from(`--${m[1] ?? m[2]}`);
  const parts: { name: string; filename: string | null; type: string | null; data: Buffer }[] = [];
  let at = raw.indexOf(delimiter);
  while (at >= 0) {
    const start = at + delimiter.length;
    if (raw.subarray(start, start + 2).toString() === '--') break;
    const next = raw.indexOf(delimiter, start);
    if (next < 0) throw new Invalid('multipart body not terminated');
    const part = raw.subarray(start + 2, next - 2); // after CRLF, before CRLF
    const split = part.indexOf('\r\n\r\n');
    if (split < 0) throw new Invalid('multipart part without headers');
    const head = part.subarray(0, split).toString('utf8');
    const name = /name="([^"]*)"/i.exec(head)?.[1];
    if (name === undefined) throw new Invalid('multipart part without a name');
    parts.push({
      name,
      filename: /filename="([^"]*)"/i.exec(head)?.[1] ?? null,
      type: /^content-type:\s*(.+)$/im.exec(head)?.[1]?.trim() ?? null,
      data: part.subarray(split + 4),
    });
    at = next;
  }
  return parts;
}

function utcMidnightAfter(ms: number): number {
  const d = new Date(ms);
  return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
}

interface Window {
  limit: number;
  start: number;
  used: number;
  penaltyUntil: number;
}

export class FakePipedrive extends FakeCrmServer {
  token = 'pd-test-token';
  /** The user the API token belongs to. */
  tokenUserId = 1;
  /** Users of the company (call logs and persons may be owned by any of them). */
  readonly users = new Set<number>([1, 42]);
  readonly persons = new Map<number, FakePerson>();
  readonly deals = new Map<number, FakeDeal>();
  /** Newest last. */
  readonly callLogs: FakeCallLog[] = [];
  readonly activities = new Map<number, FakeActivity>();
  /** Recordings by call log id. */
  readonly recordings = new Map<string, FakeRecording>();
  /** The fake's clock (rate-limit windows, the daily reset, add/update times). */
  now: () => number = () => Date.now();
  /**
   * The company's daily token budget; null: not limited. Resets at 00:00 UTC of `now`, or that much
   * later with `resetOffsetMs` (a company whose day starts elsewhere: the page does not say which).
   */
  budget: { limit: number; remaining: number; resetOffsetMs?: number; resetsAt?: number } | null = null;
  /** Burst windows per token (2 s; search its own); null: not enforced. */
  burst: { limit: number; searchLimit: number; windowMs: number; penaltyMs: number } | null = null;
  /** POST/PUT/PATCH requests left today (`x-daily-requests-left`). */
  writesLeft = 10_000;
  private windows = new Map<'api' | 'search', Window>();
  private nextPerson = 1;
  private nextDeal = 900;
  private nextActivity = 500;

  /** Back to an empty company with the default settings (between tests). */
  reset(): void {
    this.requests.length = 0;
    this.persons.clear();
    this.deals.clear();
    this.callLogs.length = 0;
    this.activities.clear();
    this.recordings.clear();
    this.windows.clear();
    this.token = 'pd-test-token';
    this.tokenUserId = 1;
    this.budget = null;
    this.burst = null;
    this.writesLeft = 10_000;
    this.now = () => Date.now();
    this.nextPerson = 1;
    this.nextDeal = 900;
    this.nextActivity = 500;
  }

  addPerson(name: string, ...phones: string[]): number {
    const id = this.nextPerson++;
    const t = this.iso();
    this.persons.set(id, {
      id,
      name,
      owner_id: this.tokenUserId,
      phones: phones.map((value, i) => ({ label: 'work', value, primary: i === 0 })),
      emails: [],
      add_time: t,
      update_time: t,
    });
    return id;
  }

  addDeal(personId: number | null, status: FakeDeal['status'] = 'open', title = `Deal ${this.nextDeal}`): number {
    const id = this.nextDeal++;
    this.deals.set(id, { id, title, person_id: personId, owner_id: this.tokenUserId, status });
    return id;
  }

  private iso(): string {
    return `${new Date(this.now()).toISOString().slice(0, 19)}Z`;
  }

  protected handle(req: RecordedRequest): Reply {
    const token = req.headers['x-api-token'] ?? req.query.api_token;
    if (token !== this.token)
      return {
        status: 401,
        body: { success: false, error: 'unauthorized access', errorCode: 401, error_info: ERROR_INFO },
      };
    // v1 answers under /v1 and /api/v1; v2 only under /api/v2.
    const path = req.path.startsWith('/api/v1/') ? req.path.slice(4) : req.path;
    const retired = RETIRED.find((r) => r.method === req.method && r.path.test(path));
    if (retired) return v1Error(410, `Gone: this API v1 endpoint is no longer available. Use ${retired.use}.`);

    const kind = this.kindOf(req.method, path);
    const limited = this.charge(kind, req.method);
    if (limited) return limited;
    let reply: Reply;
    try {
      reply = this.route(req, path);
    } catch (err) {
      if (!(err instanceof Invalid)) throw err;
      reply = path.startsWith('/api/v2/') ? v2Error(err.status, err.message) : v1Error(err.status, err.message);
    }
    return { ...reply, headers: { ...this.limitHeaders(kind), ...reply.headers } };
  }

  private route(req: RecordedRequest, path: string): Reply {
    let m: RegExpExecArray | null;
    if (req.method === 'GET' && path === '/api/v2/persons/search') return this.searchPersons(req.query);
    if (req.method === 'POST' && path === '/api/v2/persons') return this.addPersonV2(req.body, req.rawBody);
    if (req.method === 'GET' && path === '/api/v2/deals') return this.listDeals(req.query);
    if (req.method === 'GET' && path === '/api/v2/activities') return this.listActivities(req.query);
    if (req.method === 'PATCH' && (m = /^\/api\/v2\/activities\/(\d+)$/.exec(path)))
      return this.updateActivity(Number(m[1]), req.body, req.rawBody);
    if (req.method === 'POST' && path === '/v1/callLogs') return this.addCallLog(req.body);
    if (req.method === 'GET' && path === '/v1/callLogs') return this.listCallLogs(req.query);
    if (req.method === 'GET' && (m = /^\/v1\/callLogs\/([^/]+)$/.exec(path)))
      return this.getCallLog(decodeURIComponent(m[1]!));
    if (req.method === 'DELETE' && (m = /^\/v1\/callLogs\/([^/]+)$/.exec(path)))
      return this.deleteCallLog(decodeURIComponent(m[1]!));
    if (req.method === 'DELETE' && (m = /^\/api\/v2\/activities\/(\d+)$/.exec(path)))
      return this.deleteActivity(Number(m[1]));
    if (req.method === 'POST' && (m = /^\/v1\/callLogs\/([^/]+)\/recordings$/.exec(path)))
      return this.addRecording(decodeURIComponent(m[1]!), req);
    return v1Error(404, `Unknown method ${req.method} ${req.path}`);
  }

  // ---- rate limits ----

  private kindOf(method: string, path: string): { window: 'api' | 'search'; cost: number } {
    if (path.endsWith('/search')) return { window: 'search', cost: 20 };
    if (method !== 'GET') return { window: 'api', cost: 5 };
    return { window: 'api', cost: /\/\d+$|\/callLogs\/[^/]+$/.test(path) ? 1 : 10 };
  }

  private windowOf(name: 'api' | 'search'): Window | null {
    if (this.burst === null) return null;
    const now = this.now();
    const limit = name === 'search' ? this.burst.searchLimit : this.burst.limit;
    let w = this.windows.get(name);
    if (!w || now >= w.start + this.burst.windowMs) {
      w = { limit, start: now, used: 0, penaltyUntil: w?.penaltyUntil ?? 0 };
      this.windows.set(name, w);
    }
    return w;
  }

  private dailyBudget(): { limit: number; remaining: number } | null {
    if (this.budget === null) return null;
    const now = this.now();
    const offset = this.budget.resetOffsetMs ?? 0;
    const nextReset = () => utcMidnightAfter(now - offset) + offset;
    if (this.budget.resetsAt === undefined) this.budget.resetsAt = nextReset();
    if (now >= this.budget.resetsAt) {
      this.budget.remaining = this.budget.limit;
      this.budget.resetsAt = nextReset();
    }
    return this.budget;
  }

  /** A 429 when a limit refuses the request; else charges it and returns null. */
  private charge(kind: { window: 'api' | 'search'; cost: number }, method: string): Reply | null {
    const over = (headers: Record<string, string>): Reply => ({
      status: 429,
      headers: { ...this.limitHeaders(kind), ...headers },
      body: {
        success: false,
        error: 'Request over limit',
        errorCode: 429,
        error_info: ERROR_INFO,
        data: null,
        additional_data: null,
      },
    });
    const budget = this.dailyBudget();
    if (budget !== null && budget.remaining < kind.cost) {
      budget.remaining = 0;
      return over({ 'x-ratelimit-reset': '2', 'retry-after': '2' });
    }
    const w = this.windowOf(kind.window);
    if (w !== null && this.burst !== null) {
      const now = this.now();
      if (now < w.penaltyUntil || w.used >= w.limit) {
        if (now >= w.penaltyUntil) w.penaltyUntil = now + this.burst.penaltyMs;
        const secs = String(Math.ceil((w.penaltyUntil - now) / 1000));
        return over({ 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': secs, 'retry-after': secs });
      }
      w.used++;
    }
    if (budget !== null) budget.remaining -= kind.cost;
    if (method !== 'GET') this.writesLeft = Math.max(0, this.writesLeft - 1);
    return null;
  }

  private limitHeaders(kind: { window: 'api' | 'search' }): Record<string, string> {
    const w = this.windowOf(kind.window);
    const limit = w?.limit ?? (kind.window === 'search' ? 10 : 20);
    const budget = this.dailyBudget();
    return {
      'x-ratelimit-limit': String(limit),
      'x-ratelimit-remaining': String(w === null ? limit - 1 : Math.max(0, w.limit - w.used)),
      'x-ratelimit-reset': '2',
      'x-daily-requests-left': String(this.writesLeft),
      'x-daily-ratelimit-token-limit': String(budget?.limit ?? 1_000_000),
      'x-daily-ratelimit-token-remaining': String(budget?.remaining ?? 1_000_000),
    };
  }

  // ---- persons ----

  private searchPersons(q: Record<string, string>): Reply {
    checkQuery(q, {
      term: 'string',
      fields: SEARCH_FIELDS,
      exact_match: 'bool',
      organization_id: 'int',
      include_fields: ['person.picture'],
      limit: 'int',
      cursor: 'string',
    });
    const term = q.term;
    if (term === undefined) throw new Invalid("Validation failed: 'term' is required");
    const exact = q.exact_match === 'true';
    if (term.length < (exact ? 1 : 2))
      throw new Invalid('Validation failed: the search term must be at least 2 characters long (1 with exact_match)');
    const limit = q.limit === undefined ? 100 : Number(q.limit);
    if (limit > 500) throw new Invalid("Validation failed: 'limit' must be at most 500");
    const offset = this.offsetOf(q.cursor);
    const fields = (q.fields ?? SEARCH_FIELDS.join(',')).split(',');
    const t = term.toLowerCase();
    const hit = (value: string) => (exact ? value.toLowerCase() === t : value.toLowerCase().includes(t));
    const matches = [...this.persons.values()].filter(
      (p) =>
        (fields.includes('phone') && p.phones.some((ph) => hit(ph.value))) || (fields.includes('name') && hit(p.name)),
    );
    const page = matches.slice(offset, offset + limit);
    return {
      status: 200,
      body: {
        success: true,
        data: {
          items: page.map((p) => ({
            result_score: 0.8,
            item: {
              id: p.id,
              type: 'person',
              name: p.name,
              phones: p.phones.map((ph) => ph.value),
              emails: p.emails.map((e) => e.value),
              visible_to: 3,
              owner: { id: p.owner_id },
              organization: null,
              custom_fields: [],
              notes: [],
            },
          })),
        },
        additional_data: { next_cursor: offset + limit < matches.length ? this.cursorFor(offset + limit) : null },
      },
    };
  }

  private addPersonV2(body: unknown, raw: string): Reply {
    const b = checkBody(body ?? (raw === '' ? undefined : raw), PERSON_FIELDS);
    if (typeof b.name !== 'string' || b.name.trim() === '') throw new Invalid("Validation failed: 'name' is required");
    if (b.owner_id !== undefined && !this.users.has(b.owner_id as number))
      throw new Invalid('Validation failed: owner_id is not a user of this company');
    const phones = (b.phones as unknown[] | undefined) ?? [];
    for (const ph of phones) {
      const p = checkBody(ph, { value: 'string', primary: 'bool', label: 'string' });
      if (p.label !== undefined && !['work', 'home', 'mobile', 'other'].includes(p.label as string))
        throw new Invalid(`Validation failed: phone label '${String(p.label)}'`);
    }
    const id = this.nextPerson++;
    const t = this.iso();
    const person: FakePerson = {
      id,
      name: b.name,
      owner_id: (b.owner_id as number | undefined) ?? this.tokenUserId,
      phones: phones.map((ph, i) => {
        const p = ph as { value: string; primary?: boolean; label?: string };
        return { value: p.value, primary: p.primary ?? i === 0, label: p.label ?? 'work' };
      }),
      emails: [],
      add_time: t,
      update_time: t,
    };
    this.persons.set(id, person);
    return {
      status: 200,
      body: {
        success: true,
        data: { ...person, org_id: null, is_deleted: false, visible_to: 3, label_ids: [], custom_fields: {} },
      },
    };
  }

  // ---- deals ----

  private listDeals(q: Record<string, string>): Reply {
    checkQuery(q, {
      filter_id: 'int',
      ids: 'string',
      owner_id: 'int',
      person_id: 'int',
      org_id: 'int',
      pipeline_id: 'int',
      stage_id: 'int',
      status: ['open', 'won', 'lost', 'deleted'],
      updated_since: 'time',
      updated_until: 'time',
      sort_by: ['id', 'update_time', 'add_time'],
      sort_direction: ['asc', 'desc'],
      include_fields: 'string',
      custom_fields: 'string',
      limit: 'int',
      cursor: 'string',
    });
    const limit = q.limit === undefined ? 100 : Number(q.limit);
    if (limit > 500) throw new Invalid("Validation failed: 'limit' must be at most 500");
    const statuses = q.status?.split(',') ?? ['open', 'won', 'lost'];
    const all = [...this.deals.values()].filter(
      (d) => statuses.includes(d.status) && (q.person_id === undefined || d.person_id === Number(q.person_id)),
    );
    const offset = this.offsetOf(q.cursor);
    const page = all.slice(offset, offset + limit).map((d) => ({
      ...d,
      org_id: null,
      value: 0,
      currency: 'EUR',
      is_deleted: d.status === 'deleted',
      is_archived: false,
    }));
    return {
      status: 200,
      body: {
        success: true,
        data: page,
        additional_data: { next_cursor: offset + limit < all.length ? this.cursorFor(offset + limit) : null },
      },
    };
  }

  // ---- activities ----

  private listActivities(q: Record<string, string>): Reply {
    checkQuery(q, {
      filter_id: 'int',
      ids: 'string',
      owner_id: 'int',
      deal_id: 'int',
      lead_id: 'string',
      person_id: 'int',
      org_id: 'int',
      done: 'bool',
      updated_since: 'time',
      updated_until: 'time',
      sort_by: ['id', 'update_time', 'add_time', 'due_date'],
      sort_direction: ['asc', 'desc'],
      include_fields: ['attendees'],
      limit: 'int',
      cursor: 'string',
    });
    const limit = q.limit === undefined ? 100 : Number(q.limit);
    if (limit > 500) throw new Invalid("Validation failed: 'limit' must be at most 500");
    const since = q.updated_since === undefined ? -Infinity : Date.parse(q.updated_since);
    const until = q.updated_until === undefined ? Infinity : Date.parse(q.updated_until);
    const all = [...this.activities.values()].filter(
      (a) =>
        (q.owner_id === undefined || a.owner_id === Number(q.owner_id)) &&
        (q.person_id === undefined || a.person_id === Number(q.person_id)) &&
        (q.deal_id === undefined || a.deal_id === Number(q.deal_id)) &&
        (q.done === undefined || a.done === (q.done === 'true')) &&
        Date.parse(a.update_time) >= since &&
        Date.parse(a.update_time) < until,
    );
    const by = (q.sort_by ?? 'id') as 'id' | 'update_time' | 'add_time' | 'due_date';
    const key = (a: FakeActivity) => (by === 'id' ? String(a.id).padStart(12, '0') : String(a[by]));
    all.sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : a.id - b.id));
    if (q.sort_direction === 'desc') all.reverse();
    const offset = this.offsetOf(q.cursor);
    return {
      status: 200,
      body: {
        success: true,
        data: all.slice(offset, offset + limit).map((a) => ({ ...a })),
        additional_data: { next_cursor: offset + limit < all.length ? this.cursorFor(offset + limit) : null },
      },
    };
  }

  private updateActivity(id: number, body: unknown, raw: string): Reply {
    const activity = this.activities.get(id);
    if (!activity) throw new Invalid('Activity not found', 404);
    const b = checkBody(body ?? (raw === '' ? undefined : raw), ACTIVITY_FIELDS);
    if (typeof b.person_id === 'number' && !this.persons.has(b.person_id))
      throw new Invalid(`Person with id ${b.person_id} not found`);
    if (typeof b.deal_id === 'number' && !this.deals.has(b.deal_id))
      throw new Invalid(`Deal with id ${b.deal_id} not found`);
    if (typeof b.owner_id === 'number' && !this.users.has(b.owner_id))
      throw new Invalid(`User with id ${b.owner_id} not found`);
    for (const p of (b.participants as unknown[] | undefined) ?? [])
      checkBody(p, { person_id: 'int', primary: 'bool' });
    Object.assign(activity, b, { update_time: this.iso() });
    return { status: 200, body: { success: true, data: { ...activity } } };
  }

  // ---- call logs ----

  private addCallLog(body: unknown): Reply {
    const b = checkBody(body ?? {}, CALL_LOG_FIELDS);
    if (typeof b.outcome !== 'string' || !OUTCOMES.includes(b.outcome))
      throw new Invalid(`Invalid outcome: ${String(b.outcome)}`);
    if (typeof b.to_phone_number !== 'string' || b.to_phone_number === '')
      throw new Invalid('to_phone_number is required');
    for (const f of ['start_time', 'end_time']) {
      if (typeof b[f] !== 'string' || !DATETIME.test(b[f] as string))
        throw new Invalid(`${f} must be in format YYYY-MM-DD HH:MM:SS`);
    }
    if (b.duration !== undefined && !/^\d+$/.test(b.duration as string))
      throw new Invalid('duration must be a string of seconds');
    if (b.person_id !== undefined && !this.persons.has(b.person_id as number))
      throw new Invalid('Person not found', 404);
    if (b.deal_id !== undefined && !this.deals.has(b.deal_id as number)) throw new Invalid('Deal not found', 404);
    if (b.deal_id !== undefined && b.lead_id !== undefined)
      throw new Invalid('A call log can be associated with either a deal or a lead, but not both');
    if (b.user_id !== undefined && !this.users.has(b.user_id as number)) throw new Invalid('User not found', 404);
    const owner = (b.user_id as number | undefined) ?? this.tokenUserId;
    const activityId = this.nextActivity++;
    const t = this.iso();
    this.activities.set(activityId, {
      id: activityId,
      type: 'call',
      subject: (b.subject as string | undefined) ?? 'Call',
      note: (b.note as string | undefined) ?? '',
      owner_id: owner,
      creator_user_id: this.tokenUserId,
      person_id: (b.person_id as number | undefined) ?? null,
      deal_id: (b.deal_id as number | undefined) ?? null,
      org_id: null,
      done: true,
      is_deleted: false,
      due_date: (b.start_time as string).slice(0, 10),
      due_time: (b.start_time as string).slice(11, 16),
      participants: b.person_id === undefined ? [] : [{ person_id: b.person_id, primary: true }],
      add_time: t,
      update_time: t,
    });
    const log: FakeCallLog = {
      ...b,
      id: `CA${randomBytes(14).toString('hex')}`,
      activity_id: activityId,
      user_id: owner,
      has_recording: false,
      company_id: 1,
    };
    this.callLogs.push(log);
    return { status: 200, body: { success: true, data: log } };
  }

  /** The call logs of the token's user only, newest first. */
  private listCallLogs(q: Record<string, string>): Reply {
    const start = Number(q.start ?? 0);
    const limit = Math.min(50, Number(q.limit ?? 50));
    const mine = this.callLogs.filter((l) => l.user_id === this.tokenUserId).reverse();
    const page = mine.slice(start, start + limit);
    const more = start + limit < mine.length;
    return {
      status: 200,
      body: {
        success: true,
        data: page,
        additional_data: {
          pagination: { start, limit, more_items_in_collection: more, ...(more ? { next_start: start + limit } : {}) },
        },
      },
    };
  }

  private deleteCallLog(id: string): Reply {
    const i = this.callLogs.findIndex((l) => l.id === id);
    if (i === -1) return v1Error(404, 'Call log not found');
    this.callLogs.splice(i, 1);
    this.recordings.delete(id);
    return { status: 200, body: { success: true } };
  }

  private deleteActivity(id: number): Reply {
    if (!this.activities.delete(id)) throw new Invalid('Activity not found', 404);
    return { status: 200, body: { success: true, data: { id } } };
  }

  private getCallLog(id: string): Reply {
    const log = this.callLogs.find((l) => l.id === id);
    if (!log) return v1Error(404, 'Call log not found');
    return { status: 200, body: { success: true, data: log } };
  }

  private addRecording(id: string, req: RecordedRequest): Reply {
    const log = this.callLogs.find((l) => l.id === id);
    const type = String(req.headers['content-type'] ?? '');
    if (!type.toLowerCase().startsWith('multipart/form-data'))
      throw new Invalid('The recording must be sent as multipart/form-data');
    const file = multipartParts(type, req.rawBytes).find((p) => p.name === 'file');
    if (!file || file.filename === null) throw new Invalid('file is required');
    if (!log) return v1Error(404, 'Call log not found');
    if (log.has_recording) return v1Error(409, 'The call log already has a recording');
    if (file.type === null || !file.type.toLowerCase().startsWith('audio/'))
      throw new Invalid(`Unsupported file type ${String(file.type)}: an audio file is required`);
    log.has_recording = true;
    this.recordings.set(id, {
      fileName: file.filename,
      contentType: file.type,
      bytes: file.data.length,
      sha256: createHash('sha256').update(file.data).digest('hex'),
    });
    return { status: 200, body: { success: true } };
  }

  // ---- cursors ----

  private cursorFor(offset: number): string {
    return Buffer.from(`offset:${offset}`).toString('base64url');
  }

  private offsetOf(cursor: string | undefined): number {
    if (cursor === undefined) return 0;
    const m = /^offset:(\d+)$/.exec(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!m) throw new Invalid("Validation failed: 'cursor' is not valid");
    return Number(m[1]);
  }
}
