// Limits on the shape of a parsed JSON body: nesting depth, entries of one array or object, values
// in all, and numbers beyond a double's range. V8's JSON.parse copes with any nesting, but zod,
// JSON.stringify and BullMQ recurse: a body nested a few thousand levels deep overflows their stack
// wherever it is next serialized (here, or in the fan-out, where it stopped all delivery). Checked
// by one iterative walk, before anything else looks at the body; refused with a 400 pointing where.
import type { MiddlewareHandler } from 'hono';
import { jsonPointer } from '../../model/webhook.js';
import { ApiError } from '../errors.js';

export interface JsonLimits {
  /** Deepest nesting of arrays and objects; the body itself is level 1. Default 64. */
  maxDepth: number;
  /** Most elements of one array, or keys of one object. Default 100,000. */
  maxEntries: number;
  /** Most values in the whole body, containers included. Default 1,000,000. */
  maxValues: number;
}

/**
 * The spec's payload nests 8 levels (assist.callScenarios[].smartAnswers[].setItems[].question) and
 * its longest list is a transcript's chunks: about 2,200 for a three-hour call (chunks of ~5 s), 5
 * values each. These defaults are far beyond that (100,000 chunks are ~11 hours of word-by-word chunks), and far below
 * what overflows a stack (a few thousand levels) or makes one job's JSON a gigabyte of heap.
 * @internal Exported for its tests only (test/ingress-edge.redis.test.ts).
 */
export const DEFAULT_JSON_LIMITS: JsonLimits = { maxDepth: 64, maxEntries: 100_000, maxValues: 1_000_000 };

/**
 * A pointer longer than this is cut to its first whole segments (still a pointer, to an ancestor of
 * the spot), so a refusal never echoes megabytes of keys back.
 * @internal Exported for its tests only (test/ingress-edge.redis.test.ts).
 */
export const MAX_POINTER_CHARS = 1024;

/** @internal Part of a signature only tests use (exported with it). */
export interface LimitViolation {
  /** RFC 6901 pointer to the value where the limit was hit, possibly cut (see MAX_POINTER_CHARS). */
  pointer: string;
  detail: string;
}

/**
 * Walks `root` without recursion (an explicit stack of containers, each with its keys and position)
 * and returns the first limit it breaks, or null. Time is bounded by `maxValues`: it stops as soon as
 * a limit is hit, and an array or object over `maxEntries` is refused before its entries are visited.
 * @internal Exported for its tests only (test/ingress-edge.redis.test.ts).
 */
export function findLimitViolation(root: unknown, limits: JsonLimits = DEFAULT_JSON_LIMITS): LimitViolation | null {
  if (typeof root === 'number') return Number.isFinite(root) ? null : cut([], NON_FINITE);
  if (root === null || typeof root !== 'object') return null;
  const containers: object[] = [];
  const keys: (string[] | null)[] = []; // null for arrays
  const positions: number[] = [];
  const lengths: number[] = [];
  const { maxDepth, maxEntries, maxValues } = limits;
  const here = () => pathOf(keys, positions);
  let values = 1;
  let next: object | null = root;
  let nextPath: () => PropertyKey[] = () => [];
  for (;;) {
    if (next !== null) {
      // Open the container found last: its depth, its size.
      if (containers.length + 1 > maxDepth) return cut(nextPath(), `nesting deeper than ${maxDepth} levels`);
      const own = Array.isArray(next) ? null : Object.keys(next);
      const length = own ? own.length : (next as unknown[]).length;
      if (length > maxEntries) {
        return cut(
          nextPath(),
          `${own ? 'object' : 'array'} with ${length} ${own ? 'keys' : 'elements'} (at most ${maxEntries})`,
        );
      }
      containers.push(next);
      keys.push(own);
      positions.push(0);
      lengths.push(length);
      next = null;
      nextPath = here;
    }
    const top = containers.length - 1;
    if (top < 0) return null;
    const container = containers[top]!;
    const own = keys[top]!;
    const length = lengths[top]!;
    let at = positions[top]!;
    // Through the primitives of this container in one loop, up to the next container inside it.
    while (at < length) {
      const child: unknown = own ? (container as Record<string, unknown>)[own[at]!] : (container as unknown[])[at];
      at++;
      if (++values > maxValues) {
        positions[top] = at;
        return cut(here(), `more than ${maxValues} values in the body`);
      }
      if (typeof child === 'object') {
        if (child !== null) {
          next = child;
          break;
        }
      } else if (typeof child === 'number' && !Number.isFinite(child)) {
        positions[top] = at;
        return cut(here(), NON_FINITE);
      }
    }
    positions[top] = at;
    if (next === null) {
      containers.pop();
      keys.pop();
      positions.pop();
      lengths.pop();
    }
  }
}

const NON_FINITE = 'number beyond the range of a double (about ±1.8e308), which no sink could store as sent';

/** The path to the entry each container is at (its position was already advanced past it). */
function pathOf(keys: (string[] | null)[], positions: number[]): PropertyKey[] {
  const path: PropertyKey[] = [];
  for (let i = 0; i < positions.length; i++) {
    const own = keys[i];
    path.push(own ? own[positions[i]! - 1]! : positions[i]! - 1);
  }
  return path;
}

/** The pointer to `path`, cut to whole segments within MAX_POINTER_CHARS (said in the detail). */
function cut(path: readonly PropertyKey[], detail: string): LimitViolation {
  let pointer = '';
  let kept = 0;
  for (const segment of path) {
    const next = jsonPointer([segment]);
    if (pointer.length + next.length > MAX_POINTER_CHARS) break;
    pointer += next;
    kept++;
  }
  if (kept < path.length) detail += ` (the pointer names the first ${kept} of ${path.length} levels)`;
  return { pointer, detail };
}

/** Refuses a parsed body (`jsonBody`, see json-body.ts) that breaks a limit: 400 with a pointer. */
export function jsonLimits(options: Partial<JsonLimits> = {}): MiddlewareHandler {
  const limits: JsonLimits = {
    maxDepth: options.maxDepth ?? DEFAULT_JSON_LIMITS.maxDepth,
    maxEntries: options.maxEntries ?? DEFAULT_JSON_LIMITS.maxEntries,
    maxValues: options.maxValues ?? DEFAULT_JSON_LIMITS.maxValues,
  };
  return async function jsonLimitsMiddleware(c, next) {
    const broken = findLimitViolation(c.get('jsonBody'), limits);
    if (broken) throw new ApiError(400, `request body: ${broken.detail}`, { pointer: broken.pointer });
    await next();
  };
}
