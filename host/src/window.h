// SPDX-License-Identifier: Apache-2.0
// The fragment window: W slots carrying one communicator's stream of
// fragments (FORMAT.md §9).
//
// Every collective's fragments are numbered in one stream (seq) shared by
// all collectives of the communicator; fragment seq travels through slot
// seq % W with shadow set (seq / W) % 2. A slot carries its next fragment
// only once the result of its previous one arrived, so the window clocks
// itself; slots advance independently, so one lost packet delays one slot,
// not the stream. The window knows slots and sequence numbers; what a slot
// sends and when it times out is the progress engine's.
// Not synchronized: the progress thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "host/src/operation.h"

namespace tributary::host {

struct Slot {
  uint64_t next_seq = 0;  // the fragment this slot carries now (busy) or next
  bool busy = false;
  Operation* op = nullptr;
  uint64_t elem_offset = 0;
  uint32_t elem_count = 0;
  uint64_t first_sent_ns = 0;
  uint64_t last_sent_ns = 0;       // the last send of the data or a probe
  // The order of the last send of the data and of the last probe among
  // everything this rank sent (ProgressEngine's tx_order_): a STATUS
  // answering a probe speaks for the data sent before it.
  uint64_t data_order = 0;
  uint64_t probe_order = 0;
  // The lowest probe number an answer may still echo (0: none out) and
  // how many are out (progress_status.cc). An answer speaks of the data
  // sent before the probe it echoes; from an aggregator that predates the
  // echo it is taken for the oldest probe's.
  uint64_t first_probe_order = 0;
  uint32_t probes_out = 0;
  uint64_t deadline_ns = 0;
  uint32_t retries = 0;            // timer expiries (backoff exponent)
  uint32_t early_recoveries = 0;   // probes or resends because later fragments completed first
  bool early_out = false;          // the last send was one of them (unanswered yet)
  bool data_resent = false;        // the contribution went out more than once
  bool held = false;               // STATUS said the aggregator has our data
  bool probe_pending = false;      // a RESULT_REQUEST is unanswered
  uint64_t probe_sent_ns = 0;      // when the last one was sent
  uint32_t unanswered_probes = 0;  // consecutive probes with no answer
  uint32_t missing_count = 0;      // from the aggregator's last STATUS
  std::vector<uint32_t> missing;   // first few missing senders
};

class FragmentWindow {
 public:
  explicit FragmentWindow(uint32_t slots);

  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  Slot& slot(uint32_t i) { return slots_[i]; }
  const Slot& slot(uint32_t i) const { return slots_[i]; }
  // The shadow set fragment `seq` uses.
  uint8_t ShadowOf(uint64_t seq) const { return static_cast<uint8_t>((seq / size()) & 1); }
  size_t busy() const { return busy_; }

  // Numbers `nfrags` new fragments; returns the first one's seq.
  uint64_t Append(uint64_t nfrags);
  // Idle slots whose next fragment may now exist become ready.
  void WakeIdle();
  // The ready slot with the lowest next fragment, marked busy with its
  // owner's fragment, if admit(seq) allows it; false when none is ready or
  // admit refused it (it stays ready). Slots whose next fragment does not
  // exist yet go idle. `ops` are the unfinished operations, ordered by
  // first_seq. Lowest first: under a congestion limit every rank sends the
  // job's fragments in the same order (see LowestUnfinished).
  template <typename Ops, typename Admit>
  bool NextToSend(const Ops& ops, Admit&& admit, uint32_t* index);
  // The lowest fragment not completed yet (in flight or not sent): every
  // fragment below it is done. A rank that may always send fragments below
  // LowestUnfinished() + n (n >= 1), whatever else it holds in flight,
  // never deadlocks a job whose ranks limit what they have in flight
  // differently: the job's lowest unfinished fragment is sendable at every
  // rank that has not sent it. O(slots).
  uint64_t LowestUnfinished() const;
  // Slot i's fragment completed: it moves to its next fragment.
  void Release(uint32_t i);
  // Every slot stops carrying anything (abort).
  void Clear();

 private:
  void Claim(uint32_t i, Operation* owner);

  std::vector<Slot> slots_;
  // Slots free to carry their next fragment: a min-heap on next_seq.
  bool LowerSeqLater(uint32_t a, uint32_t b) const { return slots_[a].next_seq > slots_[b].next_seq; }
  void PushReady(uint32_t i);

  std::vector<uint32_t> ready_;
  std::vector<uint32_t> idle_;   // free slots whose next fragment is not submitted yet
  uint64_t seq_end_ = 0;         // one past the last numbered fragment
  size_t busy_ = 0;
};

template <typename Ops, typename Admit>
bool FragmentWindow::NextToSend(const Ops& ops, Admit&& admit, uint32_t* index) {
  const auto later = [this](uint32_t a, uint32_t b) { return LowerSeqLater(a, b); };
  while (!ready_.empty()) {
    const uint32_t i = ready_.front();
    if (slots_[i].next_seq < seq_end_ && !admit(slots_[i].next_seq)) return false;
    std::pop_heap(ready_.begin(), ready_.end(), later);
    ready_.pop_back();
    if (slots_[i].next_seq >= seq_end_) {
      idle_.push_back(i);
      continue;
    }
    // The op that owns fragment next_seq (ops is short and ordered).
    Operation* owner = nullptr;
    for (const auto& op : ops) {
      if (op->Owns(slots_[i].next_seq)) {
        owner = op.get();
        break;
      }
    }
    Claim(i, owner);
    *index = i;
    return true;
  }
  return false;
}

}  // namespace tributary::host
