// A skip's free text sorted into one of the bounded skip reasons (the metric label `reason`, the
// timeline entry's `skip`): several reasons in one text are classed by the first of them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { skipReason } from '../queues/timeline.js';

test('several skip reasons in one text: classed by the first one in it', () => {
  assert.equal(skipReason('anonymous caller; +49151****678: opted out'), 'anonymous');
  assert.equal(skipReason('+49151****678: opted out; anonymous caller'), 'opt-out');
  assert.equal(skipReason('empty message; quiet hours until 08:00'), 'empty-message');
  assert.equal(skipReason('quiet hours until 08:00; empty message'), 'quiet-hours');
  assert.equal(skipReason('nothing we know'), 'other');
  assert.equal(skipReason(undefined), 'other');
});
