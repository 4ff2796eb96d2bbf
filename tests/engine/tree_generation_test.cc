// SPDX-License-Identifier: Apache-2.0
// Generations across a tree of aggregators (FORMAT.md §3.1, §13): a leaf
// whose ranks start a new communicator joins its parent as a newer
// incarnation, so the parent ends the leaf's part in its generation even
// when the leaf's LEAVEs were lost, and the new communicator's rounds never
// meet the old one's partial sums; and a leaf the parent's drain left
// behind (its ranks still in the old communicator) keeps its old partial
// sums out of the parent's next generation.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tributary::engine
