// SPDX-License-Identifier: Apache-2.0
// CopyChoice (host/src/copy_choice.h): whether redundant copies pay on a
// path is measured by trials with and without them, scheduled by collective
// id, and the faster kept until the next trial.
#include "host/src/copy_choice.h"

#include <gtest/gtest.h>

namespace tributary::host {
namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kEpoch = CopyChoice::kEpoch;
constexpr uint64_t kCycleLen = CopyChoice::kEpoch * CopyChoice::kCycle;

// One cycle from collective `first` (a multiple of kCycleLen): every
// collective of `bytes` sent as the schedule says and completed after
// `with` or `without`. Returns how many went with copies and whether the
// choice changed.
struct CycleResult {
  uint64_t copied = 0;
  bool changed = false;
};
CycleResult RunCycle(CopyChoice* c, uint64_t first, uint64_t with, uint64_t without,
                     uint64_t bytes = 4096) {
  CycleResult r;
  for (uint64_t id = first; id < first + kCycleLen; ++id) {
    r.changed = c->Advance(id) || r.changed;
    const bool copies = c->CopiesFor(id);
    r.copied += copies ? 1 : 0;
    c->OnComplete(id, bytes, copies ? with : without);
  }
  return r;
}

TEST(CopyChoiceTest, EveryCycleTriesBothThenKeepsTheFaster) {
  CopyChoice c;
  for (uint64_t id = 0; id < kCycleLen; ++id) {
    const uint64_t epoch = id / kEpoch;
    EXPECT_EQ(c.CopiesFor(id), epoch != 1) << id << ": before any decision copies are on";
  }
  // Copies slower on this path (a rate limiter's bucket runs dry): off
  // from the first collective after the trials, until the next cycle's.
  CycleResult r = RunCycle(&c, 0, 900 * kUs, 300 * kUs);
  EXPECT_TRUE(r.changed);
  EXPECT_FALSE(c.copies());
  EXPECT_EQ(r.copied, kEpoch) << "the trial with copies only";
  EXPECT_EQ(c.with_ns(), 900 * kUs);
  EXPECT_EQ(c.without_ns(), 300 * kUs);
  r = RunCycle(&c, kCycleLen, 900 * kUs, 300 * kUs);
  EXPECT_FALSE(r.changed);
  EXPECT_EQ(r.copied, kEpoch);
  // The path changed (losses now cost round trips the copies save): on.
  r = RunCycle(&c, 2 * kCycleLen, 200 * kUs, 600 * kUs);
  EXPECT_TRUE(r.changed);
  EXPECT_TRUE(c.copies());
  EXPECT_EQ(r.copied, kCycleLen - kEpoch);
  EXPECT_EQ(c.decisions(), 3u);
}

TEST(CopyChoiceTest, NearTiesAndOneOutlierChooseNoCopies) {
  CopyChoice c;
  // Copies 3% faster: within the 5% margin, so the bytes are saved.
  EXPECT_TRUE(RunCycle(&c, 0, 970 * kUs, 1000 * kUs).changed);
  EXPECT_FALSE(c.copies());
  // One descheduled collective in the trial without copies (100 ms) does
  // not make the copies look faster: the largest sample is left out.
  CopyChoice d;
  for (uint64_t id = 0; id < 2 * kEpoch; ++id) {
    d.Advance(id);
    const bool copies = d.CopiesFor(id);
    const bool outlier = id == kEpoch + CopyChoice::kSettle + 3;
    d.OnComplete(id, 4096, copies ? 500 * kUs : (outlier ? 100000 * kUs : 300 * kUs));
  }
  EXPECT_TRUE(d.Advance(2 * kEpoch));
  EXPECT_FALSE(d.copies());
  EXPECT_EQ(d.without_ns(), 300 * kUs);
}

TEST(CopyChoiceTest, TooFewOrUnlikeSamplesDecideNothing) {
  CopyChoice c;
  // Only 5 measurable collectives in the trial without copies (the others
  // were big, or sent before the aggregator reported loss).
  for (uint64_t id = 0; id < 2 * kEpoch; ++id) {
    c.Advance(id);
    const uint64_t from = kEpoch + CopyChoice::kSettle;
    if (id >= from && id < from + CopyChoice::kMinSamples - 1) c.OnComplete(id, 4096, 100 * kUs);
    if (id < kEpoch) c.OnComplete(id, 4096, 900 * kUs);
  }
  EXPECT_FALSE(c.Advance(2 * kEpoch));
  EXPECT_TRUE(c.copies());
  EXPECT_EQ(c.decisions(), 0u);
  // Trials of different sizes (64 KiB with copies, 1 KiB without) say
  // nothing about the copies.
  CopyChoice d;
  for (uint64_t id = 0; id < 2 * kEpoch; ++id) {
    d.Advance(id);
    d.OnComplete(id, id < kEpoch ? 65536 : 1024, id < kEpoch ? 900 * kUs : 100 * kUs);
  }
  EXPECT_FALSE(d.Advance(2 * kEpoch));
  EXPECT_TRUE(d.copies());
  // Samples that complete after the decision count for nothing.
  CopyChoice e;
  for (uint64_t id = 0; id < 2 * kEpoch; ++id) {
    e.Advance(id);
    e.OnComplete(id, 4096, id < kEpoch ? 900 * kUs : 100 * kUs);
  }
  EXPECT_TRUE(e.Advance(2 * kEpoch));
  EXPECT_FALSE(e.copies());
  for (uint64_t id = 0; id < kEpoch; ++id) e.OnComplete(id, 4096, 1 * kUs);
  EXPECT_FALSE(e.Advance(2 * kEpoch + 1));
  EXPECT_FALSE(e.copies());
}

// Outside the trials, a big collective (only its start may go twice) copies
// only once a trial found copies faster; small ones copy until a decision.
TEST(CopyChoiceTest, BigCollectivesCopyOnlyOnceCopiesWon) {
  CopyChoice c;
  EXPECT_TRUE(c.CopiesFor(0, false)) << "the trial with copies";
  EXPECT_FALSE(c.CopiesFor(kEpoch, false)) << "the trial without";
  EXPECT_FALSE(c.CopiesFor(2 * kEpoch, false)) << "no decision yet";
  EXPECT_TRUE(c.CopiesFor(2 * kEpoch, true));
  RunCycle(&c, 0, 200 * kUs, 600 * kUs);
  EXPECT_TRUE(c.CopiesFor(kCycleLen + 2 * kEpoch, false));
  // (That trial confirmed the first choice: the next is in cycle 2.)
  RunCycle(&c, 2 * kCycleLen, 900 * kUs, 300 * kUs);
  EXPECT_FALSE(c.copies());
  EXPECT_FALSE(c.CopiesFor(2 * kCycleLen + 3 * kEpoch, false));
  EXPECT_FALSE(c.CopiesFor(2 * kCycleLen + 3 * kEpoch, true));
}

// Trials that confirm the choice come ever less often (every 8th cycle at
// most); one that changes it brings them back to every cycle.
TEST(CopyChoiceTest, ConfirmedChoicesAreTriedLessOften) {
  CopyChoice c;
  uint64_t copied = 0;
  for (uint64_t cycle = 0; cycle < 40; ++cycle) {
    copied += RunCycle(&c, cycle * kCycleLen, 900 * kUs, 300 * kUs).copied;
  }
  // Trials in cycles 0, 1, 2, 4, 8, 16, 24 and 32.
  EXPECT_EQ(copied, 8 * kEpoch);
  EXPECT_EQ(c.skip(), CopyChoice::kMaxSkip);
  EXPECT_FALSE(c.copies());
  // The path changes: the trial of cycle 40 finds copies faster.
  EXPECT_TRUE(RunCycle(&c, 40 * kCycleLen, 200 * kUs, 600 * kUs).changed);
  EXPECT_EQ(c.skip(), 1u);
  EXPECT_EQ(RunCycle(&c, 41 * kCycleLen, 200 * kUs, 600 * kUs).copied, kCycleLen - kEpoch)
      << "the next cycle tries again";
}

// The start of each trial is not measured: the path is still in the state
// the other mode left (a rate limiter's bucket full after a phase without
// copies lets the first copies through at wire speed).
TEST(CopyChoiceTest, TheStartOfATrialIsNotMeasured) {
  CopyChoice c;
  for (uint64_t id = 0; id < 2 * kEpoch; ++id) {
    c.Advance(id);
    const bool settling = id % kEpoch < CopyChoice::kSettle;
    const uint64_t with = settling ? 1 * kUs : 900 * kUs;
    c.OnComplete(id, 4096, c.CopiesFor(id) ? with : 300 * kUs);
  }
  EXPECT_TRUE(c.Advance(2 * kEpoch));
  EXPECT_FALSE(c.copies());
  EXPECT_EQ(c.with_ns(), 900 * kUs);
}

TEST(CopyChoiceTest, NotAutomaticAlwaysCopies) {
  CopyChoice c(false);
  for (uint64_t id = 0; id < 2 * kCycleLen; ++id) {
    EXPECT_FALSE(c.Advance(id));
    EXPECT_TRUE(c.CopiesFor(id));
    c.OnComplete(id, 4096, c.CopiesFor(id) ? 900 * kUs : 1 * kUs);
  }
  EXPECT_EQ(c.decisions(), 0u);
}

}  // namespace
}  // namespace tributary::host
