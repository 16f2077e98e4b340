// The user display name is defined once (src/model/call.ts); the archive text, the CRM template
// variables and the notification fields all show the same names for the same users.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { userDisplayName, userDisplayNames, type CallUser } from '../src/model/call.js';
import { renderTranscriptText } from '../src/sinks/archive/render.js';
import { callVars } from '../src/sinks/crm/vars.js';
import { messageFields } from '../src/sinks/notify/message.js';
import { sampleCall } from './support/calls.js';

const user = (u: Partial<CallUser>): CallUser => ({ userId: null, accountId: null, fullUserId: null, firstName: null, lastName: null, fullName: null, ...u });

const users = [
  user({ userId: 'w1', firstName: 'G', lastName: 'H', fullName: 'Grace Hopper' }),
  user({ userId: 'w2', firstName: 'Ada' }),
  user({ userId: 'w3', lastName: 'Lovelace' }),
  user({ userId: 'w7' }),
  user({}),
];

test('fullName, else first and last name, else the user id; a user with none of them is left out', () => {
  assert.deepEqual(users.map(userDisplayName), ['Grace Hopper', 'Ada', 'Lovelace', 'w7', '']);
  assert.deepEqual(userDisplayNames({ users }), ['Grace Hopper', 'Ada', 'Lovelace', 'w7']);
  assert.equal(userDisplayName(user({ userId: 'w9', firstName: 'Alan', lastName: 'Turing' })), 'Alan Turing');
});

test('the archive text, the CRM variables and the notification fields show the same names', () => {
  const call = { ...sampleCall('names'), users };
  const expected = 'Grace Hopper, Ada, Lovelace, w7';
  assert.match(renderTranscriptText(call), new RegExp(`^Users: ${expected}$`, 'm'));
  assert.deepEqual(callVars(call, { defaultRegion: 'DE', archive: { enabled: false } }).users, expected.split(', '));
  assert.equal(messageFields(call, 'UTC').users, expected);
});

test('the webhook normalizer builds fullName from the parts when the sender gives none', () => {
  const call = sampleCall('parts', {
    patch: (p) => {
      p.call.users = [{ userId: 'w1', firstName: 'Ada', lastName: 'Lovelace' }, { userId: 'w2', lastName: 'Hopper' }, { userId: 'w3' }];
    },
  });
  assert.deepEqual(
    call.users.map((u) => u.fullName),
    ['Ada Lovelace', 'Hopper', null],
  );
  assert.deepEqual(userDisplayNames(call), ['Ada Lovelace', 'Hopper', 'w3']);
});
