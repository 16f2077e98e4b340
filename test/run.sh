#!/usr/bin/env bash
# `npm test`: every test. The suite on the one Redis (test/*.test.ts) and the cluster pass
# (npm run test:cluster: pipeline, updates, poller and chaos on a Redis Cluster it starts on its own
# loopback ports) run side by side — they share no Redis and no key — then the chaos run on the
# one Redis (test/chaos) alone: it kills and restarts processes against deadlines and must not
# share the two cores. The cluster pass's output is printed when it is done; the exit status fails
# when any part fails. (npm run test:single runs the one-Redis part alone.)
set -u
cd "$(dirname "$0")/.."
run=(node --import tsx --test --test-concurrency=1 --test-timeout=420000)
out=$(mktemp)
trap 'rm -f "$out"' EXIT
npm run --silent test:cluster >"$out" 2>&1 &
cluster=$!
"${run[@]}" test/*.test.ts
suite=$?
wait "$cluster"
clustered=$?
echo
echo "== npm run test:cluster (ran beside the suite above): exit $clustered"
cat "$out"
echo
echo "== the chaos run on the one Redis (npm run test:chaos)"
"${run[@]}" test/chaos/*.test.ts
chaos=$?
[ "$suite" -eq 0 ] && [ "$clustered" -eq 0 ] && [ "$chaos" -eq 0 ]
