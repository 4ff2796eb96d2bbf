#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prepares what scripts/gpu-check.sh runs on a lent GPU machine, whose image
# has CUDA, PyTorch (with its NCCL) and CMake but none of Debian's libraries
# Tributary links: builds a lean Release tree here (udp and ofi; no DPDK,
# verbs or manager) and copies into BUNDLE (default .gpu-bundle, which must
# be ignored: .git/info/exclude) the stripped tributaryd and NCCL plugin,
# and every shared library they and libfabric load that is not part of the
# C/C++ runtime (libsodium, yaml-cpp, libfabric and its own dependencies).
# Carry BUNDLE with the device call (see scripts/gpu-check.sh).
# Usage: scripts/gpu-bundle.sh [BUNDLE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$root/.gpu-bundle}
build=${GPU_BUNDLE_BUILD:-$root/build-gpu-bundle}
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTRIBUTARY_WITH_DPDK=OFF -DTRIBUTARY_WITH_VERBS=OFF -DTRIBUTARY_WITH_MANAGER=OFF \
  -DTRIBUTARY_WITH_OFI=ON -DTRIBUTARY_BUILD_FUZZ=OFF -DTRIBUTARY_BUILD_BENCH=OFF > /dev/null
cmake --build "$build" -j "$(nproc)" --target tributaryd nccl_net_tributary \
  tributary_kernels_gpu_test kernel_reduce_bandwidth device_allreduce tributary_kernels_shared
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib"
cp "$build/switch_agent/tributaryd" "$bundle/bin/"
cp "$build/host/nccl/libnccl-net-tributary.so" "$bundle/lib/"
# The node level's reduce kernel, which libtributary.so loads from its own
# directory (the ldd loop below copies libtributary.so itself).
cp "$build/host/libtributary-kernels.so" "$bundle/lib/"
# The CUDA kernels (kernels/): their GPU test and bandwidth table. They load
# the CUDA runtime they were built with (copied below) and the machine's
# driver (libcuda.so.1, never copied).
cp "$build/tests/kernels/tributary_kernels_gpu_test" "$build/bench/kernel_reduce_bandwidth" \
  "$build/bench/device_allreduce" "$bundle/bin/"
libfabric=$(ldconfig -p | awk '/libfabric\.so\.1 .*x86-64/ && !f { f = $NF } END { print f }')
[[ -n $libfabric ]] || { echo "gpu-bundle: libfabric.so.1 not found (apt-get install libfabric1)" >&2; exit 1; }
cp -L "$libfabric" "$bundle/lib/libfabric.so.1"
# The C and C++ runtimes are the image's own (newer than Debian 12's, and
# backward compatible); everything else travels.
runtime='^(linux-vdso|ld-linux|libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+)\.'
for f in "$bundle/bin/"* "$bundle/lib/libnccl-net-tributary.so" "$bundle/lib/libfabric.so.1" \
  "$bundle/lib/libtributary-kernels.so"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
done | sort -u | while read -r name path; do
  if [[ ! $name =~ $runtime ]] && [[ ! -e $bundle/lib/$name ]]; then cp -L "$path" "$bundle/lib/$name"; fi
done
strip --strip-unneeded "$bundle/bin/"* "$bundle/lib/"*.so* 2> /dev/null || true
du -sh "$bundle"
ls "$bundle/lib"
