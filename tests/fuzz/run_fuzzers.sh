#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every built libFuzzer target for a chosen time and reports exec/s.
#
#   tests/fuzz/run_fuzzers.sh <seconds> [build-dir]      (build-dir: ./build)
#
# Fuzzers are <build-dir>/fuzz/<name> (cmake/TributaryFuzz.cmake). A fuzzer
# NAME_fuzz reads seeds from tests/fuzz/corpus/NAME/ (read only) and writes
# what it finds into a scratch corpus <build-dir>/fuzz/<name>_corpus, so
# repeated runs build on each other without touching the source tree.
# Crash reproducers go to <build-dir>/fuzz/artifacts/. Exit status: 0 when
# every fuzzer ran clean, 1 if any found a failure, 2 on usage errors.
set -euo pipefail

if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 <seconds> [build-dir]" >&2
  exit 2
fi
seconds=$1
build_dir=${2:-build}
src_dir=$(cd "$(dirname "$0")" && pwd)
fuzz_dir="$build_dir/fuzz"

if [[ ! -d "$fuzz_dir" ]]; then
  echo "no $fuzz_dir: configure with clang++ available and build first" >&2
  exit 2
fi
mkdir -p "$fuzz_dir/artifacts"

status=0
found=0
for bin in "$fuzz_dir"/*_fuzz; do
  [[ -x "$bin" && -f "$bin" ]] || continue
  found=1
  name=$(basename "$bin")
  seeds="$src_dir/corpus/${name%_fuzz}"
  scratch="$fuzz_dir/${name}_corpus"
  mkdir -p "$scratch"
  corpora=("$scratch")
  [[ -d "$seeds" ]] && corpora+=("$seeds")
  log="$fuzz_dir/$name.log"
  echo "== $name: ${seconds}s, seeds ${seeds}"
  if "$bin" -max_total_time="$seconds" -timeout=10 -print_final_stats=1 \
      -artifact_prefix="$fuzz_dir/artifacts/${name}-" "${corpora[@]}" >"$log" 2>&1; then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  echo "   $result: ${execs:-?} execs, ${rate:-?} exec/s, corpus $(ls "$scratch" | wc -l) new files (log: $log)"
  [[ $result == ok ]] || tail -n 30 "$log" | sed 's/^/   | /'
done

if [[ $found == 0 ]]; then
  echo "no fuzzers in $fuzz_dir" >&2
  exit 2
fi
exit $status
