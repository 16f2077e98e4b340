// Times without a zone are UTC (the spec's times are ISO 8601 UTC), whatever the server's time zone:
// each reader runs in a child process whose TZ is New York (a TZ set in this process after its
// first Date would not apply).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The reader script's output (one JSON value), run under `TZ`. */
function runIn(tz: string, script: string): unknown {
  const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: root,
    env: { ...process.env, TZ: tz },
    encoding: 'utf8',
  });
  return JSON.parse(out);
}

const READERS = `
import { readWebhook } from './src/model/webhook.ts';
import { normalizeVcon } from './src/model/vcon.ts';
import { normalizeChannelEvent } from './src/model/channel-event.ts';
import { normalizeHistoryEntry } from './src/model/history.ts';
const receivedAt = new Date('2026-04-08T12:00:00Z');
const webhook = readWebhook(
  {
    version: 'v2',
    call: { id: 'tz-1', from: '+492116355340', to: '+4921155550100', startTime: '2026-04-08T10:00:00',
      endTime: '2026-04-08 10:01:00', direction: 'in' },
    assist: { transcription: { content: 'x', chunks: [{ speaker: 'caller', startTime: '2026-04-08T10:00:30.5', content: 'x' }] } },
  },
  { agentId: 'a', receivedAt },
);
const vcon = normalizeVcon(
  { vcon: '0.0.1', uuid: 'tz-2', created_at: '2026-04-08T09:00:00',
    dialog: [{ type: 'text', start: '2026-04-08T10:00:00', duration: 5, originator: 0, body: 'x' }] },
  { agentId: null, receivedAt },
);
const channel = normalizeChannelEvent(
  { eventId: 'ev-tz', type: 'CALL', createdAt: '2026-04-08T10:01:00',
    call: { callSid: 'sid-tz', channelId: 'ch-1', direction: 'INCOMING', from: '+492111234567', to: '+4930987654',
      startedAt: '2026-04-08T10:00:00', establishedAt: '2026-04-08T10:00:05', terminatedAt: '2026-04-08T10:01:00Z', state: 'FINISHED' } },
  receivedAt,
);
const history = normalizeHistoryEntry(
  { id: 'h-tz', type: 'CALL', direction: 'INCOMING', created: '2026-04-08T10:00:00', duration: 60 },
  { receivedAt },
);
console.log(JSON.stringify({
  webhook: [webhook.call.startedAt, webhook.call.endedAt, webhook.call.transcript.chunks[0].startOffsetMs],
  vcon: [vcon.call.startedAt],
  channel: [channel.startedAt, channel.durationSec],
  history: [history.startedAt],
}));
`;

test('an ISO date-time without a zone is read as UTC, not in the server time zone', () => {
  // Before: New York read "2026-04-08T10:00:00" as 14:00 UTC (Date.parse takes a zone-less date-time as local).
  const expected = {
    webhook: ['2026-04-08T10:00:00.000Z', '2026-04-08T10:01:00.000Z', 30_500],
    vcon: ['2026-04-08T10:00:00.000Z'],
    channel: ['2026-04-08T10:00:00.000Z', 55],
    history: ['2026-04-08T10:00:00.000Z'],
  };
  assert.deepEqual(runIn('America/New_York', READERS), expected);
  assert.deepEqual(runIn('Asia/Kolkata', READERS), expected);
});
