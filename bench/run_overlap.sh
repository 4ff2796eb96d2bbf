#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# run_overlap: the gradient bucketer's overlap of communication with compute
# (bench/training/overlap_bench.cc) against a tributaryd it starts on
# loopback: a bucket-size sweep for a ResNet-50-like and a GPT-like layer
# list, emulated compute (sleeps) per layer, every gradient through the
# aggregator (node level off). Prints overlap_bench's tables.
# Usage: bench/run_overlap.sh [BUILD_DIR] (env: RANKS=4, ITERS=5,
#   COMPUTE_MS=300, BUCKETS_MB=1,5,25,100, MODELS="resnet50 gpt-small").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
RANKS=${RANKS:-4} ITERS=${ITERS:-5} COMPUTE_MS=${COMPUTE_MS:-300}
BUCKETS_MB=${BUCKETS_MB:-1,5,25,100} MODELS=${MODELS:-resnet50 gpt-small}
for bin in "$build/switch_agent/tributaryd" "$build/bench/overlap_bench"; do
  [[ -x $bin ]] || { echo "run_overlap: build $bin first" >&2; exit 2; }
done
# shellcheck source=bench/daemon_lib.sh
source "$here/daemon_lib.sh"
work=$(mktemp -d /tmp/trib-overlap.XXXXXX)
trap 'bench_daemon_stop; rm -rf "$work"' EXIT
bench_daemon_start "$work/daemon.log" "$work/daemon.log" "$build/switch_agent/tributaryd" \
  --listen-address 127.0.0.1 --port 0
key=$(sed -n 's/^tributaryd public key \([0-9a-f]*\)$/\1/p' "$work/daemon.log")
echo "# $(nproc) CPUs, $(git -C "$here" rev-parse --short HEAD 2> /dev/null || echo '?'), $(date -u +%F)"
for model in $MODELS; do
  "$build/bench/overlap_bench" --aggregator "$BENCH_DAEMON_ADDR" --aggregator-key "$key" \
    --ranks "$RANKS" --model "$model" --compute-ms "$COMPUTE_MS" --iters "$ITERS" \
    --bucket-mb "$BUCKETS_MB"
done
