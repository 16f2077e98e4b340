# The Redis `npm test` runs on (sourced by test/run.sh): the one at TEST_REDIS_URL, by default
# redis://127.0.0.1:6379. On a machine where none runs there — a newcomer's, after `apt install
# redis-server` — one is started on that port for the run and stopped after it, as `npm start`
# starts a private one; before, the suite ran on into minutes of ECONNREFUSED stack traces. With
# TEST_REDIS_URL set to a Redis that does not answer, or no redis-server to start (REDIS_SERVER_BIN,
# else redis-server on PATH), one line says so and `npm test` exits 1.

test_redis_pid=""
test_redis_dir=""

# "PONG", "password" (the Redis asks for one), or "" (nothing answers) at host $1, port $2.
test_redis_answer() {
  local reply
  # In a subshell: a refused connection ends it, not the caller.
  reply=$( (exec 3<>"/dev/tcp/$1/$2" && printf 'PING\r\n' >&3 && read -r -t 2 line <&3 && echo "$line") 2>/dev/null)
  case "$reply" in
    +PONG*) echo PONG ;;
    -NOAUTH* | -WRONGPASS* | -NOPERM*) echo password ;;
  esac
}

ensure_test_redis() {
  local url=${TEST_REDIS_URL:-redis://127.0.0.1:6379}
  local hostport=${url#redis://}
  hostport=${hostport#*@}
  hostport=${hostport%%/*}
  local host=${hostport%:*} port=${hostport##*:}
  [ "$host" = "$hostport" ] && port=6379
  local answer
  answer=$(test_redis_answer "$host" "$port")
  [ "$answer" = PONG ] && return 0
  if [ "$answer" = password ] && [ -z "${TEST_REDIS_URL:-}" ]; then
    echo "npm test: the Redis at $host:$port asks for a password; set TEST_REDIS_URL=redis://:<password>@$host:$port, or stop it and npm test starts one of its own" >&2
    return 1
  fi
  [ "$answer" = password ] && return 0
  if [ -n "${TEST_REDIS_URL:-}" ]; then
    echo "npm test: no Redis answers at TEST_REDIS_URL ($host:$port); start it, or unset TEST_REDIS_URL and npm test starts one on 127.0.0.1:6379" >&2
    return 1
  fi
  local bin=${REDIS_SERVER_BIN:-redis-server}
  if ! command -v "$bin" >/dev/null 2>&1; then
    echo "npm test: no Redis answers at 127.0.0.1:6379 and there is no $bin to start one: install Redis 6.2 or later (apt install redis-server, brew install redis) or set TEST_REDIS_URL; npm run test:unit runs the tests that need none" >&2
    return 1
  fi
  test_redis_dir=$(mktemp -d)
  "$bin" --port 6379 --bind 127.0.0.1 --save "" --appendonly no --dir "$test_redis_dir" >"$test_redis_dir/redis.log" 2>&1 &
  test_redis_pid=$!
  for _ in $(seq 1 100); do
    [ "$(test_redis_answer 127.0.0.1 6379)" = PONG ] && break
    kill -0 "$test_redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! kill -0 "$test_redis_pid" 2>/dev/null || [ "$(test_redis_answer 127.0.0.1 6379)" != PONG ]; then
    echo "npm test: no Redis answers at 127.0.0.1:6379, and $bin did not start there: $(tail -n 1 "$test_redis_dir/redis.log")" >&2
    stop_test_redis
    return 1
  fi
  echo "== no Redis answered at 127.0.0.1:6379: npm test started one there for this run ($bin, pid $test_redis_pid)"
}

stop_test_redis() {
  if [ -n "$test_redis_pid" ]; then
    kill "$test_redis_pid" 2>/dev/null
    wait "$test_redis_pid" 2>/dev/null
    test_redis_pid=""
  fi
  [ -n "$test_redis_dir" ] && rm -rf "$test_redis_dir"
  test_redis_dir=""
}
