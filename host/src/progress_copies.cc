// SPDX-License-Identifier: Apache-2.0
// Redundant copies under loss (FORMAT.md §8.4): which first sends go twice,
// and the measurements that decide whether copies pay on this path
// (copy_choice.h).
#include "common/log.h"
#include "host/src/progress.h"

namespace tributary::host {

// While the aggregator reports loss, the first send of a fragment within
// the first redundant_max_bytes of its collective goes out twice (the
// second copy marked redundant), so that losing one copy costs nothing:
// small collectives whole, at most that much of big ones; where the copies
// pay on this path.
int ProgressEngine::Copies(Operation& op, const Slot& slot, bool first_send, uint64_t now) {
  const bool lossy = first_send && redundant_ && !reliable_ && options_.redundant_max_bytes > 0;
  if (first_send && !lossy) op.copy_measurable = false;
  if (!lossy) return 1;
  const uint64_t decisions = copy_choice_.decisions();
  if (copy_choice_.Advance(op.desc.collective_id)) LogCopyChoice(now);
  if (copy_choice_.decisions() != decisions) {
    TRIB_LOG(kDebug, "progress", "collective %llu: copies %s (%.0f us with, %.0f us without)",
             static_cast<unsigned long long>(op.desc.collective_id),
             copy_choice_.copies() ? "on" : "off", copy_choice_.with_ns() / 1e3,
             copy_choice_.without_ns() / 1e3);
  }
  const uint64_t limit = options_.redundant_max_bytes;
  if ((slot.elem_offset + slot.elem_count) * op.elem_size > limit) return 1;
  const bool whole = op.desc.count * op.elem_size <= limit;
  return copy_choice_.CopiesFor(op.desc.collective_id, whole) ? 2 : 1;
}

// A collective completed while the aggregator reported loss; its latency is
// a sample of the trial it fell in.
void ProgressEngine::ChooseCopies(const Operation& op) {
  copy_choice_.OnComplete(op.desc.collective_id, op.desc.count * op.elem_size,
                          clock_() - op.submit_ns);
}

// The choice changed: at INFO, at most once per kCopyChoiceLogNs.
void ProgressEngine::LogCopyChoice(uint64_t now) {
  if (copy_choice_logged_ns_ != 0 && now - copy_choice_logged_ns_ < kCopyChoiceLogNs) return;
  copy_choice_logged_ns_ = now;
  TRIB_LOG(kInfo, "progress",
           "job %u rank %u: redundant copies %s on this path under loss (collectives took "
           "%.0f us with them, %.0f us without; tried again within %llu collectives)",
           id_.job_id, id_.rank, copy_choice_.copies() ? "pay" : "do not pay",
           copy_choice_.with_ns() / 1e3, copy_choice_.without_ns() / 1e3,
           static_cast<unsigned long long>(CopyChoice::kEpoch * CopyChoice::kCycle *
                                           CopyChoice::kMaxSkip));
}

}  // namespace tributary::host
