#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Small all-reduce latency against its floor, on loopback: the p50/p99 time
# of an 8-byte fp32 all-reduce with 2 ranks through tributaryd, next to the
# p50/p99 round trip of a UDP datagram of the same size (8 bytes + 64-byte
# header) between two processes. Interleaved (T U T U ...), medians over
# ROUNDS, ratio tributary/UDP. Builds nothing.
#
# Usage: bench/run_latency.sh [BUILD_DIR]
# Environment: ROUNDS (5), ITERS (20000), WARMUP (1000), RANKS (2),
# TRIB_ARGS (extra `tributary bench` flags), UDP_ARGS (e.g. "--busy-poll"),
# DAEMON_ARGS (extra tributaryd flags, e.g. "--busy-poll-us 200"),
# PIN (0): 1 runs tributaryd pinned to the last CPU and the ranks to the
# others (taskset), so that with RANKS=1 on a 2-CPU machine each of the two
# processes has a core, like the two of the ping-pong (which may use any).
set -u -o pipefail

BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-20000}
WARMUP=${WARMUP:-1000}
RANKS=${RANKS:-2}
TRIB_ARGS=${TRIB_ARGS:-}
UDP_ARGS=${UDP_ARGS:-}
DAEMON_ARGS=${DAEMON_ARGS:-}
PIN=${PIN:-0}
TRIB="$BUILD/tools/tributary/tributary"
UDP="$BUILD/bench/udp_pingpong"
DAEMON="$BUILD/switch_agent/tributaryd"
for b in "$TRIB" "$UDP" "$DAEMON"; do
  if [[ ! -x "$b" ]]; then
    echo "run_latency: $b not found; build tributary_cli and udp_pingpong in $BUILD" >&2
    exit 2
  fi
done

RESULTS=$(mktemp)
DAEMON_OUT=$(mktemp)
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
trap 'bench_daemon_stop; rm -f "$RESULTS" "$DAEMON_OUT"' EXIT

# Where the ranks run and how they reach a daemon: with PIN=1 a daemon of
# our own on the last CPU, the ranks on the others; else `tributary bench`
# starts its own (with DAEMON_ARGS).
RANK_PIN=()
DAEMON_FLAGS=()
if [[ $PIN == 1 ]]; then
  command -v taskset > /dev/null || { echo "run_latency: PIN=1 needs taskset (util-linux)" >&2; exit 2; }
  last=$(($(nproc) - 1))
  ((last >= 1)) || { echo "run_latency: PIN=1 needs 2 CPUs or more" >&2; exit 2; }
  # shellcheck disable=SC2086
  bench_daemon_start "$DAEMON_OUT" "$DAEMON_OUT" taskset -c "$last" "$DAEMON" \
    --listen-address 127.0.0.1 --port 0 $DAEMON_ARGS || exit 1
  RANK_PIN=(taskset -c "0-$((last - 1))")
  DAEMON_FLAGS=(--daemon "$BENCH_DAEMON_ADDR")
elif [[ -n $DAEMON_ARGS ]]; then
  DAEMON_FLAGS=(--daemon-args "$DAEMON_ARGS")
fi

# Both programs print "# latency N B: p50 X us p99 Y us ...".
parse() {  # name -> "name p50 p99" or "name FAIL FAIL"
  awk -v name="$1" '/^# latency / { for (i = 1; i <= NF; ++i) { if ($i == "p50") p50 = $(i + 1);
    if ($i == "p99") p99 = $(i + 1) } } END { if (p50 == "") print name, "FAIL", "FAIL";
    else print name, p50, p99 }'
}

run_one() {  # name command...
  local name=$1
  shift
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "# $name failed (exit $rc):" >&2
    printf '%s\n' "$out" | tail -5 | sed 's/^/#   /' >&2
    echo "$name FAIL FAIL" >> "$RESULTS"
    return
  fi
  printf '%s\n' "$out" | parse "$name" | tee -a "$RESULTS" | sed "s/^/# round $round: /" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  run_one tributary timeout 600 "${RANK_PIN[@]}" "$TRIB" bench --in-place 0 --node-level off \
    "${DAEMON_FLAGS[@]}" --ranks "$RANKS" -b 8 -e 8 -n "$ITERS" -w "$WARMUP" --latency $TRIB_ARGS
  run_one udp timeout 600 "$UDP" --size 72 -n "$ITERS" -w "$WARMUP" $UDP_ARGS
done

median() {  # name column(2=p50, 3=p99)
  awk -v name="$1" -v c="$2" '$1 == name { print $c }' "$RESULTS" |
    { vals=$(cat); if grep -q FAIL <<< "$vals"; then echo FAIL; else
        sort -g <<< "$vals" | awk '{ v[NR] = $1 } END {
          if (NR % 2) printf "%.2f\n", v[(NR + 1) / 2];
          else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; fi; }
}
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'
}

tp50=$(median tributary 2); tp99=$(median tributary 3)
up50=$(median udp 2); up99=$(median udp 3)
echo
echo "8-byte fp32 all-reduce ($RANKS ranks, tributaryd on 127.0.0.1${DAEMON_ARGS:+ with $DAEMON_ARGS}" \
     "$([[ $PIN == 1 ]] && echo "pinned to CPU $last, ranks to the others"))" \
     "vs UDP round trip of 72 bytes; median of $ROUNDS interleaved rounds of $ITERS iterations;" \
     "$(nproc) CPUs, $(uname -r)"
echo
echo "| | p50 (us) | p99 (us) |"
echo "|---|---:|---:|"
echo "| tributary all-reduce | $tp50 | $tp99 |"
echo "| UDP ping-pong (floor) | $up50 | $up99 |"
echo "| ratio | $(ratio "$tp50" "$up50") | $(ratio "$tp99" "$up99") |"
