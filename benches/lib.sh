# shellcheck shell=bash
# What the benchmark scripts share for the servers they start: starting one and waiting until it
# listens, stopping it, stopping every one when the script ends, reading a /metrics value.
# Sourced, not run, by a script under `set -euo pipefail`:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
#   start_server NAME PORT LOG CMD [ARG...]
#       CMD in the background, its stdout and stderr appended to LOG; its pid in SERVER_PID (CMD's
#       own process: prefixes that exec, such as `env V=1` or `taskset -c 1`, keep it, so
#       `loadgen --pid` reads the server itself). Returns once PORT on 127.0.0.1 accepts a TCP
#       connection: our server binds its ports only once its voices are loaded (from then on its
#       /ready answers 200 until it drains), so a connection is readiness without an HTTP request,
#       and the same test serves the reference servers and a Wyoming port. Returns 1, after
#       saying why and showing LOG's last 20 lines, when PORT is taken before the start, when CMD
#       exits first, or after SERVER_WAIT_S seconds [120, whole seconds] (CMD is then stopped).
#   stop_server PID...
#       SIGTERM (our server drains), up to 5 s to exit, then SIGKILL; reaps it. Empty PIDs are
#       skipped; what it stopped leaves stop_all's list.
#   track_pid PID...
#       adds a background process of the script's own (not a server) to what stop_all stops.
#   stop_all
#       stop_server on every process start_server started or track_pid added and not yet stopped.
#   port_free PORT
#       true when nothing accepts TCP connections on 127.0.0.1:PORT.
#   metric PORT NAME
#       the value of the Prometheus sample NAME (no labels) in the server's /metrics; nothing when
#       it is absent.
#
# Sourcing it sets two traps: EXIT runs stop_all, INT and TERM exit with 130 (a script's background
# jobs ignore Ctrl-C, so without them an interrupted run would leave its servers up). A script with
# more to do at exit sets its own EXIT trap and calls stop_all in it. Messages go to stderr,
# prefixed with the script's name.

BENCH_PIDS=()
BENCH_MAIN_PID=$BASHPID
SERVER_PID=""
SERVER_WAIT_S="${SERVER_WAIT_S:-120}"

_bench_say() { echo "$(basename "$0" .sh): $*" >&2; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

track_pid() { BENCH_PIDS+=("$@"); }

start_server() {
  local name=$1 port=$2 log=$3 why="" i
  shift 3
  SERVER_PID=""
  if ! port_free "$port"; then
    _bench_say "$name: port $port is already in use"
    return 1
  fi
  "$@" >>"$log" 2>&1 &
  SERVER_PID=$!
  track_pid "$SERVER_PID"
  for ((i = 0; i < SERVER_WAIT_S * 10; i++)); do
    port_free "$port" || return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      why="exited during start-up"
      break
    fi
    sleep 0.1
  done
  _bench_say "$name ${why:-did not listen on port $port within $SERVER_WAIT_S s}; the end of its log ($log):"
  tail -n 20 "$log" >&2 || true
  stop_server "$SERVER_PID"
  SERVER_PID=""
  return 1
}

stop_server() {
  local pid p i keep
  for pid in "$@"; do
    if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; fi
  done
  for pid in "$@"; do
    [[ -n "$pid" ]] || continue
    for ((i = 0; i < 50; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -9 "$pid" 2>/dev/null || true; fi
    wait "$pid" 2>/dev/null || true
    keep=()
    for p in "${BENCH_PIDS[@]}"; do
      if [[ "$p" != "$pid" ]]; then keep+=("$p"); fi
    done
    BENCH_PIDS=("${keep[@]}")
  done
}

stop_all() {
  # Only the script itself: a background subshell that a signal reaches before it has reset the
  # traps it inherited would otherwise run this too.
  [[ "$BASHPID" == "$BENCH_MAIN_PID" ]] || return 0
  stop_server "${BENCH_PIDS[@]}"
}

metric() { curl -s "127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

trap stop_all EXIT
trap 'exit 130' INT TERM
