// A fake Pipedrive API v1 on loopback, following the documented request and response shapes:
//   GET  /v1/persons/search?term=&fields=phone[&exact_match=true]
//        -> { success, data:{ items:[{ result_score, item:{ id, type:'person', name, phones:[string], ... } }] }, additional_data:{ pagination } }
//        (term anywhere in the value unless exact_match; minimum 2 characters)
//   POST /v1/callLogs   { outcome, to_phone_number, start_time, end_time, from_phone_number?, duration?, subject?, note?, person_id?, user_id? }
//        -> { success:true, data:{ id:'CA…', activity_id, …request fields, has_recording, company_id } }
//   GET  /v1/callLogs?start=&limit=   newest first, with additional_data.pagination
//   PUT  /v1/activities/{id}          -> { success:true, data:{ …activity } }, 404 when unknown
// Errors: { success:false, error, error_info, data:null, additional_data:null }.
// Auth: `x-api-token` header or `api_token` query parameter.
import { randomBytes } from 'node:crypto';
import { FakeCrmServer, type RecordedRequest, type Reply } from './fake-crm-server.js';

export interface FakePerson {
  id: number;
  name: string;
  phones: { label: string; value: string; primary: boolean }[];
}

export interface FakeCallLog {
  id: string;
  activity_id: number;
  [field: string]: unknown;
}

export interface FakeActivity {
  id: number;
  type: 'call';
  subject: string;
  note: string;
  person_id: number | null;
  done: boolean;
}

const OUTCOMES = ['connected', 'no_answer', 'left_message', 'left_voicemail', 'wrong_number', 'busy'];
const DATETIME = /^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}$/;

function fail(status: number, error: string): Reply {
  return { status, body: { success: false, error, error_info: 'Please check developers.pipedrive.com', data: null, additional_data: null } };
}

export class FakePipedrive extends FakeCrmServer {
  token = 'pd-test-token';
  readonly persons = new Map<number, FakePerson>();
  /** Newest last. */
  readonly callLogs: FakeCallLog[] = [];
  readonly activities = new Map<number, FakeActivity>();
  private nextPerson = 1;
  private nextActivity = 500;

  addPerson(name: string, ...phones: string[]): number {
    const id = this.nextPerson++;
    this.persons.set(id, { id, name, phones: phones.map((value, i) => ({ label: 'work', value, primary: i === 0 })) });
    return id;
  }

  protected override commonHeaders(): Record<string, string> {
    return { 'x-ratelimit-limit': '20', 'x-ratelimit-remaining': '19', 'x-ratelimit-reset': '2', 'x-daily-requests-left': '9999' };
  }

  protected handle(req: RecordedRequest): Reply {
    const token = req.headers['x-api-token'] ?? req.query.api_token;
    if (token !== this.token) return { status: 401, body: { success: false, error: 'unauthorized access', errorCode: 401, error_info: 'Please check developers.pipedrive.com' } };
    let m: RegExpExecArray | null;
    if (req.method === 'GET' && req.path === '/v1/persons/search') return this.searchPersons(req.query);
    if (req.method === 'POST' && req.path === '/v1/callLogs') return this.addCallLog(req.body);
    if (req.method === 'GET' && req.path === '/v1/callLogs') return this.listCallLogs(req.query);
    if (req.method === 'PUT' && (m = /^\/v1\/activities\/(\d+)$/.exec(req.path))) return this.updateActivity(Number(m[1]), req.body);
    return fail(404, `Unknown method ${req.method} ${req.path}`);
  }

  private searchPersons(q: Record<string, string>): Reply {
    const term = q.term ?? '';
    const exact = q.exact_match === 'true' || q.exact_match === '1';
    if (!exact && term.length < 2) return fail(400, 'Search term must be at least 2 characters long');
    if (q.fields !== undefined && q.fields.split(',').some((f) => !['name', 'email', 'phone', 'notes', 'custom_fields'].includes(f))) {
      return fail(400, 'Invalid field in fields');
    }
    const t = term.toLowerCase();
    const items = [...this.persons.values()]
      .filter((p) => p.phones.some((ph) => (exact ? ph.value.toLowerCase() === t : ph.value.toLowerCase().includes(t))))
      .map((p) => ({
        result_score: 0.8,
        item: {
          id: p.id,
          type: 'person',
          name: p.name,
          phones: p.phones.map((ph) => ph.value),
          emails: [],
          visible_to: 3,
          owner: { id: 1 },
          organization: null,
          custom_fields: [],
          notes: [],
        },
      }));
    const limit = Number(q.limit ?? 100);
    return {
      status: 200,
      body: { success: true, data: { items: items.slice(0, limit) }, additional_data: { pagination: { start: 0, limit, more_items_in_collection: items.length > limit } } },
    };
  }

  private addCallLog(body: unknown): Reply {
    const b = (body ?? {}) as Record<string, unknown>;
    if (typeof b.outcome !== 'string' || !OUTCOMES.includes(b.outcome)) return fail(400, `Invalid outcome: ${String(b.outcome)}`);
    if (typeof b.to_phone_number !== 'string' || b.to_phone_number === '') return fail(400, 'to_phone_number is required');
    for (const f of ['start_time', 'end_time']) {
      if (typeof b[f] !== 'string' || !DATETIME.test(b[f] as string)) return fail(400, `${f} must be in format YYYY-MM-DD HH:MM:SS`);
    }
    if (b.duration !== undefined && (typeof b.duration !== 'string' || !/^\d+$/.test(b.duration))) return fail(400, 'duration must be a string of seconds');
    if (b.person_id !== undefined && !this.persons.has(b.person_id as number)) return fail(404, 'Person not found');
    const known = ['outcome', 'to_phone_number', 'from_phone_number', 'start_time', 'end_time', 'duration', 'subject', 'note', 'person_id', 'user_id', 'org_id', 'deal_id', 'lead_id', 'activity_id'];
    const unknown = Object.keys(b).filter((k) => !known.includes(k));
    if (unknown.length > 0) return fail(400, `Unknown field(s): ${unknown.join(', ')}`);
    const activityId = this.nextActivity++;
    this.activities.set(activityId, {
      id: activityId,
      type: 'call',
      subject: (b.subject as string | undefined) ?? 'Call',
      note: (b.note as string | undefined) ?? '',
      person_id: (b.person_id as number | undefined) ?? null,
      done: true,
    });
    const log: FakeCallLog = { ...b, id: `CA${randomBytes(14).toString('hex')}`, activity_id: activityId, has_recording: false, company_id: 1 };
    this.callLogs.push(log);
    return { status: 200, body: { success: true, data: log } };
  }

  private listCallLogs(q: Record<string, string>): Reply {
    const start = Number(q.start ?? 0);
    const limit = Math.min(50, Number(q.limit ?? 50));
    const newestFirst = [...this.callLogs].reverse();
    const page = newestFirst.slice(start, start + limit);
    const more = start + limit < newestFirst.length;
    return {
      status: 200,
      body: { success: true, data: page, additional_data: { pagination: { start, limit, more_items_in_collection: more, ...(more ? { next_start: start + limit } : {}) } } },
    };
  }

  private updateActivity(id: number, body: unknown): Reply {
    const activity = this.activities.get(id);
    if (!activity) return fail(404, 'Activity not found');
    const b = (body ?? {}) as Record<string, unknown>;
    if (b.person_id !== undefined && !this.persons.has(b.person_id as number)) return fail(404, 'Person not found');
    if (typeof b.subject === 'string') activity.subject = b.subject;
    if (typeof b.note === 'string') activity.note = b.note;
    if (typeof b.person_id === 'number') activity.person_id = b.person_id;
    return { status: 200, body: { success: true, data: { ...activity } } };
  }
}
