// SPDX-License-Identifier: Apache-2.0
// The retransmission timeout of RFC 6298, shared by the host's progress
// engine and the aggregator's uplink to its parent.
//
// SRTT and RTTVAR are smoothed over round-trip samples (gains 1/8 and 1/4);
// the timeout is SRTT + 4 RTTVAR (the initial value before any sample),
// clamped to [min, max], doubled per expiry of the same packet up to
// max_backoff_shift doublings, and clamped to max again. Callers feed only
// unambiguous samples (Karn's rule: never from a packet sent twice). All in
// nanoseconds, integer arithmetic. Value type, not synchronized.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

namespace tributary::base {

// The minimum of the last N values. A completion time that includes waiting
// for others (other ranks' losses and lateness, at an aggregator) is not a
// round trip; the minimum of recent ones is, as long as one of them did not
// wait. Feeding it to RttEstimator keeps the timeout near the true round
// trip under loss (issue #12); it still rises once N in a row were slow.
template <size_t N>
class RecentMinimum {
 public:
  uint64_t Add(uint64_t v) {
    values_[next_++ % N] = v;
    if (count_ < N) ++count_;
    return *std::min_element(values_.begin(), values_.begin() + count_);
  }

 private:
  std::array<uint64_t, N> values_{};
  size_t next_ = 0;
  size_t count_ = 0;
};

class RttEstimator {
 public:
  struct Limits {
    uint64_t initial_ns = 0;  // before the first sample
    uint64_t min_ns = 0;
    uint64_t max_ns = 0;
    uint32_t max_backoff_shift = 20;
  };

  explicit RttEstimator(const Limits& limits) : limits_(limits) {}

  void Sample(uint64_t rtt_ns) {
    if (!have_sample_) {
      srtt_ns_ = rtt_ns;
      rttvar_ns_ = rtt_ns / 2;
      have_sample_ = true;
      return;
    }
    const uint64_t err = rtt_ns > srtt_ns_ ? rtt_ns - srtt_ns_ : srtt_ns_ - rtt_ns;
    rttvar_ns_ = (3 * rttvar_ns_ + err) / 4;
    srtt_ns_ = (7 * srtt_ns_ + rtt_ns) / 8;
  }

  // The timeout of a packet whose timer expired `expiries` times already.
  uint64_t RtoNs(uint32_t expiries = 0) const {
    const uint64_t base = std::clamp(have_sample_ ? srtt_ns_ + 4 * rttvar_ns_ : limits_.initial_ns,
                                     limits_.min_ns, limits_.max_ns);
    const uint32_t shift = std::min(expiries, limits_.max_backoff_shift);
    // base << shift without overflow: anything past max is max.
    if (shift >= 64 || base > (limits_.max_ns >> shift)) return limits_.max_ns;
    return std::min(base << shift, limits_.max_ns);
  }

  bool have_sample() const { return have_sample_; }
  uint64_t srtt_ns() const { return srtt_ns_; }
  uint64_t rttvar_ns() const { return rttvar_ns_; }

 private:
  Limits limits_;
  bool have_sample_ = false;
  uint64_t srtt_ns_ = 0;
  uint64_t rttvar_ns_ = 0;
};

}  // namespace tributary::base
