// SPDX-License-Identifier: Apache-2.0
// Whether redundant copies pay on this rank's path (FORMAT.md §8.4).
//
// While the aggregator reports loss, a rank may send the start of each
// collective twice (and the aggregator then sends its RESULTs twice): on
// loopback and fast links a copy costs a fraction of a round trip and saves
// the round trips of recovering a loss; on a link that is slow next to the
// message it costs as much as the loss it insures against, and more where a
// rate limiter's bucket runs dry under the doubled traffic (RELIABILITY.md:
// 4 KiB all-reduces on 200 Mbit/s links took 2-4x as long with copies, 1.5x
// without). No estimate of the link rate tells these apart in advance (the
// bucket lets a pair of packets through at wire speed), so the rank
// measures: collectives alternate between short trials with and without
// copies, and the faster one is kept until the next trial.
//
// The schedule is a function of the collective id, which every rank of a
// job shares, so all ranks try the same collectives the same way (the
// aggregator doubles RESULTs only while children copy). Per cycle of
// kCycle epochs of kEpoch collectives (1024): epoch 0 with copies, epoch 1
// without, then the choice (7/8 of the collectives). Only collectives sent
// while the aggregator reported loss are measured (small ones, and big
// ones whose start may go twice), from submission to completion,
// and not the first kSettle of a trial: the path is still in the state the
// other mode left (a bucket that filled up without copies lets the first
// copies through at wire speed; the trials were short at first, 16
// collectives, and on 200 Mbit/s links took copies for cheap half of the
// time). The choice is made before the
// first send after the trials (samples that complete later are dropped),
// when both trials have kMinSamples such collectives of similar size (mean
// bytes within 2x); copies are kept only when their trial was at least 5%
// faster (the largest sample of each trial left out: one descheduled
// process says nothing about the path). Before the first decision, copies
// are on. A trial costs: on a path where copies are 2-4x slower, a trial
// with them every cycle made the whole run 20-30% slower than no copies at
// all; so each trial that confirms the choice doubles the cycles to the
// next (every 8th cycle at most), and one that changes it brings them back
// to every cycle. Ranks that saw the same trials keep the same schedule.
// Value type, not synchronized; no clock.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tributary::host {

class CopyChoice {
 public:
  static constexpr uint64_t kEpoch = 64;   // collectives per epoch
  static constexpr uint64_t kCycle = 16;   // epochs per cycle
  static constexpr uint64_t kSettle = 16;  // the first of each trial are not measured
  static constexpr uint32_t kMinSamples = 16;
  static constexpr uint64_t kMaxSkip = 8;  // trials at least every this many cycles

  // automatic false: always copy (while the aggregator reports loss).
  explicit CopyChoice(bool automatic = true) : automatic_(automatic) {}

  // Before a first send of collective `id` that could go twice: ends the
  // trials once `id` lies past them. Returns true when the choice changed.
  bool Advance(uint64_t id) {
    if (!automatic_) return false;
    const uint64_t cycle = id / (kEpoch * kCycle);
    bool changed = false;
    if (cycle != cycle_) {
      if (!decided_) changed = Decide();
      cycle_ = cycle;
      decided_ = false;
      trial_[0] = trial_[1] = Trial{};
    }
    if (Epoch(id) >= 2 && !decided_) {
      decided_ = true;
      changed = Decide() || changed;
    }
    return changed;
  }

  // Whether collective `id`'s first copies go twice (the aggregator reports
  // loss and its fragments are small enough: the caller's conditions).
  // `whole`: all of the collective lies within the bytes that may go twice.
  // Until the first decision, only such small collectives copy outside the
  // trials: the start of a big one saves little, and on a slow link costs.
  bool CopiesFor(uint64_t id, bool whole = true) const {
    if (!automatic_) return true;
    const uint64_t epoch = Epoch(id);
    if (epoch < 2 && TrialCycle(id)) return epoch == 0;
    return decisions_ > 0 ? copies_ : whole;
  }

  // A measurable collective (see above) completed `latency_ns` after its
  // submission: a sample of its trial, if that is still open.
  void OnComplete(uint64_t id, uint64_t bytes, uint64_t latency_ns) {
    const uint64_t epoch = Epoch(id);
    if (!automatic_ || decided_ || epoch >= 2 || id / (kEpoch * kCycle) != cycle_ ||
        !TrialCycle(id) || id % kEpoch < kSettle) {
      return;
    }
    trial_[epoch].Add(bytes, latency_ns);
  }

  bool copies() const { return copies_; }
  uint64_t decisions() const { return decisions_; }
  // The last decision's trimmed mean latencies, with and without copies.
  uint64_t with_ns() const { return with_ns_; }
  uint64_t without_ns() const { return without_ns_; }
  // Trials run in every skip()-th cycle: doubled (up to kMaxSkip) each time
  // a trial confirms the choice, back to 1 when one changes it.
  uint64_t skip() const { return skip_; }

 private:
  struct Trial {
    uint32_t n = 0;
    uint64_t bytes = 0, sum_ns = 0, max_ns = 0;
    void Add(uint64_t b, uint64_t ns) {
      ++n;
      bytes += b;
      sum_ns += ns;
      if (ns > max_ns) max_ns = ns;
    }
    uint64_t TrimmedMean() const { return (sum_ns - max_ns) / (n - 1); }
  };

  static uint64_t Epoch(uint64_t id) { return (id / kEpoch) % kCycle; }
  bool TrialCycle(uint64_t id) const { return (id / (kEpoch * kCycle)) % skip_ == 0; }

  // Compares the trials of the current cycle: true if the choice changed.
  bool Decide() {
    const Trial& on = trial_[0];
    const Trial& off = trial_[1];
    if (on.n < kMinSamples || off.n < kMinSamples) return false;
    const uint64_t on_bytes = on.bytes / on.n, off_bytes = off.bytes / off.n;
    if (on_bytes > 2 * off_bytes + 1 || off_bytes > 2 * on_bytes + 1) return false;
    with_ns_ = on.TrimmedMean();
    without_ns_ = off.TrimmedMean();
    ++decisions_;
    const bool copies = with_ns_ * 100 < without_ns_ * 95;
    const bool changed = copies != copies_;
    copies_ = copies;
    skip_ = changed ? 1 : std::min(2 * skip_, kMaxSkip);
    return changed;
  }

  bool automatic_;
  bool copies_ = true;
  uint64_t skip_ = 1;
  uint64_t cycle_ = 0;
  bool decided_ = false;  // this cycle's trials are over
  Trial trial_[2];
  uint64_t decisions_ = 0;
  uint64_t with_ns_ = 0, without_ns_ = 0;
};

}  // namespace tributary::host
