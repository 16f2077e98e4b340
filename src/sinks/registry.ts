// Every kind of sink callsync knows, by its `type` in the config file, and the environment
// variables they read (composed into the one environment schema by src/config/env.ts).
import { mergeEnvShapes, type EnvShape } from '../env-values.js';
import { defineSinkType, type SinkType } from './types.js';
import { archiveSinkType } from './archive/index.js';
import { crmSinkTypes } from './crm/index.js';
import { notifySinkTypes } from './notify/index.js';
import { regionEnv } from './region.js';
import { privacyEnv } from './notify/ledger.js';

const all: SinkType[] = [defineSinkType(archiveSinkType), ...crmSinkTypes, ...notifySinkTypes];

export const sinkTypes: ReadonlyMap<string, SinkType> = new Map(all.map((t) => [t.type, t]));

/**
 * Every variable a sink type reads (a variable several types read is declared once, by the file
 * that owns it), plus PHONE_DEFAULT_REGION, which `callsync opt-out` reads too, and PRIVACY_HMAC_SECRET
 * (the privacy key: the notification sinks, the timeline's number index, `callsync forget`).
 */
export const sinkEnv: EnvShape = mergeEnvShapes([regionEnv, privacyEnv, ...all.map((t) => t.env ?? {})]);
