// The CRM sink types (registered by src/sinks/registry.ts).
import { defineSinkType, type SinkType } from '../types.js';
import { hubspotSinkType } from './hubspot.js';
import { pipedriveSinkType } from './pipedrive.js';
import { webhookSinkType } from './webhook.js';

export const crmSinkTypes: SinkType[] = [
  defineSinkType(hubspotSinkType),
  defineSinkType(pipedriveSinkType),
  defineSinkType(webhookSinkType),
];
