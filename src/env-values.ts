// zod schemas of environment values (a string or unset) and the shape type every part of callsync
// declares its variables with: the core settings (src/config/env.ts), the platform API client
// (src/telephony/client.ts) and each sink type (its `env`). src/config/env.ts composes them into
// the one environment schema. Imports nothing of callsync.
import { z } from 'zod';

/** Variable name -> schema of its value (`undefined` when unset). */
export type EnvShape = Record<string, z.ZodType<unknown, string | undefined>>;

/** The parsed values of a shape's variables (all optional: a part reads only what it declared). */
export type EnvOf<S extends EnvShape> = { readonly [K in keyof S]?: z.output<S[K]> };

const TRUE = ['1', 'true', 'yes', 'on'];
const FALSE = ['0', 'false', 'no', 'off'];

/** A trimmed string, or undefined when unset or blank. */
export const envString = z
  .string()
  .optional()
  .transform((v) => (v === undefined || v.trim() === '' ? undefined : v.trim()));

/** A trimmed string with a default for unset or blank. */
export const envStringOr = (def: string) =>
  z
    .string()
    .optional()
    .transform((v) => (v === undefined || v.trim() === '' ? def : v.trim()));

/** Comma-separated values, trimmed, empty ones dropped. Unset: `[]`. */
export const envList = z
  .string()
  .optional()
  .transform((v) =>
    (v ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s.length > 0),
  );

/** The value as a whole number written in decimal digits, else NaN (`Number` reads `0x10` as 16, `1e3` as 1000). */
export const decimal = (v: string): number => (/^\d+$/.test(v.trim()) ? Number(v) : NaN);

/** A whole number >= `min` (and <= `max`); `def` when unset or blank. */
export const envInt = (def: number, min = 0, max = Number.MAX_SAFE_INTEGER) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => {
      if (v === undefined || v.trim() === '') return def;
      const n = decimal(v);
      if (!Number.isInteger(n) || n < min || n > max) {
        ctx.addIssue({
          code: 'custom',
          message: `expected a whole number ${max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`}, got "${v}"`,
        });
        return z.NEVER;
      }
      return n;
    });

/** A whole number >= `min`, or undefined when unset or blank (the default is decided by its reader). */
export const envOptionalInt = (min = 0) =>
  z
    .string()
    .optional()
    .transform((v, ctx): number | undefined => {
      if (v === undefined || v.trim() === '') return undefined;
      const n = decimal(v);
      if (!Number.isInteger(n) || n < min) {
        ctx.addIssue({ code: 'custom', message: `expected a whole number >= ${min}, got "${v}"` });
        return z.NEVER;
      }
      return n;
    });

function readBool(v: string, ctx: z.RefinementCtx): boolean {
  const s = v.trim().toLowerCase();
  if (TRUE.includes(s)) return true;
  if (FALSE.includes(s)) return false;
  ctx.addIssue({ code: 'custom', message: `expected true or false, got "${v}"` });
  return z.NEVER;
}

/** true / false (also 1/0, yes/no, on/off); `def` when unset or blank. */
export const envBool = (def: boolean) =>
  z
    .string()
    .optional()
    .transform((v, ctx) => (v === undefined || v.trim() === '' ? def : readBool(v, ctx)));

/** true / false, or undefined when unset or blank (the default is decided by its reader). */
export const envOptionalBool = z
  .string()
  .optional()
  .transform((v, ctx): boolean | undefined => (v === undefined || v.trim() === '' ? undefined : readBool(v, ctx)));

/**
 * A URL as an error may show it: without user info, query or fragment, which may hold credentials
 * (`https://user:password@…`, HubSpot's old `?hapikey=…`).
 */
export function shownUrl(text: string): string {
  const head = text.split(/[?#]/, 1)[0] ?? '';
  const cut = head.length < text.length ? `${head}?…` : head;
  return cut.replace(/^([a-z][a-z0-9+.-]*:\/\/)?[^/@]*@/i, (_m, scheme: string | undefined) => `${scheme ?? ''}***@`);
}

/** An http(s) URL, or undefined when unset or blank. */
export const envUrl = z
  .string()
  .optional()
  .transform((v, ctx): string | undefined => {
    if (v === undefined || v.trim() === '') return undefined;
    const s = v.trim();
    const protocol = URL.canParse(s) ? new URL(s).protocol : '';
    if (protocol !== 'http:' && protocol !== 'https:') {
      ctx.addIssue({
        code: 'custom',
        message: `expected an http(s) URL such as https://api.example.com, got "${shownUrl(s)}"`,
      });
      return z.NEVER;
    }
    return s;
  });

/** One of `values` (case as given); `def` (or undefined) when unset or blank. */
export function envEnum<const T extends readonly [string, ...string[]]>(
  values: T,
): z.ZodType<T[number] | undefined, string | undefined>;
export function envEnum<const T extends readonly [string, ...string[]]>(
  values: T,
  def: T[number],
): z.ZodType<T[number], string | undefined>;
export function envEnum<const T extends readonly [string, ...string[]]>(
  values: T,
  def?: T[number],
): z.ZodType<T[number] | undefined, string | undefined> {
  return z
    .string()
    .optional()
    .transform((v, ctx): T[number] | undefined => {
      if (v === undefined || v.trim() === '') return def;
      const s = v.trim();
      if (!(values as readonly string[]).includes(s)) {
        ctx.addIssue({ code: 'custom', message: `"${s}" — use ${oneOf(values)}` });
        return z.NEVER;
      }
      return s as T[number];
    });
}

/** `a`, `a or b`, `a, b or c`. */
export function oneOf(values: readonly unknown[]): string {
  const names = values.map(String);
  return names.length <= 1 ? (names[0] ?? '') : `${names.slice(0, -1).join(', ')} or ${names[names.length - 1]}`;
}

/**
 * Merges shapes; a variable two parts read must be declared by the same schema object (import it
 * from the part that owns it), so its value cannot mean two things.
 */
export function mergeEnvShapes(shapes: EnvShape[]): EnvShape {
  const merged: EnvShape = {};
  for (const shape of shapes) {
    for (const [name, schema] of Object.entries(shape)) {
      if (merged[name] !== undefined && merged[name] !== schema)
        throw new Error(`environment variable ${name} is declared twice with different schemas`);
      merged[name] = schema;
    }
  }
  return merged;
}
