// `callsync send-sample`: posts a sample call-data webhook so a new user sees the whole path work.
import type { Config } from '../config/index.js';
import { contentHash, type CanonicalCall } from '../model/call.js';
import { normalizeWebhook } from '../model/webhook.js';
import { sinksFor } from '../routing/router.js';
import { archiveObjectAddress, type ArchiveOptions } from '../sinks/archive/index.js';
import { archiveKeys } from '../sinks/archive/keys.js';
import { sinkJobId, sinkQueueName } from '../../queues/registry.js';
import type { CliIo } from './io.js';
import { followHint, samplePayload, type SampleOptions } from './sample.js';
import { sendPushSample } from './sample-push.js';

function defaultSampleUrl(config: Config): string {
  const host = config.http.host === '0.0.0.0' || config.http.host === '::' ? '127.0.0.1' : config.http.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.http.port}/webhooks/ai-agent/sample-agent`;
}

/** The agent id the ingress reads from `/webhooks/ai-agent/<agentId>`, or null for `/webhooks/ai-agent`. */
function agentIdOfUrl(url: string): string | null {
  let path: string;
  try {
    path = new URL(url).pathname;
  } catch {
    return null;
  }
  const m = /\/webhooks\/ai-agent\/([^/]+)\/?$/.exec(path);
  if (!m) return null;
  try {
    return decodeURIComponent(m[1]!);
  } catch {
    return m[1]!;
  }
}

/**
 * Where this configuration's archive sinks write the call (the JSON record; the `.txt` is beside
 * it): the keys come from the archive's own layout, for the call as the ingress normalizes it.
 */
function sampleArchiveAddresses(config: Config, call: CanonicalCall): { sink: string; address: string }[] {
  const addresses: { sink: string; address: string }[] = [];
  for (const name of sinksFor(config.routes, call)) {
    const sink = config.sinks[name];
    if (sink?.type !== 'archive') continue;
    const options = sink.options as ArchiveOptions;
    addresses.push({ sink: name, address: archiveObjectAddress(options, archiveKeys(call, options.prefix).json) });
  }
  return addresses;
}

const hints: Record<number, string> = {
  401: 'the ingress wants the shared secret: set WEBHOOK_AUTH_HEADER and WEBHOOK_AUTH_TOKENS here as for the server',
  403: 'this address is not on the allow list: for a local try start callsync with WEBHOOK_ALLOWED_IPS=127.0.0.1,::1',
  503: 'callsync could not store the event (is Redis up?) or is shutting down; try again',
};

export async function sendSample(
  config: Config,
  url: string | undefined,
  io: CliIo,
  sample: SampleOptions = {},
): Promise<number> {
  const target = url ?? defaultSampleUrl(config);
  const payload = samplePayload(new Date(), sample);
  // A webhook call is answered (an agent took it): other outcomes come as the Push API's events.
  if (sample.outcome !== undefined && sample.outcome !== 'answered')
    return sendPushSample(
      config,
      target,
      (payload.call as { id: string }).id,
      { ...sample, outcome: sample.outcome },
      io,
    );
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const token = config.webhook.authTokens[0];
  if (config.webhook.authHeader && token) headers[config.webhook.authHeader] = token;
  let res: Response;
  try {
    res = await fetch(target, {
      method: 'POST',
      headers,
      body: JSON.stringify(payload),
      signal: AbortSignal.timeout(10_000),
    });
  } catch (err) {
    const cause = (err as Error & { cause?: { code?: string; message?: string; errors?: { code?: string }[] } }).cause;
    const why = cause?.code ?? cause?.errors?.[0]?.code ?? cause?.message ?? (err as Error).message;
    io.err(`could not reach ${target}: ${why}`);
    io.err('is callsync running? start it with `callsync start` (or `npm start`), or pass --url');
    return 1;
  }
  const text = await res.text();
  const callId = (payload.call as { id: string }).id;
  if (res.status === 202) {
    const body = JSON.parse(text) as { id: string; duplicate: boolean; update?: boolean; spooled?: boolean };
    const state = body.duplicate
      ? 'duplicate of a call already accepted, nothing new queued'
      : body.update
        ? 'an update of a call already accepted'
        : '';
    io.out(`accepted: call ${callId} (inbound log id ${body.id}${state ? `; ${state}` : ''})`);
    if (body.spooled) io.out('spooled to local disk (Redis unavailable); it reaches the queues when Redis is back');
    // The call as the ingress sees it (the agent comes from the URL), so the key is the one it gets.
    const received = normalizeWebhook(payload, { agentId: agentIdOfUrl(target), receivedAt: new Date() });
    const call: CanonicalCall = {
      ...received,
      revision: { stamp: '', update: body.update === true, content: contentHash(received) },
    };
    // A sink with endpoints (a signed webhook) has a queue per endpoint; the fan-out adds the call to those.
    const queues = sinksFor(config.routes, call).flatMap(
      (name) => config.sinks[name]?.endpoints?.map((e) => sinkQueueName(name, e)) ?? [sinkQueueName(name)],
    );
    if (queues.length === 0) io.out('no sink takes this call in this configuration (see its routes)');
    // The dashboard lists jobs per sink queue under the sink job id, the same in each queue; `callsync call` takes either id.
    else
      io.out(
        `job ${sinkJobId(call)} in ${queues.join(', ')}${body.spooled ? ' (once Redis is back)' : ''}${followHint(config, callId)}`,
      );
    const archives = sampleArchiveAddresses(config, call);
    for (const a of archives) {
      // Only spooled: nothing is archived until Redis is back, so no path that does not exist yet.
      io.out(
        body.spooled
          ? `archive ${a.sink}: spooled — not archived yet (it is written once Redis is back)`
          : `archive ${a.sink}: ${a.address} (and .txt beside it)`,
      );
    }
    return 0;
  }
  io.err(`${target} answered ${res.status}: ${text.slice(0, 500)}`);
  const hint = hints[res.status];
  if (hint) io.err(`hint: ${hint}`);
  return 1;
}
