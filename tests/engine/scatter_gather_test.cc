// SPDX-License-Identifier: Apache-2.0
// Proves the reduce-scatter and all-gather rounds of one aggregator
// (FORMAT.md §3.3.1): a reduce-scatter RESULT whose data is addressed to the
// owner alone (retransmission answers too), all-gather notices that count
// as arrived without touching the accumulator whether they come before or
// after the owner's data, a round of notices only answered with a notice,
// every form of a RESULT saying where the round before stands, and the
// rules that refuse inconsistent rounds: a second owner, a round that is
// reduce-scatter for some children only, a notice with a payload, and the
// codec's flag rules.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine {
namespace {

using proto::DataType;
using proto::MsgType;
using proto::ReduceOp;
using testing::JobFixture;
using testing::TestEngine;

constexpr uint32_t kCount = 16;  // floats per fragment (64-byte payloads)

// A contribution with routing flags; a notice carries no payload.
Action Routed(JobFixture* job, uint32_t sender, uint16_t flags, const std::vector<float>& v,
              uint32_t slot = 0, uint64_t collective = 1, uint64_t offset = 0) {
  proto::PacketView p;
  p.header = job->Header(MsgType::kContribution, sender, slot, 0, collective, offset,
                         DataType::kFloat32, ReduceOp::kSum, kCount);
  p.header.flags = flags;
  if ((flags & proto::kFlagNotice) == 0) {
    p.payload = reinterpret_cast<const uint8_t*>(v.data());
    p.payload_len = v.size() * 4;
  }
  return job->Deliver(p, JobFixture::Peer(sender), 2);
}

std::vector<float> Filled(float x) { return std::vector<float>(kCount, x); }

TEST(EngineScatterGather, ReduceScatterResultGoesToTheOwnerAlone) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  EXPECT_EQ(Routed(&job, 0, proto::kFlagOwnerOnly, Filled(1)).kind, ActionKind::kNone);
  Routed(&job, 1, proto::kFlagOwnerOnly | proto::kFlagOwner, Filled(2));
  const Action done = Routed(&job, 2, proto::kFlagOwnerOnly, Filled(4));
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_TRUE(done.owner_only);
  EXPECT_EQ(done.owner, JobFixture::Peer(1));
  EXPECT_EQ(done.header.flags & proto::kFlagNotice, 0);
  ASSERT_EQ(done.payload_len, kCount * 4);
  EXPECT_EQ(reinterpret_cast<const float*>(done.payload)[kCount - 1], 7.0f);
  // What each child receives (ReplyPolicy::Deliver's rule).
  for (uint32_t c = 0; c < 3; ++c) {
    proto::PacketView v;
    const auto bytes = testing::EncodeActionFor(done, JobFixture::Peer(c));
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_EQ(v.payload_len, c == 1 ? kCount * 4 : 0u) << c;
    EXPECT_EQ((v.header.flags & proto::kFlagNotice) != 0, c != 1) << c;
  }
  // Retransmission answers: a duplicate or a probe from a non-owner gets
  // the notice, the owner's gets the data.
  const Action dup0 = Routed(&job, 0, proto::kFlagOwnerOnly, Filled(1));
  EXPECT_EQ(dup0.kind, ActionKind::kSendToOne);
  EXPECT_EQ(dup0.payload_len, 0u);
  EXPECT_NE(dup0.header.flags & proto::kFlagNotice, 0);
  EXPECT_FALSE(dup0.owner_only);
  const Action probe1 = job.Request(1, 0, 0, 1, 0);
  EXPECT_EQ(probe1.header.type, MsgType::kResult);
  EXPECT_EQ(probe1.payload_len, kCount * 4);
  EXPECT_EQ(probe1.header.flags & proto::kFlagNotice, 0);
  const Action probe2 = job.Request(2, 0, 0, 1, 0);
  EXPECT_EQ(probe2.header.type, MsgType::kResult);
  EXPECT_EQ(probe2.payload_len, 0u);
}

TEST(EngineScatterGather, AllGatherNoticesCountWithoutTouchingTheData) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  // The owner's data in the middle: a notice opens the round, one follows.
  std::vector<float> mine(kCount);
  for (uint32_t k = 0; k < kCount; ++k) mine[k] = -0.0f + static_cast<float>(k) * 0.5f;
  mine[0] = -0.0f;  // a sum with zeros would turn it into +0
  EXPECT_EQ(Routed(&job, 0, proto::kFlagNotice, {}).kind, ActionKind::kNone);
  Routed(&job, 2, proto::kFlagOwner, mine);
  const Action done = Routed(&job, 1, proto::kFlagNotice, {});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_FALSE(done.owner_only);
  ASSERT_EQ(done.payload_len, kCount * 4);
  EXPECT_EQ(std::memcmp(done.payload, mine.data(), kCount * 4), 0);
  EXPECT_EQ(engine.counters().bytes_reduced, kCount * 4);
  // The owner's data first, then both notices, in another slot.
  std::vector<float> next = Filled(3.5f);
  EXPECT_EQ(Routed(&job, 1, proto::kFlagOwner, next, 1, 2).kind, ActionKind::kNone);
  EXPECT_EQ(Routed(&job, 0, proto::kFlagNotice, {}, 1, 2).kind, ActionKind::kNone);
  const Action done2 = Routed(&job, 2, proto::kFlagNotice, {}, 1, 2);
  ASSERT_EQ(done2.kind, ActionKind::kResultToAll);
  EXPECT_EQ(std::memcmp(done2.payload, next.data(), kCount * 4), 0);
}

TEST(EngineScatterGather, NoticesOnlyAnswerWithANotice) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/2, /*slots=*/4, 64);
  Routed(&job, 0, proto::kFlagNotice, {});
  const Action done = Routed(&job, 1, proto::kFlagNotice, {});
  ASSERT_EQ(done.kind, ActionKind::kResultToAll);
  EXPECT_NE(done.header.flags & proto::kFlagNotice, 0);
  EXPECT_EQ(done.payload_len, 0u);
  EXPECT_EQ(done.header.elem_count, kCount);
}

// FORMAT.md §3.3.3 in every form of a RESULT: a reduce-scatter RESULT
// says where the round before stands to its owner and, in the notice
// form, to every other child (answers to duplicates too), and a round of
// notices only says it as well.
TEST(EngineScatterGather, EveryFormOfAResultSaysWhereTheRoundBeforeStands) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  constexpr uint16_t kRs = proto::kFlagOwnerOnly, kMine = proto::kFlagOwnerOnly | proto::kFlagOwner;
  const auto said = [](const Action& a) {
    return a.header.flags & (proto::kFlagPrevPending | proto::kFlagPrevComplete);
  };
  // Collective 1, fragment 0 (slot 0): child 2's share has not come.
  EXPECT_EQ(Routed(&job, 0, kRs, Filled(1)).kind, ActionKind::kNone);
  EXPECT_EQ(Routed(&job, 1, kMine, Filled(2)).kind, ActionKind::kNone);
  // Fragment 1 (slot 1, the next kCount elements, owned by child 0)
  // completes first: the round before is pending, for every child.
  Routed(&job, 0, kMine, Filled(1), 1, 1, kCount);
  Routed(&job, 1, kRs, Filled(2), 1, 1, kCount);
  const Action second = Routed(&job, 2, kRs, Filled(4), 1, 1, kCount);
  ASSERT_EQ(second.kind, ActionKind::kResultToAll);
  ASSERT_TRUE(second.owner_only);
  for (uint32_t c = 0; c < 3; ++c) {
    proto::PacketView v;
    const auto bytes = testing::EncodeActionFor(second, JobFixture::Peer(c));
    ASSERT_EQ(proto::Decode(bytes.data(), bytes.size(), &v), proto::DecodeError::kOk) << c;
    EXPECT_EQ((v.header.flags & proto::kFlagNotice) != 0, c != 0) << c;
    EXPECT_EQ(v.header.flags & (proto::kFlagPrevPending | proto::kFlagPrevComplete),
              proto::kFlagPrevPending)
        << c;
  }
  // Fragment 0 completes; a duplicate of fragment 1 from child 1 (not
  // its owner) is answered with the notice, which now says complete.
  ASSERT_EQ(Routed(&job, 2, kRs, Filled(4)).kind, ActionKind::kResultToAll);
  const Action again = Routed(&job, 1, kRs, Filled(2), 1, 1, kCount);
  ASSERT_EQ(again.kind, ActionKind::kSendToOne);
  EXPECT_NE(again.header.flags & proto::kFlagNotice, 0);
  EXPECT_EQ(said(again), proto::kFlagPrevComplete);
  // Collective 2: a round of notices only (slot 3) ahead of its
  // predecessor (slot 2, one notice of three so far): pending.
  EXPECT_EQ(Routed(&job, 0, proto::kFlagNotice, {}, 2, 2).kind, ActionKind::kNone);
  for (uint32_t c = 0; c < 2; ++c) Routed(&job, c, proto::kFlagNotice, {}, 3, 2, kCount);
  const Action notices = Routed(&job, 2, proto::kFlagNotice, {}, 3, 2, kCount);
  ASSERT_EQ(notices.kind, ActionKind::kResultToAll);
  EXPECT_NE(notices.header.flags & proto::kFlagNotice, 0);
  EXPECT_EQ(said(notices), proto::kFlagPrevPending);
}

TEST(EngineScatterGather, InconsistentRoundsAreRefused) {
  TestEngine engine(EngineLimits{}, 1);
  JobFixture job(&engine, 1, 2, /*fan_in=*/3, /*slots=*/4, 64);
  // A second owner.
  Routed(&job, 0, proto::kFlagOwner, Filled(1));
  Action a = Routed(&job, 1, proto::kFlagOwner, Filled(1));
  EXPECT_EQ(a.header.type, MsgType::kNack);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kMismatch));
  // Reduce-scatter for one child, all-reduce for another.
  a = Routed(&job, 1, proto::kFlagOwnerOnly, Filled(1));
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kMismatch));
  // The round is still whole: the right contributions finish it.
  Routed(&job, 1, 0, Filled(2));
  EXPECT_EQ(Routed(&job, 2, 0, Filled(4)).kind, ActionKind::kResultToAll);
  // A notice with a payload (the codec refuses it; the engine too).
  proto::PacketView p;
  p.header = job.Header(MsgType::kContribution, 0, 1, 0, 3, 0, DataType::kFloat32,
                        ReduceOp::kSum, kCount);
  p.header.flags = proto::kFlagNotice;
  const std::vector<float> v = Filled(1);
  p.payload = reinterpret_cast<const uint8_t*>(v.data());
  p.payload_len = 64;
  a = job.Deliver(p, JobFixture::Peer(0), 2);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kBadRange));
}

// FORMAT.md §3.3.1 on the wire: a notice has no payload and never owns;
// a RESULT carries no owner flags.
TEST(EngineScatterGather, CodecFlagRules) {
  proto::Header h;
  h.type = MsgType::kContribution;
  h.dtype = DataType::kFloat32;
  h.op = ReduceOp::kSum;
  h.elem_count = kCount;
  std::vector<uint8_t> buf(proto::kHeaderSize + 64);
  proto::PacketView v;
  auto encode = [&](uint16_t flags, size_t payload) {
    h.flags = flags;
    const std::vector<uint8_t> data(payload, 1);
    const size_t n = proto::Encode(h, data.data(), payload, buf.data(), buf.size());
    return proto::Decode(buf.data(), n, &v);
  };
  EXPECT_EQ(encode(proto::kFlagNotice, 0), proto::DecodeError::kOk);
  EXPECT_EQ(v.payload_len, 0u);
  EXPECT_EQ(encode(proto::kFlagNotice, 64), proto::DecodeError::kLengthMismatch);
  EXPECT_EQ(encode(proto::kFlagNotice | proto::kFlagOwner, 0), proto::DecodeError::kBadFlags);
  EXPECT_EQ(encode(proto::kFlagOwner | proto::kFlagOwnerOnly, 64), proto::DecodeError::kOk);
  EXPECT_EQ(encode(0, 0), proto::DecodeError::kLengthMismatch);
  h.type = MsgType::kResult;
  EXPECT_EQ(encode(proto::kFlagNotice, 0), proto::DecodeError::kOk);
  EXPECT_EQ(encode(proto::kFlagOwner, 64), proto::DecodeError::kBadFlags);
  EXPECT_EQ(encode(proto::kFlagOwnerOnly, 64), proto::DecodeError::kBadFlags);
}

}  // namespace
}  // namespace tributary::engine
