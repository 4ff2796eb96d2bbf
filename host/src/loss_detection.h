// SPDX-License-Identifier: Apache-2.0
// Loss detection policy of the progress engine, apart from its I/O and
// window bookkeeping (FORMAT.md §9.4, docs/RELIABILITY.md "Loss"):
//
// SendTimeLossDetector (RACK, RFC 8985): a fragment sent before the newest
// answered one (by send time, then seq: one burst shares a send time) and
// unanswered for that answer's round trip plus a reordering window is
// overdue. The window is srtt/2 times a scale in [1, kMaxScale]: +1 (at most
// once per srtt) when an early recovery proves spurious (answered "held":
// the aggregator had the data), -1 after kDecayResults results without one.
// Only fragments whose data went out once may be fed to OnAnswered: a
// resent one may be answered by its first copy's result a moment after the
// resend, and that tiny "round trip" would make every older fragment
// overdue at once (an avalanche of resends, issue #12).
//
// SpuriousScale: the learning part of that window. (Applied to the
// retransmission timer as well, it doubled the time of large all-reduces
// under 10% loss: with several ranks most timer recoveries are answered
// "held" because another rank's part was lost, which is no evidence that
// the timer is too short. docs/RELIABILITY.md, "Congestion".)
//
// ResendRateMonitor: every kPeriodFragments first sends, the share resent;
// a report when it stayed >= kWarnPercent for kWarnPeriods periods in a
// row, at most one per kWarnIntervalNs.
//
// Value types, not synchronized: the progress thread owns them.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tributary::host {

// A multiplier in [1, kMax] of a recovery's waiting time that learns from
// its own mistakes: +1 (at most once per srtt: one burst of late results
// makes many fragments recover at once, and that is one piece of evidence)
// when a recovery proves spurious, -1 after kDecayResults results without
// one.
class SpuriousScale {
 public:
  static constexpr uint32_t kMax = 8;
  static constexpr uint32_t kDecayResults = 256;

  void OnResult() {
    if (scale_ > 1 && ++results_since_widened_ >= kDecayResults) {
      --scale_;
      results_since_widened_ = 0;
    }
  }
  void OnSpurious(uint64_t now_ns, uint64_t srtt_ns) {
    results_since_widened_ = 0;
    if (widened_once_ && now_ns - last_widened_ns_ < srtt_ns) return;
    widened_once_ = true;
    last_widened_ns_ = now_ns;
    scale_ = std::min(scale_ + 1, kMax);
  }
  uint32_t scale() const { return scale_; }

 private:
  uint32_t scale_ = 1;
  uint32_t results_since_widened_ = 0;
  bool widened_once_ = false;
  uint64_t last_widened_ns_ = 0;
};

class SendTimeLossDetector {
 public:
  static constexpr uint32_t kMaxScale = SpuriousScale::kMax;
  static constexpr uint32_t kDecayResults = SpuriousScale::kDecayResults;

  // A result answered the fragment `seq`, whose only data copy was sent at
  // `sent_ns`.
  void OnAnswered(uint64_t sent_ns, uint64_t seq, uint64_t now_ns) {
    if (sent_ns > xmit_ns_ || (sent_ns == xmit_ns_ && seq > seq_)) {
      xmit_ns_ = sent_ns;
      seq_ = seq;
      rtt_ns_ = now_ns - sent_ns;
    }
  }
  // Any result: the reordering window narrows after kDecayResults of them
  // without a spurious early recovery.
  void OnResult() { scale_.OnResult(); }
  // An early recovery was answered "held": the result was late, not lost.
  void OnSpurious(uint64_t now_ns, uint64_t srtt_ns) { scale_.OnSpurious(now_ns, srtt_ns); }

  // Fragment `seq`, last sent at `sent_ns`, was sent before the newest
  // answered one. False until something was answered.
  bool SentBeforeNewest(uint64_t sent_ns, uint64_t seq) const {
    return rtt_ns_ != 0 && (sent_ns < xmit_ns_ || (sent_ns == xmit_ns_ && seq < seq_));
  }
  // When such a fragment is overdue.
  uint64_t OverdueAt(uint64_t sent_ns, uint64_t srtt_ns) const {
    return sent_ns + rtt_ns_ + srtt_ns / 2 * scale_.scale();
  }
  uint32_t scale() const { return scale_.scale(); }

 private:
  uint64_t xmit_ns_ = 0;
  uint64_t seq_ = 0;
  uint64_t rtt_ns_ = 0;  // 0: nothing answered yet
  SpuriousScale scale_;
};

class ResendRateMonitor {
 public:
  static constexpr uint32_t kPeriodFragments = 1024;
  static constexpr uint32_t kWarnPercent = 5;
  static constexpr uint32_t kWarnPeriods = 3;
  static constexpr uint64_t kWarnIntervalNs = 60000000000;

  struct Report {
    uint32_t sent;    // first sends in the last period
    uint32_t resent;  // data resent in it
  };

  void OnResend() { ++resent_; }
  // A first send; true (with *report) when a WARN is due.
  bool OnFirstSend(uint64_t now_ns, Report* report) {
    if (++sent_ < kPeriodFragments) return false;
    *report = Report{sent_, resent_};
    sent_ = 0;
    resent_ = 0;
    if (report->resent * 100 < report->sent * kWarnPercent) {
      lossy_periods_ = 0;
      return false;
    }
    if (++lossy_periods_ < kWarnPeriods) return false;
    lossy_periods_ = 0;
    if (warned_ && now_ns - last_warn_ns_ < kWarnIntervalNs) return false;
    warned_ = true;
    last_warn_ns_ = now_ns;
    return true;
  }

 private:
  uint32_t sent_ = 0;
  uint32_t resent_ = 0;
  uint32_t lossy_periods_ = 0;
  bool warned_ = false;
  uint64_t last_warn_ns_ = 0;
};

}  // namespace tributary::host
