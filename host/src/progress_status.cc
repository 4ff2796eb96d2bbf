// SPDX-License-Identifier: Apache-2.0
// The progress engine's reading of the aggregator's STATUS (progress.h;
// FORMAT.md §3.6, §8.3): which probe it answers, what it says of the data
// sent before that probe, and the windowed STATUS's resends. Apart from
// progress.cc, which moves packets, because it is loss recovery.
#include <algorithm>

#include "host/src/control_messages.h"
#include "host/src/progress.h"

namespace tributary::host {

// STATUS answers a probe (RESULT_REQUEST) or a duplicate contribution while
// the round is pending. If the aggregator holds our data we only wait (and
// later probe again, header only); if it does not, the data was lost and is
// resent at once instead of after another timeout.
//
// Which probe it answers: the aggregator echoes the probe's number
// (FORMAT.md §3.6). A numbered STATUS is read only while that probe is out
// (its number between the oldest unanswered probe's and the latest's), and
// answers it and every older one: a late answer, or one sniffed and
// replayed, names a probe already answered and changes nothing. An
// aggregator that numbers its answers sends an unnumbered STATUS only for a
// copy of the data (a duplicate contribution), always "held" and never
// windowed: one touches no probe. An unnumbered "not held" or windowed one
// comes from an aggregator that predates the numbers (none seen yet from
// this job's aggregator) and is taken for the answer to the oldest probe
// still out. Either way "not held" acts only when the probe answered went
// out after our latest copy of the data: an answer about an earlier copy
// says nothing of this one.
void ProgressEngine::HandleStatus(const proto::PacketView& p, uint64_t now) {
  const proto::Header& h = p.header;
  if (h.slot >= window_.size() || h.epoch != id_.epoch) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (h.flags & proto::kFlagGap) return HandleGapReport(p, now);
  uint64_t number = 0;
  const bool numbered = proto::DecodeRequestSeq(p, &number);
  if (numbered && keepalive_order_ != 0 && number == keepalive_order_) {
    keepalive_order_ = 0;  // the keepalive's answer: the aggregator holds the job
    answers_numbered_ = true;
    return;
  }
  Slot& slot = window_.slot(h.slot);
  if (!slot.busy || slot.op->desc.collective_id != h.collective_id ||
      slot.elem_offset != h.elem_offset) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);  // late, or replayed
    return;
  }
  const bool held = (h.flags & proto::kFlagHeld) != 0;
  const bool windowed = (h.flags & proto::kFlagWindow) != 0;
  if (numbered) answers_numbered_ = true;  // authentic: only the aggregator numbers
  uint64_t answered = 0;  // the order of the probe answered (0: none was out)
  if (numbered) {
    if (slot.probes_out == 0 || number < slot.first_probe_order || number > slot.probe_order) {
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    answered = number;
  } else if (held && !windowed) {
    // The answer to a copy of the data (or, from an aggregator that
    // predates the echo, perhaps to a probe: it says "wait" either way, and
    // a probe it leaves out is asked again by the timer, never resent while
    // held). Touching no probe, one sniffed and replayed cannot use up the
    // probe whose genuine answer is on its way.
    RecordMissing(p, &slot);
    NoteHeld(&slot, now);
    if (!answers_numbered_) {
      // From an aggregator that predates the echo, perhaps a probe's
      // answer: that probe is no longer pending (an ask for a lost RESULT
      // is not held back by it). Which probes are out stays as it was.
      slot.probe_pending = false;
      slot.unanswered_probes = 0;
    }
    return;
  } else if (answers_numbered_) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);  // never sent unnumbered
    return;
  } else {
    // A windowed STATUS may make us resend a whole window: it is read only
    // as the answer to a probe still outstanding (FORMAT.md §8.3).
    if (windowed && slot.probes_out == 0) {
      counters_.rejected.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    answered = slot.first_probe_order;
  }
  // A STATUS answers our own probe at once: a pure round trip, when it is
  // known which probe it answers (the latest one's send time is kept).
  if (numbered ? number == slot.probe_order
               : slot.probe_pending && slot.probes_out == 1 && slot.unanswered_probes == 0) {
    if (slot.probe_sent_ns != 0) Sample(now - slot.probe_sent_ns);
  }
  const bool poll_answer = h.slot == poll_slot_ && slot.next_seq == poll_seq_ &&
                           (!numbered || number >= poll_order_);
  if (numbered && number < slot.probe_order) {
    // An older probe's answer: the later ones are still out.
    slot.first_probe_order = number + 1;
    slot.probes_out = 1;
  } else {
    slot.probe_pending = false;
    slot.unanswered_probes = 0;
    slot.probes_out = 0;
    slot.first_probe_order = 0;
  }
  uint32_t acted = 0;
  if (windowed) {
    acted = ApplyStatusWindow(p, slot.next_seq, answered, now);
  } else {
    RecordMissing(p, &slot);
  }
  const bool resend = !held && answered > slot.data_order;
  if (poll_answer) {
    // The window poll's answer: the next one may go at once if this one
    // found something to do, else after a growing pause (MaybePollWindow).
    poll_slot_ = kNoPoll;
    poll_answered_ns_ = now;
    poll_rtt_ns_ = now - poll_sent_ns_;
    if (acted > 0 || resend) {
      poll_backoff_ = 0;
    } else {
      poll_backoff_ = std::min(poll_backoff_ + 1, kMaxPollBackoff);
      if (polls_left_ > 0) --polls_left_;
    }
  }
  if (acted > 0 || resend) ArmPolls();
  if (held) return NoteHeld(&slot, now);
  slot.held = false;
  if (!resend) return;
  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
  SendFragment(h.slot, now, true, false);
}

// The aggregator holds our data and waits for other ranks. An early probe
// or resend answered so: the result was not lost, only later than a later
// fragment's. Results return that far out of order here: the reordering
// window widens (RFC 8985 §6.2 does so on DSACKs).
void ProgressEngine::NoteHeld(Slot* slot, uint64_t now) {
  slot->held = true;
  if (slot->early_out) rack_.OnSpurious(now, rtt_.srtt_ns());
  slot->early_out = false;
}

// Fragment base_seq + j lives in slot (base_seq + j) mod W; a bit about a
// fragment the slot no longer carries is stale. Data sent after the probe
// may still be on its way and is left alone; what the aggregator lacks of
// the data sent before it was lost (a datagram path keeps order: one that
// reorders costs a needless resend, which idempotence absorbs) and goes
// again at once. Held and complete with no RESULT here: that RESULT left
// before this STATUS and was lost; a single probe asks for it. That holds
// for the fragment named too (j = 0), whose round the answer to a
// state-only request may report complete; its held bit is the header's
// (HandleStatus).
uint32_t ProgressEngine::ApplyStatusWindow(const proto::PacketView& p, uint64_t base_seq,
                                           uint64_t probe_order, uint64_t now) {
  uint32_t acted = 0;
  const uint32_t w = std::min(p.header.aux, window_.size());
  const uint8_t* held = p.payload;
  const uint8_t* complete = p.payload + proto::WindowBitmapBytes(p.header.aux);
  for (uint32_t j = 0; j < w; ++j) {
    const uint64_t seq = base_seq + j;
    const auto i = static_cast<uint32_t>(seq % window_.size());
    Slot& s = window_.slot(i);
    if (!s.busy || s.next_seq != seq || s.data_order > probe_order) continue;
    if (j == 0 && !proto::WindowBit(held, 0)) continue;
    if (!proto::WindowBit(held, j)) {
      s.held = false;
      counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
      SendFragment(i, now, true, false);
      ++acted;
      continue;
    }
    s.held = true;
    if (proto::WindowBit(complete, j) && !(s.probe_pending && s.probe_order > probe_order)) {
      s.probe_pending = true;
      s.probe_sent_ns = now;
      SendFragment(i, now, true, true);
      ++acted;
    }
  }
  return acted;
}

}  // namespace tributary::host
