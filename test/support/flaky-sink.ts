// A sink whose behaviour is chosen by the call id, to drive jobs into every outcome:
//   ok-*     done                      perm-*  permanent failure (dead letters at once)
//   flaky-*  fails once, then done     fail-*  always fails (transient): dead letters after the last attempt
//   auth-*   credentials rejected (pauses the queue)
//   slow-*   done after `slowMs`       gate-*  fails permanently while `sink.failing` is true
//   down-*   fails transiently (503) while `sink.failing` is true
import type { CanonicalCall } from '../../src/model/call.js';
import { AuthError, PermanentError, TransientError } from '../../src/errors.js';
import type { Sink, SinkContext, SinkResult } from '../../src/sinks/types.js';

export class FlakySink implements Sink {
  readonly type = 'archive';
  /** Call ids delivered successfully, in order (a call delivered twice appears twice). */
  readonly delivered: string[] = [];
  /** Call ids of every attempt, in order, whatever its outcome. */
  readonly attempted: string[] = [];
  failing = true;
  constructor(
    readonly name = 'archive',
    private readonly slowMs = 500,
  ) {}

  async deliver(call: CanonicalCall, ctx: SinkContext): Promise<SinkResult> {
    const id = call.callId;
    ctx.log.info({ callId: id }, 'flaky sink: delivering');
    this.attempted.push(id);
    if (id.startsWith('perm-')) throw new PermanentError(`remote refused call ${id} for good`, { status: 422 });
    if (id.startsWith('flaky-') && ctx.attempt === 1) throw new TransientError('remote hiccup', { status: 502 });
    if (id.startsWith('fail-')) throw new TransientError('remote down', { status: 503 });
    if (id.startsWith('down-') && this.failing) throw new TransientError('remote down', { status: 503 });
    if (id.startsWith('auth-')) throw new AuthError('token rejected', { status: 401 });
    if (id.startsWith('gate-') && this.failing)
      throw new PermanentError('remote rejected the record: field "subject" too long', { status: 400 });
    if (id.startsWith('slow-')) await new Promise((r) => setTimeout(r, this.slowMs));
    this.delivered.push(id);
    return { status: 'done', refs: { id } };
  }
}
