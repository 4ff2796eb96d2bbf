#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configures and builds Tributary into BUILD_DIR (default: build/).
# Usage: scripts/build.sh [extra cmake -D options...]
# Environment: BUILD_DIR, BUILD_TYPE (default RelWithDebInfo), JOBS (default nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@"
else
  cmake "$build" "$@" > /dev/null
fi
cmake --build "$build" -j "$jobs"
