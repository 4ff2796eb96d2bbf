#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Throughput of a running job while hostile traffic hits the same tributaryd:
# no flood vs garbage, wrong-key contributions for the job's id, random job
# ids, JOINs from fresh source ports, "tenant": another, legitimate job
# on the same daemon streaming 64 MiB all-reduces through its own slots as
# fast as it can (tenancy: one job's load must not starve another), and
# "greedy": the same with a misbehaving job's settings, a 1024-fragment
# window of 64-byte payloads (issue #12), and "hostile": greedy with its
# congestion control off (TRIBUTARY_CONGESTION_TARGET_US=0: a job that
# ignores queues, as a modified library would). Interleaved rounds (none, garbage,
# wrong-key, unknown, join, tenant, greedy, ...), median algbw per mode and
# its ratio to no flood; every run checks its results (-c 1) and the
# daemon's counters (drops by reason, peers) are printed at the end.
# Loopback only.
# Usage: bench/run_flood.sh [BUILD_DIR]   Environment: ROUNDS (3), SIZE (16M), RANKS (4),
#   MODES ("none garbage wrong-key unknown join tenant greedy hostile": a subset, "none"
#   first),
#   DAEMON_ARGS (more tributaryd flags, e.g. "--fair-queue-packets 0" for arrival order)
set -u -o pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-16M}
RANKS=${RANKS:-4}
TRIB="$BUILD/tools/tributary/tributary"
FLOOD="$BUILD/bench/udp_flood"
DAEMON="$BUILD/switch_agent/tributaryd"
work=$(mktemp -d /tmp/tributary-flood.XXXXXX)
daemon_pid=""
cleanup() {
  [[ -n "$daemon_pid" ]] && kill "$daemon_pid" 2> /dev/null && wait "$daemon_pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# shellcheck disable=SC2086  # DAEMON_ARGS: words on purpose
"$DAEMON" --listen-address 127.0.0.1 --port 0 ${DAEMON_ARGS:-} > "$work/daemon.out" \
  2> "$work/daemon.err" &
daemon_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/daemon.out" && break; sleep 0.05; done
addr=$(sed -n 's/^tributaryd listening on //p' "$work/daemon.out")
[[ -n "$addr" ]] || { echo "run_flood: daemon did not start" >&2; exit 2; }

read -r -a modes <<< "${MODES:-none garbage wrong-key unknown join tenant greedy hostile}"
[[ ${modes[0]} == none ]] || { echo "run_flood: MODES must start with none (the reference)" >&2; exit 2; }
declare -A results ratios
round_base=1
for round in $(seq "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    job=$((RANDOM * 32768 + RANDOM + 1))
    # The bench starts first: its ranks create the job in their first
    # milliseconds, and the flood is aimed at a job that exists. (A JOIN
    # with a guessed key that arrives before any rank's would create the job
    # with that key: with first-contact job creation, admission belongs to
    # the manager; see docs/RELIABILITY.md.)
    "$TRIB" bench --in-place 0 --node-level off --daemon "$addr" --job-id "$job" --ranks "$RANKS" -b "$SIZE" -e "$SIZE" \
      -n 40 -w 5 -c 1 > "$work/bench.out" 2>&1 &
    bench_pid=$!
    flood_pid=""
    if [[ "$mode" == tenant || "$mode" == greedy || "$mode" == hostile ]]; then
      # The other job: its own id and key, as many ranks, 64 MiB rounds until
      # it is stopped (SIGTERM: the bench stops its ranks and leaves).
      # greedy: 1024 fragments in flight per rank, 64 bytes each.
      greedy=()
      [[ "$mode" != tenant ]] && greedy=(--window 1024 --payload 64)
      cc=${TRIBUTARY_CONGESTION_TARGET_US:-}
      [[ "$mode" == hostile ]] && cc=0
      env ${cc:+TRIBUTARY_CONGESTION_TARGET_US=$cc} \
        "$TRIB" bench --in-place 0 --node-level off --daemon "$addr" --job-id $((job ^ 1)) --ranks "$RANKS" -b 64M -e 64M \
        "${greedy[@]}" -n 100000 -w 0 -c 0 > "$work/tenant.out" 2>&1 &
      flood_pid=$!
    elif [[ "$mode" != none ]]; then
      sleep 0.3
      "$FLOOD" --daemon "$addr" --mode "$mode" --job "$job" --seconds 60 > /dev/null &
      flood_pid=$!
    fi
    wait "$bench_pid"
    rc=$?
    [[ -n "$flood_pid" ]] && kill "$flood_pid" 2> /dev/null && wait "$flood_pid" 2> /dev/null
    out=$(cat "$work/bench.out")
    # Columns: size count type redop time algbw busbw #wrong.
    algbw=$(awk '/^ +[0-9]/ && NF >= 14 {print $7}' <<< "$out" | tail -1)
    wrong=$(awk '/^ +[0-9]/ && NF >= 14 {print $9}' <<< "$out" | tail -1)
    if [[ $rc -ne 0 ]]; then echo "round $round $mode: bench failed (rc $rc)"; echo "$out" | tail -5; fi
    echo "# round $round: $mode algbw=$algbw wrong=$wrong"
    results[$mode]+="$algbw "
    # Against the same round's "none" (the first mode): a machine whose
    # speed drifts between rounds still gives comparable ratios.
    [[ $mode == none ]] && round_base=$algbw
    ratios[$mode]+="$(awk -v a="$algbw" -v b="$round_base" 'BEGIN {printf "%.3f", a / b}') "
  done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
base=$(median <<< "${results[none]}")
echo
echo "All-reduce $SIZE fp32 sum, $RANKS ranks, with a flood at the same tributaryd (median of $ROUNDS rounds)"
echo
echo "| flood | algbw GB/s | vs no flood | per round (median) |"
echo "|---|---:|---:|---:|"
for mode in "${modes[@]}"; do
  m=$(median <<< "${results[$mode]}")
  echo "| $mode | $m | $(awk -v a="$m" -v b="$base" 'BEGIN {printf "%.2f", a / b}') |" \
    "$(median <<< "${ratios[$mode]}") |"
done
kill -USR1 "$daemon_pid"; sleep 0.3
echo
echo "Daemon counters after the runs:"
grep -E "engine_drops|decode_errors|peers=" "$work/daemon.err" | tail -3
grep -o "rx_shed=[0-9]*" "$work/daemon.err" | tail -1
