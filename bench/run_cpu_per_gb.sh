#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# CPU seconds per GB all-reduced on loopback, of the ranks (the bench
# process tree) and of tributaryd, at the margin: each round runs
# `tributary bench` twice against one daemon, with N1 and N2 timed
# iterations, and divides the difference in CPU by the difference in bytes
# (size x ranks x (N2 - N1)), so start-up, JOIN and the bench's own buffer
# fills cancel out. Rounds alternate between the settings given; medians.
#
# Usage: bench/run_cpu_per_gb.sh [BUILD_DIR] [SETTING...]
#   a SETTING is a quoted list of VAR=value for the ranks, e.g.
#   "TRIBUTARY_PAYLOAD_MAC=0"; "-" is the defaults. Default: "-".
# Environment: RANKS (2), SIZE (64M), N1 (5), N2 (25), ROUNDS (5).
# Loopback only; stops only the daemons it started.
set -u -o pipefail
BUILD=${1:-build}
shift || true
SETTINGS=("$@")
((${#SETTINGS[@]})) || SETTINGS=("-")
RANKS=${RANKS:-2}
SIZE=${SIZE:-64M}
N1=${N1:-5}
N2=${N2:-25}
ROUNDS=${ROUNDS:-5}
source "$(dirname "${BASH_SOURCE[0]}")/daemon_lib.sh"
bench_binaries run_cpu_per_gb "$BUILD"
work=$(mktemp -d /tmp/tributary-cpu.XXXXXX)
cleanup() { bench_daemon_stop; rm -rf "$work"; }
trap cleanup EXIT INT TERM

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2> /dev/null || echo 0; }
hz=$(getconf CLK_TCK)
bytes=$(( $(numfmt --from=iec "$SIZE") * RANKS * (N2 - N1) ))

# run SETTING ITERS -> "ranks_cpu_s daemon_cpu_s algbw" (the daemon: $pid)
run() {
  local setting=$1 iters=$2 d0 d1
  local -a envs=()
  [[ $setting != - ]] && read -r -a envs <<< "$setting"
  d0=$(ticks "$BENCH_DAEMON_PID")
  (
    env "${envs[@]}" "$TRIB" bench --in-place 0 --node-level off --daemon "$BENCH_DAEMON_ADDR" \
      --ranks "$RANKS" -b "$SIZE" -e "$SIZE" -n "$iters" -w 1 -c 0 > "$work/out" 2>&1
    rc=$?
    times > "$work/times"
    exit $rc
  ) || { echo "run_cpu_per_gb: bench failed ($setting):" >&2; tail -5 "$work/out" >&2; exit 1; }
  d1=$(ticks "$BENCH_DAEMON_PID")
  local host_s
  host_s=$(bench_children_cpu_s "$work/times")
  echo "$host_s $(awk -v a="$d0" -v b="$d1" -v hz="$hz" 'BEGIN {print (b - a) / hz}') \
$(awk '/^ +[0-9]/ {print $7}' "$work/out")"
}

for round in $(seq "$ROUNDS"); do
  for i in "${!SETTINGS[@]}"; do
    bench_daemon_start "$work/daemon.out" "$work/daemon.out" "$DAEMON" --listen-address 127.0.0.1 \
      --port 0 || exit 1
    read -r r1 d1 a1 <<< "$(run "${SETTINGS[$i]}" "$N1")" || exit 1
    read -r r2 d2 a2 <<< "$(run "${SETTINGS[$i]}" "$N2")" || exit 1
    bench_daemon_stop
    awk -v r1="$r1" -v r2="$r2" -v d1="$d1" -v d2="$d2" -v b="$bytes" -v a="$a2" \
      'BEGIN {printf "%s %s %s\n", (r2 - r1) / (b / 1e9), (d2 - d1) / (b / 1e9), a}' >> "$work/s$i"
    echo "# round $round, ${SETTINGS[$i]}: $(tail -1 "$work/s$i")" >&2
  done
done

median() { sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'; }
echo
echo "CPU s per GB all-reduced, marginal ($RANKS ranks, $SIZE, $N2 - $N1 iterations," \
     "median of $ROUNDS rounds; $(nproc) CPUs)"
echo
echo "| setting | ranks | daemon | algbw GB/s |"
echo "|---|--:|--:|--:|"
for i in "${!SETTINGS[@]}"; do
  echo "| ${SETTINGS[$i]} | $(awk '{print $1}' "$work/s$i" | median) |" \
       "$(awk '{print $2}' "$work/s$i" | median) | $(awk '{print $3}' "$work/s$i" | median) |"
done
