// OpenTelemetry traces, one trace per call: with OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) set, callsync exports over OTLP/HTTP the ingress' acceptance
// of a call, its fan-out and one span per sink attempt, and the outbound HTTP requests (CRMs,
// webhooks, the platform's API: src/http-request.ts; fetch, for downloads) as children of the attempt. Off when unset: nothing is loaded and
// every function here returns at once (no context manager, no cost).
//
// The trace id of a call is its call hash (32 hex digits, the sink job id's head), so every process
// puts its spans into the same trace without carrying context through Redis; the span ids of the
// ingress and fan-out spans are derived from it too, so the next hop links to them (span links
// across the queue hop, as the messaging conventions recommend for fan-out). Attributes carry ids
// and outcomes only — never a number, a name or transcript text.
import { createHash, randomBytes } from 'node:crypto';
import {
  context,
  SpanKind,
  SpanStatusCode,
  trace,
  TraceFlags,
  type Attributes,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';

let tracingEnabled = false;
let shutdownHook: (() => Promise<void>) | null = null;
/** Ids the next span gets (set around one synchronous `startSpan`). */
let forced: { traceId: string; spanId: string } | null = null;

const TRACER = 'callsync';

/** True when traces are exported (the SDK was started). */
export function tracingOn(): boolean {
  return tracingEnabled;
}

/**
 * Whether the environment asks for traces: an OTLP endpoint set and the SDK not disabled.
 * @internal Exported for its tests only (test/telemetry.redis.test.ts).
 */
export function tracingWanted(env: NodeJS.ProcessEnv): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').toLowerCase() === 'true') return false;
  if ((env.OTEL_TRACES_EXPORTER ?? 'otlp').toLowerCase() === 'none') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/**
 * Starts the SDK when the environment asks for it (the standard OTEL_* variables: endpoint,
 * headers, timeout, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, …, read by the SDK itself).
 * Returns false when tracing stays off. The packages are imported only here.
 */
export async function startTracing(env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (tracingEnabled || !tracingWanted(env)) return tracingEnabled;
  const [
    { BasicTracerProvider, BatchSpanProcessor },
    { OTLPTraceExporter },
    { resourceFromAttributes },
    { AsyncLocalStorageContextManager },
    { registerInstrumentations },
    { UndiciInstrumentation },
  ] = await Promise.all([
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/exporter-trace-otlp-http'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/context-async-hooks'),
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-undici'),
  ]);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({ 'service.name': env.OTEL_SERVICE_NAME || 'callsync' }),
    idGenerator: {
      generateTraceId: () => forced?.traceId ?? randomBytes(16).toString('hex'),
      generateSpanId: () => forced?.spanId ?? randomBytes(8).toString('hex'),
    },
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  trace.setGlobalTracerProvider(provider);
  // fetch (undici): the recording downloads and OAuth token requests — children of the sink attempt.
  // (The CRMs, the signed webhook and the platform's API go through src/http-request.ts: `traceHttp`.)
  // Only inside a call's span, and query values left out of the URL (Pipedrive's api_token, a searched number).
  const undici = new UndiciInstrumentation({
    requireParentforSpans: true,
    startSpanHook: (request) => {
      const url = new URL(request.path, request.origin);
      const query = redactQuery(url.search);
      return { 'url.full': `${url.origin}${url.pathname}${query}`, 'url.query': query };
    },
  });
  const unregister = registerInstrumentations({ tracerProvider: provider, instrumentations: [undici] });
  tracingEnabled = true;
  shutdownHook = async () => {
    unregister();
    await provider.forceFlush().catch(() => undefined);
    await provider.shutdown().catch(() => undefined);
    trace.disable();
    context.disable();
    tracingEnabled = false;
  };
  return true;
}

/**
 * `?api_token=abc&term=+49…` -> `?api_token=…&term=…`: the names stay, no value.
 * @internal Exported for its tests only (test/telemetry.redis.test.ts).
 */
export function redactQuery(search: string): string {
  return search.replace(/([?&][^=&]*=)[^&]*/g, '$1…');
}

/** Exports what is buffered and stops tracing (shutdown; tests). */
export async function stopTracing(): Promise<void> {
  const hook = shutdownHook;
  shutdownHook = null;
  await hook?.();
}

/** The span id of a call's `role` span (ingress, fanout): derived, so the next hop can link to it. */
function derivedSpanId(traceId: string, role: string): string {
  return createHash('sha256').update(`${traceId}:${role}`).digest('hex').slice(0, 16);
}

function linkTo(traceId: string, role: string): Link {
  const spanContext: SpanContext = {
    traceId,
    spanId: derivedSpanId(traceId, role),
    traceFlags: TraceFlags.SAMPLED,
    isRemote: true,
  };
  return { context: spanContext };
}

/** A span of a call's trace (trace id: its call hash), started now or at `startTime`. */
function startCallSpan(
  callHash: string,
  name: string,
  kind: SpanKind,
  attributes: Attributes,
  options: { role?: string; links?: Link[]; startTime?: number },
): Span {
  forced = {
    traceId: callHash,
    spanId: options.role ? derivedSpanId(callHash, options.role) : randomBytes(8).toString('hex'),
  };
  try {
    // A root of its own (no active parent), in the call's trace.
    return trace
      .getTracer(TRACER)
      .startSpan(
        name,
        { kind, attributes, links: options.links, startTime: options.startTime },
        trace.deleteSpan(context.active()),
      );
  } finally {
    forced = null;
  }
}

const isHash = (id: string) => /^[0-9a-f]{32}$/.test(id);

/** The ingress accepted (or spooled, or found a duplicate of) a call: its span, from `startedAt` to now. */
export function traceAccepted(
  callHash: string,
  attributes: { source: string; jobId: string; revision: string; spooled?: boolean },
  startedAt: number,
): void {
  if (!tracingEnabled || !isHash(callHash)) return;
  const span = startCallSpan(
    callHash,
    'callsync.ingress accept',
    SpanKind.SERVER,
    {
      'callsync.call.hash': callHash,
      'callsync.source': attributes.source,
      'callsync.ack_id': attributes.jobId,
      'callsync.revision': attributes.revision,
      'callsync.spooled': attributes.spooled === true,
    },
    { role: 'ingress', startTime: startedAt },
  );
  span.end();
}

/** The fan-out queued the call's sink jobs: its span, linked to the ingress span. */
export function traceFannedOut(
  callHash: string,
  attributes: { jobId: string; sinks: string[]; routes: string[] },
  startedAt: number,
): void {
  if (!tracingEnabled || !isHash(callHash)) return;
  const span = startCallSpan(
    callHash,
    'callsync.fanout',
    SpanKind.CONSUMER,
    {
      'callsync.call.hash': callHash,
      'callsync.job_id': attributes.jobId,
      'callsync.sinks': attributes.sinks,
      'callsync.routes': attributes.routes,
      'messaging.operation.type': 'process',
    },
    { role: 'fanout', links: [linkTo(callHash, 'ingress')], startTime: startedAt },
  );
  span.end();
}

/** An attempt of a sink job: runs `work` inside its span (outbound requests become its children), linked to the fan-out span. */
export async function traceAttempt<T>(
  callHash: string,
  attributes: { sink: string; endpoint?: string; jobId: string; attempt: number },
  work: () => Promise<T>,
  outcome: (result: T) => { outcome: string; skip?: string },
): Promise<T> {
  if (!tracingEnabled || !isHash(callHash)) return work();
  const span = startCallSpan(
    callHash,
    `callsync.sink ${attributes.sink}`,
    SpanKind.CONSUMER,
    {
      'callsync.call.hash': callHash,
      'callsync.sink': attributes.sink,
      ...(attributes.endpoint ? { 'callsync.endpoint': attributes.endpoint } : {}),
      'callsync.job_id': attributes.jobId,
      'callsync.attempt': attributes.attempt,
      'messaging.operation.type': 'process',
    },
    { links: [linkTo(callHash, 'fanout')] },
  );
  try {
    const result = await context.with(trace.setSpan(context.active(), span), work);
    const o = outcome(result);
    span.setAttribute('callsync.outcome', o.outcome);
    if (o.skip) span.setAttribute('callsync.skip_reason', o.skip);
    return result;
  } catch (err) {
    // The error's class only: its message may echo what the remote was sent.
    span.setAttribute('callsync.outcome', 'failed');
    span.setAttribute('error.type', err instanceof Error ? err.name : 'Error');
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw err;
  } finally {
    span.end();
  }
}

/**
 * An outbound HTTP request on node:http (src/http-request.ts: the CRMs, the signed webhook, the
 * platform's API) as a child span (kind CLIENT) of the sink attempt under way, named and described as
 * the undici instrumentation describes fetch's: the method; `http.request.method`, `url.full` and
 * `url.query` with query values left out, `server.address`, `server.port`,
 * `http.response.status_code` (an error status from 400 on), `error.type` when no answer came.
 * None outside an attempt's span; nothing at all while tracing is off.
 */
export async function traceHttp<T extends { status: number }>(
  method: string,
  url: URL,
  work: () => Promise<T>,
): Promise<T> {
  if (!tracingEnabled || !trace.getSpan(context.active())) return work();
  const query = redactQuery(url.search);
  const attributes = {
    'http.request.method': method,
    'url.full': `${url.origin}${url.pathname}${query}`,
    'url.path': url.pathname,
    'url.query': query,
    'url.scheme': url.protocol.replace(/:$/, ''),
    'server.address': url.hostname,
    'server.port': Number(url.port || (url.protocol === 'https:' ? 443 : 80)),
  };
  return traceClient(method, attributes, async () => {
    const answer = await work();
    // The active span is the request's own here (traceClient runs `work` inside it).
    const span = trace.getSpan(context.active())!;
    span.setAttribute('http.response.status_code', answer.status);
    if (answer.status >= 400) span.setStatus({ code: SpanStatusCode.ERROR });
    return answer;
  });
}

/**
 * An outbound request the fetch instrumentation does not see — the archive's S3 PUTs (node:http,
 * the lean path's and the SDK's), an e-mail over SMTP (nodemailer) — as a child span (kind CLIENT)
 * of the sink attempt under way; none outside an attempt's span. `attributes`: ids only.
 */
export async function traceClient<T>(name: string, attributes: Attributes, work: () => Promise<T>): Promise<T> {
  if (!tracingEnabled) return work();
  const parent = trace.getSpan(context.active());
  if (!parent) return work();
  const span = trace.getTracer(TRACER).startSpan(name, { kind: SpanKind.CLIENT, attributes }, context.active());
  try {
    return await context.with(trace.setSpan(context.active(), span), work);
  } catch (err) {
    // The error's class only: its message may echo what was sent.
    span.setAttribute('error.type', err instanceof Error ? err.name : 'Error');
    span.setStatus({ code: SpanStatusCode.ERROR });
    throw err;
  } finally {
    span.end();
  }
}
