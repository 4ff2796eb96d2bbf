#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fairness between two jobs on one tributaryd (issue #12: "two saturating
# jobs each keep >= 45% of their solo throughput on one daemon core").
# Per round: one job alone, then two equal jobs (their own ids and keys,
# RANKS ranks each) started together; each all-reduces SIZE bytes ITERS
# times, results checked. Printed: each job's time per all-reduce and the
# share of its solo throughput it kept (solo time / shared time), median
# over rounds. Loopback only; the daemon and the benches started here are
# stopped on exit.
# Usage: bench/run_two_jobs.sh [BUILD_DIR]   Environment: ROUNDS (3), SIZE (16M), RANKS (4),
#   ITERS (30), EXTRA (more `tributary bench` flags for the second job, e.g. "--window 1024
#   --payload 64" for a misbehaving one), DAEMON_ARGS (more tributaryd flags, e.g.
#   "--fair-queue-packets 0" for arrival order)
set -u -o pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-16M}
RANKS=${RANKS:-4}
ITERS=${ITERS:-30}
read -r -a extra <<< "${EXTRA:-}"
TRIB="$BUILD/tools/tributary/tributary"
DAEMON="$BUILD/switch_agent/tributaryd"
work=$(mktemp -d /tmp/tributary-two-jobs.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

# shellcheck disable=SC2086  # DAEMON_ARGS: words on purpose
"$DAEMON" --listen-address 127.0.0.1 --port 0 ${DAEMON_ARGS:-} > "$work/daemon.out" \
  2> "$work/daemon.err" &
pids+=($!)
daemon_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/daemon.out" && break; sleep 0.05; done
addr=$(sed -n 's/^tributaryd listening on //p' "$work/daemon.out")
[[ -n "$addr" ]] || { echo "run_two_jobs: daemon did not start" >&2; exit 2; }

# bench JOB OUT [flags...]: the time per all-reduce in us (nccl-tests column 5).
bench() {
  local job=$1 out=$2
  shift 2
  "$TRIB" bench --in-place 0 --node-level off --daemon "$addr" --job-id "$job" --ranks "$RANKS" -b "$SIZE" -e "$SIZE" \
    -n "$ITERS" -w 3 -c 1 "$@" > "$out.log" 2>&1
  local rc=$?
  awk '/^ +[0-9]/ && NF >= 14 { print $6 }' "$out.log" | tail -1 > "$out"
  if ((rc != 0)) || [[ ! -s "$out" ]]; then
    echo "run_two_jobs: bench of job $job failed (rc $rc)" >&2
    tail -5 "$out.log" >&2
    return 1
  fi
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
for round in $(seq "$ROUNDS"); do
  base=$((round * 1000 + RANDOM % 1000))
  bench $((base * 4 + 1)) "$work/solo" || exit 1
  bench $((base * 4 + 2)) "$work/a" & pa=$!
  bench $((base * 4 + 3)) "$work/b" "${extra[@]}" & pb=$!
  wait "$pa" || exit 1
  wait "$pb" || exit 1
  solo=$(cat "$work/solo") a=$(cat "$work/a") b=$(cat "$work/b")
  echo "# round $round: alone $solo us, together $a us and $b us"
  echo "$solo" >> "$work/solos"
  awk -v s="$solo" -v t="$a" 'BEGIN { printf "%.3f\n", s / t }' >> "$work/shares_a"
  awk -v s="$solo" -v t="$b" 'BEGIN { printf "%.3f\n", s / t }' >> "$work/shares_b"
done
echo
echo "Two jobs of $RANKS ranks on one tributaryd, $SIZE fp32 sum, $ITERS iterations (median of $ROUNDS rounds)"
echo "second job's extra flags: ${EXTRA:-none}"
echo
echo "| job | share of its solo throughput kept |"
echo "|---|---:|"
echo "| first | $(median < "$work/shares_a") |"
echo "| second | $(median < "$work/shares_b") |"
echo "solo time per all-reduce: $(median < "$work/solos") us"
kill -USR1 "$daemon_pid" 2> /dev/null && sleep 0.3
echo "daemon: $(grep -o "rx_shed=[0-9]*" "$work/daemon.err" | tail -1) (packets dropped by the fair queue)"
