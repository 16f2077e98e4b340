// The user display name is defined once (src/model/call.ts); the archive text, CRM templates and
// notification templates all show the same names for the same users.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { userDisplayName, userDisplayNames, type CallUser } from '../src/model/call.js';
import { renderTranscriptText } from '../src/sinks/archive/render.js';
import { callVars, renderTitle } from '../src/sinks/crm/vars.js';
import { renderText } from '../src/sinks/notify/message.js';
import { templateVars } from '../src/sinks/template-vars.js';
import { sampleCall } from './support/calls.js';

const user = (u: Partial<CallUser>): CallUser => ({
  userId: null,
  accountId: null,
  fullUserId: null,
  firstName: null,
  lastName: null,
  fullName: null,
  ...u,
});

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

test('the archive text, a CRM template and a notification template show the same names', () => {
  const call = { ...sampleCall('names'), users };
  const expected = 'Grace Hopper, Ada, Lovelace, w7';
  assert.match(renderTranscriptText(call), new RegExp(`^Users: ${expected}$`, 'm'));
  assert.equal(
    renderTitle('{{users}}', callVars(call, { defaultRegion: 'DE', archive: { enabled: false } })),
    expected,
  );
  assert.equal(renderText('{{users}}', templateVars(call, { timeZone: 'UTC' })), expected);
});

test('the webhook normalizer builds fullName from the parts when the sender gives none', () => {
  const call = sampleCall('parts', {
    patch: (p) => {
      p.call.users = [
        { userId: 'w1', firstName: 'Ada', lastName: 'Lovelace' },
        { userId: 'w2', lastName: 'Hopper' },
        { userId: 'w3' },
      ];
    },
  });
  assert.deepEqual(
    call.users.map((u) => u.fullName),
    ['Ada Lovelace', 'Hopper', null],
  );
  assert.deepEqual(userDisplayNames(call), ['Ada Lovelace', 'Hopper', 'w3']);
});
