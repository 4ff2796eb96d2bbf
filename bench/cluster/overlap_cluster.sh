#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# overlap_cluster.sh: the gradient bucketer's overlap of communication with
# compute (bench/training/overlap_bench.cc) on the emulated cluster: one
# rank per host namespace, each behind its own rate-limited link to the
# switch namespace where tributaryd runs (netns_lib.sh draws it). Every
# layer's compute is a sleep (the CPU stays free, as a GPU's would); the
# gradients cross the links. Prints rank 0's table per model: compute,
# communication, both in sequence, overlapped, and overlap / max(compute,
# comm) per bucket size.
#
# Needs root (exit 77 otherwise). Always removes its namespaces and
# processes. Exit: 0 every rank finished, 1 otherwise, 2 usage.
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$HERE/netns_lib.sh"

BUILD="$HERE/../../build"
HOSTS=4; RATE=1gbit; MTU=9000; MODELS="resnet50"; COMPUTE_MS=1500; ITERS=3
BUCKETS_MB="1,5,25"; TIMEOUT=900; OUT=""
usage() {
  cat << EOF
Usage: $0 [options]
  --build DIR       build directory (default: $HERE/../../build)
  --hosts N         hosts, one rank each (default $HOSTS)
  --rate RATE       link rate, tc syntax (default $RATE)   --mtu BYTES (default $MTU)
  --models "..."    overlap_bench models (default "$MODELS")
  --compute-ms MS   backward compute per iteration (default $COMPUTE_MS)
  --iters N         timed iterations per bucket size (default $ITERS)
  --bucket-mb LIST  bucket sizes in MiB (default $BUCKETS_MB)
  --timeout S       per-model limit (default $TIMEOUT)
  --out FILE        also write the tables there
EOF
}
while (($#)); do
  case $1 in
    --build) BUILD=$2; shift ;;
    --hosts) HOSTS=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --mtu) MTU=$2; shift ;;
    --models) MODELS=$2; shift ;;
    --compute-ms) COMPUTE_MS=$2; shift ;;
    --iters) ITERS=$2; shift ;;
    --bucket-mb) BUCKETS_MB=$2; shift ;;
    --timeout) TIMEOUT=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "overlap_cluster: unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done
DAEMON_BIN="$BUILD/switch_agent/tributaryd"
BENCH_BIN="$BUILD/bench/overlap_bench"
for bin in "$DAEMON_BIN" "$BENCH_BIN"; do
  [[ -x $bin ]] || { echo "overlap_cluster: build $bin first" >&2; exit 2; }
done
netns_check || exit $?
WORK=$(mktemp -d /tmp/trib-overlap-cluster.XXXXXX)
remove_work() { rm -rf "$WORK"; }
netns_trap_cleanup remove_work

netns_cluster_create "$HOSTS" "$RATE" "$MTU" || { echo "overlap_cluster: cluster failed" >&2; exit 1; }
netns_start_daemon "$DAEMON_BIN" "$WORK/daemon.log" || exit 1
echo "# emulated cluster: $HOSTS hosts x 1 rank, links $RATE, MTU $MTU, tributaryd in the" \
     "switch namespace; $(nproc) CPUs; $(date -u +%F)" | tee ${OUT:+"$OUT"}
failures=0 job=7000
for model in $MODELS; do
  job=$((job + 1))
  key=$(od -An -N8 -tu8 /dev/urandom | tr -d ' ')
  pids=()
  for ((h = 0; h < HOSTS; ++h)); do
    netns_host_exec "$h" timeout "$TIMEOUT" "$BENCH_BIN" --aggregator "$NETNS_DAEMON" \
      --ranks "$HOSTS" --rank "$h" --job-id "$job" --job-key "$key" --model "$model" \
      --compute-ms "$COMPUTE_MS" --iters "$ITERS" --bucket-mb "$BUCKETS_MB" \
      > "$WORK/$model.rank$h.log" 2>&1 &
    pids+=($!)
  done
  for h in "${!pids[@]}"; do
    if ! wait "${pids[$h]}"; then
      echo "overlap_cluster: $model rank $h failed:" >&2
      tail -5 "$WORK/$model.rank$h.log" >&2
      failures=$((failures + 1))
    fi
  done
  grep -v 'WARN' "$WORK/$model.rank0.log" | tee ${OUT:+-a "$OUT"}
done
((failures == 0)) || exit 1
