// SPDX-License-Identifier: Apache-2.0
// Congestion control of the progress engine: how many fragments a rank
// keeps in flight, at most its configured window (docs/RELIABILITY.md
// "Congestion").
//
// Delay-based AIMD on the standing queue. A result's latency (first send to
// RESULT, fragments whose data went out once) is the path's round trip plus
// the time the fragment waited in queues (socket buffers, a busy
// aggregator, a rate-limited link) plus any wait for other ranks. The
// smallest latency of an epoch (at least kMinEpochNs and one srtt) minus
// the base round trip (the smallest latency of the last 5-10 s) is the
// standing queue: a queue every fragment of the epoch waited in, not a
// burst (CoDel's observation). When it exceeds the target the limit shrinks
// in proportion to the excess (to at least half) once per epoch; otherwise
// it grows by max(1, window / 32) fragments per epoch, up to the window.
//
// Why delay and not loss: random loss on these paths (a lossy link, a
// dropping switch) says nothing about queues, and a loss-driven window
// collapses at a few percent of it (TCP Reno at 10% loss runs at a few
// percent of the link); queueing is what a too-deep window causes, and it
// shows in the latency before any queue overflows. A 1024-fragment window
// of 64-byte payloads (issue #12) kept 8 ms of queue in front of its
// aggregator and resent 16-31% of its fragments without any loss.
//
// The target is max(target option, base round trip, 8 fragments at the
// delivery rate): a queue of a few fragments keeps a rate-limited link busy,
// and a path whose round trip is long needs a deeper one.
//
// ECN (RFC 3168): where a queue on the path marks packets CE instead of
// dropping them, results report the marks (FORMAT.md §3.3) and the epoch's
// cut is at least half the fraction of marked results (DCTCP's rule), so a
// marking switch is obeyed before its queue shows in the latency.
// Value type, not synchronized: the progress thread owns it.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tributary::host {

class CongestionWindow {
 public:
  static constexpr uint64_t kMinEpochNs = 2000000;
  static constexpr uint64_t kBaseHalfNs = 5000000000;  // base = min over 5..10 s
  static constexpr uint32_t kMinFragments = 4;
  static constexpr uint32_t kMaxTimerScale = 8;
  static constexpr uint64_t kTimerDecayNs = 1000000000;

  // `window`: the configured window (the most in flight); `target_ns` 0:
  // no congestion control, the limit stays the window.
  CongestionWindow(uint32_t window, uint64_t target_ns)
      : max_(window),
        min_(std::min(window, kMinFragments)),
        increase_(std::max(1.0, window / 32.0)),
        target_ns_(target_ns),
        limit_(window) {}

  // A fragment whose data went out once was answered `latency_ns` after its
  // first send. `epoch_ns`: the epoch's length beyond kMinEpochNs (the
  // srtt); `floor_ns`: the smallest target (8 fragments at the delivery
  // rate, 0 before it is known).
  void OnLatency(uint64_t latency_ns, uint64_t now_ns, uint64_t epoch_ns, uint64_t floor_ns) {
    if (target_ns_ == 0) return;
    if (now_ns - base_since_ns_ >= kBaseHalfNs) {
      base_prev_ns_ = base_cur_ns_;
      base_cur_ns_ = UINT64_MAX;
      base_since_ns_ = now_ns;
    }
    base_cur_ns_ = std::min(base_cur_ns_, latency_ns);
    epoch_min_ns_ = std::min(epoch_min_ns_, latency_ns);
    if (!epoch_started_) {
      epoch_started_ = true;
      epoch_start_ns_ = now_ns;
    }
    if (now_ns - epoch_start_ns_ < std::max(kMinEpochNs, epoch_ns)) return;
    const uint64_t base = base_ns();
    // The base window may have turned over inside this epoch (and again
    // after an idle spell) and forgotten a sample that is still the epoch's
    // minimum: below the base is no queue.
    queue_ns_ = epoch_min_ns_ > base ? epoch_min_ns_ - base : 0;
    target_used_ns_ = std::max({target_ns_, base, floor_ns});
    // Proportional to the excess, at most halving: a queue twice the
    // target cuts a quarter, a deep one half.
    double cut = 0;
    if (queue_ns_ > target_used_ns_) {
      cut = 0.5 * static_cast<double>(queue_ns_ - target_used_ns_) / queue_ns_;
    }
    // ECN: a queue on the path said so itself. Half the fraction of marked
    // results (DCTCP's rule: every result marked halves the limit).
    if (epoch_marked_ > 0) {
      const double ecn_cut = 0.5 * static_cast<double>(epoch_marked_) /
                             static_cast<double>(std::max(epoch_results_, epoch_marked_));
      if (ecn_cut > cut && limit_ > min_) ++ecn_decreases_;  // the marks decided
      cut = std::max(cut, ecn_cut);
    }
    if (cut > 0) {
      limit_ = std::max(static_cast<double>(min_), limit_ * (1.0 - cut));
      ++decreases_;
    } else {
      limit_ = std::min(static_cast<double>(max_), limit_ + increase_);
    }
    epoch_start_ns_ = now_ns;
    epoch_min_ns_ = UINT64_MAX;
    epoch_results_ = epoch_marked_ = 0;
  }

  // Every RESULT: `marked` when it reported ECN congestion marks (CE on the
  // RESULT, or contributions of its round marked on the way: FORMAT.md
  // §3.3). Counted per epoch; OnLatency's epoch decision uses the fraction.
  void OnResultMarks(bool marked) {
    if (target_ns_ == 0) return;
    ++epoch_results_;
    if (marked) ++epoch_marked_;
  }

  // Timers expired for many fragments at once (at least half of those in
  // flight): not random loss but a stall (a descheduled process on a busy
  // host) or a queue deeper than the timers allow. At most once per epoch
  // (kMinEpochNs and `epoch_ns`) and once until the next result (a rank
  // waiting for a late peer sees its timers expire again and again, each
  // backoff step a "mass timeout": that is one piece of evidence): the
  // timers get one step longer (up to kMaxTimerScale times the RTO; one
  // step shorter per kTimerDecayNs without another), and with congestion
  // control on the limit halves and a new epoch starts.
  void OnMassTimeout(uint64_t now_ns, uint64_t epoch_ns) {
    if (cut_since_result_) return;
    if (cut_once_ && now_ns - last_cut_ns_ < std::max(kMinEpochNs, epoch_ns)) return;
    DecayTimerScale(now_ns);
    cut_once_ = true;
    cut_since_result_ = true;
    last_cut_ns_ = now_ns;
    decay_from_ns_ = now_ns;
    timer_scale_ = std::min(timer_scale_ + 1, kMaxTimerScale);
    if (target_ns_ == 0) return;
    limit_ = std::max(static_cast<double>(min_), limit_ / 2);
    ++decreases_;
    epoch_started_ = true;
    epoch_start_ns_ = now_ns;
    epoch_min_ns_ = UINT64_MAX;
    epoch_results_ = epoch_marked_ = 0;
  }

  // Any result: the next mass timeout is new evidence.
  void OnResult() { cut_since_result_ = false; }

  // The multiplier of the retransmission timeout after mass timeouts.
  uint32_t timer_scale(uint64_t now_ns) {
    DecayTimerScale(now_ns);
    return timer_scale_;
  }

  // Fragments the rank may have in flight now.
  uint32_t limit() const { return static_cast<uint32_t>(limit_); }
  bool limiting() const { return limit() < max_; }
  uint64_t base_ns() const { return std::min(base_prev_ns_, base_cur_ns_); }
  // The last epoch's standing queue and the target it was held to.
  uint64_t queue_ns() const { return queue_ns_; }
  uint64_t target_ns() const { return target_used_ns_; }
  uint64_t decreases() const { return decreases_; }
  // Epochs whose decrease the ECN marks decided (deeper than the queue's).
  uint64_t ecn_decreases() const { return ecn_decreases_; }

 private:
  const uint32_t max_;
  const uint32_t min_;
  const double increase_;
  const uint64_t target_ns_;
  double limit_;
  uint64_t base_cur_ns_ = UINT64_MAX;
  uint64_t base_prev_ns_ = UINT64_MAX;
  uint64_t base_since_ns_ = 0;
  bool epoch_started_ = false;
  uint64_t epoch_start_ns_ = 0;
  uint64_t epoch_min_ns_ = UINT64_MAX;
  uint64_t queue_ns_ = 0;
  uint64_t target_used_ns_ = 0;
  uint64_t decreases_ = 0;
  uint64_t ecn_decreases_ = 0;
  uint64_t epoch_results_ = 0;
  uint64_t epoch_marked_ = 0;
  void DecayTimerScale(uint64_t now_ns) {
    if (timer_scale_ > 1 && now_ns - decay_from_ns_ >= kTimerDecayNs) {
      const uint64_t steps = (now_ns - decay_from_ns_) / kTimerDecayNs;
      timer_scale_ = steps >= timer_scale_ - 1 ? 1 : timer_scale_ - static_cast<uint32_t>(steps);
      decay_from_ns_ += steps * kTimerDecayNs;
    }
  }

  bool cut_since_result_ = false;
  uint64_t decay_from_ns_ = 0;
  bool cut_once_ = false;
  uint64_t last_cut_ns_ = 0;
  uint32_t timer_scale_ = 1;
};

}  // namespace tributary::host
