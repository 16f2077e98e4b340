#!/usr/bin/env bash
# `npm test`: every test. Three lanes run side by side (below), sharing no Redis and no key: the
# suite on the one Redis; npm run test:cluster (pipeline, updates, poller, forget and retention,
# chaos on a Redis Cluster it starts on its own loopback ports), then npm run test:sentinel (the
# same on a master with a replica behind a sentinel, likewise its own), then some of the suite's
# files; and more of the suite's files. Then the chaos run on the one Redis (test/chaos) alone: it
# kills and restarts processes against deadlines and must not share the two cores. The other
# lanes' output is printed when they are done; the exit status fails when any part fails.
# (npm run test:single runs the one-Redis part alone.)
#
# The lanes. Three run at once, each in ports of its own (TEST_PORT_RANGE, test/support/redis-server.ts:
# a port one lane probes or binds is never one another lane's killed node is coming back on):
# - the suite: the tests without Redis in one process, then test/*.redis.test.ts on the one Redis;
# - the replicated passes (npm run test:cluster, then npm run test:sentinel), then the files of
#   `beside` on a redis-server of their own;
# - the files of `aside` on a redis-server of their own, from the start.
# The suite alone took ~1,110 s of a 1,435 s CI run (2026-12-07) while the replicated lane idled its
# last ~420 s; with the third lane the three end within a minute of each other (~800 s). The files
# moved out of the suite mostly wait on servers and processes they start rather than compute, so
# the two cores carry three lanes. On a lane's own Redis the
# Redis-wide settings a test makes (maxmemory, CLIENT PAUSE) or watches (MONITOR, a scan for a
# number) stay on its lane.
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
  test/start-truth.redis.test.ts
  test/poller.redis.test.ts
  test/redis-cluster-spread.redis.test.ts
)
aside=(
  test/privacy-forget-faults.redis.test.ts
  test/private-redis-loading.redis.test.ts
  test/startup-failure.redis.test.ts
  test/redis-topologies.redis.test.ts
  test/private-redis-lifecycle.redis.test.ts
  test/private-redis.redis.test.ts
  test/startup-shutdown.redis.test.ts
  test/backfill-replay.redis.test.ts
  test/ack-replicas.redis.test.ts
  test/migrate-keys.redis.test.ts
  test/dotenv.redis.test.ts
  test/cli-process.redis.test.ts
  test/npm-start-parent.redis.test.ts
  test/fresh-clone.redis.test.ts
  test/dashboard-cross-site.redis.test.ts
  test/calls-query-bounds.redis.test.ts
  test/fanout-isolation.redis.test.ts
  test/spool-large.redis.test.ts
)
suite=()
for file in test/*.redis.test.ts; do
  [[ " ${beside[*]} ${aside[*]} " == *" $file "* ]] || suite+=("$file")
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"; stop_test_redis' EXIT

# own_redis <lane> <top port> <file>...: the files on a redis-server of their own, on the first
# port from <top> down that one can take (freePort then skips it); exit status of the run.
own_redis() {
  local lane=$1 top=$2 dir="$tmp/$1" port pid status=1
  shift 2
  mkdir -p "$dir"
  for port in $(seq "$top" -1 $((top - 99))); do
    redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 50); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    # Ours answering, not another server on the port (ours then exits at once: it could not bind).
    sleep 0.2
    if kill -0 "$pid" 2>/dev/null && redis-cli -p "$port" ping >/dev/null 2>&1; then
      echo "== $lane: $# files on a redis-server of their own at 127.0.0.1:$port (at ${SECONDS} s)"
      TEST_REDIS_URL="redis://127.0.0.1:$port" "${run[@]}" "$@"
      status=$?
      kill "$pid"
      wait "$pid" 2>/dev/null
      break
    fi
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  echo "== $lane: exit $status (at ${SECONDS} s)"
  return "$status"
}

(
  export TEST_PORT_RANGE=20900-21799
  npm run --silent test:cluster
  clustered=$?
  echo "== npm run test:cluster: exit $clustered (at ${SECONDS} s)"
  npm run --silent test:sentinel
  sentinel=$?
  echo "== npm run test:sentinel: exit $sentinel (at ${SECONDS} s)"
  own_redis beside 21799 "${beside[@]}"
  besides=$?
  [ "$clustered" -eq 0 ] && [ "$sentinel" -eq 0 ] && [ "$besides" -eq 0 ]
) >"$tmp/replicated.out" 2>&1 &
replicated=$!
(
  export TEST_PORT_RANGE=21800-22699
  own_redis aside 22699 "${aside[@]}"
) >"$tmp/aside.out" 2>&1 &
asides=$!
# The tests that need no Redis in one process (test/unit.ts: a process per file spent ~1.5 s each
# loading tsx and the code), then those that do, a process per file.
ports=(env TEST_PORT_RANGE=20000-20899)
"${ports[@]}" node --import tsx test/unit.ts
unit=$?
"${ports[@]}" "${run[@]}" "${suite[@]}"
suite=$?
[ "$unit" -eq 0 ] || suite=$unit
echo "== the tests without Redis (one process): exit $unit"
echo "== the suite on the one Redis: exit $suite (${SECONDS} s)"
wait "$replicated"
replicas=$?
wait "$asides"
aside_status=$?
echo
echo "== npm run test:cluster, then npm run test:sentinel, then ${#beside[@]} files of the suite (ran beside the suite above): exit $replicas (${SECONDS} s since the start of npm test)"
cat "$tmp/replicated.out"
echo
echo "== ${#aside[@]} files of the suite (ran beside the suite above from its start): exit $aside_status"
cat "$tmp/aside.out"
[ "$aside_status" -eq 0 ] || replicas=$aside_status
echo
echo "== the chaos run on the one Redis (npm run test:chaos)"
"${run[@]}" test/chaos/*.test.ts
chaos=$?
echo "== the chaos run: exit $chaos; npm test took ${SECONDS} s"
[ "$suite" -eq 0 ] && [ "$replicas" -eq 0 ] && [ "$chaos" -eq 0 ]
