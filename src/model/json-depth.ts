// Values read from the platform's API (channel events, history entries) are kept in a call's `raw`
// as read — but no value nested a few thousand levels deep can be stored: JSON.stringify (the
// inbound log, BullMQ's job data) overflows its stack on it. The ingress refuses such a body with a
// 400 (src/ingress/middleware/json-limits.ts); an answer of the API cannot be refused (the poller
// would read it again forever, and every event after it with it), so its deeper parts are replaced
// by a marker, in a copy, and the event goes on. Iterative: the input may be nested any depth.

/** Deepest nesting kept: the value itself is level 1 (the ingress' default WEBHOOK_MAX_DEPTH). */
export const MAX_KEPT_DEPTH = 64;

/** What stands for a container nested deeper than MAX_KEPT_DEPTH in the copy. */
export const TOO_DEEP_MARKER = `[nested deeper than ${MAX_KEPT_DEPTH} levels: left out by callsync]`;

export interface DepthBounded {
  /** The value itself when nothing is nested too deep; else a copy with those containers replaced. */
  value: unknown;
  /** Containers replaced by TOO_DEEP_MARKER (0: `value` is the input). */
  cut: number;
  /** The top-level key (or index) under which the first one was, when the value is a container. */
  firstCutUnder?: string;
}

const isContainer = (v: unknown): v is object => v !== null && typeof v === 'object';

/** True when a container inside `value` is deeper than `maxDepth` (stops at the first). */
function tooDeep(value: unknown, maxDepth: number): boolean {
  if (!isContainer(value)) return false;
  const stack: [object, number][] = [[value, 1]];
  while (stack.length > 0) {
    const [container, depth] = stack.pop()!;
    if (depth > maxDepth) return true;
    for (const child of Object.values(container) as unknown[]) if (isContainer(child)) stack.push([child, depth + 1]);
  }
  return false;
}

/** Sets `key` on a plain object as an own property, `__proto__` included (never the prototype). */
function put(target: Record<string, unknown> | unknown[], key: string | number, v: unknown): void {
  if (key === '__proto__')
    Object.defineProperty(target, key, { value: v, enumerable: true, writable: true, configurable: true });
  else (target as Record<string | number, unknown>)[key] = v;
}

/** `value` with every container nested deeper than `maxDepth` replaced by TOO_DEEP_MARKER. */
export function withinDepth(value: unknown, maxDepth: number = MAX_KEPT_DEPTH): DepthBounded {
  if (!tooDeep(value, maxDepth)) return { value, cut: 0 };
  const source = value as object;
  const root: Record<string, unknown> | unknown[] = Array.isArray(source) ? [] : {};
  const stack: { from: object; to: Record<string, unknown> | unknown[]; depth: number; top?: string }[] = [
    { from: source, to: root, depth: 1 },
  ];
  let cut = 0;
  let firstCutUnder: string | undefined;
  while (stack.length > 0) {
    const { from, to, depth, top } = stack.pop()!;
    const entries: [string | number, unknown][] = Array.isArray(from)
      ? from.map((v, i) => [i, v])
      : Object.entries(from);
    for (const [key, child] of entries) {
      const under = top ?? String(key);
      if (!isContainer(child)) {
        put(to, key, child);
      } else if (depth + 1 > maxDepth) {
        put(to, key, TOO_DEEP_MARKER);
        if (cut++ === 0) firstCutUnder = under;
      } else {
        const copy: Record<string, unknown> | unknown[] = Array.isArray(child) ? [] : {};
        put(to, key, copy);
        stack.push({ from: child, to: copy, depth: depth + 1, top: under });
      }
    }
  }
  return { value: root, cut, ...(firstCutUnder === undefined ? {} : { firstCutUnder }) };
}
