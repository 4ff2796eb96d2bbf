#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Everything GPU-side in one run on a lent one-GPU machine (under 8 minutes
# on an H200), its report under OUTDIR. CI has no GPU and never runs it.
#
# CUDA kernels (issue #14, kernels/): tributary_kernels_gpu_test (every
# dtype x op against the CPU reference, poisoned outputs, up to
# KERNEL_MAX_BYTES, default 1 GiB, for fp32/bf16 SUM; the NVLS group or its
# refusal on one GPU), then kernel_reduce_bandwidth for fp32 and bf16 at
# 256 MiB: the k-input reduce against the GPU's device-to-device copy.
#
# Device memory in the host library (issue #14): device_allreduce, two
# ranks on the one GPU through tributaryd on loopback: cudaMalloc buffers
# staged through pinned host memory, stream-ordered, exact, 1..256 MiB, and
# the same all-reduce from host buffers.
#
# NCCL plugin (issue #13): tributaryd on loopback, two processes on the one
# GPU that NCCL takes for two nodes (distinct NCCL_HOSTID; NCCL's P2P and
# SHM transports off), torch.distributed with the NCCL backend of the
# image's PyTorch:
#   1. with NCCL_NET_PLUGIN=tributary NCCL_COLLNET_ENABLE=1: results exact at
#      every size 8 B .. 1 GiB (float32 sum), the time of each, and from
#      NCCL's log (NCCL_DEBUG=INFO) whether the plugin loaded and whether
#      CollNet connected on the aggregator;
#   2. the same sweep on NCCL's own socket transport (NCCL_NET=Socket),
#      the baseline;
#   3. a table of both, the last thing printed.
#
# The image has CUDA, PyTorch and CMake but not the Debian libraries
# Tributary links: prepare here with scripts/gpu-bundle.sh (binaries and
# their libraries in .gpu-bundle, listed in .git/info/exclude) and carry
# .gpu-bundle with the call:
#   run(command="bash scripts/gpu-check.sh $OUT", carry=[".gpu-bundle"], timeout_s=540)
# Usage: scripts/gpu-check.sh OUTDIR   Environment: GPU_BUNDLE (.gpu-bundle),
#   MAX_BYTES (1 GiB), SWEEP_TIMEOUT_S (200 per sweep)
set -u -o pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$root/.gpu-bundle}
max_bytes=${MAX_BYTES:-1073741824}
sweep_timeout=${SWEEP_TIMEOUT_S:-200}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

if [[ ! -x $bundle/bin/tributaryd || ! -e $bundle/lib/libnccl-net-tributary.so ]]; then
  say "gpu-check: no bundle at $bundle: run scripts/gpu-bundle.sh on the build machine and carry it"
  exit 2
fi
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(ldd "$bundle/bin/tributaryd" "$bundle/lib/libnccl-net-tributary.so" \
  "$bundle/lib/libfabric.so.1" 2>&1 | grep 'not found' | sort -u)
if [[ -n $missing ]]; then
  say "gpu-check: libraries missing on this machine: $missing"
  exit 2
fi
nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1
python3 - > "$out/versions.txt" 2>&1 <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PY
say "$(head -1 "$out/nvidia-smi.txt")"
say "$(tr '\n' ' ' < "$out/versions.txt")"

# The CUDA kernels first: they need no daemon.
t0=$(date +%s)
TRIBUTARY_GPU_TEST_MAX_BYTES=${KERNEL_MAX_BYTES:-1073741824} timeout 300 \
  "$bundle/bin/tributary_kernels_gpu_test" > "$out/kernels-gpu-test.log" 2>&1
kernels_rc=$?
say "kernel GPU test: $([[ $kernels_rc == 0 ]] && echo passed || echo "FAILED (rc $kernels_rc), see kernels-gpu-test.log") in $(( $(date +%s) - t0 )) s"
grep -E '^\[  (PASSED|FAILED) ' "$out/kernels-gpu-test.log" | tee -a "$summary"
for dtype in float32 bfloat16; do
  timeout 120 "$bundle/bin/kernel_reduce_bandwidth" --dtype "$dtype" --bytes 268435456 \
    > "$out/kernel-bandwidth-$dtype.txt" 2>&1 || say "kernel bandwidth ($dtype) FAILED"
  tee -a "$summary" < "$out/kernel-bandwidth-$dtype.txt"
done

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
}
trap cleanup EXIT INT TERM

"$bundle/bin/tributaryd" --listen-address 127.0.0.1 --port 0 > "$out/tributaryd.out" \
  2> "$out/tributaryd.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do grep -q "listening on" "$out/tributaryd.out" && break; sleep 0.1; done
addr=$(sed -n 's/^tributaryd listening on //p' "$out/tributaryd.out")
if [[ -z $addr ]]; then
  say "gpu-check: tributaryd did not start"; cat "$out/tributaryd.log" >> "$summary"; exit 1
fi
say "tributaryd on $addr"

# sweep LABEL PORT [VAR=VALUE ...]: two ranks on GPU 0, logs rank0.log and
# rank1.log under $out/LABEL, the rows in $out/LABEL.jsonl. Returns 0 when
# both ranks exited 0 (every size exact) within the timeout.
sweep() {
  local label=$1 port=$2
  shift 2
  mkdir -p "$out/$label"
  local rank rank_pids=()
  for rank in 0 1; do
    env "$@" RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      NCCL_HOSTID="gpucheck-node$rank" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL \
      timeout "$sweep_timeout" python3 "$root/scripts/gpu/nccl_allreduce.py" \
      --label "$label" --max-bytes "$max_bytes" --out "$out/$label.jsonl" \
      > "$out/$label/rank$rank.log" 2>&1 &
    rank_pids+=($!)
  done
  local rc=0 p
  for p in "${rank_pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# Device memory through the host library's staging, against host buffers.
t0=$(date +%s)
dev_pids=()
for rank in 0 1; do
  timeout 180 "$bundle/bin/device_allreduce" --rank $rank --size 2 --aggregator "$addr" \
    --job-id 7001 --job-key 77 --max-bytes 268435456 > "$out/device-allreduce-rank$rank.txt" 2>&1 &
  dev_pids+=($!)
done
device_rc=0
for p in "${dev_pids[@]}"; do wait "$p" || device_rc=1; done
say "device-memory all-reduce (2 ranks, staged, stream-ordered): $([[ $device_rc == 0 ]] && echo exact || echo "FAILED, see device-allreduce-rank*.txt") in $(( $(date +%s) - t0 )) s"
tee -a "$summary" < "$out/device-allreduce-rank0.txt"

t0=$(date +%s)
sweep tributary 29511 NCCL_NET_PLUGIN=tributary NCCL_COLLNET_ENABLE=1 \
  TRIBUTARY_AGGREGATOR="$addr" TRIBUTARY_TRANSPORT=udp TRIBUTARY_OFI_PROVIDER="tcp;ofi_rxm" \
  TRIBUTARY_NCCL_IFACES=lo
plugin_rc=$?
say "plugin sweep: $([[ $plugin_rc == 0 ]] && echo exact || echo FAILED, see tributary/rank*.log) in $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
sweep socket 29512 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_NET_PLUGIN=none
socket_rc=$?
say "socket sweep: $([[ $socket_rc == 0 ]] && echo exact || echo FAILED, see socket/rank*.log) in $(( $(date +%s) - t0 )) s"

# What NCCL's log says about the plugin and CollNet (rank 0).
log="$out/tributary/rank0.log"
loaded=$(grep -c -E 'NET/Plugin.*Loaded net plugin Tributary' "$log")
collnet_loaded=$(grep -c -E 'NET/Plugin.*Loaded collnet plugin Tributary' "$log")
joined=$(grep -c 'Tributary/nccl: CollNet rank' "$log")
not_used=$(grep -E 'CollNet NOT (IN )?USE' "$out"/tributary/rank*.log | head -3)
say "plugin loaded by NCCL: $([[ $loaded -gt 0 ]] && echo yes || echo NO)"
say "collnet table loaded: $([[ $collnet_loaded -gt 0 ]] && echo yes || echo NO)"
say "CollNet communicators joined on the aggregator (rank 0): $joined"
[[ -n $not_used ]] && say "warnings: $not_used"
grep -h -E 'NET/Plugin|Tributary/|CollNet|collnet' "$log" | head -40 > "$out/plugin-lines.txt"
kill -USR1 "$daemon" 2> /dev/null
sleep 0.5
grep -A8 'tributaryd counters' "$out/tributaryd.log" | tail -8 > "$out/daemon-counters.txt"

python3 - "$out" <<'PY' | tee -a "$summary"
import json, sys
out = sys.argv[1]
def load(label):
    try:
        return {r["bytes"]: r for r in map(json.loads, open(f"{out}/{label}.jsonl"))}
    except OSError:
        return {}
t, s = load("tributary"), load("socket")
print(f"{'bytes':>12} {'tributary_us':>13} {'busbw':>7} {'socket_us':>11} {'busbw':>7} {'speedup':>8}")
for b in sorted(set(t) | set(s)):
    tu = t.get(b, {}).get("us"); su = s.get(b, {}).get("us")
    tb = t.get(b, {}).get("busbw_GBps"); sb = s.get(b, {}).get("busbw_GBps")
    sp = f"{su / tu:.2f}x" if tu and su else "-"
    print(f"{b:>12} {tu if tu is not None else '-':>13} {tb if tb is not None else '-':>7} "
          f"{su if su is not None else '-':>11} {sb if sb is not None else '-':>7} {sp:>8}")
PY
[[ $kernels_rc == 0 && $device_rc == 0 && $plugin_rc == 0 && $socket_rc == 0 && $loaded -gt 0 ]]
