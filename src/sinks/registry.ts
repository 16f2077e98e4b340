// Every kind of sink callsync knows, by its `type` in the config file.
import type { SinkType } from './types.js';
import { archiveSinkType } from './archive/index.js';
import { crmSinkTypes } from './crm/index.js';
import { notifySinkTypes } from './notify/index.js';

const all: SinkType<never>[] = [archiveSinkType as SinkType<never>, ...(crmSinkTypes as SinkType<never>[]), ...(notifySinkTypes as SinkType<never>[])];

export const sinkTypes: ReadonlyMap<string, SinkType<unknown>> = new Map(all.map((t) => [t.type, t as SinkType<unknown>]));
