#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Quick start, command 1: installs the Debian packages, builds, and runs the
# embedded default job: tributaryd on 127.0.0.1 plus 4 rank processes
# all-reducing 4 KiB..64 MiB of float32, printed as an nccl-tests table with
# a one-line verdict. Exit code 0 only when every result was exact.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/setup-debian.sh"
bash "$root/scripts/build.sh"
exec "${BUILD_DIR:-$root/build}/tools/tributary/tributary" demo
