// SinkDeps / SinkContext for the CRM adapter tests: real Redis state under a unique prefix, a
// controllable clock, and a log captured in memory (to prove what was never logged).
import { Redis } from 'ioredis';
import { callKeySegment } from '../../src/model/call.js';
import { RedisKeyValueStore } from '../../src/state/kv.js';
import type { SinkContext, SinkDeps } from '../../src/sinks/types.js';
import { loadConfig } from '../../src/config/index.js';
import { memoryLog } from './callsync.js';
import { cleanupPrefix, REDIS_URL, uniquePrefix } from './redis.js';

/**
 * What sinks get as `SinkDeps.settings` from these variables, through the one parse path
 * (loadConfig's `sinkSettings`): every sink type's section merged, each sink reads its own.
 */
export function parsedSinkSettings(env: NodeJS.ProcessEnv = {}): Record<string, any> {
  return Object.assign({}, ...Object.values(loadConfig(env).sinkSettings));
}

export interface CrmTestDeps extends SinkDeps<Record<string, any>> {
  /** Every sink type's settings parsed from the test's variables (tests replace them: parsedSinkSettings). */
  settings: Record<string, any>;
  prefix: string;
  redis: Redis;
  logs: Record<string, unknown>[];
  clock: { now: number; advance(ms: number): void };
  ctx(attempt?: number): SinkContext;
  close(): Promise<void>;
}

export function crmTestDeps(env: NodeJS.ProcessEnv = {}): CrmTestDeps {
  const prefix = `${uniquePrefix('crmtest')}:`;
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
  const { lines, log } = memoryLog('debug');
  const clock = {
    now: Date.parse('2026-04-08T12:00:00Z'),
    advance(ms: number) {
      clock.now += ms;
    },
  };
  return {
    prefix,
    redis,
    logs: lines,
    clock,
    log,
    state: new RedisKeyValueStore(redis, prefix),
    telephony: null,
    now: () => new Date(clock.now),
    settings: parsedSinkSettings(env),
    ctx: (attempt = 1) => ({ jobId: 'job-1', attempt, log, signal: new AbortController().signal }),
    async close() {
      redis.disconnect();
      await cleanupPrefix(prefix);
    },
  };
}

/** The default CRM body (HubSpot `hs_call_body`, Pipedrive `note`) of `sampleCall(callId)` (agent-1). */
export const expectedDefaultBody = (callId: string) =>
  [
    'The caller asked to move her dentist appointment to Friday morning.',
    '',
    'Key points:',
    '• Appointment moved to Friday 9:00',
    '• Caller prefers SMS confirmation',
    '',
    'Topics: appointment, rescheduling',
    '',
    'Answers:',
    'Preferred day?: Friday',
    'Preferred time?: 9:00',
    '',
    // The archive's key of the call: `<call id>-<16 hex of sha256(call key)>` (src/sinks/archive/keys.ts).
    `Transcript: transcripts/2026/04/08/${callKeySegment({ key: `ai-agent:agent-1:${callId}`, callId })}.txt`,
  ].join('<br>\n');

/** The default CRM body of the sample call `c-1`. */
export const EXPECTED_DEFAULT_BODY = expectedDefaultBody('c-1');
