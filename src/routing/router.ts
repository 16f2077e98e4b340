// Picks the sinks a call goes to: every route whose `when` holds contributes its `to` sinks.
import { hasSummary, hasTranscript, type CanonicalCall } from '../model/call.js';
import type { Condition, ParsedRoute } from './types.js';

function conditionHolds(c: Condition, call: CanonicalCall): boolean {
  if (c.source && !c.source.includes(call.source)) return false;
  if (c.agent && (call.agentId === null || !c.agent.includes(call.agentId))) return false;
  if (c.channel && (call.channelId === null || !c.channel.includes(call.channelId))) return false;
  if (c.direction && !c.direction.includes(call.direction)) return false;
  if (c.outcome && !c.outcome.includes(call.outcome)) return false;
  if (c.hasSummary !== undefined && hasSummary(call) !== c.hasSummary) return false;
  if (c.hasTranscript !== undefined && hasTranscript(call) !== c.hasTranscript) return false;
  if (c.hasRecording !== undefined && call.recordings.length > 0 !== c.hasRecording) return false;
  if (c.topics) {
    const topics = new Set((call.summary?.topics ?? []).map((t) => t.toLowerCase()));
    if (!c.topics.some((t) => topics.has(t.toLowerCase()))) return false;
  }
  return true;
}

export function routeMatches(route: ParsedRoute, call: CanonicalCall): boolean {
  return route.when.some((condition) => conditionHolds(condition, call));
}

/** Sink names for this call, each once, in the order routes name them. */
export function sinksFor(routes: readonly ParsedRoute[], call: CanonicalCall): string[] {
  const names = new Set<string>();
  for (const route of routes) if (routeMatches(route, call)) for (const name of route.to) names.add(name);
  return [...names];
}
