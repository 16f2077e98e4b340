// The Calls page's two ways out of a call (./calls-page.ts): the archived objects of its archive
// sinks, served by the dashboard itself (only keys the call's timeline names as written), and links
// to the CRM records a HubSpot or Pipedrive sink wrote, when the deployment's account is known.
import type { ObjectStore } from '../sinks/archive/store.js';
import type { TimelineEntry } from '../../queues/timeline.js';

/** The archive sinks of the deployment, by sink name; each opens its store when first asked. */
export type ArchiveStores = ReadonlyMap<string, () => Promise<ObjectStore>>;

/** The refs of an archive sink's done entry that name an object the page may open, and its content type. */
const ARCHIVE_REFS: Record<string, string> = {
  json: 'application/json; charset=utf-8',
  vcon: 'application/json; charset=utf-8',
  text: 'text/plain; charset=utf-8',
};

export interface ArchivedObject {
  sink: string;
  key: string;
  contentType: string;
}

/** The objects the call's archive sinks wrote (their done entries' json, text and vcon keys). */
export function archivedObjects(
  entries: readonly TimelineEntry[],
  stores: ArchiveStores | undefined,
): ArchivedObject[] {
  if (!stores) return [];
  const found = new Map<string, ArchivedObject>();
  for (const e of entries) {
    if (e.event !== 'done' || !e.sink || !e.refs || !stores.has(e.sink)) continue;
    for (const [name, key] of Object.entries(e.refs)) {
      const contentType = ARCHIVE_REFS[name];
      if (contentType && key !== '') found.set(`${e.sink}\n${key}`, { sink: e.sink, key, contentType });
    }
  }
  return [...found.values()];
}

/** Accounts in the CRMs' web apps (HUBSPOT_PORTAL_ID, PIPEDRIVE_COMPANY_DOMAIN). */
export interface CrmLinkSettings {
  hubspotPortalId?: string;
  pipedriveCompanyDomain?: string;
}

/**
 * The web app's page of a CRM record a sink reported (its ref name and id), or null.
 * HubSpot: record pages are app.hubspot.com/contacts/<portal id>/record/<object type id>/<record id>,
 * with the object type ids of HubSpot's CRM object docs (0-1 contacts, 0-48 calls). Pipedrive: the
 * company's own host, <domain>.pipedrive.com/person/<id> and /deal/<id>. The docs search found no page
 * stating these shapes outright (it found the calls API, /crm/v3/objects/calls, and Pipedrive's
 * company-domain setting), so they are the shapes both apps show in the address bar. A Pipedrive
 * activity or call log has no page of its own: its id stays text.
 */
export function crmRecordUrl(ref: string, id: string, settings: CrmLinkSettings | undefined): string | null {
  if (!settings || !/^\d+$/.test(id)) return null;
  const portal = settings.hubspotPortalId;
  const domain = settings.pipedriveCompanyDomain;
  if (portal && ref === 'hubspotCallId') return `https://app.hubspot.com/contacts/${portal}/record/0-48/${id}`;
  if (portal && ref === 'hubspotContactId') return `https://app.hubspot.com/contacts/${portal}/record/0-1/${id}`;
  if (domain && ref === 'pipedrivePersonId') return `https://${domain}.pipedrive.com/person/${id}`;
  if (domain && ref === 'pipedriveDealId') return `https://${domain}.pipedrive.com/deal/${id}`;
  return null;
}
