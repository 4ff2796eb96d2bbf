// SPDX-License-Identifier: Apache-2.0
// Proves the tree data path of the engine (uplink.cc) with three engines
// wired together in process: two leaves (fan-in 2 each, or 3 and 2) under
// one provisioned root of fan-in 2. Every packet between them is encoded and decoded as on the
// wire. Shown: exact and identical results on every rank over many rounds
// through both shadow sets; loss between two aggregators recovered between
// them by the uplink timer (children's timers untouched); a parent restart
// (new epoch) recovered by re-JOIN and re-send; children probing a set that
// waits for its parent hear "held"; provisioning rules (conflicts, limits,
// withdraw, no idle reaping); packets a parent would send refused from
// anyone else; a packet of one level replayed at another refused (each
// level has a key of its own); AVG divided once, at the root, by the job's rank count (5
// ranks under a root of fan-in 2), which the leaves' partial sums carry.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "tests/engine/engine_test_util.h"
#include "tests/engine/tree_harness.h"

namespace tributary::engine {
namespace {

using namespace tree_testing;  // NOLINT(build/namespaces): the harness's names

TEST(EngineTree, TwoLevelsExactOnEveryRankThroughBothShadowSets) {
  Tree t;
  t.Poll();  // the leaves JOIN the root
  t.Pump();
  EXPECT_EQ(t.leaf(0).counters().uplink_joins, 1u);
  EXPECT_EQ(t.root().Jobs()[0].joined, 2u);
  for (uint64_t c = 0; c < 3 * kSlots; ++c) {
    const uint32_t slot = c % kSlots, shadow = (c / kSlots) % 2;
    ContributeRound(&t, slot, shadow, c);
    t.Pump();
    ExpectResults(&t, c);
  }
  EXPECT_EQ(t.leaf(0).counters().uplink_sends, 3u * kSlots);
  EXPECT_EQ(t.leaf(1).counters().uplink_results, 3u * kSlots);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 0u);
  EXPECT_EQ(t.root().counters().completions, 3u * kSlots);
  EXPECT_EQ(t.root().counters().TotalDrops(), 0u);
}

// Proves (ECN, FORMAT.md §3.3): congestion marks reach every rank below
// the aggregator that saw them. A leaf's RESULT counts its own children's
// marked contributions plus the parent's count plus a CE on the parent's
// RESULT; the other leaf's ranks hear only the marks above them.
TEST(EngineTree, CongestionMarksAddUpDownTheTree) {
  Tree t;
  t.Poll();
  t.Pump();
  auto mark = [](const Wire& w, const proto::Header& h) {
    if (h.type == MsgType::kContribution && w.to_engine == 2 && w.from == kLeafToken + 1) {
      return true;  // leaf 1's partial sum -> root
    }
    return h.type == MsgType::kResult && w.to_engine == 0;  // root -> leaf 0
  };
  for (int i = 0; i < 2; ++i) {
    for (uint32_t r = 0; r < 2; ++r) {
      t.set_contribute_ce(i == 0 && r == 1);  // rank 1 -> leaf 0
      t.Contribute(i, r, 0, 0, 0, Values(i, r, 0));
    }
  }
  t.set_contribute_ce(false);
  t.Pump(nullptr, mark);
  ASSERT_EQ(t.rank_rx().size(), 4u);
  for (const auto& p : t.rank_rx()) {
    EXPECT_EQ(p.header.type, MsgType::kResult);
    EXPECT_EQ(p.header.aux, p.leaf == 0 ? 3u : 1u) << "leaf " << p.leaf << " rank " << p.rank;
  }
  ExpectResults(&t, 0);
}

TEST(EngineTree, LossBetweenAggregatorsIsRecoveredByTheUplinkTimer) {
  Tree t;
  t.Poll();
  t.Pump();
  // Lose leaf 0's first partial sum and the root's first RESULT to leaf 1.
  int lost_up = 0, lost_down = 0;
  auto drop = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 2 && w.from == kLeafToken && h.type == MsgType::kContribution && lost_up == 0) {
      return ++lost_up, true;
    }
    if (w.to_engine == 1 && h.type == MsgType::kResult && lost_down == 0) return ++lost_down, true;
    return false;
  };
  ContributeRound(&t, 0, 0, 0);
  t.Pump(drop);
  EXPECT_EQ(lost_up, 1);
  EXPECT_TRUE(t.rank_rx().empty());
  // A rank probing meanwhile hears "held, nobody missing": it must wait.
  t.Contribute(0, 1, 0, 0, 0, Values(0, 1, 0));
  EXPECT_EQ(t.last().header.type, MsgType::kStatus);
  EXPECT_TRUE(t.last().header.flags & proto::kFlagHeld);
  EXPECT_EQ(t.last().header.aux, 0u);
  t.Pump();
  t.Poll();  // before the RTO: nothing is re-sent
  t.Pump();
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 0u);
  t.now() += 60'000'000;  // past the initial 50 ms RTO
  // Probe first: both leaves ask (header only). The root says it lacks leaf
  // 0's partial sum and holds leaf 1's, so leaf 1 keeps waiting and leaf 0
  // re-sends its data at the next poll.
  t.Poll();
  t.Pump(drop);
  EXPECT_EQ(t.leaf(0).counters().uplink_probes, 1u);
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 1u);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 0u);
  t.Poll();
  t.Pump(drop);  // the round completes; the RESULT to leaf 1 is lost
  EXPECT_EQ(lost_down, 1);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 1u);
  // Leaf 1's next probe (after the doubled RTO) asks for state: the root
  // says the round is complete, so its RESULT was lost, and leaf 1 asks for
  // it with a plain request (a third), answered with the stored RESULT. No
  // data re-sent for a packet the parent already had.
  t.now() += 60'000'000;
  t.Poll();
  t.Pump();
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 1u);  // 60 ms < 100 ms: not yet
  t.now() += 60'000'000;
  t.Poll();
  t.Pump();
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 3u);
  EXPECT_EQ(t.leaf(1).counters().uplink_resends, 0u);
  EXPECT_EQ(t.root().counters().retransmit_answers, 1u);
  ExpectResults(&t, 0);
  EXPECT_EQ(t.root().counters().contributions, 2u);  // no double counting
}

// Who may fill a job's fair-queue bucket (Engine::FromMemberOf): the
// address each child registered from, under its own sender index, and the
// job's parent; not another member's index, not another address, not an
// index past the fan-in, not a job the engine does not hold.
TEST(EngineTree, OnlyAJobsMembersAndParentAreFromTheJob) {
  Tree t;
  t.Poll();
  t.Pump();  // the leaves joined the root
  proto::Header h;
  h.type = MsgType::kContribution;
  h.job_id = kJob;
  h.sender = 0;
  EXPECT_TRUE(t.leaf(0).FromMemberOf(h, kRankToken));
  EXPECT_TRUE(t.leaf(0).FromMemberOf(h, kParentToken));
  EXPECT_TRUE(t.root().FromMemberOf(h, kLeafToken));
  EXPECT_FALSE(t.leaf(0).FromMemberOf(h, kRankToken + 1));  // rank 1 claiming rank 0
  EXPECT_FALSE(t.leaf(0).FromMemberOf(h, kRankToken + 5));  // no member
  EXPECT_FALSE(t.root().FromMemberOf(h, kLeafToken + 1));
  h.sender = 1;
  EXPECT_TRUE(t.leaf(0).FromMemberOf(h, kRankToken + 1));
  h.sender = 7;  // past the fan-in
  EXPECT_FALSE(t.leaf(0).FromMemberOf(h, kRankToken + 7));
  EXPECT_TRUE(t.leaf(0).FromMemberOf(h, kParentToken));
  h.job_id = kJob + 1;
  h.sender = 0;
  EXPECT_FALSE(t.leaf(0).FromMemberOf(h, kRankToken));
  EXPECT_FALSE(t.leaf(0).FromMemberOf(h, kParentToken));
}

// FORMAT.md §3.4 between aggregators: a leaf's RESULT_REQUESTs to its
// parent carry request numbers that grow with every request, so the root
// answers each once. The root's RESULT to leaf 1 is lost; leaf 1 asks
// until it has it; then its last request, as sniffed on the link, is
// replayed from its address: the root drops it (replayed_request) and
// sends nothing, where an unnumbered request would draw the stored RESULT
// again at each replay.
TEST(EngineTree, UplinkRequestsAreNumberedAndAReplayDrawsNothing) {
  Tree t;
  t.Poll();
  t.Pump();
  int lost_down = 0;
  std::vector<Wire> requests;
  auto watch = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 2 && h.type == MsgType::kResultRequest) requests.push_back(w);
    if (w.to_engine == 1 && h.type == MsgType::kResult && lost_down == 0) return ++lost_down, true;
    return false;
  };
  ContributeRound(&t, 0, 0, 0);
  t.Pump(watch);
  ASSERT_EQ(lost_down, 1);
  auto leaf1_results = [&] {
    int n = 0;
    for (const auto& p : t.rank_rx()) n += p.leaf == 1 && p.header.type == MsgType::kResult;
    return n;
  };
  for (int i = 0; i < 10 && leaf1_results() < 2; ++i) {
    t.now() += 60'000'000;
    t.Poll();
    t.Pump(watch);
  }
  ExpectResults(&t, 0);
  ASSERT_GE(requests.size(), 2u);  // the state probe, then the plain request
  uint64_t last = 0;
  proto::PacketView v;
  for (const Wire& w : requests) {
    ASSERT_EQ(proto::Decode(w.bytes.data(), w.bytes.size(), &v), proto::DecodeError::kOk);
    uint64_t seq = 0;
    ASSERT_TRUE(proto::DecodeRequestSeq(v, &seq)) << "an unnumbered uplink request";
    EXPECT_GT(seq, last);
    last = seq;
  }
  const uint64_t answers = t.root().counters().retransmit_answers;
  const uint64_t replayed = testing::Drops(t.root(), DropReason::kReplayedRequest);
  for (int i = 0; i < 3; ++i) {
    const Action a = t.root().OnPacket(v, requests.back().from, t.now());
    EXPECT_EQ(a.kind, ActionKind::kNone) << "replay " << i;
  }
  EXPECT_EQ(testing::Drops(t.root(), DropReason::kReplayedRequest), replayed + 3);
  EXPECT_EQ(t.root().counters().retransmit_answers, answers);
}

// FORMAT.md §3.3.3 between aggregators: the root's RESULT of a
// collective's second fragment says the first one's round is complete, so
// a leaf still waiting for the first one's RESULT lost it and asks for it
// at its next poll, with a plain request and no timer. Meanwhile that leaf
// tells its own ranks the round before is pending (it waits upstream).
TEST(EngineTree, AResultSayingTheRoundBeforeIsCompleteRecoversItsLostResultAtOnce) {
  Tree t;
  t.Poll();
  t.Pump();
  constexpr uint64_t kCollective = 5;
  constexpr uint64_t kSecond = kPayload / 4;  // elements of the first fragment
  int lost = 0;
  auto drop = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 1 && h.type == MsgType::kResult && h.elem_offset == 0 && lost == 0) {
      return ++lost, true;
    }
    return false;
  };
  for (uint64_t f = 0; f < 2; ++f) {
    for (int i = 0; i < 2; ++i) {
      for (uint32_t r = 0; r < 2; ++r) {
        const auto v = Values(i, r, f);
        t.ContributeBytes(i, r, static_cast<uint32_t>(f), 0, kCollective, DataType::kInt32,
                          ReduceOp::kSum, reinterpret_cast<const uint8_t*>(v.data()),
                          v.size() * 4, 0, 0, f * kSecond);
      }
    }
  }
  t.Pump(drop);
  ASSERT_EQ(lost, 1);
  EXPECT_EQ(t.leaf(1).counters().uplink_results, 1u);  // the second fragment's
  // What each leaf told its own ranks with the second fragment's RESULT:
  // leaf 0 has the first one's, so that round is complete there; leaf 1's
  // first round still waits for the root (its partial sum went up), so it
  // says pending, and its ranks wait while it recovers that RESULT itself.
  int told = 0;
  for (const auto& p : t.rank_rx()) {
    if (p.header.type != MsgType::kResult || p.header.elem_offset != kSecond) continue;
    ++told;
    EXPECT_EQ(p.header.flags & (proto::kFlagPrevPending | proto::kFlagPrevComplete),
              p.leaf == 0 ? proto::kFlagPrevComplete : proto::kFlagPrevPending)
        << "leaf " << p.leaf;
  }
  EXPECT_EQ(told, 4);
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 0u);
  t.Poll();  // no time has passed: far from any timer
  t.Pump();
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 1u);
  EXPECT_EQ(t.leaf(1).counters().uplink_resends, 0u);
  EXPECT_EQ(t.leaf(0).counters().uplink_probes, 0u);
  EXPECT_EQ(t.root().counters().retransmit_answers, 1u);
  EXPECT_EQ(t.leaf(1).counters().uplink_results, 2u);
  // Every rank has both fragments' sums, once each.
  for (uint64_t f = 0; f < 2; ++f) ExpectResultsOf(&t, kCollective, f * kSecond, f);
  // Nothing more is asked at later polls.
  t.now() += 1'000'000'000;
  t.Poll();
  t.Pump();
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 1u);
}

// A probe that reaches the parent after the round completed, while the
// RESULT is still on its way (queued ahead of the answer, as on a saturated
// link), draws a STATUS, not a second RESULT; the RESULT completes the set
// and the STATUS behind it changes nothing.
TEST(EngineTree, AProbeOfARoundWhoseResultIsOnItsWayDrawsNoSecondResult) {
  Tree t;
  t.Poll();
  t.Pump();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 0, 0, 0, Values(1, r, 0));
  t.Pump();  // the root holds leaf 1's partial sum
  t.now() += 60'000'000;  // past leaf 1's RTO
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 0, 0, 0, Values(0, r, 0));
  t.Poll();  // leaf 1's probe, on the wire behind leaf 0's partial sum
  t.Pump();
  EXPECT_EQ(t.leaf(1).counters().uplink_probes, 1u);
  EXPECT_EQ(t.leaf(0).counters().uplink_probes, 0u);
  EXPECT_EQ(t.root().counters().retransmit_answers, 0u);  // was 1: the RESULT twice
  EXPECT_EQ(t.leaf(1).counters().uplink_drops, 0u);       // no duplicate RESULT arrived
  EXPECT_EQ(t.leaf(1).counters().uplink_results, 1u);
  ExpectResults(&t, 0);
}

TEST(EngineTree, ParentRestartIsRecoveredByRejoinAndResend) {
  Tree t;
  t.Poll();
  t.Pump();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 1, 0, 1, Values(0, r, 1));
  t.Pump();  // leaf 0's partial sum is at the old root
  t.Restart(99);  // the root restarts: new epoch, nothing held
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 1, 0, 1, Values(1, r, 1));
  t.Pump();  // leaf 1 sends with the old epoch: NACK stale_epoch -> re-JOIN
  EXPECT_GE(t.leaf(1).counters().uplink_nacks, 1u);
  t.now() += 60'000'000;
  for (int round = 0; round < 4 && t.rank_rx().size() < 4; ++round) {
    t.Poll();
    t.Pump();
    t.now() += 60'000'000;
  }
  ExpectResults(&t, 1);
  EXPECT_EQ(t.root().counters().contributions, 2u);
}

// Anyone can send a leaf an unauthenticated "unknown job" claiming to come
// from its parent. The leaf asks the parent again (a JOIN); the parent's
// JOIN_ACK names the epoch the leaf had, so the NACK was false and nothing
// the parent holds is sent again; the round then completes as usual.
// A NACK unknown_job without a MAC, as anyone can send it from the root's
// address, delivered to leaf 0 `times` times: each is taken without an
// answer.
void SpoofUnknownJobAtLeafZero(Tree* t, int times) {
  proto::Header nack;
  nack.type = MsgType::kNack;
  nack.job_id = kJob;
  nack.aux = static_cast<uint32_t>(proto::NackCode::kUnknownJob);
  uint8_t bytes[proto::kHeaderSize];
  ASSERT_EQ(proto::Encode(nack, nullptr, 0, bytes, sizeof(bytes)), sizeof(bytes));
  proto::PacketView v;
  ASSERT_EQ(proto::Decode(bytes, sizeof(bytes), &v), proto::DecodeError::kOk);
  for (int i = 0; i < times; ++i) {
    EXPECT_EQ(t->leaf(0).OnPacket(v, kParentToken, t->now()).kind, ActionKind::kNone);
  }
}

TEST(EngineTree, AFalseUnknownJobFromTheParentResendsNothing) {
  Tree t;
  LeafZeroWaitsAtTheRoot(&t);
  const uint64_t sends = t.leaf(0).counters().uplink_sends;
  ASSERT_NO_FATAL_FAILURE(SpoofUnknownJobAtLeafZero(&t, 1));
  for (int round = 0; round < 4; ++round) {  // the JOIN, the CHALLENGE, the JOIN again
    t.Poll();
    t.Pump();
  }
  EXPECT_EQ(t.leaf(0).counters().uplink_false_unknown_job, 1u);
  EXPECT_EQ(t.leaf(0).counters().uplink_sends, sends);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 0u);
  EXPECT_EQ(t.root().counters().retransmit_answers, 0u);
  LeafOneCompletesTheRound(&t, 1, 1);
}

// An unauthenticated "unknown job" (anyone can send one) only puts the
// parent's epoch in doubt: the leaf goes on with that epoch while its JOIN
// settles the doubt, so the parent's RESULT that arrives before the
// JOIN_ACK is taken. Before, the leaf forgot the epoch until the JOIN_ACK
// came and dropped that RESULT (a steady flood of such NACKs stalled the
// job). A flood of them puts nothing more in doubt. A sibling's STATUS
// (authentic: the same key), replayed at this leaf, is dropped.
TEST(EngineTree, ASpoofedUnknownJobDoesNotStopTheParentsResults) {
  Tree t;
  LeafZeroWaitsAtTheRoot(&t);
  ASSERT_NO_FATAL_FAILURE(SpoofUnknownJobAtLeafZero(&t, 100));
  // Leaf 1's partial sum completes the round before leaf 0 polls (no JOIN
  // has gone yet): the RESULT reaches leaf 0's ranks all the same.
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 1, 0, 1, Values(1, r, 1));
  t.Pump();
  ExpectResults(&t, 1);
  EXPECT_EQ(t.leaf(0).counters().uplink_drops, 0u);
  // The doubt is settled by one JOIN, and nothing is re-sent.
  for (int round = 0; round < 4; ++round) {  // the JOIN, the CHALLENGE, the JOIN again
    t.Poll();
    t.Pump();
  }
  EXPECT_EQ(t.leaf(0).counters().uplink_false_unknown_job, 1u);
  EXPECT_EQ(t.leaf(0).counters().uplink_resends, 0u);
  // Leaf 1's STATUS from the root, replayed at leaf 0: not leaf 0's.
  proto::PacketView status;
  status.header.type = MsgType::kStatus;
  status.header.job_id = kJob;
  status.header.epoch = t.root().Jobs()[0].epoch;
  status.header.sender = 1;  // leaf 1's index at the root
  status.header.collective_id = 1;
  status.header.shadow = 1;
  status.header.flags = proto::kFlagHeld;
  const uint64_t drops = t.leaf(0).counters().uplink_drops;
  t.leaf(0).OnPacket(testing::Sealed(status, kRootKey), kParentToken, t.now());
  EXPECT_EQ(t.leaf(0).counters().uplink_drops, drops + 1);
  status.header.sender = 0;  // leaf 0's own: taken (held: nothing to do)
  t.leaf(0).OnPacket(testing::Sealed(status, kRootKey), kParentToken, t.now());
  EXPECT_EQ(t.leaf(0).counters().uplink_drops, drops + 1);
}

TEST(EngineTree, ProvisioningRulesAndLifetime) {
  EngineLimits limits;
  limits.max_jobs = 2;
  limits.job_idle_timeout_ns = 10;
  testing::TestEngine e(limits, 1);
  JobSpec spec;
  spec.job_id = 5;
  spec.job_key = 9;
  spec.params = {3, 8, 1024};
  EXPECT_EQ(e.Provision(spec, 1), ProvisionResult::kCreated);
  EXPECT_EQ(e.Provision(spec, 1), ProvisionResult::kUnchanged);
  JobSpec other = spec;
  other.job_key = 10;
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kConflict);
  other = spec;
  other.params.fan_in = 4;
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kConflict);
  other = spec;
  other.job_id = 6;
  other.params.payload_bytes = 1000;  // not a multiple of 64
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kInvalid);
  other.params.payload_bytes = 1024;
  other.has_parent = true;
  other.parent_fan_in = 2;
  other.child_index = 2;  // >= the parent's fan-in
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kInvalid);
  other.child_index = 1;
  other.uplink_key = 11;  // the parent's key
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kCreated);
  EXPECT_TRUE(e.HasUplinks());
  for (const uint64_t uplink_key : {uint64_t{0}, uint64_t{12}}) {  // 0: the job's own key
    JobSpec moved = other;
    moved.uplink_key = uplink_key;
    EXPECT_EQ(e.Provision(moved, 1), ProvisionResult::kConflict);
  }
  other.job_id = 7;
  EXPECT_EQ(e.Provision(other, 1), ProvisionResult::kJobLimit);
  // Children must JOIN with the provisioned parameters.
  EXPECT_EQ(e.OnPacket(JoinPacket(5, 9, 0, JoinPayload(3, 8, 2048)), 77, 2).header.type,
            MsgType::kNack);
  EXPECT_EQ(e.OnPacket(JoinPacket(5, 9, 0, JoinPayload(3, 8, 1024)), 77, 2).header.type,
            MsgType::kJoinAck);
  // Provisioned jobs outlive idleness and their children's LEAVE ...
  EXPECT_EQ(e.Reap(1000000), 0u);
  // ... and end when withdrawn.
  EXPECT_FALSE(e.Withdraw(99));
  EXPECT_TRUE(e.Withdraw(6));
  EXPECT_EQ(e.Reap(1000001), 1u);
  EXPECT_FALSE(e.HasUplinks());
  EXPECT_EQ(e.Jobs().size(), 1u);
}

// A daemon run by the manager serves only placed jobs: a JOIN that races
// ahead of the placement is told unknown_job (and retries), so no leaf ever
// aggregates a job without knowing its parent.
TEST(EngineTree, ManagedEngineCreatesNoJobOnJoin) {
  EngineLimits limits;
  limits.create_jobs_on_join = false;
  testing::TestEngine e(limits, 1);
  const Action a = e.OnPacket(JoinPacket(5, 9, 0, JoinPayload(2, 8, 1024)), 77, 1);
  EXPECT_EQ(a.header.type, MsgType::kNack);
  EXPECT_EQ(a.header.aux, static_cast<uint32_t>(proto::NackCode::kUnknownJob));
  EXPECT_TRUE(e.Jobs().empty());
  JobSpec spec;
  spec.job_id = 5;
  spec.job_key = 9;
  spec.params = {2, 8, 1024};
  ASSERT_EQ(e.Provision(spec, 1), ProvisionResult::kCreated);
  EXPECT_EQ(e.OnPacket(JoinPacket(5, 9, 0, JoinPayload(2, 8, 1024)), 77, 1).header.type,
            MsgType::kJoinAck);
}

TEST(EngineTree, ParentMessagesFromAnyoneElseAreRefused) {
  Tree t;
  t.Poll();
  t.Pump();
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(0, r, 0, 0, 0, Values(0, r, 0));
  // A forged RESULT from a rank's address (not the parent): dropped.
  std::vector<int32_t> forged(kPayload / 4, 7);
  proto::PacketView p;
  p.header.type = MsgType::kResult;
  p.header.job_id = kJob;
  p.header.collective_id = 0;
  p.header.dtype = DataType::kInt32;
  p.header.op = ReduceOp::kSum;
  p.header.elem_count = kPayload / 4;
  p.payload = reinterpret_cast<const uint8_t*>(forged.data());
  p.payload_len = kPayload;
  const uint64_t unexpected = t.leaf(0).counters().drops[static_cast<size_t>(DropReason::kUnexpectedType)];
  EXPECT_EQ(t.leaf(0).OnPacket(testing::Sealed(p, kKey), kRankToken, t.now()).kind,
            ActionKind::kNone);
  EXPECT_EQ(t.leaf(0).counters().drops[static_cast<size_t>(DropReason::kUnexpectedType)],
            unexpected + 1);
  // From the parent's address (spoofed) without the parent's key: dropped,
  // bad MAC; the ranks' key, which every rank holds, is not the parent's.
  EXPECT_EQ(t.leaf(0).OnPacket(testing::Sealed(p, kKey + 1), kParentToken, t.now()).kind,
            ActionKind::kNone);
  EXPECT_EQ(t.leaf(0).OnPacket(testing::Sealed(p, kKey), kParentToken, t.now()).kind,
            ActionKind::kNone);
  EXPECT_EQ(t.leaf(0).counters().drops[static_cast<size_t>(DropReason::kBadMac)], 2u);
  // The real round still completes exactly.
  for (uint32_t r = 0; r < 2; ++r) t.Contribute(1, r, 0, 0, 0, Values(1, r, 0));
  t.Pump();
  ExpectResults(&t, 0);
}

// FORMAT.md §13: a tree level has a key of its own. Everything on the
// leaves' uplinks is MACed with the root's key, which no rank holds. A rank's
// contribution, sniffed and replayed at the root from its leaf's address,
// fails the root's MAC and draws no answer (with one key for every level the
// root answered it with an authentic NACK stale_epoch, which replayed at the
// rank failed its communicator); an uplink packet replayed at a leaf as a
// rank's fails there.
TEST(EngineTree, APacketOfOneLevelReplayedAtAnotherIsRefused) {
  Tree t;
  std::vector<Wire> uplink;  // both ways, as the sniffer on the link saw it
  auto sniff = [&](const Wire& w, const proto::Header&) {
    if (w.to_engine == 2 || w.from == kParentToken) uplink.push_back(w);
    return false;
  };
  t.Poll();
  t.Pump(sniff);
  ContributeRound(&t, 0, 0, 0);
  t.Pump(sniff);
  ExpectResults(&t, 0);
  const proto::MacKey ranks = proto::DeriveMacKey(kJob, kKey);
  const proto::MacKey root = proto::DeriveMacKey(kJob, kRootKey);
  ASSERT_GE(uplink.size(), 6u);  // JOIN, JOIN_ACK, CONTRIBUTION and RESULT per leaf
  for (const Wire& w : uplink) {
    proto::PacketView v;
    ASSERT_EQ(proto::Decode(w.bytes.data(), w.bytes.size(), &v), proto::DecodeError::kOk);
    EXPECT_TRUE(proto::VerifyPacket(root, v)) << proto::MsgTypeName(v.header.type);
    EXPECT_FALSE(proto::VerifyPacket(ranks, v)) << proto::MsgTypeName(v.header.type);
  }

  // Rank 1 of leaf 0's contribution of the next round, replayed at the root.
  const std::vector<int32_t> values = Values(0, 1, 1);
  proto::PacketView p =
      t.FromRank(0, MsgType::kContribution, 1, 1, 0, 1, static_cast<uint32_t>(values.size()));
  p.payload = reinterpret_cast<const uint8_t*>(values.data());
  p.payload_len = values.size() * 4;
  const size_t bad_mac = static_cast<size_t>(DropReason::kBadMac);
  const uint64_t root_bad = t.root().counters().drops[bad_mac];
  EXPECT_EQ(t.root().OnPacket(testing::Sealed(p, kKey), kLeafToken + 0, t.now()).kind,
            ActionKind::kNone);
  EXPECT_EQ(t.root().counters().drops[bad_mac], root_bad + 1);
  EXPECT_EQ(t.root().counters().drops[static_cast<size_t>(DropReason::kStaleEpoch)], 0u);

  // Leaf 0's partial sum (to the root), replayed at leaf 1 from a rank's
  // address: refused there too.
  const auto up = std::find_if(uplink.begin(), uplink.end(), [](const Wire& w) {
    proto::PacketView v;
    return w.to_engine == 2 &&
           proto::Decode(w.bytes.data(), w.bytes.size(), &v) == proto::DecodeError::kOk &&
           v.header.type == MsgType::kContribution;
  });
  ASSERT_NE(up, uplink.end());
  proto::PacketView replay;
  ASSERT_EQ(proto::Decode(up->bytes.data(), up->bytes.size(), &replay), proto::DecodeError::kOk);
  const uint64_t leaf_bad = t.leaf(1).counters().drops[bad_mac];
  EXPECT_EQ(t.leaf(1).OnPacket(replay, kRankToken + 0, t.now()).kind, ActionKind::kNone);
  EXPECT_EQ(t.leaf(1).counters().drops[bad_mac], leaf_bad + 1);

  // The job goes on exactly.
  ContributeRound(&t, 1, 0, 1);
  t.Pump();
  ExpectResults(&t, 1);
}

// A provisioned tree outlives its communicators: when every rank left, each
// node starts over with a new epoch and leaves its parent, so a new
// communicator of the same job (collective ids from 0 again) is exact.
TEST(EngineTree, NewCommunicatorAfterAllRanksLeftStartsOverEverywhere) {
  Tree t;
  t.Poll();
  t.Pump();
  for (uint64_t c = 0; c < 6; ++c) {
    for (int i = 0; i < 2; ++i) {
      for (uint32_t r = 0; r < 2; ++r) t.Contribute(i, r, c % kSlots, (c / kSlots) % 2, c, Values(i, r, c));
    }
    t.Pump();
  }
  const uint32_t old_epoch = t.epoch(0);
  for (int i = 0; i < 2; ++i) t.LeaveAll(i);
  EXPECT_EQ(t.leaf(0).counters().recycles, 1u);
  EXPECT_EQ(t.leaf(0).counters().late_leaves, 1u);  // the last rank's second copy
  t.Poll();  // each leaf owes its parent two LEAVEs
  t.Poll();
  t.Pump();
  EXPECT_EQ(t.root().counters().recycles, 1u);
  EXPECT_EQ(t.root().counters().TotalDrops(), 0u);
  t.rank_rx().clear();
  for (int i = 0; i < 2; ++i) t.Rejoin(i);
  EXPECT_NE(t.epoch(0), old_epoch);
  t.Poll();  // the leaves join the root again
  t.Pump();
  for (uint64_t c = 0; c < 2; ++c) {
    for (int i = 0; i < 2; ++i) {
      for (uint32_t r = 0; r < 2; ++r) t.Contribute(i, r, c % kSlots, 0, c, Values(i, r, c + 100));
    }
    t.Pump();
  }
  // Values(…, c + 100) differ from the first generation's: stale answers would show.
  int got = 0;
  for (const auto& p : t.rank_rx()) {
    if (p.header.type != MsgType::kResult) continue;
    ++got;
    const auto* out = reinterpret_cast<const int32_t*>(p.payload.data());
    int64_t want = 0;
    for (int i = 0; i < 2; ++i)
      for (uint32_t r = 0; r < 2; ++r) want += Values(i, r, p.header.collective_id + 100)[0];
    EXPECT_EQ(out[0], static_cast<int32_t>(want));
  }
  EXPECT_EQ(got, 8);
}

// AVG in a tree: the leaves (3 and 2 ranks) forward undivided partial sums
// carrying their rank counts in aux; the provisioned root, whose fan-in is
// 2, divides once by the job's 5 ranks. int32 truncates toward zero (sums
// of both signs, none divisible by 5 everywhere), fp32 rounds once. Every
// rank gets the same divided result; a leaf's children never see a partial.
TEST(EngineTree, AvgDividesOnceAtTheRootByTheJobsRankCount) {
  Tree t({3, 2});
  t.Poll();
  t.Pump();
  ASSERT_EQ(t.root().Jobs()[0].joined, 2u);
  constexpr size_t kN = kPayload / 4;
  auto value = [](int leaf, uint32_t r, size_t k) {
    return static_cast<int32_t>((leaf * 3 + r + 1) * 7 * (k % 2 == 0 ? 1 : -1) + k);
  };
  std::vector<uint32_t> partial_ranks;
  auto watch = [&](const Wire& w, const proto::Header& h) {
    if (w.to_engine == 2 && h.type == MsgType::kContribution) {
      partial_ranks.push_back(h.aux);
      EXPECT_EQ(h.op, ReduceOp::kAvg);
    }
    return false;
  };
  for (uint64_t c = 0; c < 2; ++c) {
    const DataType dt = c == 0 ? DataType::kInt32 : DataType::kFloat32;
    for (int i = 0; i < 2; ++i) {
      for (uint32_t r = 0; r < (i == 0 ? 3u : 2u); ++r) {
        std::vector<uint8_t> bytes(kPayload);
        for (size_t k = 0; k < kN; ++k) {
          const int32_t v = value(i, r, k);
          if (dt == DataType::kInt32) {
            std::memcpy(bytes.data() + 4 * k, &v, 4);
          } else {
            const float f = static_cast<float>(v);
            std::memcpy(bytes.data() + 4 * k, &f, 4);
          }
        }
        t.ContributeBytes(i, r, static_cast<uint32_t>(c), 0, c, dt, ReduceOp::kAvg, bytes.data(),
                          bytes.size());
      }
    }
    t.Pump(watch);
    int results = 0;
    for (const auto& p : t.rank_rx()) {
      if (p.header.type != MsgType::kResult || p.header.collective_id != c) continue;
      ++results;
      ASSERT_EQ(p.payload.size(), kPayload);
      for (size_t k = 0; k < kN; ++k) {
        int64_t sum = 0;
        for (int i = 0; i < 2; ++i) {
          for (uint32_t r = 0; r < (i == 0 ? 3u : 2u); ++r) sum += value(i, r, k);
        }
        if (dt == DataType::kInt32) {
          int32_t got;
          std::memcpy(&got, p.payload.data() + 4 * k, 4);
          ASSERT_EQ(got, static_cast<int32_t>(sum / 5)) << "[" << k << "] sum " << sum;  // C division
        } else {
          float got;
          std::memcpy(&got, p.payload.data() + 4 * k, 4);
          ASSERT_EQ(got, static_cast<float>(sum) / 5.0f) << "[" << k << "]";
        }
      }
    }
    EXPECT_EQ(results, 5) << "collective " << c;
  }
  EXPECT_EQ(partial_ranks, (std::vector<uint32_t>{3, 2, 3, 2}));
  EXPECT_EQ(t.root().counters().completions, 2u);
  EXPECT_EQ(t.root().counters().TotalDrops(), 0u);
}

// Proves (FORMAT.md §3.3.1) a reduce-scatter round through the tree: the
// sum reaches its owner (rank 0 of leaf 1) alone; the root sends leaf 0 a
// notice, leaf 1 the data, and leaf 1 passes the data to the owner and a
// notice to its other rank. Retransmission answers follow the same rule.
TEST(EngineTree, ReduceScatterDataReachesOnlyTheOwner) {
  Tree t;
  t.Poll();
  t.Pump();
  const uint64_t c = 5;
  ContributeReduceScatterRound(&t, c);
  t.Pump();
  const std::vector<int32_t> want = SumOfValues(c);
  int data = 0, notices = 0;
  for (const auto& p : t.rank_rx()) {
    ASSERT_EQ(p.header.type, MsgType::kResult);
    ASSERT_EQ(p.header.elem_count, kPayload / 4);
    if (p.leaf == 1 && p.rank == 0) {
      ++data;
      ASSERT_EQ(p.header.flags & proto::kFlagNotice, 0);
      ASSERT_EQ(p.payload.size(), kPayload);
      EXPECT_EQ(std::memcmp(p.payload.data(), want.data(), kPayload), 0);
    } else {
      ++notices;
      EXPECT_NE(p.header.flags & proto::kFlagNotice, 0);
      EXPECT_TRUE(p.payload.empty());
    }
  }
  EXPECT_EQ(data, 1);
  EXPECT_EQ(notices, 3);
  EXPECT_EQ(t.root().counters().TotalDrops(), 0u);
  EXPECT_EQ(t.leaf(0).counters().uplink_drops, 0u);

  // A duplicate from a non-owner gets the notice again; from the owner, the data.
  t.rank_rx().clear();
  const auto v00 = Values(0, 0, c);
  t.ContributeBytes(0, 0, 1, 0, c, DataType::kInt32, ReduceOp::kSum,
                    reinterpret_cast<const uint8_t*>(v00.data()), v00.size() * 4,
                    proto::kFlagOwnerOnly);
  const auto v10 = Values(1, 0, c);
  t.ContributeBytes(1, 0, 1, 0, c, DataType::kInt32, ReduceOp::kSum,
                    reinterpret_cast<const uint8_t*>(v10.data()), v10.size() * 4,
                    proto::kFlagOwnerOnly | proto::kFlagOwner);
  t.Pump();
  ASSERT_EQ(t.rank_rx().size(), 2u);
  EXPECT_TRUE(t.rank_rx()[0].payload.empty());
  EXPECT_NE(t.rank_rx()[0].header.flags & proto::kFlagNotice, 0);
  EXPECT_EQ(t.rank_rx()[1].payload.size(), kPayload);
}

// Proves (FORMAT.md §3.3.1) an all-gather round through the tree: the
// owner (rank 1 of leaf 0) sends its bytes, everyone else a notice (leaf
// 1's partial "sum" goes up as a notice), and every rank gets the owner's
// bytes exactly, whichever arrived first at the leaf.
TEST(EngineTree, AllGatherFansTheOwnersBytesOutToEveryRank) {
  Tree t;
  t.Poll();
  t.Pump();
  std::vector<uint8_t> bytes(kPayload);
  for (size_t k = 0; k < bytes.size(); ++k) bytes[k] = static_cast<uint8_t>(k * 37 + 255);
  const uint64_t c = 9;
  for (int i = 1; i >= 0; --i) {
    for (uint32_t r = 0; r < 2; ++r) {
      if (i == 0 && r == 1) {
        t.ContributeBytes(i, r, 2, 1, c, DataType::kUint8, ReduceOp::kSum, bytes.data(),
                          bytes.size(), proto::kFlagOwner);
      } else {
        t.ContributeBytes(i, r, 2, 1, c, DataType::kUint8, ReduceOp::kSum, nullptr, 0,
                          proto::kFlagNotice, kPayload);
      }
    }
  }
  t.Pump();
  ASSERT_EQ(t.rank_rx().size(), 4u);
  for (const auto& p : t.rank_rx()) {
    ASSERT_EQ(p.header.type, MsgType::kResult);
    EXPECT_EQ(p.header.flags & proto::kFlagNotice, 0);
    ASSERT_EQ(p.payload, bytes) << "leaf " << p.leaf << " rank " << p.rank;
  }
  EXPECT_EQ(t.root().counters().TotalDrops(), 0u);
  EXPECT_EQ(t.root().counters().bytes_reduced, kPayload);  // one leaf sent data, one a notice
}

}  // namespace
}  // namespace tributary::engine
