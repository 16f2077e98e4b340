// libphonenumber-js, loaded on first use. Its ~130 modules and metadata cost ~12 MB of memory that a
// process never parsing a number saves (the ingress; a worker without CRM or SMS sinks). Loaded
// synchronously (its CommonJS build), because zod refinements of the config call it.
import { createRequire } from 'node:module';

type Min = typeof import('libphonenumber-js');
type Max = typeof import('libphonenumber-js/max');

const load = createRequire(import.meta.url);
let min: Min | undefined;
let max: Max | undefined;

/** `libphonenumber-js` (the default, "min" metadata). */
export const phoneLib = (): Min => (min ??= load('libphonenumber-js') as Min);
/** `libphonenumber-js/max` (full metadata: number types such as MOBILE). */
export const phoneLibMax = (): Max => (max ??= load('libphonenumber-js/max') as Max);
