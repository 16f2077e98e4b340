// What the spool's duplicate check remembers: the revisions of each call waiting in the spool.
// The same rule as the inbound log's (queues/inbound.ts): the same content again is a duplicate,
// answered with the call's first spooled id; other content is spooled as an update.
import { callHash, contentHash, type CanonicalCall } from '../model/call.js';

export type SpoolCheck =
  { duplicate: true; firstId: string } | { duplicate: false; update: boolean; contentHash: string };

export class SpooledRevisions {
  /** callHash -> (content hash -> id), in the order spooled: the first id is the call's first delivery. */
  private readonly byCall = new Map<string, Map<string, string>>();

  /** Whether `call` repeats a revision waiting in the spool, or is new (an update when another revision waits). */
  check(call: CanonicalCall): SpoolCheck {
    const content = contentHash(call);
    const revisions = this.byCall.get(callHash(call.key));
    if (revisions?.has(content)) return { duplicate: true, firstId: revisions.values().next().value! };
    return { duplicate: false, update: revisions !== undefined, contentHash: content };
  }

  /** Whether any revision of `call` waits in the spool (then a new one must queue behind it). */
  waits(call: Pick<CanonicalCall, 'key'>): boolean {
    return this.byCall.has(callHash(call.key));
  }

  add(call: CanonicalCall, id: string, content: string = contentHash(call)): void {
    const hash = callHash(call.key);
    let revisions = this.byCall.get(hash);
    if (!revisions) this.byCall.set(hash, (revisions = new Map()));
    if (!revisions.has(content)) revisions.set(content, id);
  }

  /** Forgets the revision spooled as `id` (drained, or its write failed). */
  remove(call: CanonicalCall, id: string, content: string = contentHash(call)): void {
    const hash = callHash(call.key);
    const revisions = this.byCall.get(hash);
    if (revisions?.get(content) !== id) return;
    revisions.delete(content);
    if (revisions.size === 0) this.byCall.delete(hash);
  }
}
