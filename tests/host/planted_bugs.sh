#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mutation check of the progress engine's unit tests (issue #11): plants one
# bug at a time into the engine, rebuilds and runs host_progress_test, and
# prints whether the tests caught it; each file is restored afterwards. Not
# part of CI (it rebuilds eight times); run it after changing the engine or
# its tests. Usage: tests/host/planted_bugs.sh [BUILD_DIR] (default build/).
set -u
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build}
run() {  # name file python-replacement
  local name=$1 file=$2
  cp "$file" /tmp/plant.bak.$$
  python3 -c "
import sys
p='$file'; s=open(p).read(); a=sys.argv[1]; b=sys.argv[2]
assert a in s, a
open(p,'w').write(s.replace(a,b,1))" "$3" "$4"
  if cmake --build "$build" --target host_progress_test > /tmp/plant-build.$$.log 2>&1; then
    if "$build"/tests/host/host_progress_test > /tmp/plant-$name.$$.log 2>&1; then
      echo "$name: NOT caught"
    else
      echo "$name: caught by: $(grep '^\[  FAILED  \] ProgressTest' /tmp/plant-$name.$$.log | sed 's/.*ProgressTest\.//; s/ (.*//' | sort -u | paste -sd, -)"
    fi
  else
    echo "$name: build failed"; tail -5 /tmp/plant-build.$$.log
  fi
  cp /tmp/plant.bak.$$ "$file"
}
run shadow host/src/window.h 'return static_cast<uint8_t>((seq / size()) & 1);' 'return 0;'
run karn host/src/progress.cc 'if (slot.retries == 0) Sample(now - slot.first_sent_ns);' 'Sample(now - slot.first_sent_ns);'
run one_probe host/src/progress.cc 'const bool resend = !slot.held && slot.unanswered_probes >= 2;' 'const bool resend = !slot.held && slot.unanswered_probes >= 1;'
run no_resend_on_loss host/src/progress.cc '  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
  SendFragment(h.slot, now, true, false);' '  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);'
run checksum_fatal host/src/control_messages.cc '      return Status::Ok();  // corruption on the way: retransmission recovers' '      msg = "bad checksum"; break;'
run placed_any_shadow host/src/progress.cc '      r.shadow != window_.ShadowOf(slot.next_seq)) {
    counters_.duplicate_results' '      false) {
    counters_.duplicate_results'
run held_resends host/src/progress.cc '  if (h.flags & proto::kFlagHeld) {
    slot.held = true;
    return;
  }' '  if (h.flags & proto::kFlagHeld) {
    slot.held = false;
    return;
  }'
run no_epoch_check host/src/progress.cc '      if (h.epoch != id_.epoch) {
        counters_.rejected.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      HandleResult(p, now);' '      HandleResult(p, now);'
cmake --build "$build" --target host_progress_test > /dev/null 2>&1
