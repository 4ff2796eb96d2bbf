// SPDX-License-Identifier: Apache-2.0
// The progress engine's timing policy (progress.h): when a fragment is
// overdue and what is done about it (the retransmission timer with its
// queueing allowance, send-time detection, the tail loss probe, mass
// timeouts), the round-trip samples that feed the timer, the congestion
// limit's input, and the resend-rate WARN; and the recoveries the
// aggregator starts before any timer (a gap report, a RESULT saying the
// round before it is complete). Apart from progress.cc, which moves
// fragments and results, because this is the part that decides when to
// recover.
#include <algorithm>
#include <string>

#include "common/log.h"
#include "host/src/diagnostics.h"
#include "host/src/progress.h"

namespace tributary::host {

void ProgressEngine::WarnResendRate(const ResendRateMonitor::Report& r) {
  TRIB_LOG(kWarn, "progress",
           "job %u rank %u: %u of the last %u fragments had to be sent again (%.0f%%, %u periods "
           "in a row): packets to or from aggregator %s are being lost (a lossy link, full "
           "socket buffers, or a window of %u x %u bytes deeper than the path's queues: try a "
           "smaller TRIBUTARY_WINDOW); srtt %llu us. See docs/RELIABILITY.md",
           id_.job_id, id_.rank, r.resent, r.sent, 100.0 * r.resent / r.sent,
           ResendRateMonitor::kWarnPeriods,
           options_.aggregator.c_str(), window_.size(), options_.payload_bytes,
           static_cast<unsigned long long>(rtt_.srtt_ns() / 1000));
}

uint64_t ProgressEngine::DeadlineAfter(uint32_t retries, uint64_t now) {
  // The fragments in flight ahead of this one.
  const double queued =
      static_cast<double>(window_.busy() > 0 ? window_.busy() - 1 : 0) * options_.payload_bytes;
  // Longer after mass timeouts (congestion.h): the host stalls longer than
  // the round trip says.
  // Never below the estimator's own value: a reliable transport's timers
  // are at least 1 s, above rto_max (RttLimits).
  const uint64_t rto_max_ns = uint64_t{options_.rto_max_us} * 1000;
  const uint64_t base = rtt_.RtoNs(retries);
  const uint32_t scale = cwnd_.timer_scale(now);
  const uint64_t rto = scale > 1 ? std::max(base, std::min(base * scale, rto_max_ns)) : base;
  return now + rto + delivery_.QueueingNs(queued, rto_max_ns);
}

void ProgressEngine::SampleResultLatency(uint64_t latency_ns) {
  Sample(recent_latency_.Add(latency_ns));
}

void ProgressEngine::ObserveQueue(uint64_t latency_ns, uint64_t now) {
  // The smallest target: 8 fragments at the delivery rate.
  const double rate = delivery_.bytes_per_ns();
  const uint64_t floor_ns =
      rate > 0 ? static_cast<uint64_t>(8.0 * options_.payload_bytes / rate) : 0;
  const uint32_t before = cwnd_.limit();
  cwnd_.OnLatency(latency_ns, now, rtt_.srtt_ns(), floor_ns);
  const uint32_t after = cwnd_.limit();
  counters_.cwnd_decreases.store(cwnd_.decreases(), std::memory_order_relaxed);
  if (after == before) return;
  counters_.cwnd.store(after, std::memory_order_relaxed);
  if (after < before && !ecn_logged_ && cwnd_.ecn_decreases() > 0) {
    ecn_logged_ = true;
    TRIB_LOG(kInfo, "progress",
             "job %u rank %u: the path marks congestion (ECN CE): fewer fragments in flight, %u "
             "of the window's %u (docs/RELIABILITY.md, Congestion)",
             id_.job_id, id_.rank, after, window_.size());
  }
  if (after < before && !cwnd_logged_ && cwnd_.queue_ns() > cwnd_.target_ns()) {
    // Once per communicator: a job whose window is deeper than its path
    // learns it here, not from a slow job.
    cwnd_logged_ = true;
    TRIB_LOG(kInfo, "progress",
             "job %u rank %u: results wait %.2f ms in queues (base round trip %.2f ms, target "
             "%.2f ms): fewer fragments in flight, %u of the window's %u (docs/RELIABILITY.md, "
             "Congestion)",
             id_.job_id, id_.rank, cwnd_.queue_ns() / 1e6, cwnd_.base_ns() / 1e6,
             cwnd_.target_ns() / 1e6, after, window_.size());
  }
}

void ProgressEngine::Sample(uint64_t rtt_ns) {
  rtt_.Sample(rtt_ns);
  counters_.srtt_us.store(static_cast<uint32_t>(rtt_.srtt_ns() / 1000), std::memory_order_relaxed);
  counters_.rto_us.store(static_cast<uint32_t>(rtt_.RtoNs() / 1000), std::memory_order_relaxed);
}

void ProgressEngine::Recover(uint32_t i, uint64_t now, bool timer) {
  // Probe first (header only): most timeouts on a busy cluster are waits
  // for a slower rank or packets still queued in a rate-limited link, not
  // losses, and the aggregator's STATUS tells which. Resend the data only
  // when two probes in a row went unanswered (the aggregator saying "not
  // held" triggers a resend at once instead), or when the fragment is
  // hardly bigger than the probe: the duplicate is answered as the probe
  // would be (a RESULT, or a STATUS when others are missing), a round trip
  // sooner when the data was lost.
  // Only a whole timeout makes a probe unanswered: an early recovery may
  // come while the last probe's answer is still on its way.
  Slot& slot = window_.slot(i);
  if (timer && slot.probe_pending) slot.unanswered_probes++;
  const size_t bytes = static_cast<size_t>(slot.elem_count) * slot.op->elem_size;
  const bool resend =
      !slot.held && (slot.unanswered_probes >= 2 || (!reliable_ && bytes <= options_.resend_max_bytes));
  if (resend) slot.unanswered_probes = 0;
  slot.probe_pending = !resend;
  if (!resend) slot.probe_sent_ns = now;
  // A windowed probe asks for state only (kFlagWindow, FORMAT.md §3.4): a
  // RESULT still on its way is not sent again behind itself; the STATUS
  // says the round is complete, and the RESULT is asked for if it did not
  // arrive before that STATUS (ApplyStatusWindow).
  const uint32_t w = resend ? 0 : ProbeWindow(i);
  SendFragment(i, now, true, /*probe=*/!resend, w, /*state_only=*/w > 1);
}

// The aggregator took the first copy of fragment k (the one named) while
// our fragment k - 1 was missing: every copy of k - 1 sent before k's was
// lost (a datagram path keeps one rank's order; one that reorders costs a
// needless resend, which idempotence absorbs). Acted on only while k is
// still out with its data sent once, k - 1 is the fragment of the slot
// before and its last copy went out before k's: a late or replayed report,
// or one about a k - 1 resent since, changes nothing. Saves the round trip
// of a RESULT of a later fragment plus RACK's wait and a probe.
void ProgressEngine::HandleGapReport(const proto::PacketView& p, uint64_t now) {
  const proto::Header& h = p.header;
  const Slot& after = window_.slot(h.slot);
  if (!after.busy || after.op->desc.collective_id != h.collective_id ||
      after.elem_offset != h.elem_offset || h.shadow != window_.ShadowOf(after.next_seq) ||
      after.data_resent || after.next_seq == 0 || window_.size() < 2 || reliable_) {
    // (A reliable transport loses nothing: a gap there is reordering.)
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint32_t i = h.slot == 0 ? window_.size() - 1 : h.slot - 1;
  const Slot& before = window_.slot(i);
  if (!before.busy || before.next_seq + 1 != after.next_seq || before.held ||
      before.data_order > after.data_order) {
    counters_.rejected.fetch_add(1, std::memory_order_relaxed);  // late, or replayed
    return;
  }
  counters_.gap_resends.fetch_add(1, std::memory_order_relaxed);
  counters_.lost_detected.fetch_add(1, std::memory_order_relaxed);
  ArmPolls();  // a loss: more may follow (the window poll)
  SendFragment(i, now, true, false);
}

// FORMAT.md §3.3.3. A request already out for less than a round trip is
// left to be answered. Early (before any timer). The slot is not marked
// held, so that the tail probe may still pick it if this request or its
// answer is lost too (at 10% loss, marking it held left such fragments to
// their timers: 0.17x of the loss-free time at 1 MiB instead of 0.6-0.8x).
void ProgressEngine::AskForLostResult(uint32_t i, uint64_t now) {
  Slot& slot = window_.slot(i);
  if (slot.probe_pending && now - slot.probe_sent_ns < rtt_.srtt_ns()) return;
  slot.probe_pending = true;
  slot.probe_sent_ns = now;
  slot.early_recoveries++;
  counters_.early_recoveries.fetch_add(1, std::memory_order_relaxed);
  SendFragment(i, now, true, /*probe=*/true);
}

uint32_t ProgressEngine::ProbeWindow(uint32_t i) const {
  // After two timeouts the fragment more likely waits for another rank than
  // for a loss: a plain probe, whose STATUS names the ranks missing (the
  // timeout message quotes them).
  if (reliable_ || window_.slot(i).retries >= 2) return 0;
  return WindowFrom(i);
}

uint64_t ProgressEngine::MaybePollWindow(uint64_t now) {
  if (poll_slot_ != kNoPoll) {
    // Answered (the STATUS or a RESULT cleared it), moved on, or taken for
    // lost after twice the last poll's round trip (at least srtt, at most
    // the RTO).
    const Slot& p = window_.slot(poll_slot_);
    const uint64_t lost_at =
        poll_sent_ns_ + std::min(rtt_.RtoNs(), std::max(2 * poll_rtt_ns_, rtt_.srtt_ns()));
    if (p.busy && p.next_seq == poll_seq_ && p.probe_pending && now < lost_at) return lost_at;
    poll_slot_ = kNoPoll;
  }
  // Due at once when data went out since the last poll: the poll follows
  // it, and (one datagram path keeps order) its answer comes once the
  // aggregator has seen that data. Otherwise everything in flight is known
  // held: one round trip after the last answer (time for the rounds to
  // complete, or not). Answers that changed nothing (fragments held while
  // other ranks recover) space the polls out: 1, 3, 7, ... round trips.
  // No loss seen lately (or polls off): RACK and the timers suffice.
  if (!options_.window_poll || polls_left_ == 0) return UINT64_MAX;
  uint32_t base = kNoPoll;
  uint32_t busy = 0;
  bool unpolled = false;
  for (uint32_t i = 0; i < window_.size(); ++i) {
    const Slot& s = window_.slot(i);
    if (!s.busy) continue;
    ++busy;
    if (base == kNoPoll || s.next_seq < window_.slot(base).next_seq) base = i;
    if (s.data_order > poll_order_) unpolled = true;
  }
  if (busy < 2) unpolled = false;
  const uint64_t rounds = (uint64_t{1} << poll_backoff_) - (unpolled ? 1 : 0);
  const uint64_t due = poll_answered_ns_ + poll_rtt_ns_ * rounds;
  if (now < due) return due;
  Slot& s = window_.slot(base);
  s.probe_pending = true;
  s.probe_sent_ns = now;
  poll_slot_ = base;
  poll_seq_ = s.next_seq;
  poll_sent_ns_ = now;
  counters_.window_polls.fetch_add(1, std::memory_order_relaxed);
  SendFragment(base, now, true, /*probe=*/true, std::max<uint32_t>(1, WindowFrom(base)),
               /*state_only=*/true);
  poll_order_ = s.probe_order;
  return now + std::min(rtt_.RtoNs(), std::max(2 * poll_rtt_ns_, rtt_.srtt_ns()));
}

uint32_t ProgressEngine::WindowFrom(uint32_t i) const {
  const uint64_t base = window_.slot(i).next_seq;
  uint64_t top = base;
  for (uint32_t k = 0; k < window_.size(); ++k) {
    const Slot& s = window_.slot(k);
    if (s.busy && s.next_seq > top) top = s.next_seq;
  }
  const uint64_t w =
      std::min<uint64_t>({top - base + 1, window_.size(), proto::kMaxStatusWindow});
  return w > 1 ? static_cast<uint32_t>(w) : 0;
}

int64_t ProgressEngine::CheckTimers(uint64_t now, bool drained) {
  if (aborted_) return -1;
  uint64_t next = UINT64_MAX;
  for (auto& op : ops_) {
    if (op->finished) continue;
    // Only once nothing is left to read: a short batch is not proof (the
    // transport may have dropped a foreign datagram inside it). For at most
    // kJudgeGraceNs from the first pass that found it overdue, though (after
    // a stall that is from the stall's end): a flood of datagrams at the
    // rank's port keeps the socket readable for ever.
    if (now >= op->deadline_ns) {
      if (op->overdue_ns == 0) op->overdue_ns = now;
      if (now - op->overdue_ns < kJudgeGraceNs) {
        if (drained) drained = !transport_->MoreWaiting();
        if (!drained) {
          next = now;
          continue;
        }
      }
    }
    if (now >= op->deadline_ns) {
      std::string what = DescribeIncomplete(*op, window_, now);
      if (unauthenticated_unknown_job_.load(std::memory_order_relaxed)) {
        what += "; the aggregator's address answered \"unknown job\" without a valid MAC (a "
                "restarted daemon that lost the job says this; so could anyone else)";
        if (impostor_logged_) {
          what += ", and the JOIN sent to check it was answered with a public key other than "
                  "the one trusted when this communicator joined (a daemon restarted without "
                  "its identity_file, or an impostor)";
        }
      }
      TRIB_LOG(kError, "progress", "job %u rank %u: %s", id_.job_id, id_.rank, what.c_str());
      Abort(Status(StatusCode::kTimedOut, what), op.get());
      return -1;
    }
    next = std::min(next, op->deadline_ns);
  }
  // Overdue by send time (loss_detection.h; unreliable transports only,
  // and not before the first round-trip sample: the reordering window is a
  // share of the srtt).
  expired_.clear();
  for (uint32_t i = 0; i < window_.size(); ++i) {
    Slot& slot = window_.slot(i);
    if (!slot.busy) continue;
    const bool sent_before_newest = !reliable_ && rtt_.have_sample() &&
                                    rack_.SentBeforeNewest(slot.last_sent_ns, slot.next_seq);
    const uint64_t overdue_at = rack_.OverdueAt(slot.last_sent_ns, rtt_.srtt_ns());
    if (now >= slot.deadline_ns) {
      expired_.push_back(i);  // handled below, with a new deadline
      continue;
    }
    if (sent_before_newest && now >= overdue_at) {
      slot.early_recoveries++;
      counters_.early_recoveries.fetch_add(1, std::memory_order_relaxed);
      Recover(i, now, /*timer=*/false);
      slot.early_out = true;
    } else if (sent_before_newest) {
      next = std::min(next, overdue_at);
    }
    next = std::min(next, slot.deadline_ns);
  }
  // Tail loss probe (RFC 8985 §7): nothing was answered or sent for two
  // round trips while fragments are in flight. The last fragments of a
  // collective have nothing sent after them whose result could reveal their
  // loss, and a collective of one fragment per rank has only its timer
  // (which carries 4 RTTVAR and the queueing allowance). One recovery of
  // the most recently sent fragment per quiet period: its answer (a
  // RESULT, which lets send-time detection find the older losses, or a
  // STATUS) says more than the timer would, sooner.
  if (!reliable_ && rtt_.have_sample() && window_.busy() > 0 && !tail_probe_sent_) {
    const uint64_t tail_at = last_progress_ns_ + 2 * rtt_.srtt_ns();
    if (now >= tail_at) {
      // The newest by first send (and seq), among those nothing else is
      // recovering: not expired (the timers act below), not known to be
      // held, not just recovered early.
      uint32_t newest = window_.size();
      for (uint32_t i = 0; i < window_.size(); ++i) {
        const Slot& s = window_.slot(i);
        if (!s.busy || now >= s.deadline_ns || s.held || s.early_out) continue;
        if (newest == window_.size() || s.first_sent_ns > window_.slot(newest).first_sent_ns ||
            (s.first_sent_ns == window_.slot(newest).first_sent_ns &&
             s.next_seq > window_.slot(newest).next_seq)) {
          newest = i;
        }
      }
      tail_probe_sent_ = true;
      if (newest < window_.size()) {
        counters_.tail_probes.fetch_add(1, std::memory_order_relaxed);
        Recover(newest, now, /*timer=*/false);
        next = std::min(next, window_.slot(newest).deadline_ns);
      }
    } else {
      next = std::min(next, tail_at);
    }
  }
  // Timers. When at least half of what is in flight expired at once (and
  // 8 or more), the path stalled or queues outgrew the timers: resending
  // all of it would double the queue and make the next timers expire too
  // (a 1024-deep window of 64-byte fragments resent 10-30% of them so).
  // The limit halves (congestion.h), the lowest fragments up to it are
  // recovered, and the others wait one more backed-off timeout.
  size_t budget = expired_.size();
  if (!reliable_ && expired_.size() >= std::max<size_t>(kMassTimeoutMin, window_.busy() / 2)) {
    cwnd_.OnMassTimeout(now, rtt_.srtt_ns());
    counters_.cwnd.store(cwnd_.limit(), std::memory_order_relaxed);
    counters_.cwnd_decreases.store(cwnd_.decreases(), std::memory_order_relaxed);
    budget = std::min<size_t>(budget, cwnd_.limit());
    std::sort(expired_.begin(), expired_.end(), [this](uint32_t a, uint32_t b) {
      return window_.slot(a).next_seq < window_.slot(b).next_seq;
    });
  }
  for (size_t k = 0; k < expired_.size(); ++k) {
    Slot& slot = window_.slot(expired_[k]);
    if (k < budget) {
      slot.retries++;
      counters_.timer_recoveries.fetch_add(1, std::memory_order_relaxed);
      Recover(expired_[k], now, /*timer=*/true);
    } else {
      // Not resent: it waits one more (backed-off) timeout. Its timer did
      // expire, so its result is no round-trip sample (Karn).
      slot.retries++;
      slot.deadline_ns = DeadlineAfter(slot.retries, now);
    }
    next = std::min(next, slot.deadline_ns);
  }
  // Last: a poll follows every packet of this pass.
  if (!reliable_ && rtt_.have_sample() && window_.busy() > 0) {
    next = std::min(next, MaybePollWindow(now));
  }
  return UsUntil(next, now);
}

}  // namespace tributary::host
