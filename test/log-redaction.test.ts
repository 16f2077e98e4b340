// The logger's redaction (src/log.ts) against pino's own `redact` option with the paths callsync
// used before (the oracle): for thousands of random objects — the secret keys, `headers` and its
// credential headers, arrays, at every depth — both write the same line, bound as a child's
// bindings or logged; the caller's object is never changed; errors keep what pino's `err`
// serializer writes.
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { pino, type Logger } from 'pino';
import { createLogger } from '../src/log.js';

/** The paths of pino's `redact` option as src/log.ts set them until round 11 (docs/performance.md). */
const PINO_PATHS = [
  'password',
  '*.password',
  'token',
  '*.token',
  'accessToken',
  '*.accessToken',
  'secret',
  '*.secret',
  'authorization',
  '*.authorization',
  'headers.authorization',
  'headers.cookie',
  '*.headers.authorization',
  'apiKey',
  '*.apiKey',
  'api_token',
  '*.api_token',
  'refreshToken',
  '*.refreshToken',
  'clientSecret',
  '*.clientSecret',
  'transcript',
  '*.transcript',
  'transcription',
  '*.transcription',
  'content',
  '*.content',
  'raw',
  '*.raw',
  'body',
  '*.body',
  '*.headers.cookie',
  'headers["x-api-key"]',
  '*.headers["x-api-key"]',
  'headers["x-api-token"]',
  '*.headers["x-api-token"]',
  'secretAccessKey',
  '*.secretAccessKey',
  '*.*.password',
  '*.*.token',
  '*.*.secret',
  '*.*.authorization',
  '*.*.accessToken',
  '*.*.transcript',
  '*.*.transcription',
  '*.*.content',
  '*.*.*.transcript',
  '*.*.*.transcription',
  '*.*.*.content',
];

function lines(): { out: string[]; destination: NodeJS.WritableStream } {
  const out: string[] = [];
  return { out, destination: { write: (s: string) => (out.push(s), true) } as unknown as NodeJS.WritableStream };
}

function loggers() {
  const ours = lines();
  const theirs = lines();
  const log = createLogger({ level: 'info', destination: ours.destination });
  const oracle = pino(
    { level: 'info', base: { service: 'callsync' }, redact: { paths: PINO_PATHS, censor: '[redacted]' } },
    theirs.destination,
  );
  const last = (l: string[]) => {
    const { time: _time, ...rest } = JSON.parse(l.at(-1)!) as Record<string, unknown>;
    return rest;
  };
  return { log, oracle, ours: () => last(ours.out), theirs: () => last(theirs.out) };
}

const KEYS = [
  'password',
  'token',
  'accessToken',
  'secret',
  'authorization',
  'apiKey',
  'api_token',
  'refreshToken',
  'clientSecret',
  'secretAccessKey',
  'transcript',
  'transcription',
  'content',
  'raw',
  'body',
  'headers',
  'cookie',
  'x-api-key',
  'x-api-token',
  'call',
  'data',
  'job',
  'summary',
  'chunks',
  'sink',
  'err',
  '0',
];

const { tree } = fc.letrec((tie) => ({
  tree: fc.oneof({ depthSize: 'small', maxDepth: 6 }, tie('leaf'), tie('object'), tie('array')),
  leaf: fc.oneof(fc.string({ maxLength: 8 }), fc.integer(), fc.boolean(), fc.constant(null)),
  // Plain objects (fast-check's dictionaries have no prototype; pino's own child() refuses those).
  object: fc.dictionary(fc.constantFrom(...KEYS), tie('tree'), { maxKeys: 6 }).map((o) => ({ ...o })),
  array: fc.array(tie('tree'), { maxLength: 4 }),
}));
const lineObject = fc
  .dictionary(fc.constantFrom(...KEYS.filter((k) => k !== 'err')), tree, { maxKeys: 8 })
  .map((o) => ({ ...o }));

/**
 * `write` to both loggers: the same line, and ours leaves what it logs as it was. The oracle gets
 * copies: pino's redaction writes its censor into some of the objects it is given (an array inside
 * a redacted path, seen with @pinojs/redact 0.4), which ours must not do.
 */
function same<T extends unknown[]>(
  { log, oracle, ours, theirs }: ReturnType<typeof loggers>,
  values: T,
  write: (l: Logger, ...values: T) => void,
) {
  const before = JSON.stringify(values);
  write(log, ...values);
  assert.equal(JSON.stringify(values), before, 'the logged values were changed');
  write(oracle, ...(structuredClone(values) as T));
  assert.deepEqual(ours(), theirs());
}

describe('log redaction', () => {
  test("writes what pino's redact wrote, for random objects logged or bound, and leaves them as they were", () => {
    const both = loggers();
    fc.assert(
      fc.property(lineObject, lineObject, (bindings, obj) => {
        same(both, [obj], (l, o) => l.info(o, 'logged'));
        same(both, [bindings, obj], (l, b, o) => l.child(b).warn(o, 'bound'));
      }),
      { numRuns: 3000 },
    );
  });

  test("errors: the serializer's type, message and stack, their own fields redacted as before", () => {
    const both = loggers();
    class HttpError extends Error {
      body = 'the response body';
      headers = { authorization: 'Bearer x', 'x-api-key': 'k' };
      response = { content: 'echoed text', status: 400 };
    }
    // Errors are not cloned for the oracle (structuredClone drops their class and fields): each logger gets its own.
    const make = () => [
      new HttpError('refused', { cause: new Error('underneath') }),
      Object.assign(new Error('with a token'), { token: 't-1', details: { secret: 's', list: [{ content: 'c' }] } }),
      { message: 'a plain object with a message', body: 'b' },
      'not an error',
      new AggregateError([new Error('one')], 'many'),
    ];
    const [ours, theirs] = [make(), make()];
    // The same stacks in both sets (they are made on different lines), causes and aggregated errors too.
    const stack = (e: unknown): void => {
      if (!(e instanceof Error)) return;
      e.stack = `${e.name}: ${e.message}\n    at here`;
      stack(e.cause);
      if (e instanceof AggregateError) e.errors.forEach(stack);
    };
    [...ours, ...theirs].forEach(stack);
    for (let i = 0; i < ours.length; i++) {
      const write = (l: Logger, err: unknown) => l.error({ err, sink: 'crm' }, 'failed');
      write(both.log, ours[i]);
      write(both.oracle, theirs[i]);
      assert.deepEqual(both.ours(), both.theirs());
      both.log.child({ err: ours[i] }).info('bound');
      both.oracle.child({ err: theirs[i] }).info('bound');
      assert.deepEqual(both.ours(), both.theirs());
    }
    both.log.error(ours[0], 'error as the object');
    both.oracle.error(theirs[0], 'error as the object');
    assert.deepEqual(both.ours(), both.theirs());
    const err = ours[0] as HttpError;
    assert.equal(err.body, 'the response body');
    assert.equal(err.headers.authorization, 'Bearer x');
    assert.equal(err.response.content, 'echoed text');
  });
});
