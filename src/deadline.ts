// A request's time limit that ends with the request. `AbortSignal.timeout(ms)` keeps its timer for
// the whole `ms` (30 s for a sink's request that took 5 ms), and with it the signal and everything
// that listens on it — `fetch`'s request state, an `AbortSignal.any` combination — so each request
// stays alive long enough to be promoted to the old generation, where only a full GC frees it
// (docs/performance.md, round 10). A deadline is cleared as soon as the request is over. Imports
// nothing from the project.

export interface Deadline {
  /** Aborts after `ms` with a `TimeoutError` (as `AbortSignal.timeout`), or with `parent`'s reason. */
  readonly signal: AbortSignal;
  /** The request is over: drops the timer and the listener on `parent` at once. Safe to call twice. */
  clear(): void;
}

/** A signal that aborts after `ms` or when `parent` aborts, until `clear()`. */
export function deadline(ms: number, parent?: AbortSignal): Deadline {
  const controller = new AbortController();
  if (parent?.aborted) {
    controller.abort(parent.reason);
    return { signal: controller.signal, clear: () => undefined };
  }
  const onAbort = () => controller.abort(parent!.reason);
  const timer = setTimeout(
    () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    ms,
  );
  // As AbortSignal.timeout's: the limit alone never keeps the process alive.
  timer.unref();
  parent?.addEventListener('abort', onAbort, { once: true });
  let cleared = false;
  return {
    signal: controller.signal,
    clear() {
      if (cleared) return;
      cleared = true;
      clearTimeout(timer);
      parent?.removeEventListener('abort', onAbort);
    },
  };
}
