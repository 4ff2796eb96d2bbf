#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Side-by-side all-reduce bandwidth on loopback: tributary (own tributaryd),
# Gloo (ring, TCP) and OpenMPI (MPI_Allreduce), fp32 sum, one size, 2 and 4
# ranks. The runs are interleaved (T2 G2 M2 T4 G4 M4, repeated ROUNDS times)
# so machine noise hits all of them alike; the table shows medians over the
# rounds and the ratios tributary/peer. Builds nothing.
#
# Usage: bench/run_loopback_compare.sh [BUILD_DIR]
# Environment: ROUNDS (3), SIZE (64M), ITERS (10), WARMUP (2), RANKS ("2 4"),
# TRIB_ARGS (extra `tributary bench` flags, e.g. "--payload 65024"; default
# none: every system runs with its defaults, as its users would).
# Loopback measures CPU and memory copies, not a network: see
# docs/PERFORMANCE.md for what these numbers can and cannot say.
set -u -o pipefail

BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
SIZE=${SIZE:-64M}
ITERS=${ITERS:-10}
WARMUP=${WARMUP:-2}
RANKS=${RANKS:-"2 4"}
TRIB_ARGS=${TRIB_ARGS:-}
TRIB="$BUILD/tools/tributary/tributary"
GLOO="$BUILD/bench/gloo_allreduce"
MPI="$BUILD/bench/mpi_allreduce"

if [[ ! -x "$TRIB" ]]; then
  echo "run_loopback_compare: $TRIB not found; build target tributary_cli in $BUILD" >&2
  exit 2
fi
have_gloo=0; [[ -x "$GLOO" ]] && have_gloo=1
have_mpi=0; [[ -x "$MPI" ]] && command -v mpirun > /dev/null && have_mpi=1
[[ $have_gloo == 1 ]] || echo "# gloo_allreduce not built: Gloo column skipped" >&2
[[ $have_mpi == 1 ]] || echo "# mpi_allreduce or mpirun missing: MPI column skipped" >&2

RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT

# algbw of the one data row, recomputed from its size and time columns
# (size / time, GB/s) for more digits than the printed algbw column.
algbw_of() {
  awk '!/^#/ && NF >= 14 && $6 > 0 { v = sprintf("%.4f", $1 / ($6 * 1e3)) }
       END { if (v == "") print "FAIL"; else print v }'
}

run_one() {  # name ranks command...
  local name=$1 n=$2
  shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  local bw
  bw=$(printf '%s\n' "$out" | algbw_of)
  if [[ $rc -ne 0 ]]; then
    echo "# $name n=$n failed (exit $rc):" >&2
    printf '%s\n' "$out" | tail -5 | sed 's/^/#   /' >&2
    bw=FAIL
  fi
  echo "$name $n $bw" >> "$RESULTS"
  echo "# round $round: $name ranks=$n algbw=$bw GB/s" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for n in $RANKS; do
    run_one tributary "$n" timeout 600 "$TRIB" bench --in-place 0 --ranks "$n" -b "$SIZE" -e "$SIZE" \
      -n "$ITERS" -w "$WARMUP" -d float -o sum -c 1 $TRIB_ARGS
    [[ $have_gloo == 1 ]] && run_one gloo "$n" timeout 600 "$GLOO" --ranks "$n" -b "$SIZE" \
      -e "$SIZE" -n "$ITERS" -w "$WARMUP" -c 1
    [[ $have_mpi == 1 ]] && run_one mpi "$n" timeout 600 mpirun --allow-run-as-root \
      --oversubscribe -np "$n" "$MPI" -b "$SIZE" -e "$SIZE" -n "$ITERS" -w "$WARMUP" -c 1
  done
done

median() {  # name ranks -> median algbw over rounds (FAIL if any round failed)
  awk -v name="$1" -v n="$2" '$1 == name && $2 == n { print $3 }' "$RESULTS" |
    { vals=$(cat); if [[ -z "$vals" ]]; then echo "-"; elif grep -q FAIL <<< "$vals"; then
        echo FAIL; else sort -g <<< "$vals" | awk '{ v[NR] = $1 } END {
          if (NR % 2) printf "%.3f\n", v[(NR + 1) / 2];
          else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; fi; }
}

ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f", a / b; else print "-" }'
}

echo
echo "All-reduce $SIZE fp32 sum on loopback, algbw GB/s, median of $ROUNDS interleaved rounds" \
     "($ITERS iterations after $WARMUP warm-up each; $(nproc) CPUs, $(uname -r))"
[[ -n "$TRIB_ARGS" ]] && echo "tributary bench extra flags: $TRIB_ARGS"
echo
echo "| ranks | tributary | gloo (ring, TCP) | OpenMPI | tributary/gloo | tributary/mpi |"
echo "|------:|----------:|-----------------:|--------:|---------------:|--------------:|"
for n in $RANKS; do
  t=$(median tributary "$n"); g=$(median gloo "$n"); m=$(median mpi "$n")
  echo "| $n | $t | $g | $m | $(ratio "$t" "$g") | $(ratio "$t" "$m") |"
done
