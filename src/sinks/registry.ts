// Every kind of sink callsync knows, by its `type` in the config file.
import type { SinkType } from './types.js';
import { archiveSinkType } from './archive/index.js';

const all: SinkType<never>[] = [archiveSinkType as SinkType<never>];

export const sinkTypes: ReadonlyMap<string, SinkType<unknown>> = new Map(all.map((t) => [t.type, t as SinkType<unknown>]));
