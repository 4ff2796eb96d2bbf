// SPDX-License-Identifier: Apache-2.0
// Delivery rate of results: bytes per nanosecond, an EWMA over batches of at
// least 2 ms. It turns the bytes queued ahead of a packet into time, so the
// timers of a full window on a slow or rate-limited link do not fire on
// packets that are merely waiting in a queue. Value type, not synchronized.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace tributary::host {

class DeliveryRate {
 public:
  void Note(size_t bytes, uint64_t now_ns) {
    if (window_start_ns_ == 0) window_start_ns_ = now_ns;
    window_bytes_ += bytes;
    const uint64_t elapsed = now_ns - window_start_ns_;
    if (elapsed < kMinWindowNs) return;
    const double rate = static_cast<double>(window_bytes_) / static_cast<double>(elapsed);
    bytes_per_ns_ = bytes_per_ns_ == 0 ? rate : 0.75 * bytes_per_ns_ + 0.25 * rate;
    window_start_ns_ = now_ns;
    window_bytes_ = 0;
  }

  // How long `queued_bytes` take to drain at the measured rate, at most
  // cap_ns; 0 before any measurement.
  uint64_t QueueingNs(double queued_bytes, uint64_t cap_ns) const {
    if (bytes_per_ns_ <= 0) return 0;
    return static_cast<uint64_t>(
        std::min(queued_bytes / bytes_per_ns_, static_cast<double>(cap_ns)));
  }

 private:
  static constexpr uint64_t kMinWindowNs = 2000000;
  double bytes_per_ns_ = 0;
  uint64_t window_start_ns_ = 0;
  uint64_t window_bytes_ = 0;
};

}  // namespace tributary::host
