// SPDX-License-Identifier: Apache-2.0
// Delivery rate of results: bytes per nanosecond of time with fragments in
// flight, measured over windows of at least a round trip (and 2 ms) of such
// time, and the fastest of the last 8 windows is the estimate. It turns the bytes queued
// ahead of a packet into time, so the timers of a full window on a slow or
// rate-limited link do not fire on packets that are merely waiting in a
// queue.
//
// Why busy time and the fastest window (issue #12): time with nothing in
// flight (between collectives, while the caller computes) and windows that
// stall on a lost packet say nothing about how fast the path drains a
// queue. An average over them made the rate look 100x slower than the link
// under 10% loss, the queueing allowance grew to the 200 ms cap, and every
// lost packet waited that long for its timer. Why a round trip: results
// come back in bursts (a busy aggregator, a descheduled rank), and a window
// shorter than a round trip can hold one burst and nothing else; the
// fastest of such windows was 10x the real rate on a slowed machine, the
// allowance too short, and every full window timed out while queued.
// Value type, not synchronized.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

namespace tributary::host {

class DeliveryRate {
 public:
  // Fragments are in flight again from `now_ns` (the window was empty).
  void Resume(uint64_t now_ns) {
    if (busy_) return;
    busy_ = true;
    busy_since_ns_ = now_ns;
  }
  // Nothing is in flight from `now_ns` on: the time until the next Resume()
  // does not count.
  void Pause(uint64_t now_ns) {
    if (!busy_) return;
    busy_ = false;
    busy_ns_ += now_ns - busy_since_ns_;
  }
  // A result of `bytes` arrived (the window is busy: Resume() came first);
  // `round_trip_ns`: the current round-trip estimate (0: none yet).
  void Note(size_t bytes, uint64_t now_ns, uint64_t round_trip_ns = 0) {
    window_bytes_ += bytes;
    const uint64_t elapsed = busy_ns_ + (busy_ ? now_ns - busy_since_ns_ : 0);
    if (elapsed < std::max(kMinWindowNs, round_trip_ns)) return;
    rates_[next_++ % rates_.size()] =
        static_cast<double>(window_bytes_) / static_cast<double>(elapsed);
    bytes_per_ns_ = *std::max_element(rates_.begin(), rates_.end());
    window_bytes_ = 0;
    busy_ns_ = 0;
    busy_since_ns_ = now_ns;
  }

  // How long `queued_bytes` take to drain at the measured rate, at most
  // cap_ns; 0 before any measurement.
  uint64_t QueueingNs(double queued_bytes, uint64_t cap_ns) const {
    if (bytes_per_ns_ <= 0) return 0;
    return static_cast<uint64_t>(
        std::min(queued_bytes / bytes_per_ns_, static_cast<double>(cap_ns)));
  }
  double bytes_per_ns() const { return bytes_per_ns_; }

 private:
  static constexpr uint64_t kMinWindowNs = 2000000;
  std::array<double, 8> rates_{};  // the last windows' rates (0: none yet)
  size_t next_ = 0;
  double bytes_per_ns_ = 0;
  bool busy_ = false;
  uint64_t busy_since_ns_ = 0;  // valid while busy_
  uint64_t busy_ns_ = 0;        // busy time of the current window before busy_since_ns_
  uint64_t window_bytes_ = 0;
};

}  // namespace tributary::host
