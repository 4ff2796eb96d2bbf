// SPDX-License-Identifier: Apache-2.0
// FragmentWindow; see window.h.
#include "host/src/window.h"

#include <algorithm>

#include "common/check.h"

namespace tributary::host {

FragmentWindow::FragmentWindow(uint32_t slots) : slots_(slots) {
  ready_.reserve(slots);
  idle_.reserve(slots);
  for (uint32_t i = 0; i < slots; ++i) {
    slots_[i].next_seq = i;
    idle_.push_back(i);
  }
}

uint64_t FragmentWindow::Append(uint64_t nfrags) {
  const uint64_t first = seq_end_;
  seq_end_ += nfrags;
  return first;
}

void FragmentWindow::PushReady(uint32_t i) {
  ready_.push_back(i);
  std::push_heap(ready_.begin(), ready_.end(),
                 [this](uint32_t a, uint32_t b) { return LowerSeqLater(a, b); });
}

void FragmentWindow::WakeIdle() {
  for (uint32_t i : idle_) PushReady(i);
  idle_.clear();
}

uint64_t FragmentWindow::LowestUnfinished() const {
  uint64_t lowest = UINT64_MAX;
  for (const Slot& s : slots_) lowest = std::min(lowest, s.next_seq);
  return lowest;
}

void FragmentWindow::Claim(uint32_t i, Operation* owner) {
  TRIB_CHECK_MSG(owner != nullptr, "fragment sequence without an owning operation");
  Slot& s = slots_[i];
  const uint64_t frag = s.next_seq - owner->first_seq;
  s.busy = true;
  ++busy_;
  s.op = owner;
  s.elem_offset = frag * owner->elems_per_frag;
  s.elem_count = owner->CountOf(frag);
  s.retries = 0;
  s.early_recoveries = 0;
  s.early_out = false;
  s.data_resent = false;
  s.held = false;
  s.probe_pending = false;
  s.probe_sent_ns = 0;
  s.data_order = 0;
  s.probe_order = 0;
  s.first_probe_order = 0;
  s.probes_out = 0;
  s.unanswered_probes = 0;
  s.missing_count = 0;
  s.missing.clear();
}

void FragmentWindow::Release(uint32_t i) {
  Slot& s = slots_[i];
  s.busy = false;
  --busy_;
  s.op = nullptr;
  s.next_seq += size();
  PushReady(i);
}

void FragmentWindow::Clear() {
  for (Slot& s : slots_) {
    s.busy = false;
    s.op = nullptr;
  }
  busy_ = 0;
  ready_.clear();
}

}  // namespace tributary::host
