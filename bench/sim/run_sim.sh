#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The scale study (docs/PERFORMANCE.md §14): tributary_sim swept over host
# counts, sizes and scenarios; CSV, Markdown tables and PNG plots.
#
#   bash bench/sim/run_sim.sh --build build --out /tmp/sim             # all (~70 min)
#   bash bench/sim/run_sim.sh --build build --out /tmp/sim --quick     # 64 hosts (CI smoke)
#   --parts validation,scale,sizes,scenarios   which parts (default all)
#   --hosts-list "64 256 1024 4096 16384"      the scale part's host counts
#   --size-hosts 1024                          hosts of the sizes and scenarios parts
#
# Parts (each a CSV in OUT):
#   validation.csv  the emulated cluster's star at 200 Mbit/s, n = 2, 4, 8,
#                   64 MiB, next to the measured docs/data/cluster-200mbit-sweep.csv
#   scale.csv       fat tree, 400 Gb/s: n in HOSTS_LIST, 8 B and 64 MiB,
#                   Tributary, double binary tree, ring (n <= RING_MAX_HOSTS)
#   sizes.csv       n = SIZE_HOSTS, 8 B .. 1 GiB, the three systems
#   scenarios.csv   n = SIZE_HOSTS, 64 MiB: a straggler, 0.1% and 1% loss
#                   (default timers, and shorter ones), a failed inner
#                   aggregator (radix-32 3-level fat tree: the job spans
#                   pods, so it has an inner level), two jobs sharing the
#                   tree, the rail-optimized fabric
# Every Tributary run checks every element of every result (exit 1 if any
# is wrong or a rank failed); the simulation is deterministic (same
# arguments, same figures).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=$root/build
OUT=/tmp/tributary-sim
QUICK=0
HOSTS_LIST="64 256 1024 4096 16384"
RING_MAX_HOSTS=4096
SIZE_HOSTS=1024
PARTS=validation,scale,sizes,scenarios
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --hosts-list) HOSTS_LIST=$2; shift 2 ;;
    --size-hosts) SIZE_HOSTS=$2; shift 2 ;;
    --parts) PARTS=$2; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "run_sim.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
SIM=$BUILD/bench/sim/tributary_sim
if [[ ! -x $SIM ]]; then
  echo "run_sim.sh: $SIM not built (needs libsimgrid-dev: bash scripts/setup-debian.sh)" >&2
  exit 2
fi
# The failure scenario's fabric: small enough switches that the job spans
# several pods (an inner aggregator between the leaves and the root).
FAIL_RADIX=32
if ((QUICK)); then HOSTS_LIST=64; SIZE_HOSTS=64; RING_MAX_HOSTS=64; FAIL_RADIX=8; fi
mkdir -p "$OUT"
part() { [[ ",$PARTS," == *",$1,"* ]]; }
run() {  # CSV ARGS...: one simulation, its line(s) appended to OUT/CSV
  local csv=$OUT/$1; shift
  local extra=()
  if [[ ! -s $csv ]]; then extra=(--csv-header); fi
  echo "# tributary_sim $*" >&2
  "$SIM" --csv "$csv" "${extra[@]}" "$@" 2> >(grep -v "xbt_cfg/INFO" >&2)
}

# 1. Validation against the emulated cluster (its link rate, its payload
# and window: 8 KiB fragments, 128 in flight; veth + bridge hop latency).
star=(--fabric star --gbps 0.2 --latency-us 10 --host-us 20 --payload 8192 --window 128)
if part validation; then
  for n in 2 4 8; do
    for s in tributary ring; do
      run validation.csv --scenario validation --system $s --hosts $n "${star[@]}" --sizes 64M
    done
  done
fi

# 2. Scale: busbw at 64 MiB and latency at 8 B against n.
if part scale; then
  for n in $HOSTS_LIST; do
    run scale.csv --scenario scale --system tributary --hosts "$n" --sizes 8,64M
    for s in tree ring; do
      if [[ $s == ring ]] && ((n > RING_MAX_HOSTS)); then continue; fi
      for size in 8 64M; do run scale.csv --scenario scale --system $s --hosts "$n" --sizes $size; done
    done
  done
fi

# 3. Sizes at SIZE_HOSTS.
sizes="8 1K 64K 1M 16M 64M 256M 1G"
((QUICK)) && sizes="8 64K 16M"
if part sizes; then
  run sizes.csv --scenario sizes --system tributary --hosts "$SIZE_HOSTS" --sizes "${sizes// /,}"
  for s in tree ring; do
    for size in $sizes; do
      run sizes.csv --scenario sizes --system $s --hosts "$SIZE_HOSTS" --sizes "$size"
    done
  done
fi

# 4. Scenarios at SIZE_HOSTS, 64 MiB (16 MiB for the quick run).
big=64M
((QUICK)) && big=16M
sc=(--system tributary --hosts "$SIZE_HOSTS" --sizes "$big")
if part scenarios; then
  run scenarios.csv --scenario base "${sc[@]}"
  run scenarios.csv --scenario straggler-100us --straggler-us 100 "${sc[@]}"
  for loss in 0.001 0.01; do
    run scenarios.csv --scenario "loss-$loss" --loss $loss "${sc[@]}"
    run scenarios.csv --scenario "loss-$loss-short-timers" --loss $loss --rto-min-us 20 \
      --uplink-poll-us 50 "${sc[@]}"
  done
  run scenarios.csv --scenario base-radix-$FAIL_RADIX --radix $FAIL_RADIX --levels 3 "${sc[@]}"
  run scenarios.csv --scenario failed-inner-aggregator --radix $FAIL_RADIX --levels 3 \
    --fail-at-us 200 --fail-for-us 1000 "${sc[@]}"
  run scenarios.csv --scenario two-jobs --jobs 2 "${sc[@]}"
  for s in tributary tree ring; do
    run scenarios.csv --scenario rail --fabric rail --system $s --hosts "$SIZE_HOSTS" --sizes "$big"
  done
fi

python3 "$here/summarize_sim.py" --out "$OUT" --measured "$root/docs/data/cluster-200mbit-sweep.csv"
if command -v gnuplot > /dev/null; then
  for plot in "$OUT"/*.gp; do (cd "$OUT" && gnuplot "$(basename "$plot")"); done
else
  echo "# gnuplot not installed: no PNG plots" >&2
fi
echo "# results in $OUT: *.csv, summary.md, *.png" >&2
