// The CRM sinks' memory of a number they just created a contact or person for
// (src/sinks/crm/number-memory.ts): named by its keyed hash; the plain hash an earlier version
// wrote (a TTL of a day) is read only while such names can still exist, not on every miss for ever.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { configuredKey } from '../queues/privacy-key.js';
import { callHash } from '../src/model/call.js';
import { EARLIER_NAMES_FOR_MS, numberMemoryNames } from '../src/sinks/crm/number-memory.js';

const key = configuredKey('a privacy key for this test');

test('a number is named by its keyed hash; the plain one is read during the first day only', async () => {
  const now = Date.now();
  const fresh = await numberMemoryNames(key, '+4917012345678', now);
  assert.match(fresh.current, /^h1\./);
  assert.doesNotMatch(fresh.current, /4917012345678/);
  assert.equal(fresh.earlier, callHash('+4917012345678'), 'just after the start: the earlier name is still read');

  const dayLater = await numberMemoryNames(key, '+4917012345678', now + EARLIER_NAMES_FOR_MS + 1000);
  assert.equal(dayLater.current, fresh.current);
  assert.equal(dayLater.earlier, null, 'past the earlier names’ lifetime: no GET for them');
});

test('without a privacy key (tools without Redis) the plain hash is the only name', async () => {
  assert.deepEqual(await numberMemoryNames(undefined, '+4917012345678'), {
    current: callHash('+4917012345678'),
    earlier: null,
  });
});
