// The region national numbers are read in (`0151…` → `+49151…`): a sink's `defaultRegion`, else
// PHONE_DEFAULT_REGION, else DE. Read by the CRM sinks and by `callsync opt-out`.
import { z } from 'zod';
import type { CountryCode } from 'libphonenumber-js';
import type { EnvShape } from '../env-values.js';
import { phoneLib } from '../model/libphonenumber.js';

const DEFAULT_REGION: CountryCode = 'DE';

const REGION_HINT = 'an ISO 3166 country code libphonenumber knows, e.g. DE';

/** A region option in the config file (`defaultRegion: de` → `DE`). */
export const regionSchema = z
  .string()
  .transform((v) => v.trim().toUpperCase())
  .refine((v) => phoneLib().isSupportedCountry(v), { message: `expected ${REGION_HINT}` })
  .transform((v) => v as CountryCode);

/** The environment variables of this file. */
export const regionEnv = {
  /** Region of national numbers (CRM sinks without `defaultRegion`, `callsync opt-out`). Default DE. */
  PHONE_DEFAULT_REGION: z
    .string()
    .optional()
    .transform((v, ctx): CountryCode | undefined => {
      if (v === undefined || v.trim() === '') return undefined;
      const s = v.trim().toUpperCase();
      if (!phoneLib().isSupportedCountry(s)) {
        ctx.addIssue({ code: 'custom', message: `"${v.trim()}" — expected ${REGION_HINT}` });
        return z.NEVER;
      }
      return s as CountryCode;
    }),
} satisfies EnvShape;

/** The default region from the options, else PHONE_DEFAULT_REGION (parsed by its schema above), else DE. */
export function resolveRegion(option: CountryCode | undefined, fromEnv: CountryCode | undefined): CountryCode {
  return option ?? fromEnv ?? DEFAULT_REGION;
}
