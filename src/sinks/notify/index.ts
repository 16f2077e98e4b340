// Notification sinks: each rule is a sink of type `sms` or `email`; routes choose the calls.
import { defineSinkType, type SinkType } from '../types.js';
import { emailSinkType } from './email.js';
import { smsSinkType } from './sms.js';

export const notifySinkTypes: SinkType[] = [defineSinkType(smsSinkType), defineSinkType(emailSinkType)];
