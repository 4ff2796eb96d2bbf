// SPDX-License-Identifier: Apache-2.0
// Redundancy under loss (FORMAT.md §8.4) in the engine: a job's loss
// estimate moves only with first copies that were lost (a resend or a
// redundant copy taken as new); above 3% the job is lossy: small RESULTs go
// out twice and every RESULT carries kFlagRedundant; under 1.5% it is not any
// more. RESULTs go twice only while the children send copies (a rank stops
// where copies do not pay). A redundant copy whose first copy arrived is dropped unanswered,
// never aggregated twice; one whose first copy was lost is aggregated like
// the first. Resends for complete rounds (a RESULT lost, or a rank that gave
// up waiting too soon) move nothing. redundant_max_bytes 0 turns it off.
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::MsgType;
using testing::JobFixture;
using testing::PayloadFloats;
using testing::TestEngine;

// One fp32 SUM contribution with `flags`.
Action Send(JobFixture& job, uint32_t sender, uint32_t slot, uint32_t shadow, uint64_t collective,
            const std::vector<float>& values, uint16_t flags, uint64_t offset = 0) {
  return job.SendWith(sender, slot, shadow, collective, offset, values, flags);
}

// Collective c of a 2-rank job on slot c % 4: child 0 sends `first`'s flags,
// child 1 a plain first copy. Returns the completing Action.
Action Round(JobFixture& job, uint64_t c, uint16_t first, size_t elems = 4, uint64_t offset = 0) {
  const uint32_t slot = static_cast<uint32_t>(c % 4);
  const uint32_t shadow = static_cast<uint32_t>((c / 4) % 2);
  const std::vector<float> v(elems, 1.0f);
  Send(job, 0, slot, shadow, c, v, first, offset);
  return Send(job, 1, slot, shadow, c, v, 0, offset);
}

// The same, child 0 sending a redundant copy after its first copy.
Action RoundCopied(JobFixture& job, uint64_t c, size_t elems = 4, uint64_t offset = 0) {
  const uint32_t slot = static_cast<uint32_t>(c % 4);
  const uint32_t shadow = static_cast<uint32_t>((c / 4) % 2);
  const std::vector<float> v(elems, 1.0f);
  Send(job, 0, slot, shadow, c, v, 0, offset);
  EXPECT_EQ(Send(job, 0, slot, shadow, c, v, proto::kFlagRedundant, offset).kind, ActionKind::kNone);
  return Send(job, 1, slot, shadow, c, v, 0, offset);
}

bool Flagged(const Action& a) { return (a.header.flags & proto::kFlagRedundant) != 0; }

TEST(EngineRedundancy, LossyAboveThreePercentOfFirstCopiesLostUntilUnderOneAndAHalf) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 4, 1024);
  uint64_t c = 0;
  // Loss-free: plain RESULTs, once.
  for (; c < 100; ++c) {
    const Action a = Round(job, c, 0);
    ASSERT_EQ(a.kind, ActionKind::kResultToAll);
    EXPECT_EQ(a.copies, 1);
    EXPECT_EQ(a.header.flags & proto::kFlagRedundant, 0);
  }
  // One first copy in ten lost (child 0's arrives as a resend): 5% of the
  // samples, two per round. The job turns lossy within a few dozen rounds.
  bool lossy = false;
  for (; c < 200 && !lossy; ++c) {
    const Action a = Round(job, c, c % 10 == 0 ? proto::kFlagRetransmit : 0);
    ASSERT_EQ(a.kind, ActionKind::kResultToAll);
    lossy = Flagged(a);
    EXPECT_EQ(a.copies, 1) << "no child sends copies yet";
  }
  ASSERT_TRUE(lossy) << "still not lossy after 100 rounds at 5%";
  EXPECT_GT(c, 110u) << "lossy too soon: a few losses are not 3%";
  EXPECT_EQ(RoundCopied(job, c++).copies, 2);
  EXPECT_GE(engine.counters().redundant_results, 1u);
  EXPECT_EQ(engine.Jobs()[0].stats.redundant_results, engine.counters().redundant_results);
  // Loss-free again: the average falls under 1.5% and the job is not lossy.
  bool still = true;
  uint64_t rounds = 0;
  for (; rounds < 400 && still; ++rounds, ++c) {
    const Action a = RoundCopied(job, c);
    still = Flagged(a);
    EXPECT_EQ(a.copies, still ? 2 : 1);
  }
  EXPECT_FALSE(still) << "lossy after 400 loss-free rounds";
  EXPECT_GT(rounds, 20u) << "no hysteresis: it left the lossy state at once";
}

// A provisioned job that every rank left starts over (Job::Recycle): its
// next generation is not lossy because the last one was.
TEST(EngineRedundancy, ARecycledJobForgetsItsLossEstimate) {
  TestEngine engine(EngineLimits{}, 1);
  ASSERT_EQ(testing::ProvisionJob(&engine, 1, {2, 4, 1024}), ProvisionResult::kCreated);
  uint32_t first_epoch = 0;
  {
    JobFixture job(&engine, 1, 2, 2, 4, 1024);
    first_epoch = job.epoch();
    bool lossy = false;
    for (uint64_t c = 0; c < 300 && !lossy; ++c) {
      lossy = Flagged(Round(job, c, c % 5 == 0 ? proto::kFlagRetransmit : 0));
    }
    ASSERT_TRUE(lossy) << "never lossy at 10% of first copies lost";
    for (uint32_t child = 0; child < 2; ++child) {
      proto::PacketView p;
      p.header.type = MsgType::kLeave;
      p.header.job_id = 1;
      p.header.epoch = job.epoch();
      p.header.sender = child;
      engine.OnPacket(testing::Sealed(p, 2), JobFixture::Peer(child), 2);
    }
  }
  ASSERT_EQ(engine.counters().recycles, 1u);
  JobFixture again(&engine, 1, 2, 2, 4, 1024);
  EXPECT_NE(again.epoch(), first_epoch);
  for (uint64_t c = 0; c < 8; ++c) {
    const Action a = Round(again, c, 0);
    ASSERT_EQ(a.kind, ActionKind::kResultToAll);
    EXPECT_FALSE(Flagged(a)) << "collective " << c << " of the new generation";
  }
  EXPECT_EQ(engine.Jobs()[0].stats.redundant_results, 0u);
}

TEST(EngineRedundancy, OnlyTheStartOfACollectiveGoesTwiceAndResendAnswersOnce) {
  EngineLimits limits;
  limits.redundant_max_bytes = 16;  // 4 floats
  TestEngine engine(limits, 1);
  JobFixture job(&engine, 1, 2, 2, 4, 1024);
  uint64_t c = 0;
  for (; c < 100; ++c) Round(job, c, proto::kFlagRetransmit);  // half the first copies lost
  const Action small = RoundCopied(job, c++, 4);
  EXPECT_EQ(small.copies, 2);
  EXPECT_NE(small.header.flags & proto::kFlagRedundant, 0);
  // The second packet of a collective (its first 256 elements filled a
  // 1 KiB payload) lies beyond the first 16 bytes: once.
  const Action later = Round(job, c++, 0, 1, 256);
  EXPECT_EQ(later.copies, 1) << "bytes 1024..1028 of the collective";
  EXPECT_NE(later.header.flags & proto::kFlagRedundant, 0);
  const Action big = RoundCopied(job, c, 5);
  EXPECT_EQ(big.copies, 1) << "20 bytes > redundant_max_bytes";
  EXPECT_NE(big.header.flags & proto::kFlagRedundant, 0) << "the flag tells the ranks anyway";
  // Child 1 resends the round that just completed: answered once, flagged.
  const Action again =
      Send(job, 1, static_cast<uint32_t>(c % 4), static_cast<uint32_t>((c / 4) % 2), c,
           std::vector<float>(5, 1.0f), proto::kFlagRetransmit);
  ASSERT_EQ(again.kind, ActionKind::kSendToOne);
  EXPECT_EQ(again.header.type, MsgType::kResult);
  EXPECT_EQ(again.copies, 1);
  EXPECT_NE(again.header.flags & proto::kFlagRedundant, 0);
}

// A rank that finds copies slow on its path stops sending them, and the
// aggregator's copies stop with it: RESULTs go twice for a collective the
// children copied and the one after it (the last child's copy may arrive
// after its first copy completed the round), not later.
TEST(EngineRedundancy, ResultsGoTwiceOnlyWhileTheChildrenCopy) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, 4, 1024);
  uint64_t c = 0;
  for (; c < 100; ++c) Round(job, c, proto::kFlagRetransmit);
  Action a = Round(job, c++, 0);
  ASSERT_TRUE(Flagged(a)) << "the job is lossy";
  EXPECT_EQ(a.copies, 1) << "no child copied yet";
  EXPECT_EQ(RoundCopied(job, c++).copies, 2);
  a = Round(job, c++, 0);
  EXPECT_EQ(a.copies, 2) << "the collective after a copied one";
  a = Round(job, c++, 0);
  EXPECT_EQ(a.copies, 1) << "the children stopped copying";
  EXPECT_TRUE(Flagged(a)) << "the ranks still hear of the loss";
  // A replayed copy of an old collective switches nothing back on.
  const std::vector<float> v(4, 1.0f);
  EXPECT_EQ(Send(job, 0, 0, 0, 0, v, proto::kFlagRedundant).kind, ActionKind::kNone);
  EXPECT_EQ(Round(job, c++, 0).copies, 1);
  EXPECT_EQ(RoundCopied(job, c++).copies, 2);
}

TEST(EngineRedundancy, RedundantCopiesCountOnceAndAreNeverAnswered) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, 4, 1024);
  const std::vector<float> one{1.0f}, two{2.0f}, four{4.0f};
  // First copy, then its redundant copy while the round is pending: dropped
  // without the STATUS a plain duplicate gets.
  EXPECT_EQ(Send(job, 0, 0, 0, 0, one, 0).kind, ActionKind::kNone);
  EXPECT_EQ(Send(job, 0, 0, 0, 0, one, proto::kFlagRedundant).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().redundant_drops, 1u);
  // Child 1's first copy was lost: its redundant copy is aggregated.
  EXPECT_EQ(Send(job, 1, 0, 0, 0, two, proto::kFlagRedundant).kind, ActionKind::kNone);
  const Action done = Send(job, 2, 0, 0, 0, four, 0);
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_EQ(PayloadFloats(done), (std::vector<float>{7.0f}));
  // Child 2's redundant copy after completion: dropped, not answered (its
  // RESULT went out with the completion).
  EXPECT_EQ(Send(job, 2, 0, 0, 0, four, proto::kFlagRedundant).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().redundant_drops, 2u);
  EXPECT_EQ(engine.counters().contributions, 3u);
  EXPECT_EQ(engine.counters().retransmit_answers, 0u);
  // A plain resend after completion is still answered with the result.
  const Action again = Send(job, 2, 0, 0, 0, four, proto::kFlagRetransmit);
  ASSERT_EQ(again.kind, ActionKind::kSendToOne);
  EXPECT_EQ(PayloadFloats(again), (std::vector<float>{7.0f}));
}

TEST(EngineRedundancy, ResendsForCompleteRoundsAndZeroLimitNeverMakeAJobLossy) {
  {
    // Every round answered twice to a resend (ranks that gave up waiting
    // too soon): no sample of loss.
    TestEngine engine(EngineLimits{}, 1);
    JobFixture job(&engine, 1, 2, 2, 4, 1024);
    for (uint64_t c = 0; c < 200; ++c) {
      const Action a = Round(job, c, 0);
      EXPECT_EQ(a.copies, 1);
      EXPECT_EQ(a.header.flags & proto::kFlagRedundant, 0);
      const Action again = Send(job, 0, static_cast<uint32_t>(c % 4),
                                static_cast<uint32_t>((c / 4) % 2), c,
                                std::vector<float>(4, 1.0f), proto::kFlagRetransmit);
      EXPECT_EQ(again.kind, ActionKind::kSendToOne);
    }
    EXPECT_EQ(engine.counters().redundant_results, 0u);
  }
  {
    EngineLimits off;
    off.redundant_max_bytes = 0;
    TestEngine engine(off, 1);
    JobFixture job(&engine, 1, 2, 2, 4, 1024);
    for (uint64_t c = 0; c < 200; ++c) {
      const Action a = Round(job, c, proto::kFlagRetransmit);
      EXPECT_EQ(a.copies, 1);
      EXPECT_EQ(a.header.flags & proto::kFlagRedundant, 0);
    }
    EXPECT_EQ(engine.counters().redundant_results, 0u);
  }
}

}  // namespace
}  // namespace tributary::engine
