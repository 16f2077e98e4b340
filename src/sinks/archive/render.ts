// The human-readable transcript: a header, the summary on top, then `[mm:ss] Caller: ...` lines.
import { userDisplayNames, type CanonicalCall, type Speaker } from '../../model/call.js';

function formatOffset(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const mmss = `${String(m).padStart(2, '0')}:${String(s).padStart(2, '0')}`;
  return h > 0 ? `${String(h).padStart(2, '0')}:${mmss}` : mmss;
}

const speakerLabel: Record<Speaker, string> = { caller: 'Caller', callee: 'Callee', unknown: 'Speaker' };

export function renderTranscriptText(call: CanonicalCall): string {
  const lines: string[] = [];
  lines.push(`Call ${call.callId}`);
  if (call.title) lines.push(`Title: ${call.title}`);
  lines.push(
    `Direction: ${call.direction === 'in' ? 'inbound' : 'outbound'}    From: ${call.fromRaw ?? call.from ?? 'unknown'}    To: ${call.toRaw ?? call.to ?? 'unknown'}`,
  );
  lines.push(
    `Started: ${call.startedAt}${call.durationSec !== null ? `    Duration: ${formatOffset(call.durationSec * 1000)}` : ''}`,
  );
  if (call.agentId) lines.push(`Agent: ${call.agentId}`);
  if (call.channelId) lines.push(`Channel: ${call.channelId}`);
  const people = userDisplayNames(call);
  if (people.length > 0) lines.push(`Users: ${people.join(', ')}`);
  lines.push('');

  if (call.summary) {
    lines.push('Summary', '-------', call.summary.content.trim(), '');
    if (call.summary.keyPoints.length > 0) {
      lines.push('Key points:');
      for (const point of call.summary.keyPoints) lines.push(`  - ${point}`);
      lines.push('');
    }
    if (call.summary.topics.length > 0) lines.push(`Topics: ${call.summary.topics.join(', ')}`, '');
  }

  for (const scenario of call.scenarios) {
    lines.push(`Playbook: ${scenario.name}`);
    for (const set of scenario.smartAnswers) {
      if (set.setName) lines.push(`  ${set.setName}`);
      for (const item of set.setItems)
        lines.push(`    ${item.title ? `${item.title} — ` : ''}${item.question}: ${item.answer}`);
    }
    lines.push('');
  }

  lines.push('Transcript', '----------');
  if (!call.transcript) {
    lines.push('(no transcript)');
  } else if (call.transcript.chunks.length > 0) {
    for (const chunk of call.transcript.chunks) {
      const who = chunk.speaker === 'unknown' && chunk.speakerLabel ? chunk.speakerLabel : speakerLabel[chunk.speaker];
      lines.push(`[${formatOffset(chunk.startOffsetMs)}] ${who}: ${chunk.content.trim()}`);
    }
  } else {
    lines.push(call.transcript.content.trim());
  }
  return `${lines.join('\n')}\n`;
}

/** The JSON document: the canonical record and, beside it, the payload exactly as received. */
export function renderArchiveJson(call: CanonicalCall): string {
  const { raw, ...record } = call;
  return `${JSON.stringify({ schema: 'callsync.archive.v1', call: record, original: raw }, null, 2)}\n`;
}
