// SPDX-License-Identifier: Apache-2.0
// Generations across a tree of aggregators (FORMAT.md §3.1, §13): a leaf
// whose ranks start a new communicator joins its parent as a newer
// incarnation, so the parent ends the leaf's part in its generation even
// when the leaf's LEAVEs were lost, and the new communicator's rounds never
// meet the old one's partial sums; and a leaf the parent's drain left
// behind (its ranks still in the old communicator) keeps its old partial
// sums out of the parent's next generation.
#include <gtest/gtest.h>

#include <vector>

#include "tests/engine/tree_harness.h"

namespace tributary::engine {
namespace {

using namespace tree_testing;  // NOLINT(build/namespaces): the harness's names
using proto::MsgType;

TEST(EngineTree, ALeafsNextGenerationEndsItsOldOneAtTheParentWhenItsLeavesAreLost) {
  Tree t;
  t.Poll();
  t.Pump();  // both leaves joined the root
  // Leaf 1's partial sum of collective 0 waits at the root.
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 0, 0, 0, Values(1, r, 0));
  t.Pump();
  // Leaf 0's ranks leave; both of its LEAVEs to the root are lost.
  const auto leaf0_leave = [](const Wire& w, const proto::Header& h) {
    return w.to_engine == 2 && w.from == kLeafToken + 0 && h.type == MsgType::kLeave;
  };
  t.LeaveAll(0);
  for (int i = 0; i < 2; ++i) {
    t.Poll();
    t.Pump(leaf0_leave);
  }
  // Leaf 1's ranks leave too (delivered).
  t.LeaveAll(1);
  for (int i = 0; i < 2; ++i) {
    t.Poll();
    t.Pump();
  }
  // Leaf 0's ranks start a new communicator and contribute collective 0.
  t.Rejoin(0);
  t.Poll();
  t.Pump();
  t.rank_rx().clear();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 0, 0, 0, Values(0, r, 100));
  t.Pump();
  for (const auto& p : t.rank_rx()) {
    EXPECT_NE(p.header.type, MsgType::kResult)
        << "leaf 0's new rounds met leaf 1's partial sum of the old communicator";
  }
  EXPECT_GE(t.root().counters().children_replaced, 1u);
  // Leaf 1's ranks join the new communicator: the round is theirs alone.
  t.Rejoin(1);
  t.Poll();
  t.Pump();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 0, 0, 0, Values(1, r, 100));
  t.Pump();
  ExpectResultsOf(&t, 0, 0, 100);
}

// The parent starts its next generation after the 2 s drain, without a
// leaf whose ranks are still in the old communicator (they never left).
// That leaf's probes then draw NACK stale_epoch, and its JOIN (the same
// incarnation: its generation goes on) is refused: its old partial sum
// must not enter the parent's new generation, where another leaf's new
// communicator contributes the same collective.
TEST(EngineTree, ALeafLeftBehindByTheDrainKeepsItsOldPartialSumsOutOfTheNextGeneration) {
  Tree t;
  t.Poll();
  t.Pump();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 0, 0, 0, Values(0, r, 0));
  t.Pump();  // leaf 0's partial sum of collective 0 waits at the root
  t.LeaveAll(1);
  for (int i = 0; i < 2; ++i) {
    t.Poll();
    t.Pump();
  }
  t.Rejoin(1);  // a new communicator at leaf 1; the root defers its JOIN
  t.Poll();
  t.Pump();
  for (int i = 0; i < 40; ++i) {  // 12 s: the drain, leaf 0's probes, its JOINs
    t.now() += 300'000'000;
    t.Poll();
    t.Pump();
  }
  EXPECT_GE(t.root().counters().recycles, 1u);
  t.rank_rx().clear();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 0, 0, 0, Values(1, r, 100));
  t.Pump();
  for (int i = 0; i < 10; ++i) {
    t.now() += 300'000'000;
    t.Poll();
    t.Pump();
  }
  for (const auto& p : t.rank_rx()) {
    EXPECT_NE(p.header.type, MsgType::kResult)
        << "leaf 1's new communicator's round completed with leaf 0's old partial sum";
  }
}

// A JOIN_ACK of an earlier handshake, replayed at a leaf (after its
// parent restarted and it joined again), matches no later JOIN: every
// handshake has a nonce of its own. Before, a re-JOIN repeated the first
// handshake's nonce, and the old JOIN_ACK set the old epoch again.
TEST(EngineTree, AJoinAckOfAnEarlierHandshakeReplayedChangesNothing) {
  Tree t;
  std::vector<uint8_t> first_ack;  // the root's first JOIN_ACK to leaf 1
  t.Poll();
  t.Pump([&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 1 && h.type == MsgType::kJoinAck && first_ack.empty()) first_ack = w.bytes;
    return false;
  });
  ASSERT_FALSE(first_ack.empty());
  t.Restart(99);  // the root restarts; both leaves join it again
  ContributeRound(&t, 1, 0, 1);
  t.Pump();
  for (int round = 0; round < 4 && t.rank_rx().size() < 4; ++round) {
    t.now() += 60'000'000;
    t.Poll();
    t.Pump();
  }
  ExpectResults(&t, 1);
  ASSERT_GE(t.leaf(1).counters().uplink_joins, 2u);
  // Leaf 1's partial sum of collective 2 waits at the root; the first
  // handshake's JOIN_ACK is replayed at leaf 1.
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 2, 0, 2, Values(1, r, 2));
  t.Pump();
  const uint64_t stale = t.root().counters().drops[static_cast<size_t>(DropReason::kStaleEpoch)];
  const uint64_t drops = t.leaf(1).counters().uplink_drops;
  proto::PacketView v;
  ASSERT_EQ(proto::Decode(first_ack.data(), first_ack.size(), &v), proto::DecodeError::kOk);
  EXPECT_EQ(t.leaf(1).OnPacket(v, kParentToken, t.now()).kind, ActionKind::kNone);
  EXPECT_EQ(t.leaf(1).counters().uplink_drops, drops + 1);
  // Leaf 0 completes the round: leaf 1's partial sum is still the root's.
  t.rank_rx().clear();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 2, 0, 2, Values(0, r, 2));
  for (int round = 0; round < 4; ++round) {
    t.now() += 60'000'000;
    t.Poll();
    t.Pump();
  }
  ExpectResults(&t, 2);
  EXPECT_EQ(t.root().counters().drops[static_cast<size_t>(DropReason::kStaleEpoch)], stale);
}

}  // namespace
}  // namespace tributary::engine
