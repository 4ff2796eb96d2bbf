// SPDX-License-Identifier: Apache-2.0
// The harness of the tree tests (tree_test.cc): two leaf engines under one
// provisioned root, wired in process. Tree delivers every packet between
// them encoded and decoded as on the wire (Pump, with optional drops and
// CE marks), runs the leaves' uplink timers (Poll), lets ranks contribute,
// and keeps what the ranks received; Values and ExpectResults give each
// rank's input of a round and check every rank's RESULT against the sum.
// Header-only; one test binary includes it.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "tests/engine/engine_test_util.h"

namespace tributary::engine::tree_testing {

using proto::DataType;
using proto::MsgType;
using proto::ReduceOp;
using testing::JoinPacket;
using testing::JoinPayload;

constexpr uint32_t kJob = 42;
constexpr uint64_t kKey = 0xabcdef;         // the ranks' job key, at the leaves
constexpr uint64_t kRootKey = 0x5eed1e7e1;  // the root's, on the leaves' uplinks (FORMAT.md §13)
constexpr uint32_t kSlots = 4;
constexpr uint32_t kPayload = 256;
constexpr PeerToken kParentToken = 1;   // the root, as the leaves' dataplanes name it
constexpr PeerToken kLeafToken = 2000;  // leaf i, as the root's dataplane names it
constexpr PeerToken kRankToken = 1000;  // rank i of a leaf, as that leaf names it

// A packet in flight: where it goes (engine index, 3 = a rank) and its bytes.
struct Wire {
  int to_engine;   // 0, 1 = leaves, 2 = root, 3 = ranks
  int leaf;        // for ranks: which leaf sent it
  PeerToken from;  // token the receiving engine knows the sender by
  PeerToken to;    // for ranks: the rank token
  std::vector<uint8_t> bytes;
};

class Tree {
 public:
  // ranks[i]: the fan-in of leaf i (the ranks below it).
  explicit Tree(std::array<uint32_t, 2> ranks = {2, 2}) : ranks_(ranks) {
    Restart();
    for (int i = 0; i < 2; ++i) MakeLeaf(i);
  }

  void Restart(uint32_t seed = 7) {
    root_ = std::make_unique<testing::TestEngine>(EngineLimits{}, seed);
    JobSpec spec;
    spec.job_id = kJob;
    spec.job_key = kRootKey;
    spec.params = {2, kSlots, kPayload};
    EXPECT_EQ(root_->Provision(spec, now_), ProvisionResult::kCreated);
  }
  void MakeLeaf(int i) {
    leaf_[i] = std::make_unique<testing::TestEngine>(EngineLimits{}, 100 + i);
    // As tributaryd's (its start time): later for a leaf made later (a
    // restart), and well above the +1 of each generation's end.
    next_incarnation_ += 1000;
    leaf_[i]->SetIncarnation(next_incarnation_);
    JobSpec spec;
    spec.job_id = kJob;
    spec.job_key = kKey;
    spec.params = {ranks_[i], kSlots, kPayload};
    spec.has_parent = true;
    spec.parent = kParentToken;
    spec.child_index = static_cast<uint32_t>(i);
    spec.parent_fan_in = 2;
    spec.uplink_key = kRootKey;
    EXPECT_EQ(leaf_[i]->Provision(spec, now_), ProvisionResult::kCreated);
    const auto body = JoinPayload(ranks_[i], kSlots, kPayload);
    for (uint32_t r = 0; r < ranks_[i]; ++r) {
      const Action a = leaf_[i]->OnPacket(JoinPacket(kJob, kKey, r, body), kRankToken + r, now_);
      EXPECT_EQ(a.header.type, MsgType::kJoinAck);
      epoch_[i] = a.header.epoch;
    }
  }

  Engine& leaf(int i) { return *leaf_[i]; }
  Engine& root() { return *root_; }
  uint64_t& now() { return now_; }

  // Emits what an engine's Action sends, as packets on the wire.
  void Emit(int from_engine, const Action& a) {
    if (a.kind == ActionKind::kNone) return;
    ASSERT_NE(a.kind, ActionKind::kFlushAndRetry);
    auto send = [&](PeerToken to) {
      Wire w{};
      w.bytes = testing::EncodeActionFor(a, to);
      if (from_engine == 2) {  // root -> leaf
        w.to_engine = static_cast<int>(to - kLeafToken);
        w.from = kParentToken;
      } else if (to == kParentToken) {  // leaf -> root
        w.to_engine = 2;
        w.from = kLeafToken + from_engine;
      } else {  // leaf -> rank
        w.to_engine = 3;
        w.leaf = from_engine;
        w.to = to;
      }
      wire_.push_back(std::move(w));
    };
    if (a.kind == ActionKind::kSendToOne) send(a.peer);
    for (uint32_t i = 0; i < a.peer_count; ++i) send(a.peers[i]);
  }

  // Delivers packets until none is left; `drop` may discard any of them,
  // `mark` have any arrive marked CE (ECN).
  using Filter = std::function<bool(const Wire&, const proto::Header&)>;
  void Pump(const Filter& drop = nullptr, const Filter& mark = nullptr) {
    while (!wire_.empty()) {
      Wire w = std::move(wire_.front());
      wire_.pop_front();
      proto::PacketView v;
      ASSERT_EQ(proto::Decode(w.bytes.data(), w.bytes.size(), &v), proto::DecodeError::kOk);
      if (drop && drop(w, v.header)) continue;
      if (w.to_engine == 3) {
        rank_rx_.push_back({w.leaf, static_cast<uint32_t>(w.to - kRankToken), v.header,
                            std::vector<uint8_t>(v.payload, v.payload + v.payload_len)});
        continue;
      }
      Engine& e = w.to_engine == 2 ? *root_ : *leaf_[w.to_engine];
      v.ce = mark && mark(w, v.header);
      Action a = e.OnPacket(v, w.from, now_);
      if (a.kind == ActionKind::kFlushAndRetry) {
        e.EndBurst();
        a = e.OnPacket(v, w.from, now_);
      }
      Emit(w.to_engine, a);
    }
    for (auto* e : {leaf_[0].get(), leaf_[1].get(), root_.get()}) e->EndBurst();
  }

  // Runs the uplink timers of both leaves at the current time.
  void Poll() {
    for (int i = 0; i < 2; ++i) {
      Action out[16];
      const size_t n = leaf_[i]->PollUplinks(now_, out, 16);
      for (size_t k = 0; k < n; ++k) Emit(i, out[k]);
    }
  }

  // Rank `r` of leaf `i` contributes int32 values.
  void Contribute(int i, uint32_t r, uint32_t slot, uint32_t shadow, uint64_t collective,
                  const std::vector<int32_t>& values) {
    ContributeBytes(i, r, slot, shadow, collective, DataType::kInt32, ReduceOp::kSum,
                    reinterpret_cast<const uint8_t*>(values.data()), values.size() * 4);
  }
  // The header rank `r` of leaf `i`'s job sends (unsealed): `type` about
  // (slot, shadow, collective) at element 0, `count` elements of `dtype`.
  proto::PacketView FromRank(int i, MsgType type, uint32_t r, uint32_t slot, uint32_t shadow,
                             uint64_t collective, uint32_t count, DataType dtype = DataType::kInt32,
                             ReduceOp op = ReduceOp::kSum) const {
    proto::PacketView p;
    p.header.type = type;
    p.header.job_id = kJob;
    p.header.epoch = epoch_[i];
    p.header.sender = r;
    p.header.slot = slot;
    p.header.shadow = static_cast<uint8_t>(shadow);
    p.header.collective_id = collective;
    p.header.dtype = dtype;
    p.header.op = op;
    p.header.elem_count = count;
    return p;
  }
  void ContributeBytes(int i, uint32_t r, uint32_t slot, uint32_t shadow, uint64_t collective,
                       DataType dtype, ReduceOp op, const uint8_t* bytes, size_t len,
                       uint16_t flags = 0, uint32_t notice_count = 0, uint64_t offset = 0) {
    proto::PacketView p = FromRank(
        i, MsgType::kContribution, r, slot, shadow, collective,
        notice_count != 0 ? notice_count : static_cast<uint32_t>(len / proto::DataTypeSize(dtype)),
        dtype, op);
    p.header.flags = flags;
    p.header.elem_offset = offset;
    p.payload = bytes;
    p.payload_len = len;
    p.ce = contribute_ce_;
    const proto::PacketView sealed = testing::Sealed(p, kKey);
    Action a = leaf_[i]->OnPacket(sealed, kRankToken + r, now_);
    if (a.kind == ActionKind::kFlushAndRetry) {
      leaf_[i]->EndBurst();
      a = leaf_[i]->OnPacket(sealed, kRankToken + r, now_);
    }
    last_to_rank_ = a;
    Emit(i, a);
  }

  struct RankPacket {
    int leaf;
    uint32_t rank;
    proto::Header header;
    std::vector<uint8_t> payload;
  };
  std::vector<RankPacket>& rank_rx() { return rank_rx_; }
  // Ranks' contributions arrive marked CE (ECN) while set.
  void set_contribute_ce(bool ce) { contribute_ce_ = ce; }
  uint32_t epoch(int i) const { return epoch_[i]; }
  // Both ranks of leaf `i` leave (each LEAVE sent twice; ranks send four).
  void LeaveAll(int i) {
    for (uint32_t r = 0; r < ranks_[i]; ++r) {
      proto::PacketView p;
      p.header.type = MsgType::kLeave;
      p.header.job_id = kJob;
      p.header.epoch = epoch_[i];
      p.header.sender = r;
      const proto::PacketView sealed = testing::Sealed(p, kKey);
      for (int copy = 0; copy < 2; ++copy) leaf_[i]->OnPacket(sealed, kRankToken + r, now_);
    }
  }
  // The ranks of leaf `i` join again (a new communicator of the same job).
  void Rejoin(int i) {
    const auto body = JoinPayload(ranks_[i], kSlots, kPayload);
    for (uint32_t r = 0; r < ranks_[i]; ++r) {
      epoch_[i] = leaf_[i]->OnPacket(JoinPacket(kJob, kKey, r, body), kRankToken + r, now_).header.epoch;
    }
  }
  const Action& last() const { return last_to_rank_; }

 private:
  std::array<uint32_t, 2> ranks_;
  std::unique_ptr<Engine> leaf_[2];
  std::unique_ptr<Engine> root_;
  uint32_t epoch_[2] = {};
  uint64_t now_ = 1000;
  uint64_t next_incarnation_ = 0;
  std::deque<Wire> wire_;
  bool contribute_ce_ = false;
  std::vector<RankPacket> rank_rx_;
  Action last_to_rank_;
};

inline std::vector<int32_t> Values(int leaf, uint32_t rank, uint64_t round) {
  std::vector<int32_t> v(kPayload / 4);
  for (size_t k = 0; k < v.size(); ++k) {
    v[k] = static_cast<int32_t>((leaf * 2 + rank + 1) * 1000003 * (round + 1) + k);
  }
  return v;
}

// Every rank of both leaves contributes its values of round `c` to
// collective `c` in (slot, shadow).
inline void ContributeRound(Tree* t, uint32_t slot, uint32_t shadow, uint64_t c) {
  for (int i = 0; i < 2; ++i) {
    for (uint32_t r = 0; r < 2; ++r) t->Contribute(i, r, slot, shadow, c, Values(i, r, c));
  }
}

// The sum of the four ranks' Values(.., round), as the int32 sum gives it.
inline std::vector<int32_t> SumOfValues(uint64_t round) {
  std::vector<int64_t> sum(kPayload / 4, 0);
  for (int i = 0; i < 2; ++i) {
    for (uint32_t r = 0; r < 2; ++r) {
      const auto v = Values(i, r, round);
      for (size_t k = 0; k < v.size(); ++k) sum[k] += v[k];
    }
  }
  return std::vector<int32_t>(sum.begin(), sum.end());
}

// Every rank contributes Values(.., c) to a reduce-scatter round of
// collective c in slot 1, shadow 0, whose owner is rank 0 of leaf 1.
inline void ContributeReduceScatterRound(Tree* t, uint64_t c) {
  for (int i = 0; i < 2; ++i) {
    for (uint32_t r = 0; r < 2; ++r) {
      const auto v = Values(i, r, c);
      const bool owner = i == 1 && r == 0;
      t->ContributeBytes(i, r, 1, 0, c, DataType::kInt32, ReduceOp::kSum,
                         reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4,
                         proto::kFlagOwnerOnly | (owner ? proto::kFlagOwner : 0));
    }
  }
}

// Every rank got exactly one RESULT for the fragment of `collective` at
// `offset` holding the sum of the four ranks' Values(.., round).
inline void ExpectResultsOf(Tree* t, uint64_t collective, uint64_t offset, uint64_t round) {
  const std::vector<int32_t> want = SumOfValues(round);
  int got = 0;
  for (const auto& p : t->rank_rx()) {
    if (p.header.type != MsgType::kResult || p.header.collective_id != collective ||
        p.header.elem_offset != offset) {
      continue;
    }
    ++got;
    ASSERT_EQ(p.payload.size(), kPayload);
    const auto* out = reinterpret_cast<const int32_t*>(p.payload.data());
    for (size_t k = 0; k < want.size(); ++k) {
      ASSERT_EQ(out[k], want[k]) << "collective " << collective << " [" << k << "]";
    }
  }
  EXPECT_EQ(got, 4) << "collective " << collective << " offset " << offset;
}

// Both leaves joined the root, and leaf 0's partial sum of collective 1
// waits there for leaf 1's.
inline void LeafZeroWaitsAtTheRoot(Tree* t) {
  t->Poll();
  t->Pump();
  for (uint32_t r = 0; r < 2; ++r) t->Contribute(0, r, 1, 0, 1, Values(0, r, 1));
  t->Pump();
}

// The same for a one-fragment collective whose values are its round's.
inline void ExpectResults(Tree* t, uint64_t collective) { ExpectResultsOf(t, collective, 0, collective); }

// Leaf 1's ranks contribute to `collective` (one fragment, in `slot`),
// whose round waits at the root for leaf 1 alone: every rank gets the
// exact sum, and the root counted one partial sum from each leaf.
inline void LeafOneCompletesTheRound(Tree* t, uint32_t slot, uint64_t collective) {
  for (uint32_t r = 0; r < 2; ++r) t->Contribute(1, r, slot, 0, collective, Values(1, r, collective));
  t->Pump();
  ExpectResults(t, collective);
  EXPECT_EQ(t->root().counters().contributions, 2u);
}

}  // namespace tributary::engine::tree_testing
