#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A short run of tributary_dpdk_bench (ring port, no NIC, no root), so the
# benchmark keeps working: one lane at 1 KiB, then beside a flooding job
# with the fair queue. Checks exit status and what the figures must show
# whatever the machine's speed: rounds completed, and with --flood the
# flood's frames shed by the fair queue (the harness offers 96 forgeries
# per poll against a lane that serves 32, so a backlog always builds).
# Usage: smoke_test.sh BENCH. Exit 77: the EAL cannot start here.
set -u -o pipefail
bench=$1
out=$("$bench" --seconds 0.3 --payload 1024 2>&1); rc=$?
[[ $rc == 77 ]] && { echo "$out"; exit 77; }
[[ $rc == 0 ]] || { echo "$out"; echo "FAIL: plain run exit $rc"; exit 1; }
completions() { sed -n 's/.*completions \([0-9]*\),.*/\1/p' <<< "$1" | head -1; }
c=$(completions "$out")
[[ -n $c && $c -gt 0 ]] || { echo "$out"; echo "FAIL: no completions"; exit 1; }
out=$("$bench" --seconds 0.3 --payload 1024 --flood 96 2>&1); rc=$?
[[ $rc == 0 ]] || { echo "$out"; echo "FAIL: flood run exit $rc"; exit 1; }
c=$(completions "$out")
shed=$(sed -n 's/.*: \([0-9]*\) shed by the fair queue.*/\1/p' <<< "$out")
[[ -n $c && $c -gt 0 ]] || { echo "$out"; echo "FAIL: the measured job completed nothing beside the flood"; exit 1; }
[[ -n $shed && $shed -gt 0 ]] || { echo "$out"; echo "FAIL: the fair queue shed nothing"; exit 1; }
out=$("$bench" --seconds 0.1 --payload 1024 --flood 300 2>&1); rc=$?
[[ $rc == 2 ]] || { echo "$out"; echo "FAIL: --flood 300 not refused (exit $rc)"; exit 1; }
echo "PASS: $c rounds beside the flood, $shed forgeries shed"
