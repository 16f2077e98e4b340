// What other sinks may read of the archive: the keys of a call's stored recordings (found by the
// archive's own layout, keys.ts) and, where the store can sign, time-limited URLs. A CRM links to a
// recording through this door and never touches the object store or its SDK itself.
import type { CanonicalCall } from '../../model/call.js';
import type { ArchiveAccess } from '../types.js';
import { recordingKeyStem } from './keys.js';
import type { ObjectStore } from './store.js';

/**
 * Access to one archive's objects. The extension of a recording's key comes from its download's
 * content type, known only once the archive stored it, so the key is looked up (`<stem>.` prefix).
 */
export function archiveAccess(store: ObjectStore, prefix: string | undefined): ArchiveAccess {
  const access: ArchiveAccess = {
    async recordingKeys(call: CanonicalCall): Promise<string[]> {
      const keys: string[] = [];
      for (const [index, recording] of call.recordings.entries()) {
        const stem = `${recordingKeyStem(call, recording.type, index, prefix)}.`;
        const found = (await store.keysStartingWith(stem, 10)).find(
          (k) => k.startsWith(stem) && !k.slice(stem.length).includes('/'),
        );
        if (found === undefined) break;
        keys.push(found);
      }
      return keys;
    },
  };
  if (store.presignGet) access.presignGet = store.presignGet.bind(store);
  return access;
}

/**
 * An ArchiveAccess that finds its archive when first used (the worker builds every sink before any
 * job runs); with no archive configured it finds no recordings.
 */
export function lazyArchiveAccess(find: () => ArchiveAccess | undefined): ArchiveAccess {
  return {
    recordingKeys: (call) => find()?.recordingKeys(call) ?? Promise.resolve([]),
    get presignGet() {
      return find()?.presignGet;
    },
  };
}
