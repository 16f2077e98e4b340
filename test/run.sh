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
#
# The replicated passes end long before the suite (~410 of ~810 s in CI), so a few of the suite's
# slower files (`beside` below: ~300 s, mostly waiting on servers rather than computing) then run
# on that side instead, on a redis-server of their own (TEST_REDIS_URL, a port of that side's range):
# Redis-wide settings a test makes (maxmemory, CLIENT PAUSE) or watches (MONITOR) stay on its side.
set -u
cd "$(dirname "$0")/.."
# The one Redis: the one at TEST_REDIS_URL (127.0.0.1:6379), or one started there for the run.
source test/support/test-redis.sh
ensure_test_redis || exit 1
trap stop_test_redis EXIT
run=(node --import tsx --test --test-concurrency=1 --test-timeout=420000)
beside=(
  test/redis-tls.redis.test.ts
  test/timeline-failover.redis.test.ts
  test/privacy-forget-load.redis.test.ts
  test/retry-after-long.redis.test.ts
  test/recordings.redis.test.ts
  test/crm-hubspot.redis.test.ts
  test/backfill-replay.redis.test.ts
  test/ack-replicas.redis.test.ts
  test/start-truth.redis.test.ts
  test/poller.redis.test.ts
  test/redis-cluster-spread.redis.test.ts
  test/migrate-keys.redis.test.ts
)
suite=()
for file in test/*.redis.test.ts; do
  [[ " ${beside[*]} " == *" $file "* ]] || suite+=("$file")
done
out=$(mktemp)
lane=$(mktemp -d)
trap 'rm -rf "$out" "$lane"; stop_test_redis' EXIT
(
  export TEST_PORT_RANGE=21350-22699
  npm run --silent test:cluster
  clustered=$?
  echo "== npm run test:cluster: exit $clustered (at ${SECONDS} s)"
  npm run --silent test:sentinel
  sentinel=$?
  echo "== npm run test:sentinel: exit $sentinel (at ${SECONDS} s)"
  # The first port from the top of this side's range a redis-server can take (freePort then skips it).
  besides=1
  for port in $(seq 22699 -1 22600); do
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$lane" >"$lane/redis.log" 2>&1 &
    lane_redis=$!
    for _ in $(seq 1 50); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      kill -0 "$lane_redis" 2>/dev/null || break
      sleep 0.1
    done
    # Ours answering, not another server on the port (ours then exits at once: it could not bind).
    sleep 0.2
    if kill -0 "$lane_redis" 2>/dev/null && redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "== ${#beside[@]} files of the suite on a redis-server of their own at 127.0.0.1:$port (at ${SECONDS} s)"
      TEST_REDIS_URL="redis://127.0.0.1:$port" "${run[@]}" "${beside[@]}"
      besides=$?
      kill "$lane_redis"
      wait "$lane_redis" 2>/dev/null
      break
    fi
    kill "$lane_redis" 2>/dev/null
    wait "$lane_redis" 2>/dev/null
  done
  echo "== the suite's files run beside it: exit $besides (at ${SECONDS} s)"
  [ "$clustered" -eq 0 ] && [ "$sentinel" -eq 0 ] && [ "$besides" -eq 0 ]
) >"$out" 2>&1 &
replicated=$!
# The tests that need no Redis in one process (test/unit.ts: a process per file spent ~1.5 s each
# loading tsx and the code), then those that do, a process per file.
ports=(env TEST_PORT_RANGE=20000-21349)
"${ports[@]}" node --import tsx test/unit.ts
unit=$?
"${ports[@]}" "${run[@]}" "${suite[@]}"
suite=$?
[ "$unit" -eq 0 ] || suite=$unit
echo "== the tests without Redis (one process): exit $unit"
echo "== the suite on the one Redis: exit $suite (${SECONDS} s)"
wait "$replicated"
replicas=$?
echo
echo "== npm run test:cluster, then npm run test:sentinel, then ${#beside[@]} files of the suite (ran beside the suite above): exit $replicas (${SECONDS} s since the start of npm test)"
cat "$out"
echo
echo "== the chaos run on the one Redis (npm run test:chaos)"
"${run[@]}" test/chaos/*.test.ts
chaos=$?
echo "== the chaos run: exit $chaos; npm test took ${SECONDS} s"
[ "$suite" -eq 0 ] && [ "$replicas" -eq 0 ] && [ "$chaos" -eq 0 ]
