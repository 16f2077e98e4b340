// The test servers' ports (test/support/redis-server.ts): test/run.sh runs three lanes side by
// side with a third of the range each, so none can take a port that a node of another, killed
// for a failover, is about to come back on.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { freePort, testPortRange } from './support/redis-server.js';

test('TEST_PORT_RANGE: 20000-22699 by default, low-high when set, a clear error otherwise', () => {
  assert.deepEqual(testPortRange({}), { low: 20_000, high: 22_699 });
  assert.deepEqual(testPortRange({ TEST_PORT_RANGE: ' 21350-22699 ' }), { low: 21_350, high: 22_699 });
  for (const bad of ['21350', '22699-21350', 'a-b', '80-90', '22000-23000'])
    assert.throws(() => testPortRange({ TEST_PORT_RANGE: bad }), /TEST_PORT_RANGE=.*expected low-high/, bad);
});

test('freePort takes its ports from TEST_PORT_RANGE', async () => {
  const saved = process.env.TEST_PORT_RANGE;
  process.env.TEST_PORT_RANGE = '21000-21009';
  try {
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      assert.ok(port >= 21_000 && port <= 21_009, String(port));
    }
  } finally {
    if (saved === undefined) delete process.env.TEST_PORT_RANGE;
    else process.env.TEST_PORT_RANGE = saved;
  }
});

test('test/run.sh gives the lanes that run at once ranges that do not overlap', () => {
  const script = readFileSync(new URL('./run.sh', import.meta.url), 'utf8');
  const ranges = [...script.matchAll(/TEST_PORT_RANGE=(\d+-\d+)/g)].map((m) =>
    testPortRange({ TEST_PORT_RANGE: m[1] }),
  );
  assert.equal(ranges.length, 3, 'one range for the suite, one for the replicated passes, one for the aside lane');
  for (const [i, a] of ranges.entries())
    for (const b of ranges.slice(i + 1))
      assert.ok(a.high < b.low || b.high < a.low, `${JSON.stringify(a)} and ${JSON.stringify(b)} overlap`);
});
