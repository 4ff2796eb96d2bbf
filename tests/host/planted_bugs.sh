#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Mutation check of the progress engine's unit tests (issue #11): plants one
# bug at a time into the engine, rebuilds and runs host_progress_test,
# host_recovery_test and host_congestion_test, and prints whether the tests
# caught it; each file is restored afterwards. Not part of CI (it rebuilds
# once per plant); run it after changing the engine or
# its tests. Usage: tests/host/planted_bugs.sh [BUILD_DIR] (default build/);
# PLANTS="name ..." plants only those.
set -u
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build}
run() {  # name file python-replacement
  local name=$1 file=$2
  if [[ -n ${PLANTS:-} && " $PLANTS " != *" $name "* ]]; then return; fi
  cp "$file" /tmp/plant.bak.$$
  if ! python3 -c "
import sys
p='$file'; s=open(p).read(); a=sys.argv[1]; b=sys.argv[2]
if a not in s: sys.exit(1)
open(p,'w').write(s.replace(a,b,1))" "$3" "$4"; then
    echo "$name: PATTERN NOT FOUND in $file (the code changed: update this script)"
    rm -f /tmp/plant.bak.$$
    return
  fi
  if cmake --build "$build" --target host_progress_test host_recovery_test host_congestion_test \
      > /tmp/plant-build.$$.log 2>&1; then
    if { "$build"/tests/host/host_progress_test && "$build"/tests/host/host_recovery_test &&
         "$build"/tests/host/host_congestion_test; } \
      > /tmp/plant-$name.$$.log 2>&1; then
      echo "$name: NOT caught"
    else
      echo "$name: caught by: $(grep '^\[  FAILED  \] [A-Za-z]*Test\.' /tmp/plant-$name.$$.log | sed 's/.*FAILED  \] [A-Za-z]*Test\.//; s/ (.*//' | sort -u | paste -sd, -)"
    fi
  else
    echo "$name: build failed"; tail -5 /tmp/plant-build.$$.log
  fi
  cp /tmp/plant.bak.$$ "$file"
}
run shadow host/src/window.h 'return static_cast<uint8_t>((seq / size()) & 1);' 'return 0;'
run karn host/src/progress.cc 'if (slot.retries == 0 && !slot.data_resent) {' 'if (true) {'
run one_probe host/src/progress_timers.cc '!slot.held && (slot.unanswered_probes >= 2 ||' '!slot.held && (slot.unanswered_probes >= 1 ||'
run rack_off host/src/progress_timers.cc '    if (sent_before_newest && now >= overdue_at) {' '    if (false) {'
run rack_from_resends host/src/progress.cc '  if (!slot.data_resent) rack_.OnAnswered(slot.first_sent_ns' '  rack_.OnAnswered(slot.last_sent_ns'
run rack_no_widen host/src/progress.cc '    if (slot.early_out) rack_.OnSpurious(now, rtt_.srtt_ns());' ''
run rate_counts_idle host/src/progress.cc '  if (window_.busy() == 0) delivery_.Pause(now);' ''
run no_resend_on_loss host/src/progress.cc '  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
  SendFragment(h.slot, now, true, false);' '  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);'
run checksum_fatal host/src/control_messages.cc '      return Status::Ok();  // corruption on the way: retransmission recovers' '      msg = "bad checksum"; break;'
run placed_any_shadow host/src/progress.cc '      r.shadow != window_.ShadowOf(slot.next_seq)) {
    counters_.duplicate_results' '      false) {
    counters_.duplicate_results'
run held_resends host/src/progress.cc '    slot.held = true;' '    slot.held = false;'
run no_epoch_check host/src/progress.cc '      if (h.epoch != id_.epoch) {
        counters_.rejected.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      HandleResult(p, now);' '      HandleResult(p, now);'
run cc_ignored host/src/progress.cc '  const uint32_t limit = cwnd_.limit();' '  const uint32_t limit = window_.size();'
run cc_no_lowest_rule host/src/progress.cc '    return seq < admit_below;' '    return false;'
run cc_highest_first host/src/window.h 'return slots_[a].next_seq > slots_[b].next_seq;' 'return slots_[a].next_seq < slots_[b].next_seq;'
run mass_timeout_resends_all host/src/progress_timers.cc '    budget = std::min<size_t>(budget, cwnd_.limit());' ''
run timer_not_stretched host/src/progress_timers.cc 'const uint32_t scale = cwnd_.timer_scale(now);' 'const uint32_t scale = 1;'
run reliable_timer_capped host/src/progress_timers.cc 'const uint64_t rto = scale > 1 ? std::max(base, std::min(base * scale, rto_max_ns)) : base;' 'const uint64_t rto = std::min(base * scale, rto_max_ns);'
run stall_at_an_eighth host/src/progress_timers.cc 'std::max<size_t>(kMassTimeoutMin, window_.busy() / 2)' 'std::max<size_t>(kMassTimeoutMin, window_.busy() / 8)'
run stall_cut_per_backoff host/src/congestion.h '    if (cut_since_result_) return;' ''
run no_tail_probe host/src/progress_timers.cc 'if (!reliable_ && rtt_.have_sample() && window_.busy() > 0 && !tail_probe_sent_) {' 'if (false) {'
run ecn_aux_ignored host/src/progress.cc 'const bool marked = p.ce || h.aux > 0;' 'const bool marked = p.ce;'
run ecn_ce_ignored host/src/progress.cc 'const bool marked = p.ce || h.aux > 0;' 'const bool marked = h.aux > 0;'
run ecn_no_cut host/src/congestion.h '    if (epoch_marked_ > 0) {' '    if (false) {'
run window_acts_on_later_data host/src/progress.cc 's.data_order > probe_order) continue;' 's.data_order > probe_order + 100) continue;'
run answer_taken_for_newest host/src/progress.cc 'const uint64_t answered = slot.first_probe_order;' 'const uint64_t answered = slot.probe_order;'
run window_replay_accepted host/src/progress.cc '  if (windowed && slot.probes_out == 0) {' '  if (false) {'
run stale_not_held_resends host/src/progress.cc 'const bool resend = !held && answered > slot.data_order;' 'const bool resend = !held;'
run window_no_result_ask host/src/progress.cc '    if (proto::WindowBit(complete, j) &&' '    if (false &&'
run poll_never_stops host/src/progress.cc '      if (polls_left_ > 0) --polls_left_;' ''
run poll_no_backoff host/src/progress.cc '      poll_backoff_ = std::min(poll_backoff_ + 1, kMaxPollBackoff);' '      poll_backoff_ = 0;'
run poll_not_armed_by_order host/src/progress.cc 'if (before.busy && before.next_seq == seq - 1) polls_left_' 'if (false) polls_left_'
run poll_before_loss host/src/progress_timers.cc '!options_.window_poll || polls_left_ == 0' '!options_.window_poll'
cmake --build "$build" --target host_progress_test host_recovery_test host_congestion_test > /dev/null 2>&1
