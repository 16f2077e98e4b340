#!/usr/bin/env bash
# `npm test`: every test. The suite on the one Redis (test/*.test.ts) and the replicated passes —
# npm run test:cluster (pipeline, updates, poller, forget and retention, chaos on a Redis Cluster it starts on its own
# loopback ports), then npm run test:sentinel (the same on a master with a replica behind a
# sentinel, likewise its own) — run side by side: they share no Redis and no key. Then the chaos
# run on the one Redis (test/chaos) alone: it kills and restarts processes against deadlines and
# must not share the two cores. The replicated passes' output is printed when they are done; the
# exit status fails when any part fails. (npm run test:single runs the one-Redis part alone.)
# The two sides take their private servers' ports from halves of the test range
# (TEST_PORT_RANGE, test/support/redis-server.ts): a port one side probes or binds is never one
# the other side's killed node is coming back on.
set -u
cd "$(dirname "$0")/.."
run=(node --import tsx --test --test-concurrency=1 --test-timeout=420000)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
(
  export TEST_PORT_RANGE=21350-22699
  npm run --silent test:cluster
  clustered=$?
  echo "== npm run test:cluster: exit $clustered (at ${SECONDS} s)"
  npm run --silent test:sentinel
  sentinel=$?
  echo "== npm run test:sentinel: exit $sentinel (at ${SECONDS} s)"
  [ "$clustered" -eq 0 ] && [ "$sentinel" -eq 0 ]
) >"$out" 2>&1 &
replicated=$!
# The tests that need no Redis in one process (test/unit.ts: a process per file spent ~1.5 s each
# loading tsx and the code), then those that do, a process per file.
ports=(env TEST_PORT_RANGE=20000-21349)
"${ports[@]}" node --import tsx test/unit.ts
unit=$?
"${ports[@]}" "${run[@]}" test/*.redis.test.ts
suite=$?
[ "$unit" -eq 0 ] || suite=$unit
echo "== the tests without Redis (one process): exit $unit"
echo "== the suite on the one Redis: exit $suite (${SECONDS} s)"
wait "$replicated"
replicas=$?
echo
echo "== npm run test:cluster, then npm run test:sentinel (ran beside the suite above): exit $replicas (${SECONDS} s since the start of npm test)"
cat "$out"
echo
echo "== the chaos run on the one Redis (npm run test:chaos)"
"${run[@]}" test/chaos/*.test.ts
chaos=$?
echo "== the chaos run: exit $chaos; npm test took ${SECONDS} s"
[ "$suite" -eq 0 ] && [ "$replicas" -eq 0 ] && [ "$chaos" -eq 0 ]
