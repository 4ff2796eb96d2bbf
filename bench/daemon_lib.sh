#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A tributaryd for a benchmark script on loopback: started, its address
# learned from its "tributaryd listening on" line, and stopped by pid (only
# the daemon the script started); and the CPU time of a benchmark run in a
# subshell. Sourced by bench/run_transports.sh, bench/run_udp_daemon.sh,
# bench/run_latency.sh and bench/run_cpu_per_gb.sh.
#   bench_daemon_start OUT ERR CMD...  runs CMD (tributaryd and its flags,
#                        `env VAR=... tributaryd ...` for variables) with
#                        stdout to OUT and stderr to ERR (may be the same
#                        file); sets BENCH_DAEMON_PID and BENCH_DAEMON_ADDR;
#                        returns 1 (printing ERR) if no listening line came
#                        within 5 s
#   bench_daemon_stop    TERM and wait; a no-op when none runs
#   bench_binaries NAME BUILD  sets TRIB and DAEMON (the tributary CLI and
#                        tributaryd of BUILD); exits 2 naming NAME and the
#                        missing binary when either is not built
#   bench_children_cpu_s FILE  the children's user + system seconds from a
#                        subshell's `times` output saved in FILE (line 2,
#                        e.g. "0m1.234s 0m0.567s"): the CPU of what it ran

BENCH_DAEMON_PID=""
BENCH_DAEMON_ADDR=""

bench_daemon_start() {
  local out=$1 err=$2 i
  shift 2
  if [[ $out == "$err" ]]; then "$@" > "$out" 2>&1 & else "$@" > "$out" 2> "$err" & fi
  BENCH_DAEMON_PID=$!
  BENCH_DAEMON_ADDR=""
  for ((i = 0; i < 100; ++i)); do
    BENCH_DAEMON_ADDR=$(sed -n 's/^tributaryd listening on \(.*\)$/\1/p' "$out" | head -1)
    [[ -n $BENCH_DAEMON_ADDR ]] && return 0
    sleep 0.05
  done
  echo "tributaryd did not start:" >&2
  cat "$err" >&2
  bench_daemon_stop
  return 1
}

bench_daemon_stop() {
  if [[ -n $BENCH_DAEMON_PID ]]; then
    kill "$BENCH_DAEMON_PID" 2> /dev/null
    wait "$BENCH_DAEMON_PID" 2> /dev/null
    BENCH_DAEMON_PID=""
  fi
}

bench_binaries() {
  TRIB="$2/tools/tributary/tributary"
  DAEMON="$2/switch_agent/tributaryd"
  local b
  for b in "$TRIB" "$DAEMON"; do
    [[ -x "$b" ]] || { echo "$1: $b not built" >&2; exit 2; }
  done
}

bench_children_cpu_s() {
  sed -n 2p "$1" | awk '{
      s = 0
      for (i = 1; i <= 2; ++i) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] }
      print s }'
}
