#!/usr/bin/env bash
# Quick start, command 2 (and CI): installs the Debian packages, builds, and
# runs the whole test suite through ctest: unit, multi-process integration,
# install (find_package/pkg-config consumer) and a short fuzz smoke; then the
# sanitizer stages (scripts/sanitizers.sh).
# Environment: CTEST_ARGS adds ctest arguments (e.g. "-L unit").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
bash "$root/scripts/setup-debian.sh"
bash "$root/scripts/build.sh"
cd "$build"
# shellcheck disable=SC2086
ctest --output-on-failure -j "${CTEST_JOBS:-2}" ${CTEST_ARGS:-}
# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer, and the
# threaded tests under ThreadSanitizer, each in its own build directory.
# SANITIZERS=0 skips this stage (a quick local run).
if [[ "${SANITIZERS:-1}" != 0 ]]; then
  bash "$root/scripts/sanitizers.sh"
fi
