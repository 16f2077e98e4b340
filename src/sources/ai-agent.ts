// Source `ai-agent`: the AI agent's call-data webhook (JSON), `POST /webhooks/ai-agent[/:agentId]`.
// The payload's normalization lives in src/model/webhook.ts; this file is the HTTP side of it.
import type { CanonicalCall } from '../model/call.js';
import { isVcon, normalizeVcon } from '../model/vcon.js';
import { InvalidPayloadError, readWebhook, sentCallId, type UnreadField } from '../model/webhook.js';
import { defineSourceType, SourceRefusal, type Source } from './types.js';

const AGENT_ID = /^[A-Za-z0-9._:@-]{1,200}$/;

/** The call id of a refused body (a webhook's `call.id`), or null: a vCon is refused only for a missing `uuid`. */
function callIdSent(body: unknown): string | null {
  return isVcon(body) ? null : sentCallId(body);
}

export function aiAgentSource(): Source {
  return {
    name: 'ai-agent',
    paths: ['/webhooks/ai-agent', '/webhooks/ai-agent/:agentId'],
    body: 'json',
    async receive(request) {
      const agentId = request.params.agentId ?? null;
      if (agentId !== null && !AGENT_ID.test(agentId))
        throw new SourceRefusal(400, 'agent id in the path is not valid');
      let read: { call: CanonicalCall; unread: UnreadField[] };
      try {
        // A vCon (IETF draft) on the same route becomes the same canonical call; so does the legacy
        // AI Assistant Webhook, recognised by its shape inside readWebhook.
        const body = request.json?.value;
        const options = { agentId, receivedAt: request.receivedAt };
        read = isVcon(body) ? normalizeVcon(body, options) : readWebhook(body, options);
      } catch (err) {
        if (err instanceof InvalidPayloadError)
          throw new SourceRefusal(400, err.detail, err.pointer, err.problems, callIdSent(request.json?.value));
        throw err;
      }
      return {
        // The payload is stored as received (normalizeWebhook keeps the parsed body as `raw`).
        calls: [{ call: read.call, rawJson: request.json?.text }],
        unread: read.unread,
        reply: ([result]) => {
          // `update` only on an update, `spooled` only when spooled: the plain answer stays `{id, duplicate}`.
          const body: { id: string; duplicate: boolean; update?: true; spooled?: true } = {
            id: result!.id,
            duplicate: result!.duplicate,
          };
          if (result!.update) body.update = true;
          if (result!.spooled) body.spooled = true;
          return { status: 202, contentType: 'application/json', body: JSON.stringify(body) };
        },
      };
    },
  };
}

/** The AI agent's webhook: no variables of its own (the ingress' shared secret guards it), no state. */
export const aiAgentSourceType = defineSourceType<null>({
  name: 'ai-agent',
  options: () => null,
  routes: () => aiAgentSource(),
});
