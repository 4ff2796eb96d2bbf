#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the NCCL plugin adds to an all-reduce (issue #13: "< 5% at 64 MiB"):
# starts tributaryd on loopback and runs bench/nccl/plugin_overhead, which
# all-reduces the same buffers through the host API and through the
# plugin's CollNet table in alternating rounds (see its header). The daemon
# started here is stopped on exit.
# Usage: bench/run_nccl_overhead.sh [BUILD_DIR]
#   Environment: RANKS (4), SIZES ("1M 16M 64M"), ITERS (10), ROUNDS (5),
#   POLL_PAUSE_US (0: yield between test() calls as NCCL's proxy does)
set -u -o pipefail
BUILD=${1:-build}
RANKS=${RANKS:-4}
SIZES=${SIZES:-1M 16M 64M}
ITERS=${ITERS:-10}
ROUNDS=${ROUNDS:-5}
POLL_PAUSE_US=${POLL_PAUSE_US:-0}
DAEMON="$BUILD/switch_agent/tributaryd"
BENCH="$BUILD/bench/nccl_plugin_overhead"
PLUGIN="$BUILD/host/nccl/libnccl-net-tributary.so"
for f in "$DAEMON" "$BENCH" "$PLUGIN"; do
  [[ -e $f ]] || { echo "run_nccl_overhead: $f not built" >&2; exit 2; }
done
work=$(mktemp -d /tmp/tributary-nccl-overhead.XXXXXX)
daemon_pid=
cleanup() {
  [[ -n $daemon_pid ]] && kill "$daemon_pid" 2> /dev/null && wait "$daemon_pid" 2> /dev/null
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
"$DAEMON" --listen-address 127.0.0.1 --port 0 > "$work/daemon.out" 2> "$work/daemon.err" &
daemon_pid=$!
for _ in $(seq 100); do grep -q "listening on" "$work/daemon.out" && break; sleep 0.05; done
addr=$(sed -n 's/^tributaryd listening on //p' "$work/daemon.out")
[[ -n "$addr" ]] || { echo "run_nccl_overhead: daemon did not start" >&2; exit 2; }
first=1
for size in $SIZES; do
  out=$("$BENCH" --aggregator "$addr" --plugin "$PLUGIN" --ranks "$RANKS" --bytes "$size" \
    --iters "$ITERS" --rounds "$ROUNDS" --poll-pause-us "$POLL_PAUSE_US") || { echo "run_nccl_overhead: $size failed" >&2; exit 1; }
  if ((first)); then echo "$out" | head -1; echo "$out" | grep -v '^#' | head -1; first=0; fi
  [[ -n ${VERBOSE:-} ]] && echo "$out" | grep '^# round'
  echo "$out" | tail -1
done
