// SPDX-License-Identifier: Apache-2.0
// Proves how a node of a tree (uplink.cc) reads its parent's STATUS
// (FORMAT.md §3.6, §13): only as the answer to a probe it sent since its
// partial sum last went up and has not seen answered (the number the
// parent echoes), and an unnumbered "held" one, the answer to a copy of
// the partial sum, as the answer to no probe; and a notice for a round
// whose data it is owed as nothing. Harness: tree_harness.h.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/engine/engine_test_util.h"
#include "tests/engine/tree_harness.h"

namespace tributary::engine {
namespace {

using namespace tree_testing;  // NOLINT(build/namespaces): the harness's names

// FORMAT.md §3.6, §13: the parent's STATUS echoes the number of the
// uplink probe it answers. Before, a "not held" sniffed on the uplink and
// replayed sent the node's partial sum up again at its next poll, each
// time; now an answer to a probe already answered is dropped.
TEST(EngineTree, AReplayedStatusFromTheParentSendsNoPartialSumAgain) {
  Tree t;
  t.Poll();
  t.Pump();
  int lost_up = 0;
  std::vector<Wire> statuses;  // the root's to leaf 0
  auto watch = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 2 && w.from == kLeafToken && h.type == MsgType::kContribution &&
        lost_up == 0) {
      return ++lost_up, true;
    }
    if (w.to_engine == 0 && h.type == MsgType::kStatus) statuses.push_back(w);
    return false;
  };
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 0, 0, 0, Values(0, r, 0));
  t.Pump(watch);
  ASSERT_EQ(lost_up, 1);
  t.now() += 60'000'000;  // past the RTO: leaf 0 probes; the root lacks its sum
  t.Poll();
  t.Pump(watch);
  ASSERT_EQ(statuses.size(), 1u);
  t.Poll();  // the partial sum goes again; the root holds it, waits for leaf 1
  t.Pump(watch);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 1u);
  proto::PacketView v;
  ASSERT_EQ(proto::Decode(statuses[0].bytes.data(), statuses[0].bytes.size(), &v),
            proto::DecodeError::kOk);
  EXPECT_EQ(v.header.flags & proto::kFlagHeld, 0);
  uint64_t number = 0;
  EXPECT_TRUE(proto::DecodeRequestSeq(v, &number));
  const uint64_t drops = t.leaf(0).counters().uplink_drops;
  EXPECT_EQ(t.leaf(0).OnPacket(v, kParentToken, t.now()).kind, ActionKind::kNone);  // replayed
  EXPECT_EQ(t.leaf(0).counters().uplink_drops, drops + 1);
  t.Poll();
  t.Pump(watch);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 1u);
  LeafOneCompletesTheRound(&t, 0, 0);
}

// FORMAT.md §13: the parent answers a copy of a partial sum with an
// unnumbered "held" STATUS (not windowed: probes are answered windowed).
// From a parent that numbers its answers, one answers no probe. Before,
// one (late, or replayed) reset the node's count of unanswered probes, so
// that a partial sum whose probes went unanswered was not sent again.
// (From a parent that predates the echo it is read as before.)
TEST(EngineTree, AHeldAnswerToACopyOfThePartialSumAnswersNoProbe) {
  Tree t;
  LeafZeroWaitsAtTheRoot(&t);
  std::vector<Wire> answers;
  bool lose = false;
  auto watch = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine != 0 || h.type != MsgType::kStatus) return false;
    answers.push_back(w);
    return lose;
  };
  const uint64_t later = 1'100'000'000;  // past any uplink RTO
  t.now() += later;
  t.Poll();
  t.Pump(watch);  // the first probe's answer arrives: numbered, held
  ASSERT_EQ(answers.size(), 1u);
  lose = true;
  t.now() += later;
  t.Poll();
  t.Pump(watch);
  ASSERT_EQ(t.leaf(0).counters().uplink_probes, 2u);
  proto::PacketView v;
  ASSERT_EQ(proto::Decode(answers[0].bytes.data(), answers[0].bytes.size(), &v),
            proto::DecodeError::kOk);
  proto::PacketView copy_answer;
  copy_answer.header = v.header;
  copy_answer.header.flags = proto::kFlagHeld;
  copy_answer.header.aux = 0;
  // Sealed with the uplink's key: with another, it would be refused for its
  // MAC and test nothing (it did until per-level keys; review of 2026-12-07).
  const uint64_t bad_mac = t.leaf(0).counters().drops[static_cast<size_t>(DropReason::kBadMac)];
  EXPECT_EQ(
      t.leaf(0).OnPacket(testing::Sealed(copy_answer, kRootKey), kParentToken, t.now()).kind,
      ActionKind::kNone);
  EXPECT_EQ(t.leaf(0).counters().drops[static_cast<size_t>(DropReason::kBadMac)], bad_mac);
  t.now() += later;
  t.Poll();
  t.Pump(watch);
  EXPECT_EQ(t.leaf(0).counters().uplink_probes, 3u);
  t.now() += later;
  t.Poll();  // two probes in a row unanswered: the partial sum goes again
  t.Pump(watch);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 1u);
  LeafOneCompletesTheRound(&t, 1, 1);
}

// FORMAT.md §3.3.1: a notice for a round whose data this node is owed (the
// owner of a reduce-scatter round below it, or a round this node sent data
// for that is not owner-only) is dropped. Sibling nodes share the parent's
// key and a RESULT's sender is 0, so a notice sent to one verifies at
// another: replayed at the owner's leaf, it completed the round there with
// notices, and the owner's resends were answered with notices for ever.
TEST(EngineTree, ANoticeWhereTheDataIsOwedIsDropped) {
  Tree t;
  t.Poll();
  t.Pump();
  const uint64_t c = 5;
  ContributeReduceScatterRound(&t, c);
  std::vector<uint8_t> notice;  // the root's RESULT to leaf 0
  t.Pump([&](const Wire& w, const proto::Header& h) {
    if (h.type != MsgType::kResult || w.to_engine > 1) return false;
    if (w.to_engine == 0) notice = w.bytes;
    return w.to_engine == 1;  // the owner's leaf loses its data
  });
  ASSERT_FALSE(notice.empty());
  proto::PacketView v;
  ASSERT_EQ(proto::Decode(notice.data(), notice.size(), &v), proto::DecodeError::kOk);
  ASSERT_NE(v.header.flags & proto::kFlagNotice, 0);
  const uint64_t drops = t.leaf(1).counters().uplink_drops;
  EXPECT_EQ(t.leaf(1).OnPacket(v, kParentToken, t.now()).kind, ActionKind::kNone);
  EXPECT_EQ(t.leaf(1).counters().uplink_drops, drops + 1);
  // The owner's leaf asks again and its owner gets the data.
  t.rank_rx().clear();
  for (int i = 0; i < 10; ++i) {
    t.now() += 300'000'000;
    t.Poll();
    t.Pump();
  }
  const std::vector<int32_t> want = SumOfValues(c);
  int data = 0;
  for (const auto& p : t.rank_rx()) {
    if (p.leaf != 1 || p.rank != 0 || p.header.type != MsgType::kResult) continue;
    ASSERT_EQ(p.header.flags & proto::kFlagNotice, 0) << "the owner got a notice";
    ASSERT_EQ(p.payload.size(), kPayload);
    EXPECT_EQ(std::memcmp(p.payload.data(), want.data(), kPayload), 0);
    ++data;
  }
  EXPECT_EQ(data, 1);
}

// FORMAT.md §5, §13: a round waiting at the parent for a child of the
// parent's that left can never complete. The parent says so to the node's
// probe (NACK peer_left); the node tells its own ranks the same when they
// ask, instead of "held" until their operations time out.
TEST(EngineTree, APeerLeftAtTheParentReachesTheRanksOfAnotherLeaf) {
  Tree t;
  LeafZeroWaitsAtTheRoot(&t);  // collective 1, slot 1, shadow 0
  t.LeaveAll(1);
  for (int i = 0; i < 2; ++i) {
    t.Poll();
    t.Pump();
  }
  const auto ask = [&] {
    const proto::PacketView req = t.FromRank(0, MsgType::kResultRequest, 0, 1, 0, 1, kPayload / 4);
    return t.leaf(0).OnPacket(testing::Sealed(req, kKey), kRankToken + 0, t.now());
  };
  EXPECT_EQ(ask().header.type, MsgType::kStatus) << "before the parent said anything: held";
  t.now() += 1'100'000'000;  // past the uplink RTO: leaf 0 probes the root
  t.Poll();
  t.Pump();
  const Action a = ask();
  EXPECT_EQ(a.header.type, MsgType::kNack);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kPeerLeft));
}

}  // namespace
}  // namespace tributary::engine
