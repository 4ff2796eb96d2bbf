#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Everything GPU-side in one run on a lent one-GPU machine, bounded by
# DEADLINE_S (default 480 s) in all; its report under OUTDIR. CI has no GPU
# and never runs it.
#
# Stages, most important first; each has its own cap and none may run past
# the deadline, so the report (OUTDIR/summary.txt and every log in
# OUTDIR/logs.tar.gz) is always written:
#
# NCCL plugin (issue #13): tributaryd on loopback, two processes on the one
# GPU that NCCL takes for two nodes (distinct NCCL_HOSTID; NCCL's P2P and
# SHM transports off), torch.distributed with the NCCL backend of the
# image's PyTorch:
#   1. NCCL_NET_PLUGIN=tributary NCCL_COLLNET_ENABLE=1: results exact at
#      every size 8 B .. MAX_BYTES (float32 sum), the time of each; from
#      NCCL's log whether the plugin and its CollNet table loaded, whether
#      CollNet joined on the aggregator, and which algorithm NCCL chose per
#      size (NCCL_DEBUG_SUBSYS=TUNING);
#   2. only when NCCL chose CollNet at no size: the same sweep with
#      NCCL_ALGO forcing CollNet for all-reduce (up to 256 MiB), so the
#      aggregator path is timed all the same;
#   3. the same sweep on NCCL's own socket transport (NCCL_NET=Socket), the
#      baseline;
#   then the aggregator's counters (SIGUSR1) and a table of the sweeps.
#
# CUDA kernels (issue #14, kernels/): tributary_kernels_gpu_test (every
# dtype x op against the CPU reference, poisoned outputs, up to
# KERNEL_MAX_BYTES, default 1 GiB, for fp32/bf16 SUM; the NVLS group or its
# refusal on one GPU), then kernel_reduce_bandwidth for fp32 and bf16 at
# 256 MiB: the k-input reduce against the GPU's device-to-device copy.
#
# Device memory in the host library (issue #14): device_allreduce, two
# ranks on the one GPU through tributaryd on loopback: cudaMalloc buffers
# staged through pinned host memory, stream-ordered, exact, 1 MiB ..
# DEVICE_MAX_BYTES (256 MiB), and the same all-reduce from host buffers;
# then a reduce-scatter and an all-gather of device memory, exact. Then the
# same two ranks as one host (--node-level on): the node level's peer path,
# the reduce kernel over CUDA IPC pointers, up to NODE_MAX_BYTES (64 MiB).
#
# The device tool returns at most 8 files: everything but the summary goes
# into OUTDIR/logs.tar.gz.
#
# The image has CUDA, PyTorch and CMake but not the Debian libraries
# Tributary links: prepare here with scripts/gpu-bundle.sh (binaries and
# their libraries in .gpu-bundle, which .gitignore lists) and carry
# .gpu-bundle with the call:
#   run(command="bash scripts/gpu-check.sh $OUT", carry=[".gpu-bundle"], timeout_s=560)
# Usage: scripts/gpu-check.sh OUTDIR   Environment: GPU_BUNDLE (.gpu-bundle),
#   DEADLINE_S (480), MAX_BYTES (1 GiB), KERNEL_MAX_BYTES (1 GiB),
#   DEVICE_MAX_BYTES (256 MiB), PYTHON (python3), SWEEP_ARGS (more arguments
#   for scripts/gpu/nccl_allreduce.py: "--backend gloo --device cpu" tries
#   the script's flow on a machine without a GPU)
set -u -o pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$root/.gpu-bundle}
max_bytes=${MAX_BYTES:-1073741824}
python=${PYTHON:-python3}
start_s=$(date +%s)
deadline_s=$((start_s + ${DEADLINE_S:-480}))
mkdir -p "$out/logs"
logs="$out/logs"
summary="$out/summary.txt"
: > "$summary"
say() { echo "$*" | tee -a "$summary"; }

# cap SECONDS: the stage's own cap, cut to what is left before the deadline
# (less 15 s for the report). Prints 0 when nothing is left.
cap() {
  local left=$((deadline_s - 15 - $(date +%s)))
  ((left < 0)) && left=0
  echo $(($1 < left ? $1 : left))
}

pids=()
finish() {
  for p in "${pids[@]}"; do kill "$p" 2> /dev/null && wait "$p" 2> /dev/null; done
  [[ -n ${plugin_dir:-} ]] && ls -l "$plugin_dir" > "$logs/plugin-libraries.txt" && rm -rf "$plugin_dir"
  tar -C "$out" -czf "$out/logs.tar.gz" logs 2> /dev/null && rm -rf "$logs"
}
trap finish EXIT
trap 'exit 130' INT TERM

if [[ ! -x $bundle/bin/tributaryd || ! -e $bundle/lib/libnccl-net-tributary.so ]]; then
  say "gpu-check: no bundle at $bundle: run scripts/gpu-bundle.sh on the build machine and carry it"
  exit 2
fi
# Our own programs run with every library of the bundle; Python (PyTorch,
# NCCL) only with the plugin, libfabric and the libraries this machine
# lacks: Debian's older copies of libz, libssl or the CUDA runtime must not
# shadow the image's own in the processes PyTorch runs in.
bin_lib="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(LD_LIBRARY_PATH=$bin_lib ldd "$bundle/bin/"* "$bundle/lib/libnccl-net-tributary.so" \
  "$bundle/lib/libfabric.so.1" 2>&1 | grep 'not found' | sort -u)
if [[ -n $missing ]]; then
  say "gpu-check: libraries missing on this machine: $missing"
  exit 2
fi
plugin_dir=$(mktemp -d /tmp/tributary-nccl-lib.XXXXXX)
for f in "$bundle/lib/"*; do
  name=$(basename "$f")
  if [[ $name == libnccl-net-tributary.so || $name == libfabric.so.1 ]] ||
    ! ldconfig -p | grep -q "^[[:space:]]*$name "; then
    ln -s "$f" "$plugin_dir/$name"
  fi
done
plugin_lib="$plugin_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi -L > "$logs/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv >> "$logs/nvidia-smi.txt" 2>&1
"$python" - > "$logs/versions.txt" 2>&1 <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))
print("gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
PY
say "$(head -1 "$logs/nvidia-smi.txt")"
say "$(tr '\n' ' ' < "$logs/versions.txt")"

LD_LIBRARY_PATH=$bin_lib "$bundle/bin/tributaryd" --listen-address 127.0.0.1 --port 0 > "$logs/tributaryd.out" \
  2> "$logs/tributaryd.log" &
daemon=$!
pids+=("$daemon")
for _ in $(seq 100); do grep -q "listening on" "$logs/tributaryd.out" && break; sleep 0.1; done
addr=$(sed -n 's/^tributaryd listening on //p' "$logs/tributaryd.out")
if [[ -z $addr ]]; then
  say "gpu-check: tributaryd did not start"
  cat "$logs/tributaryd.log" >> "$summary"
  exit 1
fi
say "tributaryd on $addr"

# sweep LABEL PORT CAP_S MAX_BYTES [VAR=VALUE ...]: two ranks on GPU 0,
# logs LABEL/rank0.log and LABEL/rank1.log, the rows in LABEL.jsonl (one per
# size as it finishes). Returns 0 when both ranks exited 0 (every size
# exact) within the cap.
sweep() {
  local label=$1 port=$2 limit sweep_max=$4
  limit=$(cap "$3")
  shift 4
  mkdir -p "$logs/$label"
  if ((limit < 20)); then
    say "$label sweep: skipped, the deadline is near"
    return 1
  fi
  local rank rank_pids=()
  for rank in 0 1; do
    env "$@" RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" \
      NCCL_HOSTID="gpucheck-node$rank" NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,COLL,TUNING PYTHONUNBUFFERED=1 \
      timeout -k 5 "$limit" "$python" "$root/scripts/gpu/nccl_allreduce.py" \
      --label "$label" --max-bytes "$sweep_max" --out "$logs/$label.jsonl" ${SWEEP_ARGS:-} \
      > "$logs/$label/rank$rank.log" 2>&1 &
    rank_pids+=($!)
  done
  local rc=0 p
  for p in "${rank_pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# algorithms LABEL: the algorithm NCCL chose per all-reduce size on rank 0.
algorithms() {
  grep -hoE 'AllReduce: +[0-9]+ Bytes -> Algo [A-Za-z0-9_]+ proto [A-Za-z0-9_]+' \
    "$logs/$1/rank0.log" 2> /dev/null | awk '{ print $2, $6, $8 }' | sort -u |
    awk '{ a[$1] = a[$1] (a[$1] ? "," : "") $2 "/" $3 } END { for (b in a) print b, a[b] }' | sort -n
}

# 1. The plugin as a user sets it up.
t0=$(date +%s)
plugin_env=(LD_LIBRARY_PATH="$plugin_lib" NCCL_NET_PLUGIN=tributary NCCL_COLLNET_ENABLE=1 TRIBUTARY_AGGREGATOR="$addr"
  TRIBUTARY_TRANSPORT=udp TRIBUTARY_OFI_PROVIDER="tcp;ofi_rxm" TRIBUTARY_NCCL_IFACES=lo)
sweep tributary 29511 130 "$max_bytes" "${plugin_env[@]}"
plugin_rc=$?
say "plugin sweep: $([[ $plugin_rc == 0 ]] && echo exact || echo "FAILED, see logs/tributary/rank*.log") in $(($(date +%s) - t0)) s"
log="$logs/tributary/rank0.log"
loaded=$(grep -c -E 'NET/Plugin.*Loaded net plugin Tributary' "$log")
collnet_loaded=$(grep -c -E 'NET/Plugin.*Loaded collnet plugin Tributary' "$log")
joined=$(grep -c 'Tributary/nccl: CollNet rank' "$log")
say "plugin loaded by NCCL: $([[ $loaded -gt 0 ]] && echo yes || echo NO)"
say "collnet table loaded: $([[ $collnet_loaded -gt 0 ]] && echo yes || echo NO)"
say "CollNet communicators joined on the aggregator (rank 0): $joined"
not_used=$(grep -h -E 'CollNet NOT|collnet.*not used|Tributary/nccl:.*(WARN|not used|fail)' \
  "$logs"/tributary/rank*.log | head -5)
[[ -n $not_used ]] && say "warnings: $not_used"
algos=$(algorithms tributary)
say "algorithm per size (plugin, rank 0):"
say "${algos:-  none logged}"
grep -h -E 'NET/Plugin|Tributary/|CollNet|collnet' "$log" | head -60 > "$logs/plugin-lines.txt"

# 2. CollNet forced, only when NCCL's tuning never chose it.
forced_rc=skipped
if ! grep -qi collnet <<< "$algos"; then
  t0=$(date +%s)
  sweep collnet 29513 80 $((max_bytes < 268435456 ? max_bytes : 268435456)) \
    "${plugin_env[@]}" NCCL_ALGO="allreduce:collnetdirect,collnetchain"
  forced_rc=$?
  say "forced-CollNet sweep: $([[ $forced_rc == 0 ]] && echo exact || echo "FAILED, see logs/collnet/rank*.log") in $(($(date +%s) - t0)) s"
  forced_algos=$(algorithms collnet)
  say "algorithm per size (forced, rank 0):"
  say "${forced_algos:-  none logged}"
fi
kill -USR1 "$daemon" 2> /dev/null
sleep 0.5
awk '/tributaryd counters/ { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' \
  "$logs/tributaryd.log" | head -40 > "$logs/daemon-counters.txt"
say "aggregator counters after the plugin sweeps:"
tee -a "$summary" < "$logs/daemon-counters.txt"

# 3. NCCL's own socket transport, the baseline.
t0=$(date +%s)
sweep socket 29512 75 "$max_bytes" NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo NCCL_NET_PLUGIN=none
socket_rc=$?
say "socket sweep: $([[ $socket_rc == 0 ]] && echo exact || echo "FAILED, see logs/socket/rank*.log") in $(($(date +%s) - t0)) s"

# 4. The CUDA kernels: correctness, then bandwidth.
t0=$(date +%s)
kernels_rc=1
limit=$(cap 110)
if ((limit >= 20)); then
  LD_LIBRARY_PATH=$bin_lib TRIBUTARY_GPU_TEST_MAX_BYTES=${KERNEL_MAX_BYTES:-1073741824} timeout -k 5 "$limit" \
    "$bundle/bin/tributary_kernels_gpu_test" > "$logs/kernels-gpu-test.log" 2>&1
  kernels_rc=$?
fi
say "kernel GPU test: $([[ $kernels_rc == 0 ]] && echo passed || echo "FAILED (rc $kernels_rc), see logs/kernels-gpu-test.log") in $(($(date +%s) - t0)) s"
grep -E '^\[ +(OK|PASSED|FAILED) ' "$logs/kernels-gpu-test.log" 2> /dev/null | tee -a "$summary"
for dtype in float32 bfloat16; do
  limit=$(cap 30)
  ((limit >= 5)) || { say "kernel bandwidth ($dtype): skipped, the deadline is near"; continue; }
  LD_LIBRARY_PATH=$bin_lib timeout -k 5 "$limit" "$bundle/bin/kernel_reduce_bandwidth" --dtype "$dtype" --bytes 268435456 \
    > "$logs/kernel-bandwidth-$dtype.txt" 2>&1 || say "kernel bandwidth ($dtype) FAILED"
  tee -a "$summary" < "$logs/kernel-bandwidth-$dtype.txt"
done

# Two device_allreduce ranks on the GPU: device_pair LABEL CAP ARGS...;
# logs/LABEL-rank*.txt; returns 0 when both ranks were exact.
device_pair() {
  local label=$1 limit rc=0 pids=() rank p
  limit=$(cap "$2")
  shift 2
  ((limit >= 10)) || return 1
  for rank in 0 1; do
    TRIBUTARY_LOG_LEVEL=info LD_LIBRARY_PATH=$bin_lib timeout -k 5 "$limit" "$bundle/bin/device_allreduce" \
      --rank $rank --size 2 --aggregator "$addr" "$@" > "$logs/$label-rank$rank.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}
verdict() { if (($1 == 0)); then echo exact; else echo "FAILED, see logs/$2-rank*.txt"; fi; }
# Table lines only (not the library's log lines).
table() { grep -v "^\S*:[0-9]*:[0-9]* \[" "$logs/$1-rank0.txt" 2> /dev/null | tee -a "$summary"; }

# 5. Device memory through the host library's staging, against host buffers.
t0=$(date +%s)
device_rc=0
device_pair device-allreduce 60 --job-id 7001 --job-key 77 --max-bytes "${DEVICE_MAX_BYTES:-268435456}" || device_rc=1
say "device-memory all-reduce (2 ranks, staged, stream-ordered): $(verdict $device_rc device-allreduce) in $(($(date +%s) - t0)) s"
table device-allreduce

# 6. The same on the node level: two processes of one host, the peer path
# (the reduce kernel over CUDA IPC pointers on the one GPU; the log says
# which path ran and why).
t0=$(date +%s)
node_rc=0
device_pair node-allreduce 45 --job-id 7003 --job-key 79 --node-level on \
  --max-bytes "${NODE_MAX_BYTES:-67108864}" || node_rc=1
say "device-memory all-reduce on the node level (2 processes, one GPU): $(verdict $node_rc node-allreduce) in $(($(date +%s) - t0)) s"
grep -h "node level" "$logs/node-allreduce-rank0.txt" 2> /dev/null | head -3 | tee -a "$summary"
table node-allreduce

"$python" - "$logs" <<'PY' | tee -a "$summary"
import json, sys
logs = sys.argv[1]
def load(label):
    try:
        return {r["bytes"]: r for r in map(json.loads, open(f"{logs}/{label}.jsonl"))}
    except OSError:
        return {}
sweeps = [(l, load(l)) for l in ("tributary", "collnet", "socket")]
sweeps = [(l, d) for l, d in sweeps if d]
base = dict(sweeps).get("socket", {})
head = f"{'bytes':>12}" + "".join(f" {l + '_us':>13} {'busbw':>7}" for l, _ in sweeps)
print(head + "  (vs socket)")
for b in sorted(set().union(*[d.keys() for _, d in sweeps]) if sweeps else []):
    line = f"{b:>12}"
    ratios = []
    for l, d in sweeps:
        r = d.get(b, {})
        line += f" {r.get('us', '-'):>13} {r.get('busbw_GBps', '-'):>7}"
        if l != "socket" and r.get("us") and base.get(b, {}).get("us"):
            ratios.append(f"{l} {base[b]['us'] / r['us']:.2f}x")
    print(line + "  " + ", ".join(ratios))
PY
say "gpu-check took $(($(date +%s) - start_s)) s"
[[ $kernels_rc == 0 && $device_rc == 0 && $node_rc == 0 && $plugin_rc == 0 && $socket_rc == 0 && $loaded -gt 0 ]]
