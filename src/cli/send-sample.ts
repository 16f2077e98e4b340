// `callsync send-sample`: posts a sample call-data webhook so a new user sees the whole path work.
import type { Config } from '../config/index.js';
import type { CliIo } from './io.js';
import { samplePayload } from './sample.js';

export function defaultSampleUrl(config: Config): string {
  const host = config.http.host === '0.0.0.0' || config.http.host === '::' ? '127.0.0.1' : config.http.host;
  return `http://${host.includes(':') ? `[${host}]` : host}:${config.http.port}/webhooks/ai-agent/sample-agent`;
}

const hints: Record<number, string> = {
  401: 'the ingress wants the shared secret: set WEBHOOK_AUTH_HEADER and WEBHOOK_AUTH_TOKENS here as for the server',
  403: 'this address is not on the allow list: for a local try start callsync with WEBHOOK_ALLOWED_IPS=127.0.0.1,::1',
  503: 'callsync could not store the event (is Redis up?) or is shutting down; try again',
};

export async function sendSample(config: Config, url: string | undefined, io: CliIo): Promise<number> {
  const target = url ?? defaultSampleUrl(config);
  const payload = samplePayload();
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const token = config.webhook.authTokens[0];
  if (config.webhook.authHeader && token) headers[config.webhook.authHeader] = token;
  let res: Response;
  try {
    res = await fetch(target, { method: 'POST', headers, body: JSON.stringify(payload), signal: AbortSignal.timeout(10_000) });
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
    const body = JSON.parse(text) as { id: string; duplicate: boolean };
    io.out(`accepted: call ${callId} -> job ${body.id}${body.duplicate ? ' (duplicate)' : ''}`);
    io.out('next: watch it on /admin/queues, or look for it in the archive (transcripts/<date>/' + callId + '.json)');
    return 0;
  }
  io.err(`${target} answered ${res.status}: ${text.slice(0, 500)}`);
  const hint = hints[res.status];
  if (hint) io.err(`hint: ${hint}`);
  return 1;
}
