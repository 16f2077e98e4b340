// The pure parts of backfill and replay: history entries as canonical calls, archived records read
// back (both layouts), the day list of a range, progress output, and the folder store's listing.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Progress } from '../src/cli/progress.js';
import { archivedCall, daysOf } from '../src/cli/replay.js';
import { HistoryEntryError, normalizeHistoryEntry } from '../src/model/history.js';
import { sinksFor } from '../src/routing/router.js';
import { routeSchema } from '../src/routing/types.js';
import { renderArchiveJson } from '../src/sinks/archive/render.js';
import { LocalFolderStore } from '../src/sinks/archive/store.js';
import { sampleCall } from './support/calls.js';

const receivedAt = new Date('2026-10-05T12:00:00Z');
const entry = (patch: Record<string, unknown> = {}) => ({
  id: 'h-1',
  type: 'CALL',
  source: '0049 211 55550100',
  target: '+4915112345678',
  direction: 'INCOMING',
  status: 'PICKUP',
  created: '2026-10-05T08:00:00Z',
  duration: 95,
  callId: 'abc',
  ...patch,
});

describe('history entries', () => {
  test('a history call is a call source like the others: archived, it is read back for replay, and routes can name it', () => {
    const call = normalizeHistoryEntry(entry(), { receivedAt });
    const back = archivedCall(renderArchiveJson(call));
    assert.equal(back?.source, 'history');
    assert.equal(back?.key, 'history:-:h-1');
    const routes = [
      routeSchema.parse({ when: { source: 'history' }, to: 'archive' }),
      routeSchema.parse({ when: { source: 'channel' }, to: 'crm' }),
    ];
    assert.deepEqual(sinksFor(routes, back!), ['archive']);
  });

  test('direction and status map to the canonical direction and outcome', () => {
    const cases: [string, string | undefined, string, string][] = [
      ['INCOMING', 'PICKUP', 'in', 'answered'],
      ['OUTGOING', 'PICKUP', 'out', 'answered'],
      ['MISSED_INCOMING', 'NOPICKUP', 'in', 'missed'],
      ['MISSED_OUTGOING', 'NOPICKUP', 'out', 'missed'],
      ['INCOMING', 'BUSY', 'in', 'busy'],
      ['OUTGOING', 'FORWARD', 'out', 'transferred'],
      ['MISSED_INCOMING', undefined, 'in', 'missed'],
      ['INCOMING', undefined, 'in', 'unknown'],
    ];
    for (const [direction, status, dir, outcome] of cases) {
      const call = normalizeHistoryEntry(entry({ direction, status }), { receivedAt });
      assert.deepEqual([call.direction, call.outcome], [dir, outcome], `${direction}/${status}`);
    }
  });

  test('the canonical call: key history:<scope>:<id>, numbers in E.164, times from created and duration', () => {
    const call = normalizeHistoryEntry(
      entry({
        recordings: [{ url: '/recordings/r1' }, { url: 'https://elsewhere.example/r2' }, { url: '//x.example/r3' }],
      }),
      { receivedAt },
    );
    assert.equal(call.key, 'history:-:h-1');
    assert.equal(normalizeHistoryEntry(entry(), { receivedAt, scope: 'acct' }).key, 'history:acct:h-1');
    assert.equal(call.source, 'history');
    assert.equal(call.callId, 'abc');
    assert.equal(call.eventId, 'h-1');
    assert.equal(call.from, '+4921155550100');
    assert.equal(call.fromRaw, '0049 211 55550100');
    assert.equal(call.to, '+4915112345678');
    assert.equal(call.startedAt, '2026-10-05T08:00:00.000Z');
    assert.equal(call.endedAt, '2026-10-05T08:01:35.000Z');
    assert.equal(call.durationSec, 95);
    assert.deepEqual(call.recordings, [{ downloadUrl: '/recordings/r1', type: 'call_recorder' }]);
    assert.equal(call.receivedAt, receivedAt.toISOString());
    // Without a callId the history entry's id names the call.
    assert.equal(normalizeHistoryEntry(entry({ callId: undefined }), { receivedAt }).callId, 'h-1');
  });

  test('entries that are not usable calls are refused with the entry named', () => {
    assert.throws(
      () => normalizeHistoryEntry(entry({ type: 'SMS' }), { receivedAt }),
      (e: unknown) => e instanceof HistoryEntryError && /h-1: type SMS is not a call/.test(e.message),
    );
    assert.throws(() => normalizeHistoryEntry(entry({ created: 'yesterday' }), { receivedAt }), /created: not a date/);
    assert.throws(() => normalizeHistoryEntry(entry({ direction: 'SIDEWAYS' }), { receivedAt }), /direction/);
    assert.throws(() => normalizeHistoryEntry(entry({ id: '' }), { receivedAt }), HistoryEntryError);
    assert.throws(() => normalizeHistoryEntry('nope', { receivedAt }), /HistoryEntry \(no id\)/);
  });
});

describe('archived records read back', () => {
  test('a record as the archive writes it gives back the call (raw from original)', () => {
    const call = sampleCall('c-9', { agentId: 'a-1' });
    const back = archivedCall(renderArchiveJson(call));
    assert.deepEqual(back, call);
  });

  test('an older record without a call key gets the key of its source', () => {
    const { key: _key, ...old } = sampleCall('c-old', { agentId: 'a-1' });
    const back = archivedCall(JSON.stringify({ call: old }));
    assert.equal(back?.key, 'ai-agent:a-1:c-old');
    assert.equal(back?.raw, null);
  });

  test('what is not an archived call is null', () => {
    for (const text of [
      '',
      'not json',
      '[]',
      '{"call":null}',
      '{"call":{"callId":"x"}}',
      '{"call":{"callId":"x","startedAt":"2026-01-01","source":"fax"}}',
      // Another version's record (a later callsync, another tool): its fields may mean other things.
      '{"schema":"callsync.archive.v2","call":{"callId":"x","startedAt":"2026-01-01","source":"ai-agent"}}',
      '{"schema":2,"call":{"callId":"x","startedAt":"2026-01-01","source":"ai-agent"}}',
    ]) {
      assert.equal(archivedCall(text), null, text);
    }
  });

  test('the days of a range, inclusive, across a month end', () => {
    assert.deepEqual(daysOf('2026-09-29', '2026-10-02'), ['2026/09/29', '2026/09/30', '2026/10/01', '2026/10/02']);
    assert.deepEqual(daysOf('2026-10-02', '2026-10-02'), ['2026/10/02']);
  });
});

describe('progress and listing', () => {
  test('a bar redrawn in place on a terminal, plain lines otherwise', () => {
    const tty: string[] = [];
    const bar = new Progress({ isTTY: true, write: (t) => tty.push(t) }, 'replay');
    bar.update(5, 10, '(5 queued)');
    bar.finish();
    assert.match(tty[0]!, /^\rreplay \[#{15}-{15}\] 5\/10 \(5 queued\)/);
    assert.equal(tty.at(-1), '\n');
    const plain: string[] = [];
    const lines = new Progress({ isTTY: false, write: (t) => plain.push(t) }, 'backfill');
    lines.update(10, 25);
    lines.finish();
    assert.deepEqual(plain, ['backfill: 10/25\n']);
  });

  test('the folder store lists keys under a prefix at every depth, in order, without temp files', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'store-list-'));
    try {
      const store = new LocalFolderStore(dir);
      await store.put('transcripts/2026/10/05/b.json', '{}');
      await store.put('transcripts/2026/10/05/a.json', '{}');
      await store.put('transcripts/2026/10/06/c.json', '{}');
      await mkdir(join(dir, 'transcripts/2026/10/05/sub'), { recursive: true });
      await writeFile(join(dir, 'transcripts/2026/10/05/sub/d.json'), '{}');
      await writeFile(join(dir, 'transcripts/2026/10/05/e.json.123.tmp'), '{');
      const keys: string[] = [];
      for await (const k of store.list('transcripts/2026/10/05/')) keys.push(k);
      assert.deepEqual(keys, [
        'transcripts/2026/10/05/a.json',
        'transcripts/2026/10/05/b.json',
        'transcripts/2026/10/05/sub/d.json',
      ]);
      const none: string[] = [];
      for await (const k of store.list('transcripts/2031/01/01/')) none.push(k);
      assert.deepEqual(none, []);
      assert.equal(await store.get('transcripts/2026/10/06/c.json'), '{}');
      await assert.rejects(async () => {
        for await (const _ of store.list('../outside/')) void _;
      }, /escapes the archive folder/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('backfill --from/--to', () => {
  test('take ISO-8601 days and times; a bare number or a time without a zone is a usage error', async () => {
    const { isoOption } = await import('../src/cli/backfill.js');
    assert.equal(isoOption('from', '2026-10-01'), '2026-10-01T00:00:00.000Z');
    assert.equal(isoOption('from', '2026-10-01T08:30:00Z'), '2026-10-01T08:30:00.000Z');
    assert.equal(isoOption('from', '2026-10-01T10:30+02:00'), '2026-10-01T08:30:00.000Z');
    // V8 reads these as dates (1 and -1: 2001-01-01, 0: 2000-01-01, local time), which backfilled
    // a range of years nobody asked for; a zone-less time was read in the machine's time zone.
    for (const value of ['1', '0', '-1', '12', '2026-10-01T08:30', '2026-10-01 08:30', 'October 1, 2026', '2026-02-30'])
      assert.throws(() => isoOption('from', value), { name: 'UsageError' }, value);
  });
});
