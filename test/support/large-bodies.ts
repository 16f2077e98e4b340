// Large webhook bodies for the ingress memory tests (test/ingress-memory, test/ingress-large-bodies):
// bodies that share their large part (the test holds it once), a raw poster that sees resets as
// answers, the Node flags of `npm start`, and a process' memory from /proc.
import { request } from 'node:http';
import { readFile } from 'node:fs/promises';
import { webhookPayload } from './calls.js';

export const MB = 1024 * 1024;
/**
 * The ingress' stated RSS bound (docs/operations.md "Memory"): the body budget is sized for 512 MB,
 * which most runs stay under (peaks 453–528 MB here); 640 MB is what is promised, on a loaded
 * 2-core machine too.
 */
export const RSS_BOUND_MB = 640;
const ID_WIDTH = 12;

/** The V8 flags `npm start` runs Node with (package.json), so the process measured is the one deployed. */
export async function startFlags(): Promise<string> {
  const pkg = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as {
    scripts: Record<string, string>;
  };
  return (pkg.scripts.start!.match(/--[\w-]+=\S+/g) ?? []).join(' ');
}

/** A body of about `mb` MB per call id (the large part shared: the test holds it once). */
export function largeBodies(mb: number): (id: string) => Buffer[] {
  const marker = 'X'.repeat(ID_WIDTH);
  const payload = webhookPayload(marker);
  payload.assist.transcription.content = 'The caller and the agent talk it over at length. '.repeat(
    Math.ceil((mb * MB) / 50),
  );
  const text = JSON.stringify(payload);
  const at = text.indexOf(marker);
  const head = Buffer.from(text.slice(0, at));
  const tail = Buffer.from(text.slice(at + ID_WIDTH));
  return (id) => [head, Buffer.from(id.padEnd(ID_WIDTH, '_').slice(0, ID_WIDTH)), tail];
}

export interface Answer {
  /** The HTTP status, or the error code of a connection cut under the sender (EPIPE, ECONNRESET). */
  status: number | string;
  retryAfter?: string;
  body: string;
}

/** Posts one body to the AI-agent webhook, with a Content-Length or chunked (64 KiB writes, no length). */
export function postBody(url: string, parts: Buffer[], chunked = false): Promise<Answer> {
  const length = parts.reduce((n, p) => n + p.length, 0);
  const headers: Record<string, string | number> = { 'content-type': 'application/json', connection: 'close' };
  if (!chunked) headers['content-length'] = length;
  return new Promise((resolve) => {
    const req = request(`${url}/webhooks/ai-agent/agent-1`, { method: 'POST', agent: false, headers }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'] as string | undefined, body }),
      );
      // The connection cut while the answer was read.
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ status: err.code ?? err.message, body }));
      res.on('aborted', () => resolve({ status: 'ECONNRESET', body }));
    });
    // A 503 sent before the whole body was read closes the connection under the sender's feet: the
    // sender sees EPIPE or ECONNRESET and retries.
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ status: err.code ?? err.message, body: '' }));
    if (!chunked) {
      for (const p of parts.slice(0, -1)) req.write(p);
      req.end(parts.at(-1));
      return;
    }
    for (const p of parts)
      for (let i = 0; i < p.length; i += 64 * 1024) req.write(p.subarray(i, Math.min(p.length, i + 64 * 1024)));
    req.end();
  });
}

/** A process' resident memory now (VmRSS) or at its peak (VmHWM), in MB. */
export async function statusMb(pid: number, field: 'VmHWM' | 'VmRSS'): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)![1]) / 1024;
}
