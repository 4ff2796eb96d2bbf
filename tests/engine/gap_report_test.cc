// SPDX-License-Identifier: Apache-2.0
// Gap reports (FORMAT.md §3.6.1) in the engine: a rank's first copy of
// fragment k, taken into a round it does not complete, while its fragment
// k - 1 is missing and its k - 1 - S is complete here, is answered with a
// header-only STATUS (kFlagGap | kFlagHeld) naming k, to that rank alone.
// Nothing else is: in-order streams, the first window, a rank whose
// k - 1 - S is still pending (it cannot have sent k - 1), resends and
// redundant copies of k, child aggregators' partial sums (aux > 0), a
// round k completes (its RESULT goes instead), and gap_reports off.
// Beside them, what a RESULT says of the round before its own (§3.3.3).
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::MsgType;
using testing::JobFixture;
using testing::TestEngine;

constexpr uint32_t kSlots = 4;
const std::vector<float> kOnes(4, 1.0f);

// Fragment k of the stream is collective k (offset 0), in slot k % S,
// shadow (k / S) % 2, as a rank numbers them (FORMAT.md §9.1).
Action Fragment(JobFixture& job, uint32_t sender, uint64_t k, uint16_t flags = 0,
                uint32_t aux = 0) {
  return job.SendWith(sender, static_cast<uint32_t>(k % kSlots),
                      static_cast<uint32_t>((k / kSlots) % 2), k, 0, kOnes, flags, aux);
}

// Every child sends fragments [from, to) in order; each round completes.
void Complete(JobFixture& job, uint64_t from, uint64_t to) {
  for (uint64_t k = from; k < to; ++k) {
    for (uint32_t c = 0; c < job.fan_in(); ++c) {
      const Action a = Fragment(job, c, k);
      ASSERT_EQ(a.kind, c + 1 == job.fan_in() ? ActionKind::kResultToAll : ActionKind::kNone)
          << "fragment " << k << " child " << c;
    }
  }
}

void ExpectGapReport(const Action& a, const JobFixture& job, uint32_t sender, uint64_t k) {
  ASSERT_EQ(a.kind, ActionKind::kSendToOne);
  EXPECT_EQ(a.header.type, MsgType::kStatus);
  EXPECT_EQ(a.header.flags, proto::kFlagGap | proto::kFlagHeld);
  EXPECT_EQ(a.peer, JobFixture::Peer(sender));
  EXPECT_EQ(a.header.collective_id, k);
  EXPECT_EQ(a.header.slot, k % kSlots);
  EXPECT_EQ(a.header.shadow, (k / kSlots) % 2);
  EXPECT_EQ(a.header.sender, sender);
  EXPECT_EQ(a.header.epoch, job.epoch());
  EXPECT_EQ(a.payload_len, 0u);
  EXPECT_NE(a.key, nullptr) << "sealed with the job's key";
}

TEST(EngineGapReport, FirstCopyAfterAMissingOneIsReportedOnceToItsSender) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, kSlots, 1024);
  ASSERT_NO_FATAL_FAILURE(Complete(job, 0, kSlots));
  // Child 0's fragment 4 is lost; its fragment 5 arrives first.
  ExpectGapReport(Fragment(job, 0, 5), job, 0, 5);
  EXPECT_EQ(engine.counters().gap_reports, 1u);
  // Later fragments of child 0 find their predecessor: nothing more.
  EXPECT_EQ(Fragment(job, 0, 6).kind, ActionKind::kNone);
  // The other children's in-order streams report nothing.
  for (uint32_t c = 1; c < 3; ++c) {
    for (uint64_t k = 4; k < 7; ++k) {
      const Action a = Fragment(job, c, k);
      EXPECT_NE(a.kind, ActionKind::kSendToOne) << "child " << c << " fragment " << k;
    }
  }
  // A resend of 5 (complete now) is answered with its RESULT, as before.
  const Action dup = Fragment(job, 0, 5, proto::kFlagRetransmit);
  ASSERT_EQ(dup.kind, ActionKind::kSendToOne);
  EXPECT_EQ(dup.header.type, MsgType::kResult);
  // The resend of 4 completes its round.
  EXPECT_EQ(Fragment(job, 0, 4, proto::kFlagRetransmit).kind, ActionKind::kResultToAll);
  EXPECT_EQ(engine.counters().gap_reports, 1u);
}

TEST(EngineGapReport, NothingIsReportedWhereTheSenderCannotHaveSentThePredecessor) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, kSlots, 1024);
  // The first window: fragment 2 before 1 finds no round of the sender's
  // in slot 1's other set (the job just started).
  EXPECT_EQ(Fragment(job, 0, 0).kind, ActionKind::kNone);
  EXPECT_EQ(Fragment(job, 0, 2).kind, ActionKind::kNone);
  EXPECT_EQ(Fragment(job, 0, 1).kind, ActionKind::kNone);
  EXPECT_EQ(Fragment(job, 0, 3).kind, ActionKind::kNone);
  ASSERT_EQ(Fragment(job, 1, 0).kind, ActionKind::kResultToAll);
  ASSERT_EQ(Fragment(job, 1, 2).kind, ActionKind::kResultToAll);
  ASSERT_EQ(Fragment(job, 1, 3).kind, ActionKind::kResultToAll);
  // Fragment 1 still waits for child 1: child 0's slot 1 is busy with it,
  // so child 0 sends 6 (slot 2) before 5 (slot 1): no report.
  ASSERT_EQ(Fragment(job, 0, 4).kind, ActionKind::kNone);
  ASSERT_EQ(Fragment(job, 1, 4).kind, ActionKind::kResultToAll);
  EXPECT_EQ(Fragment(job, 0, 6).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().gap_reports, 0u);
  // Child 1's late fragment 1: the sender's set of slot 0 it would look
  // at holds its newer fragment 4, so nothing can be missing before 1.
  ASSERT_EQ(Fragment(job, 1, 1).kind, ActionKind::kResultToAll);
  // Only the fragment right before is looked at: 7 finds 6 (5 is missing).
  EXPECT_EQ(Fragment(job, 0, 7).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().gap_reports, 0u);
}

TEST(EngineGapReport, ResendsCopiesChildAggregatorsAndCompletingRoundsReportNothing) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 3, kSlots, 1024);
  ASSERT_NO_FATAL_FAILURE(Complete(job, 0, kSlots));
  // Nobody's fragment 4 arrived: each packet below follows a missing one.
  EXPECT_EQ(Fragment(job, 0, 5, proto::kFlagRetransmit).kind, ActionKind::kNone);
  EXPECT_EQ(Fragment(job, 1, 6, proto::kFlagRedundant).kind, ActionKind::kNone);
  // A child aggregator's partial sums go up in the order rounds complete.
  EXPECT_EQ(Fragment(job, 2, 5, 0, /*aux=*/1).kind, ActionKind::kNone);
  // Child 1's 5 completes its round: the RESULT goes, no report.
  EXPECT_EQ(Fragment(job, 1, 5).kind, ActionKind::kResultToAll);
  EXPECT_EQ(engine.counters().gap_reports, 0u);
}

// On ofi and verbs (paths that lose nothing and may reorder) RESULTs say
// nothing of the round before: a RESULT ahead of its predecessor there is
// no sign of a lost one.
TEST(EngineGapReport, ResultsSayNothingOfTheRoundBeforeWherePathsMayReorder) {
  EngineLimits reliable;
  reliable.ordered_paths = false;
  TestEngine engine(reliable, 1);
  JobFixture job(&engine, 1, 2, 2, kSlots, 1024);
  const std::vector<float> full(256, 1.0f);
  for (uint64_t k = 0; k < 3; ++k) {
    ASSERT_EQ(job.SendWith(0, static_cast<uint32_t>(k), 0, 7, 256 * k, full, 0).kind,
              ActionKind::kNone);
  }
  for (uint64_t k : {1, 0, 2}) {  // 1 while 0 waits, then 2 after 1
    const Action a = job.SendWith(1, static_cast<uint32_t>(k), 0, 7, 256 * k, full, 0);
    ASSERT_EQ(a.kind, ActionKind::kResultToAll) << k;
    EXPECT_EQ(a.header.flags & (proto::kFlagPrevPending | proto::kFlagPrevComplete), 0) << k;
  }
}

TEST(EngineGapReport, OffNeverReports) {
  EngineLimits off;
  off.gap_reports = false;
  TestEngine engine(off, 1);
  JobFixture job(&engine, 1, 2, 2, kSlots, 1024);
  ASSERT_NO_FATAL_FAILURE(Complete(job, 0, kSlots));
  EXPECT_EQ(Fragment(job, 0, 5).kind, ActionKind::kNone);
  EXPECT_EQ(engine.counters().gap_reports, 0u);
}

// FORMAT.md §3.3.3: a RESULT says where the round of the fragment before
// its own stands here (the slot before; the other shadow set from slot 0):
// pending, complete, or nothing when that set does not hold the elements
// right before in the same collective. Fragment k of collective 7 is
// elements [4k, 4k + 4) in slot k % S, shadow (k / S) % 2.
TEST(EngineGapReport, AResultSaysWhereTheRoundBeforeItStands) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, 2, kSlots, 1024);
  const std::vector<float> full(256, 1.0f);
  const auto frag = [&](uint32_t sender, uint64_t k, uint16_t flags = 0) {
    return job.SendWith(sender, static_cast<uint32_t>(k % kSlots),
                        static_cast<uint32_t>((k / kSlots) % 2), 7, 256 * k, full, flags);
  };
  // The RESULT `a` goes as `kind` and says `said` of the round before.
  const auto expect = [](const Action& a, ActionKind kind, uint16_t said, const char* what) {
    ASSERT_EQ(a.kind, kind) << what;
    EXPECT_EQ(a.header.type, MsgType::kResult) << what;
    EXPECT_EQ(a.header.flags & (proto::kFlagPrevPending | proto::kFlagPrevComplete), said) << what;
  };
  constexpr ActionKind kAll = ActionKind::kResultToAll, kOne = ActionKind::kSendToOne;
  ASSERT_EQ(frag(0, 0).kind, ActionKind::kNone);
  ASSERT_EQ(frag(0, 1).kind, ActionKind::kNone);
  ASSERT_EQ(frag(0, 2).kind, ActionKind::kNone);
  expect(frag(1, 1), kAll, proto::kFlagPrevPending, "round 1 while round 0 waits for child 1");
  expect(frag(1, 0), kAll, 0, "the first fragment of a collective: nothing to say");
  expect(frag(1, 2), kAll, proto::kFlagPrevComplete, "round 2 after round 1");
  expect(frag(0, 1, proto::kFlagRetransmit), kOne, proto::kFlagPrevComplete,
         "a resend of fragment 1, answered now: round 0 is complete");
  ASSERT_EQ(frag(0, 4).kind, ActionKind::kNone);
  expect(frag(1, 4), kAll, 0, "fragment 4 (slot 0, shadow 1): slot 3, shadow 0 holds no round");
  ASSERT_EQ(frag(0, 3).kind, ActionKind::kNone);
  expect(frag(1, 3), kAll, proto::kFlagPrevComplete, "round 3 after round 2");
  expect(frag(1, 4, proto::kFlagRetransmit), kOne, proto::kFlagPrevComplete,
         "across the wrap: fragment 4 asked again finds round 3 complete");
  ASSERT_EQ(job.SendWith(0, 1, 1, 8, 256, full, 0).kind, ActionKind::kNone);
  expect(job.SendWith(1, 1, 1, 8, 256, full, 0), kAll, 0,
         "collective 8's elements 256..511 after collective 7's fragment 4: another collective");
}

}  // namespace
}  // namespace tributary::engine
