// No personal data where it is not needed (docs/privacy.md): what a sink's job carries of a call.
// A sink type that does not read the raw payload (`needsRaw` false) or the transcript's text
// (`needsTranscript` false) gets neither in its jobs; the transcript is then `{ omitted: true }`,
// so the sink still knows there is one (the CRM note links the archived transcript). One that says
// which parts of the call it reads (`needsParts`: its templates') gets only those of them. The fan-out
// trims its jobs the same way (workers/fanout.ts); this is for the jobs a command queues straight
// to one sink (`callsync replay --sink`, `backfill --sink`: src/cli/sink-queue.ts).
import type { Config } from '../config/index.js';
import { withParts, type CanonicalCall } from '../model/call.js';
import { sinkTypes } from '../sinks/registry.js';

/** `call` as sink `sink` of `config` gets it in its jobs. */
export function callForSink(config: Config, sink: string, call: CanonicalCall): CanonicalCall {
  const configured = config.sinks[sink];
  const type = configured ? sinkTypes.get(configured.type) : undefined;
  if (!configured || !type) return call;
  let out = type.needsRaw?.(configured.options) === false ? { ...call, raw: null } : call;
  if (type.needsTranscript?.(configured.options) === false && out.transcript !== null && out.transcript !== undefined)
    out = { ...out, transcript: { content: '', chunks: [], omitted: true } };
  const parts = type.needsParts?.(configured.options);
  return parts ? withParts(out, parts) : out;
}
