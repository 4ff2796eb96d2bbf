#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Cross-builds tributaryd and the CLI for aarch64 (BlueField-class DPUs,
# Arm servers) on Debian amd64 with Debian's cross compiler and arm64
# development packages, and checks the result under qemu-user:
#
#   --install        dpkg --add-architecture arm64 and apt-get the cross
#                    compiler, qemu-user-static and the arm64 -dev packages
#                    (root; idempotent)
#   --build DIR      build directory (default: <repo>/build-aarch64)
#   --test           run the unit tests of the parts a DPU daemon runs
#                    (proto incl. CRC32C, reduce incl. the NEON variant,
#                    engine, daemon config and dataplane, common) under
#                    qemu-aarch64 through ctest's emulator; fails if the
#                    NEON kernels or the ARMv8 CRC32C path did not run
#   --e2e NATIVE     an aarch64 tributaryd under qemu serving x86-64 ranks
#                    (`tributary bench` of the NATIVE build directory, 4
#                    ranks, 4 B..4 MiB, every result checked) on loopback;
#                    fails unless every result is exact and the daemon
#                    reduced with its NEON kernels
#
# Built: the udp dataplane, the CLI and the host library. DPDK, libfabric,
# gRPC (the manager and the daemons' manager client) and CUDA are off here
# (their arm64 -dev packages are not installed by --install); a native build
# on the DPU turns them on as on any machine. Loopback only; stops only the
# daemon it started, by pid. Exit 0 when every requested step passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build="$root/build-aarch64"
install=0 test=0 e2e=""
while (($#)); do
  case $1 in
    --install) install=1 ;;
    --build) build=$2; shift ;;
    --test) test=1 ;;
    --e2e) e2e=$2; shift ;;
    -h|--help) sed -n '3,26p' "$0"; exit 0 ;;
    *) echo "cross-build: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
QEMU_LD=/usr/aarch64-linux-gnu

if ((install)); then
  if [[ $(id -u) -ne 0 ]]; then echo "cross-build: --install needs root" >&2; exit 1; fi
  packages=(g++-aarch64-linux-gnu qemu-user-static libcli11-dev
            libyaml-cpp-dev:arm64 libsodium-dev:arm64 libgtest-dev:arm64 libgmock-dev:arm64)
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "cross-build: installing ${missing[*]}"
    dpkg --add-architecture arm64
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

command -v aarch64-linux-gnu-g++ > /dev/null ||
  { echo "cross-build: aarch64-linux-gnu-g++ not found (run with --install)" >&2; exit 1; }
mkdir -p "$build"
generator=()
if command -v ninja > /dev/null; then generator=(-G Ninja); fi
cmake -S "$root" -B "$build" "${generator[@]}" \
  -DCMAKE_TOOLCHAIN_FILE="$root/dpu/toolchain-aarch64.cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRIBUTARY_BUILD_BENCH=OFF -DTRIBUTARY_BUILD_FUZZ=OFF -DTRIBUTARY_WITH_CUDA=OFF \
  -DTRIBUTARY_WITH_DPDK=OFF -DTRIBUTARY_WITH_OFI=OFF -DTRIBUTARY_WITH_VERBS=OFF \
  -DTRIBUTARY_WITH_MANAGER=OFF -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
# common_log_test is not among them: under qemu-user 7.2 it hung in
# LogTest.LineCarriesHostPidAndRankWhenKnown (a thread and std::regex; not
# diagnosed); it runs natively in every other stage.
tests=(proto_codec_test proto_auth_test tributary_reduce_test tributary_engine_test
       agent_config_test agent_dataplane_test agent_straggler_monitor_test
       common_host_port_test common_yaml_input_test)
cmake --build "$build" -j "$(nproc)" --target tributaryd tributary_cli "${tests[@]}"
readelf -h "$build/switch_agent/tributaryd" | grep -q "Machine: *AArch64" ||
  { echo "cross-build: tributaryd is not an aarch64 binary" >&2; exit 1; }
echo "cross-build: aarch64 tributaryd, tributary and ${#tests[@]} test binaries in $build"

if ((test)); then
  regex="^($(IFS='|'; echo "${tests[*]}"))\$"
  log="$build/qemu-tests.log"
  (cd "$build" && ctest --output-on-failure -R "$regex" -V) > "$log" 2>&1 ||
    { grep -E "Failed|FAILED|Error" "$log" | head -40 >&2; echo "cross-build: tests failed under qemu ($log)" >&2; exit 1; }
  # The Arm-specific code must really have run, not been skipped.
  grep -q "KernelVariants.*/neon" "$log" && ! grep -q "SKIPPED.*neon" "$log" ||
    { echo "cross-build: the NEON reduce kernels did not run under qemu" >&2; exit 1; }
  grep -q "OK \] Crc32c.ImplementationsAgreeOnRandomData" "$log" ||
    { echo "cross-build: the ARMv8 CRC32C path did not run under qemu" >&2; exit 1; }
  echo "cross-build: ${#tests[@]} test binaries passed under qemu-aarch64 (NEON kernels and ARMv8 CRC32C included)"
fi

if [[ -n $e2e ]]; then
  cli="$e2e/tools/tributary/tributary"
  [[ -x $cli ]] || { echo "cross-build: $cli not built (native build directory)" >&2; exit 1; }
  qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64)
  work=$(mktemp -d /tmp/tributary-cross.XXXXXX)
  daemon_pid=""
  cleanup() {
    if [[ -n $daemon_pid ]]; then kill "$daemon_pid" 2> /dev/null; wait "$daemon_pid" 2> /dev/null; fi
    rm -rf "$work"
  }
  trap cleanup EXIT INT TERM
  "$qemu" -L "$QEMU_LD" "$build/switch_agent/tributaryd" --port 0 > "$work/daemon.log" 2>&1 &
  daemon_pid=$!
  addr=""
  for ((i = 0; i < 100; ++i)); do
    sleep 0.1
    addr=$(sed -n 's/^tributaryd listening on \(.*\)$/\1/p' "$work/daemon.log" | head -1)
    [[ -n $addr ]] && break
  done
  [[ -n $addr ]] || { cat "$work/daemon.log" >&2; echo "cross-build: the aarch64 tributaryd did not start" >&2; exit 1; }
  timeout 300 "$cli" bench --daemon "$addr" --ranks 4 --node-level off -b 4 -e 4M -f 16 -n 3 -w 1 \
    -d float -c 1 > "$work/bench.log" 2>&1 || true
  grep -q "reduce kernels 'neon'" "$work/daemon.log" ||
    { cat "$work/daemon.log" >&2; echo "cross-build: the daemon did not use its NEON kernels" >&2; exit 1; }
  grep -q "Out of bounds values : 0 OK" "$work/bench.log" ||
    { cat "$work/bench.log" >&2; echo "cross-build: x86-64 ranks through the aarch64 daemon were not exact" >&2; exit 1; }
  echo "cross-build: aarch64 tributaryd (qemu, NEON kernels) served 4 x86-64 ranks, 4 B..4 MiB, exact"
fi
