#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick start, command 2 (and CI): installs the Debian packages, builds, and
# runs the whole test suite through ctest: unit, multi-process integration,
# network-namespace, DPDK, install (find_package/pkg-config consumer) and a
# short fuzz smoke; then the sanitizer stages (scripts/sanitizers.sh).
#
# Every optional part the installed packages make buildable is required
# (DPDK, libfabric, verbs, the manager, the fuzzers): a configure that would
# quietly leave one out fails instead. A test that skips itself (exit 77: no
# root, no netns) fails the run too, since this script installs everything
# those tests need; ALLOW_SKIPS=1 accepts skips (a run without root).
# Tests labelled gpu are excluded (no GPU here; scripts/gpu-check.sh).
# Environment: CTEST_ARGS adds ctest arguments (e.g. "-L unit");
# SANITIZERS=0 skips the sanitizer stages and CROSS=0 the aarch64 stage
# (dpu/cross-build.sh) for a quick local run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/setup-debian.sh"
# The CUDA kernels build wherever the toolkit is (CI: /usr/local/cuda); they
# are never required elsewhere (Debian has no CUDA 12/13 toolkit to install).
cuda=AUTO
if [[ -x /usr/local/cuda/bin/nvcc ]] || command -v nvcc > /dev/null; then cuda=ON; fi
# The test build keeps line tables only (-g1): backtraces and sanitizer
# reports keep files and lines, and the build takes about a third less time
# than with full -g (variable locations), which no test reads.
bash "$root/scripts/build.sh" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" -DTRIBUTARY_BUILD_FUZZ=ON -DTRIBUTARY_WITH_DPDK=ON \
  -DTRIBUTARY_WITH_OFI=ON -DTRIBUTARY_WITH_VERBS=ON -DTRIBUTARY_WITH_MANAGER=ON \
  -DTRIBUTARY_WITH_METRICS=ON -DTRIBUTARY_WITH_SYSTEMD=ON -DTRIBUTARY_WITH_SIM=ON \
  -DTRIBUTARY_WITH_CUDA=$cuda
cd "$build"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
# shellcheck disable=SC2086
# Label gpu: tests that need a GPU (CI has none); scripts/gpu-check.sh runs them.
ctest --output-on-failure -j "${CTEST_JOBS:-2}" -LE gpu ${CTEST_ARGS:-} 2>&1 | tee "$log" || rc=$?
if [[ $rc -ne 0 ]]; then exit "$rc"; fi
if grep -q "(Skipped)" "$log" && [[ "${ALLOW_SKIPS:-0}" != 1 ]]; then
  echo "test.sh: tests skipped themselves (see above); they must run here (ALLOW_SKIPS=1 accepts that)" >&2
  exit 1
fi
# The DPU build: tributaryd cross-built for aarch64, its unit tests under
# qemu-user (NEON kernels, ARMv8 CRC32C) and an aarch64 daemon serving
# x86-64 ranks (dpu/cross-build.sh). CROSS=0 skips it (a quick local run).
if [[ "${CROSS:-1}" != 0 ]]; then
  bash "$root/dpu/cross-build.sh" --install --build "${CROSS_BUILD_DIR:-$root/build-aarch64}" \
    --test --package --e2e "$build"
fi
# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# threaded tests under ThreadSanitizer, each in its own build directory.
if [[ "${SANITIZERS:-1}" != 0 ]]; then
  bash "$root/scripts/sanitizers.sh"
fi
